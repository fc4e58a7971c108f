"""The writing side: per-worker progress logs and their snapshots.

Record layout (msgpack, arrays decode as tuples):
- log record (topic ``{prefix}.progress.{worker}``, partition 0):
  ``(lseq, channel, seq, updates)`` where ``lseq`` numbers the worker's records 0, 1,
  2, ... and ``updates`` is a list of ``(key, delta)``;
- snapshot (topic ``{prefix}.snapshots``, key ``worker``):
  ``(worker, lseq, offset, {channel: (last_seq, [(key, total), ...])})``: the fold of
  the worker's records with lseq < ``lseq``, which start at Kafka offset ``offset``
  of its log. The offset of a worker's latest snapshot is committed in the consumer
  group ``{prefix}.snapidx.{worker}``, so a reader fetches exactly one record.

Costs: ``append`` O(updates) (an async send plus the running fold); a snapshot
O(distinct keys) every ``snapshot_interval`` records.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Iterable, Optional

import msgpack

log = logging.getLogger("broker")


class BrokerError(RuntimeError):
    """The broker cannot be used: unreachable, refusing, or misconfigured."""


class BrokerLostError(BrokerError):
    """The broker lost progress records (e.g. it restarted empty): frontiers would be
    wrong, so the computation must stop."""


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


def client_options(bootstrap: str, options: Optional[dict]) -> dict:
    return {"bootstrap_servers": bootstrap, **(options or {})}


def connect_admin(bootstrap: str, options: Optional[dict] = None):
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError
    try:
        return KafkaAdminClient(**client_options(bootstrap, options), request_timeout_ms=10000)
    except KafkaError as e:
        raise BrokerError(f"Kafka broker at {bootstrap} is unreachable: {e}") from None


def ensure_topics(admin: Any, names: Iterable[str]) -> None:
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError
    wanted = [n for n in names if n not in set(admin.list_topics())]
    if not wanted:
        return
    try:
        admin.create_topics([NewTopic(n, 1, 1) for n in wanted])
    except TopicAlreadyExistsError:
        pass


class ProgressLog:
    """One process's writer: appends the batches of its workers, writes snapshots."""

    def __init__(self, bootstrap: str, prefix: str, workers: Iterable[int], *,
                 snapshot_interval: int = 1000, options: Optional[dict] = None) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaError
        self.bootstrap = bootstrap
        self.topics = Topics(prefix)
        self.snapshot_interval = snapshot_interval
        self.options = options or {}
        self.admin = connect_admin(bootstrap, options)
        self.workers = list(workers)
        ensure_topics(self.admin, [self.topics.log(w) for w in self.workers] + [self.topics.snapshots])
        self._topic_ids: dict[str, str] = {}
        self.verify()                       # remember the ids of the logs as created
        try:
            self.producer = KafkaProducer(
                **client_options(bootstrap, options), acks="all", linger_ms=0, retries=2**31 - 1,
                enable_idempotence=True, max_in_flight_requests_per_connection=1,
                delivery_timeout_ms=600_000, request_timeout_ms=5000, max_block_ms=600_000)
        except KafkaError as e:
            raise BrokerError(f"Kafka broker at {bootstrap} is unreachable: {e}") from None
        self._lock = threading.Lock()
        self._lseq = {w: 0 for w in self.workers}
        self._fold: dict[int, dict] = {w: {} for w in self.workers}   # channel -> [last seq, {key: total}]
        self._first_offset: dict[int, Optional[int]] = {w: None for w in self.workers}
        self._last_offset: dict[int, int] = {}
        self._snapshot_covers: dict[int, int] = {}   # worker -> log offset its indexed snapshot reaches
        self._topic_ids: dict[str, str] = {}
        self.can_delete = True
        self._probed = False                # delete_records support tried once
        self.records = 0
        self.bytes = 0
        self.snapshots_written = 0
        self.error: Optional[BaseException] = None

    def append(self, worker: int, channel: int, seq: int, updates: list) -> None:
        """Append one progress batch of ``worker`` (asynchronously, in order)."""
        if self.error is not None:
            raise BrokerError(f"progress log at {self.bootstrap} failed: {self.error}")
        with self._lock:
            lseq = self._lseq[worker]
            self._lseq[worker] = lseq + 1
            value = pack((lseq, channel, seq, updates))
            future = self.producer.send(self.topics.log(worker), value=value, partition=0)
            self.records += 1
            self.bytes += len(value)
            per_channel = self._fold[worker].setdefault(channel, [-1, {}])
            per_channel[0] = seq
            fold([updates], per_channel[1])
            future.add_callback(self._check_offset, worker, lseq)
            future.add_errback(self._failed)
            if self.snapshot_interval and (lseq + 1) % self.snapshot_interval == 0:
                self._snapshot(worker, lseq + 1, future)

    def _check_offset(self, worker: int, lseq: int, md: Any) -> None:
        """Record ``lseq`` must land after record ``lseq - 1``: a log that starts over
        (a broker that came back empty) puts it at a smaller offset."""
        last = self._last_offset.get(worker)
        if last is not None and md.offset <= last:
            self._failed(BrokerLostError(
                f"the progress log of worker {worker} at {self.bootstrap} starts over: record "
                f"{lseq} landed at offset {md.offset}, after offset {last} (the broker lost its data)"))
        self._last_offset[worker] = md.offset
        if lseq == 0:
            self._first_offset[worker] = md.offset

    def verify(self) -> None:
        """Raise BrokerLostError if one of our logs disappeared or was recreated (a
        broker that came back empty gives its topics new ids). A broker that does not
        answer raises the client's error instead: a stall, not a loss."""
        names = [self.topics.log(w) for w in self.workers]
        found = {t["name"]: t for t in self.admin.describe_topics(names)}
        for name in names:
            topic = found.get(name)
            if topic is None or topic.get("error_code") or topic.get("topic_id") is None:
                raise BrokerLostError(f"the progress log {name} is gone from the broker at "
                                      f"{self.bootstrap} (did it come back empty?)")
            known = self._topic_ids.setdefault(name, topic["topic_id"])
            if topic["topic_id"] != known:
                raise BrokerLostError(f"the progress log {name} at {self.bootstrap} was recreated: "
                                      f"the broker lost its records (did it come back empty?)")

    def trim(self, subscribers: Iterable[str]) -> int:
        """Delete log records every subscriber has read and the latest indexed snapshot
        covers (a joiner starts there), where the broker supports it.

        Returns the number of logs trimmed; 0 (and never again) on a broker without
        ``delete_records``, such as the in-memory test broker."""
        if not self.can_delete:
            return 0
        from kafka import TopicPartition
        from kafka.errors import KafkaError
        positions: dict = {}
        for name in subscribers:
            group = self.topics.subscriber_group(name)
            try:
                found = self.admin.list_group_offsets(group).get(group, {})
            except KafkaError:
                return 0
            for w in self.workers:
                tp = TopicPartition(self.topics.log(w), 0)
                off = found.get(tp)
                low = off.offset if off is not None else 0
                positions[tp] = min(positions.get(tp, low), low)
        for w in self.workers:
            tp = TopicPartition(self.topics.log(w), 0)
            positions[tp] = min(positions.get(tp, 0), self._snapshot_covers.get(w, 0))
        wanted = {tp: off for tp, off in positions.items() if off > 0}
        if not wanted:
            if self._probed:
                return 0
            # Nothing to delete yet: find out now whether the broker could (deleting
            # below offset 0 changes nothing where it is supported).
            wanted = {TopicPartition(self.topics.log(self.workers[0]), 0): 0}
        self._probed = True
        try:
            self.admin.delete_records(wanted)
        except Exception as e:  # noqa: BLE001 - feature detection
            self.can_delete = False
            log.info("broker at %s cannot delete records (%s): logs are kept whole", self.bootstrap, e)
            return 0
        return sum(1 for off in wanted.values() if off > 0)

    def _failed(self, exc: BaseException) -> None:
        text = f"{type(exc).__name__}: {exc}"
        if not isinstance(exc, BrokerError):
            if any(s in text for s in ("UnknownProducerId", "OutOfOrderSequence", "InitProducerId")):
                # the idempotent producer's sequence numbers no longer match the broker's
                exc = BrokerLostError(f"the broker at {self.bootstrap} lost the progress logs' state "
                                      f"(did it come back empty?): {text}")
            else:
                exc = BrokerError(f"appending to the progress log at {self.bootstrap} failed: {text}")
        if self.error is None:
            self.error = exc
            log.error("%s", exc)

    def _snapshot(self, worker: int, lseq: int, last_future: Any) -> None:
        """Write the fold of records [0, lseq) of ``worker``'s log, and point to it."""
        channels = {ch: (last, list(acc.items())) for ch, (last, acc) in self._fold[worker].items()}

        def written(record_md: Any, offset_after: int) -> None:
            from kafka import TopicPartition
            from kafka.structs import OffsetAndMetadata
            try:
                self.admin.alter_group_offsets(self.topics.snapshot_index(worker), {
                    TopicPartition(self.topics.snapshots, 0): OffsetAndMetadata(record_md.offset, None, -1)})
                self.snapshots_written += 1
                self._snapshot_covers[worker] = max(self._snapshot_covers.get(worker, 0), offset_after)
            except Exception as e:  # noqa: BLE001 - the previous snapshot stays valid
                log.warning("could not index the snapshot of worker %d: %s", worker, e)

        def covered(md: Any) -> None:
            # md: the last record of the prefix; the snapshot covers offsets [.., md.offset]
            value = pack((worker, lseq, md.offset + 1, channels))
            self.producer.send(self.topics.snapshots, key=str(worker).encode(), value=value, partition=0) \
                .add_callback(lambda rmd: written(rmd, md.offset + 1)).add_errback(self._failed)
        last_future.add_callback(covered)

    def flush(self, timeout: Optional[float] = None) -> None:
        self.producer.flush(timeout=timeout)

    def close(self) -> None:
        try:
            self.producer.flush(timeout=10)
        finally:
            self.producer.close(timeout=5)
            self.admin.close()
