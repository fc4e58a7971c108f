"""The writing side: per-worker progress logs and their snapshots.

Record layout (msgpack, arrays decode as tuples):
- log record (topic ``{prefix}.progress.{worker}``, partition 0):
  ``(lseq, channel, seq, updates)`` where ``lseq`` numbers the worker's records 0, 1,
  2, ... and ``updates`` is a list of ``(key, delta)``: one progress batch, so a batch
  is applied whole without transactions;
- snapshot (topic ``{prefix}.snapshots``, key ``worker``):
  ``(worker, lseq, offset, {channel: (last_seq, [(key, total), ...])})``: the fold of
  the worker's records with lseq < ``lseq``, which start at Kafka offset ``offset``
  of its log. The offset of a worker's latest snapshot is committed in the consumer
  group ``{prefix}.snapidx.{worker}``, so a reader fetches exactly one record.

The producer is confluent-kafka's (``broker.client``): ``append`` packs the batch, folds
it into the worker's running snapshot state and hands the record to librdkafka, which
sends it at once (no linger) from its own thread. A delivery thread serves the delivery
reports: one Python call per record, which checks that the log only grows (a broker
that came back empty makes it start over) and, at a snapshot boundary, writes the
snapshot and then its index.

Costs: ``append`` O(updates) plus one ``produce`` call (a few µs); a snapshot
O(distinct keys) every ``snapshot_interval`` records plus one admin round trip on the
delivery thread; ``verify`` one metadata round trip.
"""
from __future__ import annotations

import collections
import threading
import time
from typing import Any, Iterable, Optional

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

    >>> t = Topics("demo"); t.log(3), t.snapshots, t.snapshot_index(3)
    ('demo.progress.3', 'demo.snapshots', 'demo.snapidx.3')
    """

    def __init__(self, prefix: str) -> None:
        if not prefix or any(c not in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"
                             for c in prefix):
            raise BrokerError(f"topic prefix {prefix!r} must be non-empty letters, digits, '.', '_' or '-'")
        self.prefix = prefix

    def log(self, worker: int) -> str:
        return f"{self.prefix}.progress.{worker}"

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
                 snapshot_interval: int = 1000, options: Optional[dict] = None) -> None:
        from confluent_kafka import Producer
        self.bootstrap = bootstrap
        self.topics = Topics(prefix)
        self.snapshot_interval = snapshot_interval
        self.options = dict(options or {})
        self.admin = connect_admin(bootstrap, self.options)
        self.workers = list(workers)
        ensure_topics(self.admin, [self.topics.log(w) for w in self.workers] + [self.topics.snapshots])
        self._topic_ids: dict[str, str] = {}
        self.verify()                       # remember the ids of the logs as created
        self._worker_of = {self.topics.log(w): w for w in self.workers}
        self._lseq = {w: 0 for w in self.workers}
        self._fold: dict[int, dict] = {w: {} for w in self.workers}   # channel -> [last seq, {key: total}]
        # delivery-thread state: records delivered per worker, the offset of the last
        self._delivered = {w: 0 for w in self.workers}
        self._last_offset: dict[int, int] = {}
        # worker -> [(lseq, channels)]: snapshots waiting for record lseq-1's offset
        self._pending_snapshots: dict[int, collections.deque] = {w: collections.deque() for w in self.workers}
        self._to_index: collections.deque = collections.deque()      # (worker, snapshot offset, covers)
        self._snapshots_in_flight = 0
        self._snapshot_covers: dict[int, int] = {}   # worker -> log offset its indexed snapshot reaches
        self.can_delete = True
        self._probed = False                # delete_records support tried once
        self.records = 0
        self.bytes = 0
        self.snapshots_written = 0
        self.error: Optional[BaseException] = None
        self._lock = threading.Lock()
        self.producer = Producer({**producer_config(bootstrap, self.options),
                                  "on_delivery": self._delivered_cb, "error_cb": self._client_error})
        self._closing = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, daemon=True, name="broker-log-delivery")
        self._poller.start()

    # ---- appending (worker threads) ------------------------------------------------------
    def append(self, worker: int, channel: int, seq: int, updates: list) -> None:
        """Append one progress batch of ``worker`` (asynchronously, in order)."""
        if self.error is not None:
            raise BrokerError(f"progress log at {self.bootstrap} failed: {self.error}")
        lseq = self._lseq[worker]
        self._lseq[worker] = lseq + 1
        value = pack((lseq, channel, seq, updates))
        per_channel = self._fold[worker].setdefault(channel, [-1, {}])
        per_channel[0] = seq
        fold([updates], per_channel[1])
        if self.snapshot_interval and (lseq + 1) % self.snapshot_interval == 0:
            channels = {ch: (last, list(acc.items())) for ch, (last, acc) in self._fold[worker].items()}
            self._pending_snapshots[worker].append((lseq + 1, channels))
        self._produce(self.topics.log(worker), value)
        with self._lock:
            self.records += 1
            self.bytes += len(value)

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
        worker = self._worker_of.get(msg.topic())
        if worker is None:
            return                          # a snapshot: see _snapshot_delivered
        lseq = self._delivered[worker]
        self._delivered[worker] = lseq + 1
        offset = msg.offset()
        # Record lseq must land after record lseq - 1: a log that starts over (a broker
        # that came back empty) puts it at a smaller offset.
        last = self._last_offset.get(worker)
        if last is not None and offset <= last:
            self._failed(BrokerLostError(
                f"the progress log of worker {worker} at {self.bootstrap} starts over: record "
                f"{lseq} landed at offset {offset}, after offset {last} (the broker lost its data)"))
        self._last_offset[worker] = offset
        pending = self._pending_snapshots[worker]
        if pending and pending[0][0] == lseq + 1:
            covers_lseq, channels = pending.popleft()
            value = pack((worker, covers_lseq, offset + 1, channels))
            self._snapshots_in_flight += 1
            self._produce(self.topics.snapshots, value, str(worker).encode(),
                          on_delivery=lambda e, m: self._snapshot_delivered(e, m, worker, offset + 1))

    def _snapshot_delivered(self, err: Any, msg: Any, worker: int, covers: int) -> None:
        if err is not None:
            self._failed(err)
        else:
            self._to_index.append((worker, msg.offset(), covers))
        self._snapshots_in_flight -= 1

    def _index(self, worker: int, snapshot_offset: int, covers: int) -> None:
        try:
            set_group_offset(self.admin, self.topics.snapshot_index(worker), self.topics.snapshots,
                             snapshot_offset)
        except Exception as e:  # noqa: BLE001 - the previous snapshot stays valid
            # a timed-out future's text is empty: name the exception's type as well
            log.warning("could not index the snapshot of worker %d: %s: %s", worker,
                        type(e).__name__, describe(e))
            return
        self.snapshots_written += 1
        self._snapshot_covers[worker] = max(self._snapshot_covers.get(worker, 0), covers)

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
        """Raise BrokerLostError if one of our logs disappeared or was recreated (a
        broker that came back empty gives its topics new ids). A broker that does not
        answer raises the client's error instead: a stall, not a loss."""
        for name, topic_id in topic_ids(self.admin, [self.topics.log(w) for w in self.workers]).items():
            if topic_id is None:
                raise BrokerLostError(f"the progress log {name} is gone from the broker at "
                                      f"{self.bootstrap}: it lost its records (did it come back empty?)")
            known = self._topic_ids.setdefault(name, topic_id)
            if topic_id != known:
                raise BrokerLostError(f"the progress log {name} at {self.bootstrap} was recreated: "
                                      f"the broker lost its records (did it come back empty?)")

    def trim(self, subscribers: Iterable[str]) -> int:
        """Delete log records every subscriber has read and the latest indexed snapshot
        covers (a joiner starts there), where the broker supports it.

        Returns the number of logs trimmed; 0 (and never again) on a broker without
        ``delete_records``, such as the in-memory test broker."""
        from confluent_kafka import TopicPartition
        if not self.can_delete:
            return 0
        positions: dict[str, int] = {}
        for name in subscribers:
            try:
                found = group_offsets(self.admin, self.topics.subscriber_group(name))
            except Exception:  # noqa: BLE001 - no answer: try again next time
                return 0
            for w in self.workers:
                topic = self.topics.log(w)
                low = found.get((topic, 0), 0)
                positions[topic] = min(positions.get(topic, low), low)
        for w in self.workers:
            topic = self.topics.log(w)
            positions[topic] = min(positions.get(topic, 0), self._snapshot_covers.get(w, 0))
        wanted = {topic: off for topic, off in positions.items() if off > 0}
        if not wanted:
            if self._probed:
                return 0
            # Nothing to delete yet: find out now whether the broker could (deleting
            # below offset 0 changes nothing where it is supported).
            wanted = {self.topics.log(self.workers[0]): 0}
        self._probed = True
        try:
            for future in self.admin.delete_records(
                    [TopicPartition(t, 0, off) for t, off in wanted.items()], request_timeout=10).values():
                future.result(10)
        except Exception as e:  # noqa: BLE001 - feature detection
            self.can_delete = False
            log.info("broker at %s cannot delete records (%s): logs are kept whole", self.bootstrap, e)
            return 0
        return sum(1 for off in wanted.values() if off > 0)

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
