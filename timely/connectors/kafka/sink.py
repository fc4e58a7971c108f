"""The Kafka sink: a dataflow writes a topic by epoch, each epoch followed by its markers.

``stream.kafka_sink(brokers, topic, ...)`` writes each epoch's records once the
frontier has passed it, then one marker per partition naming the epoch's offset range;
its output stream's frontier passes an epoch once that epoch is acknowledged by the
broker. Each partition has one writer, worker ``partition % workers``. At start-up it
reads the markers already in its partitions and skips the epochs they complete, so a
restarted job never makes a reader see an epoch twice (nor half of one: records left
by a writer that died before its marker fall outside the marker's range).

Costs: the sink buffers an epoch, then two flushes per epoch (records, then markers).
The sink's start-up scan reads its partitions once: O(topic size).
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Optional, Union

from ...dataflow.channels import Direct
from ...hashing import stable_hash64
from ..client import (Brokers, ConnectorError, brokers_string, consumer_config, producer_config,
                      topic_partitions)
from ..epochs import PACKED_ROWS, Format, data_headers, format_of, marker_headers
from ..markers import MarkerIndex

__all__ = ["kafka_sink", "KafkaSinkState"]


def _key_bytes(key: Any) -> Optional[bytes]:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    return format_of("json").dumps(key)


class KafkaSinkState:
    """One worker's share of a Kafka sink: its producer, partitions and their last epochs."""

    def __init__(self, brokers: Brokers, topic: str, add_config: Optional[dict], fmt: Format,
                 owned: list[int], rows_per_message: int, timeout: float, producer: Any) -> None:
        from confluent_kafka import Consumer
        self.brokers = brokers
        self.topic = topic
        self.format = fmt
        self.owned = owned
        self.rows = rows_per_message
        self.timeout = timeout
        self.producer = producer
        self.last: dict[int, Optional[int]] = {p: None for p in owned}
        if owned:
            # A previous run's markers: the epochs it completed are not written again.
            index = MarkerIndex()
            reader = Consumer(consumer_config(brokers, None, add_config))
            try:
                index.read(reader, {(topic, p): 0 for p in owned})
            finally:
                reader.close()
            self.last = {p: index.states[(topic, p)].completed for p in owned}
        self.written = 0
        self.skipped_epochs = 0
        self._errors: list = []
        self._ranges: dict[int, list] = {}

    def _delivered(self, error: Any, message: Any) -> None:
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
        left = self.producer.flush(self.timeout)
        if left or self._errors:
            problem = "; ".join(self._errors[:3]) or f"{left} records not acknowledged in {self.timeout:g} s"
            raise ConnectorError(f"kafka_sink to {self.topic!r} at {brokers_string(self.brokers)}: "
                                 f"{what} not written: {problem}")

    def abort(self, timeout: float) -> None:
        """The dataflow is dropped after a crash: discard what is not sent yet and wait for
        what is in flight, so nothing of this life lands after the next one started."""
        self.producer.purge(in_queue=True, in_flight=False)
        self.producer.flush(timeout)

    def write(self, epochs: list[tuple[int, dict]], through: Optional[int]) -> None:
        """Write each ``(epoch, {partition: [(key, value)]})`` (ascending), each followed
        by its markers, then empty-epoch markers up to ``through`` (the epoch before the
        frontier), so readers' frontiers follow this one."""
        dumps = self.format.dumps
        for epoch, by_partition in epochs:
            targets = [p for p in self.owned if self.last[p] is None or epoch > self.last[p]]
            if len(targets) < len(self.owned):
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
            for p in targets:
                first, end = ranges.get(p, (0, 0))
                self._produce(b"", p, marker_headers(epoch, first, end))
                self.last[p] = epoch
            self._flush(f"the markers of epoch {epoch}")
        if through is not None:
            late = [p for p in self.owned if self.last[p] is None or through > self.last[p]]
            for p in late:
                self._produce(b"", p, marker_headers(through, 0, 0))
                self.last[p] = through
            if late:
                self._flush(f"the markers of epoch {through}")


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
    ``partition(record)`` picks it; with neither, records stay on partitions their
    worker writes. ``rows_per_message > 1`` packs that many records per Kafka record (the
    contract's ``rows`` header, which every reader here decodes); by default records go
    ``PACKED_ROWS`` per Kafka record without ``key`` (json and msgpack), and one per
    record with it (a foreign consumer may rely on the Kafka key of each).
    Returns a stream with no records whose frontier passes an epoch once it is durable.
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
    producer = _producer(worker, brokers, {"message.timeout.ms": int(timeout * 1000), **(add_config or {})})
    count = topic_partitions(producer, brokers, [topic])[topic]
    writers = worker.initial_workers
    owner = [writers[p % len(writers)] for p in range(count)]
    owned = [] if worker.is_joiner else [p for p in range(count) if owner[p] == worker.index]
    state = KafkaSinkState(brokers, topic, add_config, fmt, owned, rows_per_message, timeout, producer)
    # a partition's writer stays put: its process cannot leave (timely.rescaling.leave)
    worker.sink_writers[topic] = owner
    worker.checkpoint_context.add_sink(state)

    # Records travel as (partition, key, value) to the partition's one writer.
    if partition is not None:
        route = lambda r: (partition(r) % count, key(r) if key else None, r)  # noqa: E731
    elif key is not None:
        route = lambda r: (stable_hash64(key(r)) % count, key(r), r)  # noqa: E731
    else:
        spread = owned or [worker.index % count]
        cycle = itertools.cycle(spread)
        route = lambda r: (next(cycle), None, r)  # noqa: E731
    routed = stream.map(route)
    builder = scope.operator(name)
    port = builder.new_input(routed, Direct(lambda t: owner[t[0]]))
    _, durable = builder.new_output()

    def constructor(caps):
        caps[0].drop()
        pending: dict[int, tuple[Any, dict]] = {}

        def logic():
            for cap, records in port:
                found = pending.get(cap.time)
                if found is None:
                    found = pending[cap.time] = (cap.retain(), {})
                by_partition = found[1]
                for p, k, v in records:
                    bucket = by_partition.get(p)
                    if bucket is None:
                        by_partition[p] = [(k, v)]
                    else:
                        bucket.append((k, v))
            frontier = port.frontier.frontier()
            least = min(frontier) if len(frontier) else None
            ready = sorted(t for t in pending if least is None or t < least)
            through = None if least is None or least == scope.minimum else least - 1
            state.write([(t, pending[t][1]) for t in ready], through)
            for t in ready:
                pending.pop(t)[0].drop()
        return logic
    builder.build(constructor)
    return durable

