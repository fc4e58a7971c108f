"""The Kafka sink: a dataflow writes a topic by epoch, each epoch followed by its markers.

``stream.kafka_sink(brokers, topic, ...)`` writes each epoch's records once the
frontier has passed it, then one marker per partition naming the epoch's offset range;
its output stream's frontier passes an epoch once that epoch is acknowledged by the
broker.

Each partition has one writer at a time, and writers move with the cluster. A
partition is a Megaphone bin (its key is chosen to hash to bin ``p``), so the writer
of partition p at epoch e is whoever holds bin p at e: records are routed by the
configuration in force at their epoch, and a bin moves at an epoch boundary H only
once its old owner has written every epoch before H (data, markers, acknowledged).
The bin's state, ``{p: [last epoch written, offset to read markers from]}``, moves
with it; before its first write a writer reads the partition's markers from that
offset on (from 0 after a start: the topic is the sink's checkpoint, so its bins are
kept out of the dataflow's), so an epoch is never written twice, by a restarted job
or after a move. The rebalancer spreads the partitions
over the workers on joins, leaves and rollbacks, as it spreads any bins.

Costs: the sink buffers an epoch, then two flushes per epoch and worker (records, then
markers). Reading a partition's markers costs O(records since the offset), once per
partition a worker takes on.
"""
from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Optional, Union

from broker import health

from ...hashing import stable_hash64
from ...megaphone.apply import bin_slices
from ...megaphone.bins import bin_of, bin_shift
from ...megaphone.state import stateful_epochs
from ..client import (Brokers, ConnectorError, brokers_string, consumer_config, log, producer_config,
                      topic_partitions)
from ..epochs import PACKED_ROWS, Format, data_headers, format_of, marker_headers
from ..markers import MarkerIndex

__all__ = ["kafka_sink", "KafkaSinkState", "partition_keys"]


def _key_bytes(key: Any) -> Optional[bytes]:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    return format_of("json").dumps(key)


def sink_bins(partitions: int) -> int:
    """The sink's bins: the least power of two that gives every partition its own.

    >>> sink_bins(1), sink_bins(4), sink_bins(5)
    (1, 4, 8)
    """
    return 1 << max(0, partitions - 1).bit_length()


def partition_keys(partitions: int) -> list:
    """For each partition p, a key that Megaphone puts in bin p of ``sink_bins``.

    >>> from timely.hashing import stable_hash64
    >>> keys = partition_keys(4)
    >>> [bin_of(stable_hash64(k), bin_shift(4)) for k in keys]
    [0, 1, 2, 3]
    """
    k = bin_shift(sink_bins(partitions))
    keys: list = [None] * partitions
    for i in itertools.count():
        key = ("kafka_sink", i)
        b = bin_of(stable_hash64(key), k)
        if b < partitions and keys[b] is None:
            keys[b] = key
            if all(x is not None for x in keys):
                return keys
    raise AssertionError("unreachable")


class KafkaSinkState:
    """One worker's writing of a Kafka sink: its producer, and the partitions it has read
    the markers of since it took them on (``verified``)."""

    def __init__(self, brokers: Brokers, topic: str, add_config: Optional[dict], fmt: Format,
                 rows_per_message: int, timeout: float, producer: Any,
                 reader: Optional[Callable[[], Any]] = None) -> None:
        self.brokers = brokers
        self.topic = topic
        self.add_config = add_config
        self.format = fmt
        self.rows = rows_per_message
        self.timeout = timeout
        self.producer = producer
        #: makes the consumer that reads markers (a Kafka consumer; timely.verify's own)
        self.reader = reader or self._consumer
        self.verified: set[int] = set()
        self.written = 0
        self.skipped_epochs = 0
        self._errors: list = []
        self._ranges: dict[int, list] = {}

    def _delivered(self, error: Any, message: Any) -> None:
        try:
            self._note_delivery(error, message)
        except Exception as e:      # noqa: BLE001 - an exception raised into librdkafka's flush
            # comes back as a SystemError that hides it (confluent-kafka 2.16, Python 3.11)
            log.exception("kafka_sink to %r: a delivery report", self.topic)
            self._errors.append(f"{self.topic}: a delivery report failed: {e!r}")

    def _note_delivery(self, error: Any, message: Any) -> None:
        if error is not None:
            self._errors.append(f"{self.topic}[{message.partition()}]: {error.str()}")
            return
        found = self._ranges.get(message.partition())
        offset = message.offset()
        if found is None:
            self._ranges[message.partition()] = [offset, offset + 1]
        else:
            found[0] = min(found[0], offset)
            found[1] = max(found[1], offset + 1)

    def _produce(self, value: bytes, partition: int, headers: list, key: Optional[bytes] = None) -> None:
        produce = self.producer.produce
        while True:
            try:
                produce(self.topic, value, key, partition=partition, headers=headers,
                        on_delivery=self._delivered)
                return
            except BufferError:
                self.producer.poll(0.01)

    def _flush(self, what: str) -> None:
        # ``timeout`` bounds a flush while the broker answers; while it is away the flush
        # waits for it, up to --broker-timeout (broker.health stops the process then)
        h = health.health(brokers_string(self.brokers))
        deadline = time.monotonic() + self.timeout
        left = self.producer.flush(min(1.0, self.timeout))
        while left and not self._errors:
            if not h.up:
                unreachable = h.failure()
                if unreachable is not None:
                    raise unreachable
                deadline = time.monotonic() + self.timeout
            elif time.monotonic() >= deadline:
                break
            left = self.producer.flush(min(1.0, self.timeout))
        if left or self._errors:
            problem = "; ".join(self._errors[:3]) or f"{left} records not acknowledged in {self.timeout:g} s"
            raise ConnectorError(f"kafka_sink to {self.topic!r} at {brokers_string(self.brokers)}: "
                                 f"{what} not written: {problem}")

    def abort(self, timeout: float) -> None:
        """The dataflow is dropped after a crash: discard what is not sent yet and wait for
        what is in flight, so nothing of this life lands after the next one started."""
        self.producer.purge(in_queue=True, in_flight=False)
        self.producer.flush(timeout)

    def _consumer(self) -> Any:
        from confluent_kafka import Consumer
        return Consumer(consumer_config(self.brokers, None, self.add_config))

    def verify(self, held: dict[int, list]) -> None:
        """Read the markers of the partitions in ``held`` (``{p: its state}``) this worker
        has not read since it took them on, from the offset their state names, so that
        their state says the last epoch the topic has."""
        unread = {p: s for p, s in held.items() if p not in self.verified}
        if not unread:
            return
        index = MarkerIndex()
        reader = self.reader()
        try:
            index.read(reader, {(self.topic, p): s[1] for p, s in unread.items()})
        finally:
            reader.close()
        for p, s in unread.items():
            tp = (self.topic, p)
            completed = index.states[tp].completed
            if completed is not None and (s[0] is None or completed > s[0]):
                s[0] = completed
            s[1] = index.positions[tp]
            self.verified.add(p)

    def forget(self, kept: Any) -> None:
        """Partitions not in ``kept`` went to other workers: read them again if they come back."""
        self.verified &= set(kept)

    def hold(self, held: dict[int, list]) -> None:
        """This worker writes the partitions of ``held`` now: forget the others, and read
        the markers of those it has just taken on (``verify``)."""
        self.forget(held)
        self.verify(held)

    def write(self, epoch: int, by_partition: dict, held: dict[int, list]) -> list[int]:
        """Write ``epoch``'s records (``{p: [(key, value)]}``) to the partitions of
        ``held`` that have not had it, then their markers; returns those partitions."""
        dumps = self.format.dumps
        targets = [p for p, s in held.items() if s[0] is None or epoch > s[0]]
        if len(targets) < len(held):
            self.skipped_epochs += 1
        self._ranges = {}
        for p in targets:
            records = by_partition.get(p, ())
            headers = data_headers(epoch)
            if self.rows > 1:
                for i in range(0, len(records), self.rows):
                    chunk = records[i:i + self.rows]
                    self._produce(self.format.dumps_many([v for _, v in chunk]), p,
                                  data_headers(epoch, rows=len(chunk)), _key_bytes(chunk[0][0]))
            else:
                for key, value in records:
                    try:
                        encoded = dumps(value)
                    except Exception as exc:  # noqa: BLE001 - name the record
                        raise ConnectorError(f"kafka_sink to {self.topic!r}: epoch {epoch} record "
                                             f"{value!r:.80} does not encode as {self.format.name}: "
                                             f"{exc}") from None
                    self._produce(encoded, p, headers, _key_bytes(key))
            self.written += len(records)
        self._flush(f"epoch {epoch}")
        ranges = self._ranges
        self._markers(epoch, {p: ranges.get(p, (0, 0)) for p in targets}, held)
        return targets

    def through(self, epoch: int, held: dict[int, list]) -> list[int]:
        """Empty-epoch markers up to ``epoch`` on the partitions of ``held`` behind it, so
        readers' frontiers follow this one; returns those partitions."""
        late = [p for p, s in held.items() if s[0] is None or epoch > s[0]]
        if late:
            self._markers(epoch, {p: (0, 0) for p in late}, held)
        return late

    def _markers(self, epoch: int, ranges: dict[int, tuple], held: dict[int, list]) -> None:
        self._ranges = {}
        for p, (first, end) in ranges.items():
            self._produce(b"", p, marker_headers(epoch, first, end))
        self._flush(f"the markers of epoch {epoch}")
        for p in ranges:
            held[p][0] = epoch
            held[p][1] = self._ranges[p][1]


def _producer(worker: Any, brokers: Brokers, config: dict) -> Any:
    """The worker's producer for ``brokers`` and ``config``, made once: a sink rebuilt after
    a crash reuses it (an idempotent producer waits for its id before its first record:
    0.5-1 s on the test broker)."""
    from confluent_kafka import Producer
    found = getattr(worker, "kafka_producers", None)
    if found is None:
        found = worker.kafka_producers = {}
    key = (brokers_string(brokers), tuple(sorted((k, str(v)) for k, v in config.items())))
    if key not in found:
        found[key] = Producer(producer_config(brokers, config))
    return found[key]


def kafka_sink(stream: Any, brokers: Brokers, topic: str, *, value_format: Union[str, Format] = "json",
               key: Optional[Callable[[Any], Any]] = None,
               partition: Optional[Callable[[Any], int]] = None, add_config: Optional[dict] = None,
               rows_per_message: Optional[int] = None, timeout: float = 30.0, name: str = "KafkaSink") -> Any:
    """Write ``stream``'s records to ``topic`` by epoch (see the module docstring).

    ``key(record)`` is the Kafka key and picks the partition (a stable hash), unless
    ``partition(record)`` picks it; with neither, records go to partitions this worker
    writes (round robin). ``rows_per_message > 1`` packs that many records per Kafka
    record (the contract's ``rows`` header, which every reader here decodes); by
    default records go ``PACKED_ROWS`` per Kafka record without ``key`` (json and
    msgpack), and one per record with it (a foreign consumer may rely on the Kafka key
    of each). Returns a stream with no records whose frontier passes an epoch once it
    is durable.
    """
    scope = stream.scope
    if type(scope.minimum) is not int:
        raise TypeError(f"kafka_sink: epochs are ints, but scope {scope.name!r} has timestamps "
                        f"like {scope.minimum!r}")
    fmt = format_of(value_format)
    if rows_per_message is None:
        rows_per_message = PACKED_ROWS if key is None and fmt.packs else 1
    if rows_per_message < 1:
        raise ValueError(f"kafka_sink: rows_per_message must be >= 1, got {rows_per_message}")
    worker = scope.worker
    # a record outlives an outage the process waits out (broker.health)
    producer = _producer(worker, brokers, {"message.timeout.ms": int((timeout + health.timeout()) * 1000),
                                           **(add_config or {})})
    count = topic_partitions(producer, brokers, [topic])[topic]
    state = KafkaSinkState(brokers, topic, add_config, fmt, rows_per_message, timeout, producer)
    worker.checkpoint_context.add_sink(state)
    keys = partition_keys(count)
    holder: dict = {}

    # Records travel as (partition, key, value) to the partition's writer at their epoch.
    if partition is not None:
        route = lambda r: (partition(r) % count, key(r) if key else None, r)  # noqa: E731
    elif key is not None:
        route = lambda r: (stable_hash64(key(r)) % count, key(r), r)  # noqa: E731
    else:
        cycle = itertools.count(worker.index)
        seen = {"moves": None, "mine": []}

        def route(r):
            states = holder["states"]
            moves = (len(states.shipped), len(states.received))    # bins came or went
            if moves != seen["moves"]:
                seen["moves"], seen["mine"] = moves, [b for b in states.bins if b < count]
            mine = seen["mine"]
            return (mine[next(cycle) % len(mine)] if mine else next(cycle) % count, None, r)

    def make_apply(states, out, schedule):
        holder["states"] = states

        def held() -> dict[int, list]:
            bins = states.bins
            found = {}
            for b in bins:
                if b < count:
                    s = bins[b].state
                    found[b] = s[b] = list(s.get(b, (None, 0)))   # (a moved bin's came as a tuple)
            state.hold(found)
            return found

        def apply(t, cap, entries, _bins_due, _combined):
            by_partition: dict[int, list] = {}
            for _i, runs, records in entries:
                for _b, these in bin_slices(runs, records):
                    for p, k, v in these:
                        found = by_partition.get(p)
                        if found is None:
                            by_partition[p] = [(k, v)]
                        else:
                            found.append((k, v))
            state.write(t, by_partition, held())
        holder["held"] = held
        return apply

    def advanced(least: Any) -> None:
        if least is not None and least > scope.minimum:
            state.through(least - 1, holder["held"]())

    return stateful_epochs(stream.map(route), lambda r: keys[r[0]], name, make_apply,
                           sink_bins(count), advanced, checkpointed=False)
