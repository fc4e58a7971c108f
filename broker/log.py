"""The writing side: per-worker progress logs, in segments, and their snapshots.

Record layout (msgpack, arrays decode as tuples):
- log record (topic ``{prefix}.progress.{worker}.{segment}``, partition 0):
  ``(lseq, batches, ends_segment)`` where ``lseq`` numbers the worker's records 0, 1,
  2, ... and ``batches`` is ``[(channel, seq, updates), ...]``: the progress batches the
  worker sent in one step (one per scope that had news), in the order it sent them,
  each ``updates`` a list of ``(key, delta)``. A batch is never split between records,
  so it is applied whole without transactions; one record per step, not per batch,
  means one produce and one fetch however many scopes and dataflows the worker runs. A worker's log is a chain of
  segment topics of ``segment_records`` records each; the last record of a segment says
  so (``ends_segment``) and its readers move on to the next segment. Segments keep
  every fetch short: the test broker (Tansu, in memory) spends CPU on each fetch in
  proportion to the records of the topic it reads, so one ever-growing topic per worker
  makes every epoch slower until the broker saturates (``benchmarks/tansu_fetch.py``);
  a segment that every subscriber has left and no snapshot needs is deleted whole;
- snapshot (topic ``{prefix}.snapshots``, key ``worker``):
  ``(worker, lseq, (segment, offset), {channel: (last_seq, [(key, total), ...])})``:
  the fold of the worker's records with lseq < ``lseq``; record ``lseq`` is at Kafka
  offset ``offset`` of segment ``segment``. The offset of a worker's latest snapshot is
  committed in the consumer group ``{prefix}.snapidx.{worker}``, so a reader fetches
  exactly one record.

The producer is confluent-kafka's (``broker.client``): ``append`` packs the batch, folds
it into the worker's running snapshot state and hands the record to librdkafka, which
sends it at once (no linger) from its own thread. A delivery thread serves the delivery
reports: one Python call per record, which checks that each segment only grows (a
broker that came back empty makes it start over) and, at a snapshot boundary, writes
the snapshot and then its index.

Costs: ``append_batches`` O(updates) plus one ``produce`` call (a few µs); at each segment's
first record, the next segment's topic is created (an admin request, awaited only at
the next roll); a snapshot O(distinct keys) every ``snapshot_interval`` records plus
one admin round trip on the delivery thread; ``verify`` one metadata round trip.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Callable, Iterable, Optional

import msgpack

from .client import (BrokerError, BrokerLostError, connect_admin, describe, ensure_topics, group_offsets,
                     log, producer_config, set_group_offset, topic_ids)

__all__ = ["BrokerError", "BrokerLostError", "ProgressLog", "Topics", "fold", "pack", "unpack",
           "connect_admin", "ensure_topics"]


def pack(obj: Any) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=False)


def fold(batches: Iterable[Iterable[tuple[Any, int]]], into: Optional[dict] = None) -> dict:
    """Sum the deltas of ``batches`` per key, dropping keys that sum to zero.

    >>> fold([[(("a", 1), 2), (("b", 1), 1)], [(("a", 1), -2)]])
    {('b', 1): 1}
    """
    acc = {} if into is None else into
    for batch in batches:
        for key, delta in batch:
            total = acc.get(key, 0) + delta
            if total:
                acc[key] = total
            else:
                acc.pop(key, None)
    return acc


class Topics:
    """Topic and group names under one prefix, so several clusters share a broker.

    >>> t = Topics("demo"); t.log(3, 0), t.snapshots, t.snapshot_index(3)
    ('demo.progress.3.0', 'demo.snapshots', 'demo.snapidx.3')
    >>> t.parse_log("demo.progress.3.12"), t.parse_log("demo.snapshots")
    ((3, 12), None)
    """

    def __init__(self, prefix: str) -> None:
        if not prefix or any(c not in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
                             for c in prefix):
            raise BrokerError(f"topic prefix {prefix!r} must be non-empty letters, digits, '.', '_' or '-'")
        self.prefix = prefix

    def log(self, worker: int, segment: int) -> str:
        """The topic of segment ``segment`` of ``worker``'s log."""
        return f"{self.prefix}.progress.{worker}.{segment}"

    def parse_log(self, topic: str) -> Optional[tuple[int, int]]:
        """``(worker, segment)`` of a log segment's topic under this prefix, else None."""
        head = f"{self.prefix}.progress."
        if not topic.startswith(head):
            return None
        worker, _, segment = topic[len(head):].partition(".")
        return (int(worker), int(segment)) if worker.isdigit() and segment.isdigit() else None

    @property
    def snapshots(self) -> str:
        return f"{self.prefix}.snapshots"

    def snapshot_index(self, worker: int) -> str:
        return f"{self.prefix}.snapidx.{worker}"

    def subscriber_group(self, name: str) -> str:
        return f"{self.prefix}.sub.{name}"


class ProgressLog:
    """One process's writer: appends the batches of its workers, writes snapshots.

    Each worker's batches must be appended from one thread at a time (its worker
    thread): that is what keeps its log in ``lseq`` order."""

    def __init__(self, bootstrap: str, prefix: str, workers: Iterable[int], *,
                 snapshot_interval: int = 1000, segment_records: int = 500,
                 options: Optional[dict] = None,
                 trace: Optional[Callable[[str, int, list], None]] = None) -> None:
        from confluent_kafka import Producer
        if segment_records < 1:
            raise BrokerError(f"segment_records must be at least 1, got {segment_records}")
        self.bootstrap = bootstrap
        self.topics = Topics(prefix)
        self.snapshot_interval = snapshot_interval
        self.segment_records = segment_records
        self.options = dict(options or {})
        self.admin = connect_admin(bootstrap, self.options)
        self.workers = list(workers)
        ensure_topics(self.admin, [self.topics.log(w, 0) for w in self.workers] + [self.topics.snapshots])
        self._topic_ids: dict[str, str] = {}
        self._segment = {w: 0 for w in self.workers}          # the segment being appended to
        self._topic = {w: self.topics.log(w, 0) for w in self.workers}   # ... and its topic
        # segment topic -> (worker, segment), for the delivery thread (no parsing per record)
        self._where = {topic: (w, 0) for w, topic in self._topic.items()}
        self._creating: dict[int, tuple] = {}                  # worker -> (next topic, creation future)
        self._oldest = {w: 0 for w in self.workers}           # oldest segment not deleted
        self.segments_deleted = 0
        self.verify()                       # remember the ids of the logs as created
        self._lseq = {w: 0 for w in self.workers}
        self._fold: dict[int, dict] = {w: {} for w in self.workers}   # channel -> [last seq, {key: total}]
        # delivery-thread state: records delivered per worker, the offset of the last
        self._delivered = {w: 0 for w in self.workers}           # records acknowledged
        # (worker, segment) -> [records acknowledged, offset of the last]: reports come
        # in order within a segment, not across two segments in one produce request
        self._acked: dict[tuple[int, int], list] = {}
        # worker -> {lseq: [channels, start]}, in lseq order: snapshots waiting for record
        # lseq-1's offset (start), written in lseq order so the index only moves forward
        self._pending_snapshots: dict[int, dict] = {w: {} for w in self.workers}
        # (worker, snapshot offset, segment its tail starts in, records it covers)
        self._to_index: collections.deque = collections.deque()
        self._snapshots_in_flight = 0
        self._snapshot_covers: dict[int, int] = {}   # worker -> segment its indexed snapshot's tail starts in
        self._indexed_lseq: dict[int, int] = {}      # worker -> records its indexed snapshot covers
        self._previous_covers: dict[int, int] = {}   # the same, for the snapshot indexed before it
        self.can_delete = True
        self.records = 0
        self.bytes = 0
        self.snapshots_written = 0
        self.error: Optional[BaseException] = None
        #: ``trace(stage, worker, [(channel, seq), ...])`` at "append" and "ack" of each
        #: record (timely.communication.progress_trace), and what each record carries
        self.trace = trace
        self._traced: dict[tuple[int, int], list] = {}
        self._lock = threading.Lock()
        self.producer = Producer({**producer_config(bootstrap, self.options, self._client_error),
                                  "on_delivery": self._delivered_cb})
        # The metadata of the topics we write first, now: librdkafka holds a record for a
        # topic it knows nothing about until its next metadata refresh (see _create_next).
        for topic in [*self._topic.values(), self.topics.snapshots]:
            self._learn(topic)
        self._closing = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, daemon=True, name="broker-log-delivery")
        self._poller.start()

    # ---- appending (worker threads) ------------------------------------------------------
    def append(self, worker: int, channel: int, seq: int, updates: list) -> None:
        """Append one progress batch of ``worker`` as a record of its own."""
        self.append_batches(worker, [(channel, seq, updates)])

    def append_batches(self, worker: int, batches: list[tuple[int, int, list]]) -> None:
        """Append ``worker``'s batches ``[(channel, seq, updates), ...]`` (one step's) as
        one record (asynchronously, in order)."""
        if self.error is not None:
            raise BrokerError(f"progress log at {self.bootstrap} failed: {self.error}")
        lseq = self._lseq[worker]
        self._lseq[worker] = lseq + 1
        segment, at = divmod(lseq, self.segment_records)
        if at == 0 and segment:
            self._roll(worker, segment)
        if at == 0:
            self._create_next(worker, segment + 1)
        value = pack((lseq, batches, at == self.segment_records - 1))
        folds = self._fold[worker]
        for channel, seq, updates in batches:
            per_channel = folds.get(channel)
            if per_channel is None:
                per_channel = folds[channel] = [-1, {}]
            per_channel[0] = seq
            fold([updates], per_channel[1])
        if self.snapshot_interval and (lseq + 1) % self.snapshot_interval == 0:
            channels = {ch: (last, list(acc.items())) for ch, (last, acc) in self._fold[worker].items()}
            self._pending_snapshots[worker][lseq + 1] = [channels, None]
        if self.trace is not None:
            entries = [(channel, seq) for channel, seq, _ in batches]
            self._traced[(worker, lseq)] = entries
            self.trace("append", worker, entries)
        self._produce(self._topic[worker], value)
        with self._lock:
            self.records += 1
            self.bytes += len(value)

    def _create_next(self, worker: int, segment: int) -> None:
        """Start creating segment ``segment`` of ``worker``'s log, ahead of its use, and
        have the producer learn its metadata once it exists: librdkafka holds the first
        record for a topic it has no metadata for until its next metadata refresh (a
        stall of 100-300 ms at every roll, measured at 500 epochs/s)."""
        from confluent_kafka.admin import NewTopic
        topic = self.topics.log(worker, segment)
        future = self.admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic]
        self._creating[worker] = (topic, future)

        def learn() -> None:
            try:
                future.result(10)
            except Exception:  # noqa: BLE001 - it may exist (a reader made it first); _roll checks
                pass
            self._learn(topic)
        threading.Thread(target=learn, daemon=True, name="broker-log-ahead").start()

    def _learn(self, topic: str) -> None:
        """Have the producer fetch ``topic``'s metadata (one round trip)."""
        try:
            self.producer.list_topics(topic, timeout=5)
        except Exception as e:  # noqa: BLE001 - only a stall: the first produce asks itself
            log.debug("no metadata ahead for %s: %s", topic, describe(e))

    def _roll(self, worker: int, segment: int) -> None:
        """Move ``worker``'s appends to ``segment``, once its topic exists."""
        from confluent_kafka import KafkaError, KafkaException
        topic, future = self._creating.pop(worker)
        try:
            future.result(10)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                self._failed(BrokerError(f"cannot create log segment {topic!r}: {describe(e)}"))
                raise self.error from None
        self._where[topic] = (worker, segment)
        self._segment[worker] = segment
        self._topic[worker] = topic

    def _produce(self, topic: str, value: bytes, key: Optional[bytes] = None, **kw: Any) -> None:
        while True:
            try:
                self.producer.produce(topic, value, key, partition=0, **kw)
                return
            except BufferError:             # librdkafka's queue is full: the broker is slow
                if self.error is not None:
                    raise BrokerError(f"progress log at {self.bootstrap} failed: {self.error}") from None
                self._closing.wait(0.01)

    # ---- delivery reports (the delivery thread) ------------------------------------------
    def _poll_loop(self) -> None:
        while not self._closing.is_set():
            self.producer.poll(0.1)
            while self._to_index:           # popped once done: flush waits for it
                self._index(*self._to_index[0])
                self._to_index.popleft()

    def _delivered_cb(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._failed(err)
            return
        where = self._where.get(msg.topic())
        if where is None:
            return                          # a snapshot: see _snapshot_delivered
        worker, segment = where
        self._delivered[worker] += 1
        offset = msg.offset()
        acked = self._acked.get((worker, segment))
        if acked is None:
            acked = self._acked[(worker, segment)] = [0, None]
        lseq = segment * self.segment_records + acked[0]
        # Record lseq must land after record lseq - 1 of its segment: a log that starts
        # over (a broker that came back empty) puts it at a smaller offset.
        if acked[1] is not None and offset <= acked[1]:
            self._failed(BrokerLostError(
                f"the progress log of worker {worker} at {self.bootstrap} starts over: record "
                f"{lseq} landed at offset {offset} of segment {segment}, after offset {acked[1]} "
                f"(the broker lost its data)"))
        acked[0] += 1
        acked[1] = offset
        if self.trace is not None:
            self.trace("ack", worker, self._traced.pop((worker, lseq), ()))
        if acked[0] == self.segment_records:
            # Complete. Only now: a segment's reports can come after the next segments'
            # (its first record waited for the topic's metadata while theirs did not).
            del self._acked[(worker, segment)]
        pending = self._pending_snapshots[worker]
        if lseq + 1 in pending:
            # record lseq + 1 starts the next segment or follows this record in this one
            pending[lseq + 1][1] = (segment + 1, 0) if (lseq + 1) % self.segment_records == 0 \
                else (segment, offset + 1)
            while pending:
                covers_lseq, (channels, start) = next(iter(pending.items()))
                if start is None:
                    break                   # an earlier snapshot's record is not acknowledged yet
                del pending[covers_lseq]
                self._write_snapshot(worker, covers_lseq, start, channels)

    def _write_snapshot(self, worker: int, covers_lseq: int, start: tuple, channels: dict) -> None:
        value = pack((worker, covers_lseq, start, channels))
        self._snapshots_in_flight += 1
        self._produce(self.topics.snapshots, value, str(worker).encode(),
                      on_delivery=lambda e, m: self._snapshot_delivered(e, m, worker, start[0], covers_lseq))

    def _snapshot_delivered(self, err: Any, msg: Any, worker: int, covers: int, lseq: int) -> None:
        # covers: the segment where the snapshot's tail starts (none before it is needed)
        if err is not None:
            self._failed(err)
        else:
            self._to_index.append((worker, msg.offset(), covers, lseq))
        self._snapshots_in_flight -= 1

    def _index(self, worker: int, snapshot_offset: int, covers: int, lseq: int) -> None:
        """Make the snapshot of the first ``lseq`` records the worker's latest (they are
        written in order; never over a later one); ``covers``: the segment its tail
        starts in."""
        if lseq <= self._indexed_lseq.get(worker, 0):
            return
        try:
            set_group_offset(self.admin, self.topics.snapshot_index(worker), self.topics.snapshots,
                             snapshot_offset)
        except Exception as e:  # noqa: BLE001 - the previous snapshot stays valid
            # a timed-out future's text is empty: name the exception's type as well
            log.warning("could not index the snapshot of worker %d: %s: %s", worker,
                        type(e).__name__, describe(e))
            return
        self.snapshots_written += 1
        self._indexed_lseq[worker] = lseq
        self._previous_covers[worker] = self._snapshot_covers.get(worker, 0)
        self._snapshot_covers[worker] = covers

    def _client_error(self, err: Any) -> None:
        # Transport errors (a paused or restarting broker) are retried by librdkafka:
        # only a fatal error stops us.
        if err.fatal():
            self._failed(err)

    def _failed(self, exc: Any) -> None:
        if not isinstance(exc, BaseException):
            exc = BrokerError(f"appending to the progress log at {self.bootstrap} failed: {describe(exc)}")
        if self.error is None:
            self.error = exc
            log.error("%s", exc)

    # ---- checks and trimming (any thread) -------------------------------------------------
    def verify(self) -> None:
        """Raise BrokerLostError if the segment one of our logs appends to disappeared or
        was recreated (a broker that came back empty gives its topics new ids). A broker
        that does not answer raises the client's error instead: a stall, not a loss."""
        current = [self._topic[w] for w in self.workers]
        for name, topic_id in topic_ids(self.admin, current).items():
            if topic_id is None:
                raise BrokerLostError(f"the progress log {name} is gone from the broker at "
                                      f"{self.bootstrap}: it lost its records (did it come back empty?)")
            known = self._topic_ids.setdefault(name, topic_id)
            if topic_id != known:
                raise BrokerLostError(f"the progress log {name} at {self.bootstrap} was recreated: "
                                      f"the broker lost its records (did it come back empty?)")

    def trim(self, subscribers: Iterable[str]) -> int:
        """Delete the log segments of our workers that every subscriber has moved past
        and that neither of the two latest indexed snapshots needs (a joiner starts at
        the latest, or at the one before if it read the index just before).

        A subscriber that has committed no position in a worker's log holds all of it.
        Returns the number of segments deleted; 0 (and never again) on a broker that
        cannot delete topics. The subscribers' positions (a round trip each) are asked
        only when the snapshots would let a segment go: a trim every second otherwise
        cost O(processes) requests per process, O(processes^2) for the broker."""
        if not self.can_delete:
            return 0
        # Never the segment being appended to: readers and snapshots reach the next one
        # as soon as its predecessor's last record is written, before the writer rolls.
        # Nor what the snapshot indexed before the latest needs: a joiner that read the
        # index just before the latest was written starts there.
        reached = {w: min(self._previous_covers.get(w, 0), self._segment[w]) for w in self.workers}
        if all(reached[w] <= self._oldest[w] for w in self.workers):
            return 0        # nothing our snapshots let go of yet: no need to ask the subscribers
        for name in subscribers:
            try:
                found = group_offsets(self.admin, self.topics.subscriber_group(name))
            except Exception:  # noqa: BLE001 - no answer: try again next time
                return 0
            at: dict[int, int] = {}
            for topic, _ in found:
                where = self.topics.parse_log(topic)
                if where is not None and where[0] in reached:
                    at[where[0]] = max(at.get(where[0], 0), where[1])
            for w in reached:
                reached[w] = min(reached[w], at.get(w, 0))
        doomed = [(w, k) for w in self.workers for k in range(self._oldest[w], reached[w])]
        if not doomed:
            return 0
        try:
            for future in self.admin.delete_topics([self.topics.log(w, k) for w, k in doomed],
                                                   operation_timeout=10).values():
                future.result(10)
        except Exception as e:  # noqa: BLE001 - feature detection
            self.can_delete = False
            log.info("broker at %s cannot delete topics (%s): log segments are kept", self.bootstrap, e)
            return 0
        for w in self.workers:
            self._oldest[w] = max(self._oldest[w], reached[w])
        for w, k in doomed:                 # every record in them was acknowledged and read
            self._where.pop(self.topics.log(w, k), None)
        self.segments_deleted += len(doomed)
        log.info("deleted %d log segments every subscriber has left: %s", len(doomed),
                 ", ".join(f"worker {w} segment {k}" for w, k in doomed[:8]))
        return len(doomed)

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Wait until every appended record is acknowledged and every snapshot due is
        written and indexed; False if ``timeout`` seconds passed first. Only the
        delivery thread serves delivery reports (they count records in order)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not (all(self._delivered[w] == self._lseq[w] for w in self.workers)
                   and not self._snapshots_in_flight and not self._to_index):
            if self.error is not None or (deadline is not None and time.monotonic() > deadline):
                return False
            time.sleep(0.002)
        return True

    def close(self) -> None:
        try:
            self.flush(10)
        finally:
            self._closing.set()
            self._poller.join(timeout=5)
