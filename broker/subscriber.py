"""The reading side: one subscriber per process tails the progress logs of many workers.

``add(worker, from_snapshot)`` starts tailing a worker's log: from its beginning, or
from its latest snapshot (one fetch through the snapshot index), in which case the
snapshot's fold is returned so the caller can install it. Every record carries its log
sequence number (lseq): a record below the expected lseq is a duplicate and skipped, a
record above it means records were lost and stops everything with ``BrokerLostError``,
as does a read position past a log's end (the broker came back with less). Records
are handed to ``deliver(worker, channel, seq, updates)`` in log order from one thread.
Positions are committed to ``{prefix}.sub.{name}`` every ``commit_every`` records (or
every second while records arrive), so the writer can trim what every subscriber has
read.

The consumer is confluent-kafka's (``broker.client``): librdkafka fetches on its own
threads without the GIL, with a short fetch wait (``fetch.wait.max.ms``, see
``broker.client.FETCH_WAIT_MS``; Tansu answers a waiting fetch only when the wait
ends, so the wait bounds each hop's latency), and ``consume`` returns as soon as a
record is in its queue.

Costs: O(updates) per record (one unpack, one ``deliver`` call); ``add`` from a snapshot
O(snapshot size) plus two round trips; idle, one fetch per log's broker per fetch wait
(on librdkafka's threads).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

from .client import (BrokerError, BrokerLostError, connect_admin, consumer_config, describe, ensure_topics,
                     group_offsets, log)
from .log import Topics, unpack

log = logging.getLogger("broker")


class Subscriber:
    def __init__(self, bootstrap: str, prefix: str, deliver: Callable[[int, int, int, Any], None],
                 *, name: str, on_error: Callable[[BaseException], None],
                 options: Optional[dict] = None, commit_every: int = 500,
                 check: Optional[Callable[[], Optional[BaseException]]] = None) -> None:
        from confluent_kafka import Consumer
        self.bootstrap = bootstrap
        self.topics = Topics(prefix)
        self.deliver = deliver
        self.on_error = on_error
        self.check = check
        self.name = name
        self.options = dict(options or {})
        self.commit_every = commit_every
        self._admin_client = connect_admin(bootstrap, self.options)   # fails fast if unreachable
        self.consumer = Consumer(consumer_config(bootstrap, self.topics.subscriber_group(name), self.options))
        self._lock = threading.Lock()
        self._pending: list[tuple[int, int, int]] = []   # (worker, lseq, offset) to start tailing
        self._retiring: dict[str, int] = {}              # topic -> end lseq (its writer left)
        self._expected: dict[str, list] = {}             # topic -> [worker, next lseq]
        self._next_offset: dict[str, int] = {}           # topic -> next offset to read
        self.records_read: dict[int, int] = {}
        self.snapshots_read: dict[int, int] = {}
        self.positions: dict[int, int] = {}              # worker -> next lseq
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._reader = None
        self._since_commit = 0
        self._committed_at = time.monotonic()

    # ---- subscribing --------------------------------------------------------------------
    def latest_snapshot(self, worker: int) -> Optional[tuple]:
        """The latest snapshot of ``worker``'s log: (worker, lseq, offset, channels), or None."""
        from confluent_kafka import Consumer, TopicPartition
        topic = self.topics.snapshots
        offset = group_offsets(self._admin_client, self.topics.snapshot_index(worker)).get((topic, 0))
        if offset is None:
            return None
        if self._reader is None:
            self._reader = Consumer(consumer_config(self.bootstrap, f"{self.topics.prefix}.reader",
                                                    self.options))
        self._reader.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for message in self._reader.consume(100, 0.2):
                if message.error() is None and message.offset() == offset:
                    self.snapshots_read[worker] = self.snapshots_read.get(worker, 0) + 1
                    return unpack(message.value())
        raise BrokerLostError(f"the snapshot of worker {worker} at offset {offset} of "
                              f"{topic} could not be read (did the broker lose it?)")

    def add(self, worker: int, from_snapshot: bool = False) -> Optional[tuple]:
        """Start tailing ``worker``'s log; returns the snapshot it starts from, if any."""
        # Create the log if its writer has not yet: a topic auto-created by a fetch can
        # race with the writer's creation and restart offsets on some brokers.
        ensure_topics(self._admin_client, [self.topics.log(worker), self.topics.snapshots])
        snapshot = self.latest_snapshot(worker) if from_snapshot else None
        lseq, offset = (snapshot[1], snapshot[2]) if snapshot else (0, 0)
        with self._lock:
            self._pending.append((worker, lseq, offset))
        return snapshot

    def retire(self, worker: int, end: int) -> None:
        """``worker`` left and its log ends before record ``end``: stop tailing the log
        once every record before ``end`` is delivered."""
        with self._lock:
            self._retiring[self.topics.log(worker)] = end

    def _retire_done(self) -> None:
        from confluent_kafka import TopicPartition
        with self._lock:
            retiring = list(self._retiring.items())
        done = [t for t, end in retiring if t not in self._expected or self._expected[t][1] >= end]
        if done:
            with self._lock:
                for topic in done:
                    self._retiring.pop(topic, None)
            gone = [t for t in done if t in self._expected]
            for topic in gone:
                del self._expected[topic]
                self._next_offset.pop(topic, None)
            if gone:
                self.consumer.incremental_unassign([TopicPartition(t, 0) for t in gone])
                log.info("subscriber %s stopped tailing %s", self.name, ", ".join(gone))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"broker-subscriber-{self.name}")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for client in (self.consumer, self._reader):
            if client is not None:
                try:
                    client.close()
                except Exception:  # noqa: BLE001 - closing a client of a dead broker
                    pass

    # ---- the loop -----------------------------------------------------------------------
    def _assign_pending(self) -> None:
        from confluent_kafka import TopicPartition
        with self._lock:
            pending, self._pending = self._pending, []
        fresh = []
        for worker, lseq, offset in pending:
            topic = self.topics.log(worker)
            if topic in self._expected:
                continue
            self._expected[topic] = [worker, lseq]
            self._next_offset[topic] = offset
            self.positions[worker] = lseq
            fresh.append(TopicPartition(topic, 0, offset))
        if fresh:
            # Without the new topics' metadata in hand, librdkafka starts fetching a new
            # partition only after its next metadata refresh: ~450 ms measured, a stall
            # of every epoch when a process joins.
            for tp in fresh:
                self.consumer.list_topics(tp.topic, timeout=5)
            self.consumer.incremental_assign(fresh)     # the others keep their positions

    def _run(self) -> None:
        from confluent_kafka import KafkaError
        lost_codes = (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET,
                      KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
        expected, records_read, positions = self._expected, self.records_read, self.positions
        deliver = self.deliver
        try:
            while not self._stop.is_set():
                if self._pending:
                    self._assign_pending()
                if self._retiring:
                    self._retire_done()
                if self.check is not None:
                    error = self.check()
                    if error is not None:
                        raise error
                if not expected:
                    time.sleep(0.005)
                    continue
                # consume(n, timeout) waits for n records or the timeout: wait for the
                # first record only, then take whatever else is already queued
                first = self.consumer.poll(0.01)   # short: a new log waits for the next turn
                if first is None:
                    messages = ()
                else:
                    messages = self.consumer.consume(1000, 0)
                    messages.insert(0, first)
                for message in messages:
                    error = message.error()
                    if error is not None:
                        if error.code() in lost_codes:
                            raise BrokerLostError(
                                f"reading {message.topic()} at {self.bootstrap}: {error.str()} "
                                f"(the broker lost records: did it come back empty?)")
                        if error.fatal():
                            raise BrokerError(f"Kafka broker at {self.bootstrap}: {error.str()}")
                        continue                # transient: librdkafka retries
                    topic = message.topic()
                    state = expected[topic]
                    worker, want = state
                    self._next_offset[topic] = message.offset() + 1
                    lseq, channel, seq, updates = unpack(message.value())
                    if lseq < want:
                        continue                # a duplicate: already delivered
                    if lseq > want:
                        raise BrokerLostError(
                            f"progress log of worker {worker} ({topic}) jumped from record "
                            f"{want} to {lseq}: the broker at {self.bootstrap} lost records")
                    deliver(worker, channel, seq, updates)
                    state[1] = want + 1
                    positions[worker] = want + 1
                    records_read[worker] = records_read.get(worker, 0) + 1
                self._since_commit += len(messages)
                if self._since_commit >= self.commit_every or (
                        self._since_commit and time.monotonic() - self._committed_at > 1.0):
                    self._commit()
            if expected:
                self._commit(wait=True)
        except BrokerError as e:
            self.on_error(e)
        except Exception as e:  # noqa: BLE001 - a client error stops the computation, named
            self.on_error(BrokerError(f"Kafka broker at {self.bootstrap}: {describe(e)}"))

    def _commit(self, wait: bool = False) -> None:
        from confluent_kafka import TopicPartition
        self._since_commit = 0
        self._committed_at = time.monotonic()
        try:
            self.consumer.commit(offsets=[TopicPartition(t, 0, o) for t, o in self._next_offset.items()],
                                 asynchronous=not wait)
        except Exception as e:  # noqa: BLE001 - commits only enable trimming
            log.warning("subscriber %s could not commit its positions: %s", self.name, e)
