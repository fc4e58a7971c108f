"""The reading side: one subscriber per process tails the progress logs of many workers.

``add(worker, from_snapshot)`` starts tailing a worker's log: from its beginning, or
from its latest snapshot (one fetch through the snapshot index), in which case the
snapshot's fold is returned so the caller can install it. Every record carries its log
sequence number (lseq): a record below the expected lseq is a duplicate and skipped, a
record above it means records were lost and stops everything with ``BrokerLostError``.
Records are handed to ``deliver(worker, channel, seq, updates)`` in log order from one
thread. Positions are committed to ``{prefix}.sub.{name}`` every ``commit_every``
records (or every second while records arrive), so the writer can trim what every
subscriber has read.

Costs: O(updates) per record; ``add`` from a snapshot O(snapshot size + one fetch).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

from .log import (BrokerError, BrokerLostError, Topics, client_options, connect_admin, ensure_topics,
                  unpack)

log = logging.getLogger("broker")


class Subscriber:
    def __init__(self, bootstrap: str, prefix: str, deliver: Callable[[int, int, int, Any], None],
                 *, name: str, on_error: Callable[[BaseException], None],
                 options: Optional[dict] = None, commit_every: int = 500,
                 check: Optional[Callable[[], Optional[BaseException]]] = None) -> None:
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError
        self.bootstrap = bootstrap
        self.topics = Topics(prefix)
        self.deliver = deliver
        self.on_error = on_error
        self.check = check
        self.name = name
        self.options = options or {}
        self.commit_every = commit_every
        try:
            self.consumer = KafkaConsumer(**client_options(bootstrap, options), enable_auto_commit=False,
                                          auto_offset_reset="earliest",
                                          group_id=self.topics.subscriber_group(name),
                                          fetch_max_wait_ms=1, fetch_min_bytes=1,
                                          allow_auto_create_topics=False,
                                          request_timeout_ms=30000, max_poll_records=2000)
        except KafkaError as e:
            raise BrokerError(f"Kafka broker at {bootstrap} is unreachable: {e}") from None
        self._lock = threading.Lock()
        self._pending: list[tuple[int, int, int]] = []   # (worker, lseq, offset) to start tailing
        self._expected: dict[str, tuple[int, int]] = {}  # topic -> (worker, next lseq)
        self._next_offset: dict[str, int] = {}           # topic -> next offset to read
        self.records_read: dict[int, int] = {}
        self.snapshots_read: dict[int, int] = {}
        self.positions: dict[int, int] = {}              # worker -> next lseq
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._admin_client = None
        self._reader = None
        self._since_commit = 0
        self._committed_at = time.monotonic()

    # ---- subscribing --------------------------------------------------------------------
    def _admin(self):
        if self._admin_client is None:
            self._admin_client = connect_admin(self.bootstrap, self.options)
        return self._admin_client

    def latest_snapshot(self, worker: int) -> Optional[tuple]:
        """The latest snapshot of ``worker``'s log: (worker, lseq, offset, channels), or None."""
        from kafka import KafkaConsumer, TopicPartition
        tp = TopicPartition(self.topics.snapshots, 0)
        group = self.topics.snapshot_index(worker)
        found = self._admin().list_group_offsets(group).get(group, {}).get(tp)
        if found is None or found.offset < 0:
            return None
        if self._reader is None:
            self._reader = KafkaConsumer(**client_options(self.bootstrap, self.options),
                                         enable_auto_commit=False, fetch_max_wait_ms=5)
            self._reader.assign([tp])
        self._reader.seek(tp, found.offset)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for records in self._reader.poll(timeout_ms=200).values():
                for record in records:
                    if record.offset == found.offset:
                        self.snapshots_read[worker] = self.snapshots_read.get(worker, 0) + 1
                        return unpack(record.value)
        raise BrokerLostError(f"the snapshot of worker {worker} at offset {found.offset} of "
                              f"{self.topics.snapshots} could not be read")

    def add(self, worker: int, from_snapshot: bool = False) -> Optional[tuple]:
        """Start tailing ``worker``'s log; returns the snapshot it starts from, if any."""
        # Create the log if its writer has not yet: a topic auto-created by a fetch can
        # race with the writer's creation and restart offsets on some brokers.
        ensure_topics(self._admin(), [self.topics.log(worker), self.topics.snapshots])
        snapshot = self.latest_snapshot(worker) if from_snapshot else None
        lseq, offset = (snapshot[1], snapshot[2]) if snapshot else (0, 0)
        with self._lock:
            self._pending.append((worker, lseq, offset))
        return snapshot

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"broker-subscriber-{self.name}")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for client in (self.consumer, self._reader, self._admin_client):
            if client is None:
                continue
            try:
                client.close(autocommit=False) if client is self.consumer else client.close()
            except Exception:  # noqa: BLE001 - closing a client of a dead broker
                pass

    # ---- the loop -----------------------------------------------------------------------
    def _assign_pending(self) -> None:
        from kafka import TopicPartition
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return
        for worker, lseq, offset in pending:
            topic = self.topics.log(worker)
            self._expected[topic] = (worker, lseq)
            self._next_offset[topic] = offset
            self.positions[worker] = lseq
        # A new assignment may reset the positions of partitions already assigned: put
        # every one back where we are, or a join would re-read whole logs.
        self.consumer.assign([TopicPartition(t, 0) for t in self._expected])
        for topic, offset in self._next_offset.items():
            self.consumer.seek(TopicPartition(topic, 0), offset)

    def _run(self) -> None:
        from kafka.errors import KafkaError
        try:
            while not self._stop.is_set():
                self._assign_pending()
                if self.check is not None:
                    error = self.check()
                    if error is not None:
                        raise error
                if not self._expected:
                    time.sleep(0.005)
                    continue
                for tp, records in self.consumer.poll(timeout_ms=20).items():
                    worker, expected = self._expected[tp.topic]
                    for record in records:
                        self._next_offset[tp.topic] = record.offset + 1
                        lseq, channel, seq, updates = unpack(record.value)
                        if lseq < expected:
                            continue            # a duplicate: already delivered
                        if lseq > expected:
                            raise BrokerLostError(
                                f"progress log of worker {worker} ({tp.topic}) jumped from record "
                                f"{expected} to {lseq}: the broker at {self.bootstrap} lost records")
                        self.deliver(worker, channel, seq, updates)
                        expected += 1
                        self.records_read[worker] = self.records_read.get(worker, 0) + 1
                    self._expected[tp.topic] = (worker, expected)
                    self.positions[worker] = expected
                    self._since_commit += len(records)
                if self._since_commit >= self.commit_every or (
                        self._since_commit and time.monotonic() - self._committed_at > 1.0):
                    self._commit()
            if self._expected:
                self._commit()
        except BrokerError as e:
            self.on_error(e)
        except KafkaError as e:
            self.on_error(BrokerError(f"Kafka broker at {self.bootstrap}: {e}"))

    def _commit(self) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata
        self._since_commit = 0
        self._committed_at = time.monotonic()
        offsets = {}
        for topic in self._expected:
            tp = TopicPartition(topic, 0)
            position = self.consumer.position(tp)
            if position is not None:
                offsets[tp] = OffsetAndMetadata(position, None, -1)
        try:
            self.consumer.commit(offsets)
        except Exception as e:  # noqa: BLE001 - commits only enable trimming
            log.warning("subscriber %s could not commit its positions: %s", self.name, e)
