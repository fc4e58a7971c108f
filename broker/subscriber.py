"""The reading side: one subscriber per process tails the progress logs of many workers.

``add(worker, from_snapshot)`` starts tailing a worker's log: from its beginning, or
from its latest snapshot (one fetch through the snapshot index), in which case the
snapshot's fold is returned so the caller can install it. A log is a chain of segment
topics (``broker.log``). While a segment is read the next one is already assigned
(a helper thread makes sure it exists, through the admin client: the consumer is
used from the subscriber's thread only), so librdkafka has its metadata and fetches
it; records it returns early are held until the current segment's last record has
been delivered, then the subscriber moves on with no round trip. Every record carries its log
sequence number (lseq): a record below the expected lseq is a duplicate and skipped, a
record above it means records were lost and stops everything with ``BrokerLostError``,
as does a read position past a log's end (the broker came back with less). Records
are handed to ``deliver(worker, channel, seq, updates)`` in log order from one thread,
batch by batch (a record holds the batches of one step of its writer).
Positions are committed to ``{prefix}.sub.{name}`` every ``commit_every`` records (or
every second while records arrive), so the writer can trim what every subscriber has
read.

The consumer is confluent-kafka's (``broker.client``): librdkafka fetches on its own
threads without the GIL, with a short fetch wait (``fetch.wait.max.ms``, see
``broker.client.FETCH_WAIT_MS``; Tansu answers a waiting fetch only when the wait
ends, so the wait bounds each hop's latency); the subscriber waits for a first record
with ``poll`` and takes what else is queued with a ``consume`` that does not wait (a
``consume(n, timeout)`` waits out its timeout unless n records come).

Costs: O(updates) per record (one unpack, one ``deliver`` call per batch); ``add`` from
a snapshot O(snapshot size) plus two round trips; a segment change an unassign and an assign
(the topic's creation is awaited ahead, on a helper thread); idle, one fetch per log's
broker per fetch wait (on librdkafka's threads).
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Optional

from .client import (BrokerError, BrokerLostError, connect_admin, consumer_config, describe, ensure_topics,
                     group_offsets, topic_ids)
from .log import Topics, unpack

log = logging.getLogger("broker")


class Subscriber:
    def __init__(self, bootstrap: str, prefix: str, deliver: Callable[[int, int, int, Any], None],
                 *, name: str, on_error: Callable[[BaseException], None],
                 options: Optional[dict] = None, commit_every: int = 500,
                 check: Optional[Callable[[], Optional[BaseException]]] = None,
                 trace: Optional[Callable[[str, int, list], None]] = None) -> None:
        from confluent_kafka import Consumer
        self.bootstrap = bootstrap
        self.topics = Topics(prefix)
        self.deliver = deliver
        self.on_error = on_error
        self.check = check
        self.name = name
        self.options = dict(options or {})
        self.commit_every = commit_every
        #: ``trace("fetch", worker, [(channel, seq), ...])`` for each record read
        self.trace = trace
        self._admin_client = connect_admin(bootstrap, self.options)   # fails fast if unreachable
        self.consumer = Consumer(consumer_config(bootstrap, self.topics.subscriber_group(name), self.options))
        self._lock = threading.Lock()
        self._pending: list[tuple] = []                  # (worker, lseq, segment, offset) to start tailing
        self._retiring: dict[int, int] = {}              # worker -> end lseq (its writer left)
        self._expected: dict[str, list] = {}             # topic -> [worker, next lseq, segment]
        self._tailing: dict[int, str] = {}               # worker -> the segment topic being read
        self._ahead: dict[str, list] = {}                # next segment topic assigned -> early records
        self._ready: list[tuple[int, int]] = []          # (worker, segment) created, to assign ahead
        self._next_offset: dict[str, int] = {}           # topic -> next offset to read
        self.records_read: dict[int, int] = {}
        self.bytes_read = 0                              # of the records delivered
        self.snapshots_read: dict[int, int] = {}
        self.positions: dict[int, int] = {}              # worker -> next lseq
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._reader = None
        self._since_commit = 0
        self._committed_at = time.monotonic()

    # ---- subscribing --------------------------------------------------------------------
    def latest_snapshot(self, worker: int) -> Optional[tuple]:
        """The latest snapshot of ``worker``'s log: (worker, lseq, (segment, offset),
        channels), or None."""
        from confluent_kafka import Consumer, TopicPartition
        topic = self.topics.snapshots
        offset = group_offsets(self._admin_client, self.topics.snapshot_index(worker)).get((topic, 0))
        if offset is None:
            return None
        if self._reader is None:
            self._reader = Consumer(consumer_config(self.bootstrap, f"{self.topics.prefix}.reader",
                                                    self.options))
        self._reader.assign([TopicPartition(topic, 0, offset)])
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                # poll, not consume(n, timeout): that waits out its timeout unless n records come
                message = self._reader.poll(0.2)
                if message is not None and message.error() is None and message.offset() == offset:
                    self.snapshots_read[worker] = self.snapshots_read.get(worker, 0) + 1
                    return unpack(message.value())
        finally:
            # an assigned partition is fetched for as long as it stays assigned: a fetch
            # every fetch wait, for nothing, at the broker's cost
            self._reader.unassign()
        raise BrokerLostError(f"the snapshot of worker {worker} at offset {offset} of "
                              f"{topic} could not be read (did the broker lose it?)")

    def add(self, worker: int, from_snapshot: bool = False) -> Optional[tuple]:
        """Start tailing ``worker``'s log; returns the snapshot it starts from, if any.

        From a snapshot, the segment it starts in must exist: one that is gone was
        trimmed because a later snapshot covers it, so the latest is read again. It
        is never created here (an empty stand-in would be waited on forever)."""
        from confluent_kafka import KafkaException
        # Create segment 0 if its writer has not yet: a topic auto-created by a fetch can
        # race with the writer's creation and restart offsets on some brokers.
        ensure_topics(self._admin_client, [self.topics.log(worker, 0), self.topics.snapshots])
        if not from_snapshot:
            with self._lock:
                self._pending.append((worker, 0, 0, 0))
            return None
        deadline = time.monotonic() + 10
        while True:
            snapshot = self.latest_snapshot(worker)
            lseq, (segment, offset) = (snapshot[1], snapshot[2]) if snapshot else (0, (0, 0))
            topic = self.topics.log(worker, segment)
            try:
                if topic_ids(self._admin_client, [topic])[topic] is not None:
                    break
            except KafkaException:
                pass                        # no answer: ask again
            if time.monotonic() > deadline:
                raise BrokerLostError(f"segment {segment} of worker {worker}'s log ({topic}), where its "
                                      f"latest snapshot starts, is not on the broker at {self.bootstrap}")
            time.sleep(0.05)
        with self._lock:
            self._pending.append((worker, lseq, segment, offset))
        return snapshot

    def retire(self, worker: int, end: int) -> None:
        """``worker`` left and its log ends before record ``end``: stop tailing the log
        once every record before ``end`` is delivered."""
        with self._lock:
            self._retiring[worker] = end

    def _retire_done(self) -> None:
        from confluent_kafka import TopicPartition
        with self._lock:
            retiring = list(self._retiring.items())
        done = [w for w, end in retiring if w not in self._tailing or self.positions.get(w, 0) >= end]
        if done:
            with self._lock:
                for w in done:
                    self._retiring.pop(w, None)
            gone = [self._tailing.pop(w) for w in done if w in self._tailing]
            for topic in list(gone):
                worker, _, segment = self._expected.pop(topic)
                self._next_offset.pop(topic, None)
                ahead = self.topics.log(worker, segment + 1)
                if self._ahead.pop(ahead, None) is not None:
                    gone.append(ahead)
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
        for worker, lseq, segment, offset in pending:
            if worker in self._tailing:
                continue
            topic = self.topics.log(worker, segment)
            self._tailing[worker] = topic
            self._expected[topic] = [worker, lseq, segment]
            self._next_offset[topic] = offset
            self.positions[worker] = lseq
            fresh.append(TopicPartition(topic, 0, offset))
        if fresh:
            self._assign(fresh)
            for tp in fresh:
                worker, _, segment = self._expected[tp.topic]
                self._prepare(worker, segment + 1)

    def _assign(self, partitions: list) -> None:
        """Start fetching ``partitions`` (the others keep their positions). Their topics'
        metadata first: without it in hand, librdkafka starts fetching a new partition
        only after its next metadata refresh (~450 ms measured: a stall of every epoch
        when a process joins, and of every segment switch)."""
        for tp in partitions:
            self.consumer.list_topics(tp.topic, timeout=5)
        self.consumer.incremental_assign(partitions)

    def _prepare(self, worker: int, segment: int) -> None:
        """On a helper thread, make sure segment ``segment`` of ``worker``'s log exists
        (its writer creates it ahead too; whoever comes first), then have the
        subscriber's thread assign it ahead."""
        topic = self.topics.log(worker, segment)

        def create() -> None:
            try:
                ensure_topics(self._admin_client, [topic])
            except Exception as e:  # noqa: BLE001 - the switch creates what is missing itself
                log.debug("subscriber %s could not create %s ahead: %s", self.name, topic, e)
                return
            with self._lock:
                self._ready.append((worker, segment))
        threading.Thread(target=create, daemon=True, name=f"broker-ahead-{self.name}").start()

    def _assign_ready(self) -> None:
        from confluent_kafka import TopicPartition
        with self._lock:
            ready, self._ready = self._ready, []
        fresh = []
        for worker, segment in ready:
            current = self._expected.get(self._tailing.get(worker, ""))
            topic = self.topics.log(worker, segment)
            if current is not None and current[2] == segment - 1 and topic not in self._ahead:
                self._ahead[topic] = []
                fresh.append(TopicPartition(topic, 0, 0))
        if fresh:
            self._assign(fresh)

    def _next_segment(self, topic: str) -> list:
        """The record just delivered ended ``topic``'s segment: read the next one.
        Returns the next segment's records that were fetched early, to handle now."""
        from confluent_kafka import TopicPartition
        worker, lseq, segment = self._expected.pop(topic)
        self._next_offset.pop(topic, None)
        following = self.topics.log(worker, segment + 1)
        self._tailing[worker] = following
        self._expected[following] = [worker, lseq, segment + 1]
        self._next_offset[following] = 0
        self.consumer.incremental_unassign([TopicPartition(topic, 0)])
        early = self._ahead.pop(following, None)
        if early is None:                   # not assigned ahead yet: do it now
            ensure_topics(self._admin_client, [following])
            self._assign([TopicPartition(following, 0, 0)])
            early = []
        self._prepare(worker, segment + 2)
        return early

    def _run(self) -> None:
        from confluent_kafka import KafkaError
        lost_codes = (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET,
                      KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC)
        expected, records_read, positions = self._expected, self.records_read, self.positions
        deliver = self.deliver
        trace = self.trace
        try:
            while not self._stop.is_set():
                if self._pending:
                    self._assign_pending()
                if self._ready:
                    self._assign_ready()
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
                queue = collections.deque(messages)
                while queue:
                    message = queue.popleft()
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
                    state = expected.get(topic)
                    if state is None:
                        early = self._ahead.get(topic)
                        if early is not None:
                            early.append(message)   # the next segment: after this one ends
                        continue                # else fetched before its segment was left
                    worker, want, _ = state
                    self._next_offset[topic] = message.offset() + 1
                    value = message.value()
                    lseq, batches, ends_segment = unpack(value)
                    if lseq < want:
                        continue                # a duplicate: already delivered
                    if lseq > want:
                        raise BrokerLostError(
                            f"progress log of worker {worker} ({topic}) jumped from record "
                            f"{want} to {lseq}: the broker at {self.bootstrap} lost records")
                    if trace is not None:
                        trace("fetch", worker, [(channel, seq) for channel, seq, _ in batches])
                    for channel, seq, updates in batches:
                        deliver(worker, channel, seq, updates)
                    state[1] = want + 1
                    positions[worker] = want + 1
                    records_read[worker] = records_read.get(worker, 0) + 1
                    self.bytes_read += len(value)
                    if ends_segment:
                        queue.extendleft(reversed(self._next_segment(topic)))
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
