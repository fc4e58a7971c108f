"""Kafka source and sink operators: dataflows read and write topics under the epoch contract.

Named after bytewax's and Spark's Kafka connectors: ``brokers``, ``topics``,
``starting_offsets``, ``add_config`` (passed to the client), ``batch_size``.

- ``scope.kafka_source(brokers, topics, ...)`` spreads the topics' partitions over the
  workers of the original cluster (partition i of the sorted list goes to worker
  ``i % workers``). Each record's timestamp is its epoch. A record is given to the
  dataflow when its epoch's marker is read (see ``timely.connectors.epochs``), and the
  source's capability is the least, over its partitions, of the next unfinished epoch:
  the frontier passes an epoch exactly when every partition's marker for it was read.
  Topics without markers: ``epochs="ingestion"`` stamps records with the time they were
  read (epochs are milliseconds since 1970, a new one every ``epoch_records`` records or
  ``epoch_ms`` ms, so they keep increasing across restarts).
- ``stream.kafka_commit(source, ...)`` commits a source's offsets to its consumer group
  once ``stream``'s frontier has passed the epochs they end; put it after the sink, and a
  restarted dataflow resumes at the first epoch whose results are not yet in Kafka (it
  first reads the marker just before the committed offset, so a replay of that epoch is
  dropped). With ``end_epoch``, nothing from ``end_epoch`` on is committed.
- ``stream.kafka_sink(brokers, topic, ...)`` writes each epoch's records once the
  frontier has passed it, then one marker per partition naming the epoch's offset range;
  its output stream's frontier passes an epoch once that epoch is acknowledged by the
  broker. Each partition has one writer, worker ``partition % workers``. At start-up it
  reads the markers already in its partitions and skips the epochs they complete, so a
  restarted job never makes a reader see an epoch twice (nor half of one: records left
  by a writer that died before its marker fall outside the marker's range).

Costs: the source does one ``consume`` per activation (up to ``batch_size`` records),
buffers an epoch per partition until its marker, and decodes an epoch's values in one
call; the sink buffers an epoch, then two flushes per epoch (records, then markers).
The sink's start-up scan reads its partitions once: O(topic size).
"""
from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from ..dataflow.channels import Direct
from ..dataflow.operators import OperatorInfo
from ..megaphone.bins import stable_hash64
from .client import (Brokers, ConnectorError, brokers_string, consumer_config, log, producer_config,
                     topic_partitions)
from .epochs import (DecodeError, Format, PartitionEpochs, data_headers, format_of, marker_headers)
from .markers import MarkerIndex

__all__ = ["kafka_commit", "kafka_sink", "kafka_source", "KafkaSourceState"]

_POLL_TIMEOUT = 0.002      # s the worker may block in consume when nothing was ready


def _sources(worker: Any) -> dict:
    found = getattr(worker, "kafka_sources", None)
    if found is None:
        found = worker.kafka_sources = {}
    return found


def _starting(starting_offsets: Any, topic: str, partition: int) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END
    if starting_offsets == "earliest":
        return OFFSET_BEGINNING
    if starting_offsets == "latest":
        return OFFSET_END
    if isinstance(starting_offsets, dict):
        by_topic = starting_offsets.get(topic, {})
        found = by_topic.get(partition, by_topic.get(str(partition)))
        return OFFSET_BEGINNING if found is None else int(found)
    raise ValueError(f"starting_offsets must be 'earliest', 'latest' or "
                     f"{{topic: {{partition: offset}}}}, got {starting_offsets!r}")


class KafkaSourceState:
    """One worker's share of a Kafka source: its consumer and its partitions' epochs."""

    def __init__(self, brokers: Brokers, topics: Sequence[str], group_id: Optional[str],
                 starting_offsets: Any, add_config: Optional[dict], value_format: Format,
                 worker_index: int, workers: int, dead_letter_topic: Optional[str],
                 end_epoch: Optional[int] = None, resume_at_marker: bool = False) -> None:
        from confluent_kafka import Consumer, TopicPartition
        self.brokers = brokers
        #: epochs from here on are read but not given to the dataflow: never committed
        self.end_epoch = end_epoch
        self.group_id = group_id
        self.format = value_format
        self.consumer = Consumer(consumer_config(brokers, group_id, add_config))
        counts = topic_partitions(self.consumer, brokers, topics)
        every = [(t, p) for t in sorted(counts) for p in range(counts[t])]
        mine = [tp for i, tp in enumerate(every) if i % workers == worker_index] if workers else []
        self.parts: dict[tuple[str, int], PartitionEpochs] = {tp: PartitionEpochs(*tp) for tp in mine}
        starts = {}
        #: partitions resumed from a committed offset: (topic, partition) -> that offset
        self.resumed: dict[tuple[str, int], int] = {}
        if mine:
            committed = {}
            if group_id is not None:
                found = self.consumer.committed([TopicPartition(t, p) for t, p in mine], timeout=10)
                committed = {(c.topic, c.partition): c.offset for c in found if c.offset >= 0}
            for t, p in mine:
                starts[(t, p)] = committed.get((t, p), _starting(starting_offsets, t, p))
            if resume_at_marker:
                # A committed offset is just past a marker: read that marker first, so the
                # epoch it completed is known and a replay of that epoch is dropped.
                self.resumed = {tp: o for tp, o in committed.items() if o > 0}
            self.consumer.assign([TopicPartition(t, p, o - 1 if (t, p) in self.resumed else o)
                                  for (t, p), o in starts.items()])
        self.starts = starts
        self.dead_letter_topic = dead_letter_topic
        self._dlq = None
        self.records = 0            # events given to the dataflow
        self.dead_letters = 0

    # ---- reading ---------------------------------------------------------------------------
    def poll(self, batch_size: int, timeout: float) -> list:
        """Messages from the broker (errors other than end-of-partition raise)."""
        from confluent_kafka import KafkaError
        messages = self.consumer.consume(batch_size, timeout)
        for m in messages:
            error = m.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise ConnectorError(f"reading {m.topic()}[{m.partition()}] from "
                                     f"{brokers_string(self.brokers)}: {error.str()}")
        return messages

    def decode(self, topic: str, partition: int, records: list) -> list:
        """The events of ``records`` [(offset, value, rows)], bad ones to the dead-letter
        topic if one is configured."""
        values = [r[1] for r in records]
        rows = [r[2] for r in records]
        offsets = [r[0] for r in records]
        try:
            return self.format.decode(values, rows, topic, partition, offsets)
        except DecodeError:
            if self.dead_letter_topic is None:
                raise
        events: list = []
        for value, n, offset in zip(values, rows, offsets):
            try:
                events.extend(self.format.decode([value], [n], topic, partition, [offset]))
            except DecodeError as exc:
                self._dead_letter(topic, partition, offset, value, str(exc))
        return events

    def _dead_letter(self, topic: str, partition: int, offset: int, value: Any, problem: str) -> None:
        from confluent_kafka import Producer
        if self._dlq is None:
            self._dlq = Producer(producer_config(self.brokers, None))
        self._dlq.produce(self.dead_letter_topic, value, headers=[
            ("error", problem.encode()), ("source.topic", topic.encode()),
            ("source.partition", str(partition).encode()), ("source.offset", str(offset).encode())])
        left = self._dlq.flush(30)
        if left:
            raise ConnectorError(f"dead-letter topic {self.dead_letter_topic!r}: the broker did not "
                                 f"acknowledge the record from {topic}[{partition}] offset {offset}")
        self.dead_letters += 1
        log.warning("dead-lettered %s[%d] offset %d: %s", topic, partition, offset, problem)

    # ---- committing ------------------------------------------------------------------------
    def commit(self, upto: Optional[int]) -> int:
        """Commit, per partition, the offset past the last marker of an epoch ``<= upto``
        (None: every complete epoch); returns how many partitions moved."""
        from confluent_kafka import KafkaException, TopicPartition
        if self.end_epoch is not None:
            upto = self.end_epoch - 1 if upto is None else min(upto, self.end_epoch - 1)
        offsets = []
        for (t, p), state in self.parts.items():
            found = state.commit_offset(upto)
            if found is not None:
                offsets.append(TopicPartition(t, p, found))
                state.forget_commits(state.commit_points[-1][0] if upto is None else upto)
        if offsets and self.group_id is not None:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                raise ConnectorError(f"committing offsets of group {self.group_id!r} to "
                                     f"{brokers_string(self.brokers)}: {exc.args[0].str()}") from None
        return len(offsets)

    def close(self) -> None:
        self.consumer.close()


def kafka_source(scope: Any, brokers: Brokers, topics: Union[str, Iterable[str]], *,
                 group_id: Optional[str] = None, starting_offsets: Any = "earliest",
                 add_config: Optional[dict] = None, batch_size: int = 10_000,
                 value_format: Union[str, Format] = "json", end_epoch: Optional[int] = None,
                 epochs: str = "markers", epoch_records: Optional[int] = None,
                 epoch_ms: Optional[float] = None, dead_letter_topic: Optional[str] = None,
                 name: str = "KafkaSource") -> Any:
    """A stream of the topics' events, each at its epoch (see the module docstring).

    ``group_id``: the consumer group that offsets are committed to (by ``kafka_commit``)
    and resumed from; ``end_epoch``: finish once every partition completed every epoch
    before it (None: run until the dataflow is dropped); ``dead_letter_topic``: where
    values that do not decode go, instead of failing the dataflow.
    """
    topics = [topics] if isinstance(topics, str) else list(topics)
    if not topics:
        raise ValueError("kafka_source: give at least one topic")
    if epochs not in ("markers", "ingestion"):
        raise ValueError(f"kafka_source: epochs must be 'markers' or 'ingestion', got {epochs!r}")
    if epochs == "ingestion" and not (epoch_records or epoch_ms):
        raise ValueError("kafka_source: epochs='ingestion' needs epoch_records or epoch_ms")
    if epochs == "markers" and (epoch_records or epoch_ms):
        raise ValueError("kafka_source: epoch_records / epoch_ms apply only to epochs='ingestion'")
    if type(scope.minimum) is not int:
        raise TypeError(f"kafka_source: epochs are ints, but scope {scope.name!r} has timestamps "
                        f"like {scope.minimum!r}")
    fmt = format_of(value_format)
    worker = scope.worker
    builder = scope.operator(name)
    builder.set_notify(False)
    out, stream = builder.new_output()
    info = OperatorInfo(builder)
    activate = info.activator(worker)
    workers = 0 if worker.is_joiner else worker.initial_peers
    state = KafkaSourceState(brokers, topics, group_id, starting_offsets, add_config, fmt,
                             worker.index, workers, dead_letter_topic, end_epoch,
                             resume_at_marker=epochs == "markers")
    _sources(worker)[(scope.path, stream.source.node)] = state

    def constructor(caps):
        cap = caps[0]
        if not state.parts:
            cap.drop()
            return None
        holder = {"cap": cap, "idle": False}
        if epochs == "markers":
            step = _marker_step(state, out, holder, batch_size, end_epoch)
        else:
            step = _ingestion_step(state, out, holder, batch_size, end_epoch, epoch_records, epoch_ms)

        def logic():
            if holder["cap"] is None:
                return
            step()
            if holder["cap"] is not None:
                activate()
        activate()
        return logic
    builder.build(constructor)
    return stream


def _marker_step(state: KafkaSourceState, out: Any, holder: dict, batch_size: int,
                 end_epoch: Optional[int]) -> Callable[[], None]:
    parts = state.parts
    resumed = state.resumed

    def step():
        messages = state.poll(batch_size, _POLL_TIMEOUT if holder["idle"] else 0)
        holder["idle"] = not messages
        cap = holder["cap"]
        for m in messages:
            if m.error() is not None:
                continue
            key = (m.topic(), m.partition())
            if resumed and key in resumed and m.offset() < resumed.pop(key):
                # the record before the committed offset: only its marker is wanted
                if any(h[0] == "marker" for h in m.headers() or ()):
                    parts[key].record(m.offset(), m.headers(), None)
                continue
            for epoch, records in parts[key].record(m.offset(), m.headers(), m.value()):
                if end_epoch is not None and epoch >= end_epoch:
                    continue
                events = state.decode(key[0], key[1], records)
                if events:
                    state.records += len(events)
                    out.give_batch(cap, events, epoch)
        bounds = [p.bound() for p in parts.values()]
        if None in bounds:
            return
        least = min(bounds)
        if end_epoch is not None and least >= end_epoch:
            cap.drop()
            holder["cap"] = None
        elif least > cap.time:
            cap.downgrade(least)
    return step


def _ingestion_step(state: KafkaSourceState, out: Any, holder: dict, batch_size: int,
                    end_epoch: Optional[int], epoch_records: Optional[int],
                    epoch_ms: Optional[float]) -> Callable[[], None]:
    parts = state.parts
    now_ms = lambda: int(time.time() * 1000)  # noqa: E731
    clock = {"epoch": max(holder["cap"].time, now_ms()), "count": 0, "started": time.monotonic()}
    holder["cap"].downgrade(clock["epoch"])

    def advance():
        epoch = clock["epoch"]
        for p in parts.values():
            if p.position is not None:
                p.completed = epoch
                p.commit_points.append((epoch, p.position))
        clock["epoch"] = max(epoch + 1, now_ms())
        clock["count"] = 0
        clock["started"] = time.monotonic()
        if end_epoch is not None and clock["epoch"] >= end_epoch:
            holder["cap"].drop()
            holder["cap"] = None
        else:
            holder["cap"].downgrade(clock["epoch"])

    def step():
        messages = state.poll(min(batch_size, epoch_records or batch_size),
                              _POLL_TIMEOUT if holder["idle"] else 0)
        holder["idle"] = not messages
        batches: dict = {}
        for m in messages:
            if m.error() is not None:
                continue
            key = (m.topic(), m.partition())
            parts[key].position = m.offset() + 1
            batches.setdefault(key, []).append((m.offset(), m.value(), None))
        for (topic, partition), records in batches.items():
            events = state.decode(topic, partition, records)
            if events:
                state.records += len(events)
                out.give_batch(holder["cap"], events)
            clock["count"] += len(records)
        if ((epoch_records and clock["count"] >= epoch_records)
                or (epoch_ms and (time.monotonic() - clock["started"]) * 1000 >= epoch_ms)):
            advance()
    return step


# ---- committing ---------------------------------------------------------------------------
def kafka_commit(stream: Any, *sources: Any, name: str = "KafkaCommit") -> None:
    """Commit the consumer offsets of ``sources`` (streams from ``kafka_source``) once
    ``stream``'s frontier has passed the epochs they end, and all of them once it is
    empty. Put it after the sink: a restart then resumes at the first epoch whose
    results were not yet acknowledged."""
    scope = stream.scope
    registry = _sources(scope.worker)
    states = []
    for source in sources:
        found = registry.get((source.scope.path, source.source.node))
        if found is None:
            raise ValueError(f"kafka_commit: {source!r} is not a stream made by kafka_source")
        states.append(found)
    builder = scope.operator(name)
    port = builder.new_input(stream)
    builder.new_output()

    def constructor(caps):
        # Held until the input frontier is empty, so the last commit happens before the
        # dataflow is complete (nothing reads this output: it holds back no one else).
        held = {"cap": caps[0], "upto": None}

        def logic():
            port.drain()
            frontier = port.frontier.frontier()
            if not len(frontier):
                for s in states:
                    s.commit(None)
                    s.close()
                held["cap"].drop()
                return
            upto = min(frontier) - 1
            if held["upto"] is None or upto > held["upto"]:
                held["upto"] = upto
                for s in states:
                    s.commit(upto)
        return logic
    builder.build(constructor)


# ---- the sink -----------------------------------------------------------------------------
def _key_bytes(key: Any) -> Optional[bytes]:
    if key is None or isinstance(key, bytes):
        return key
    if isinstance(key, str):
        return key.encode()
    return format_of("json").dumps(key)


class KafkaSinkState:
    """One worker's share of a Kafka sink: its producer, partitions and their last epochs."""

    def __init__(self, brokers: Brokers, topic: str, add_config: Optional[dict], fmt: Format,
                 owned: list[int], rows_per_message: int, timeout: float) -> None:
        from confluent_kafka import Consumer, Producer
        self.brokers = brokers
        self.topic = topic
        self.format = fmt
        self.owned = owned
        self.rows = rows_per_message
        self.timeout = timeout
        self.producer = Producer(producer_config(brokers, {"message.timeout.ms": int(timeout * 1000),
                                                           **(add_config or {})}))
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


def kafka_sink(stream: Any, brokers: Brokers, topic: str, *, value_format: Union[str, Format] = "json",
               key: Optional[Callable[[Any], Any]] = None,
               partition: Optional[Callable[[Any], int]] = None, add_config: Optional[dict] = None,
               rows_per_message: int = 1, timeout: float = 30.0, name: str = "KafkaSink") -> Any:
    """Write ``stream``'s records to ``topic`` by epoch (see the module docstring).

    ``key(record)`` is the Kafka key and picks the partition (a stable hash), unless
    ``partition(record)`` picks it; with neither, records stay on partitions their
    worker writes. ``rows_per_message > 1`` packs that many records per Kafka record.
    Returns a stream with no records whose frontier passes an epoch once it is durable.
    """
    scope = stream.scope
    if type(scope.minimum) is not int:
        raise TypeError(f"kafka_sink: epochs are ints, but scope {scope.name!r} has timestamps "
                        f"like {scope.minimum!r}")
    if rows_per_message < 1:
        raise ValueError(f"kafka_sink: rows_per_message must be >= 1, got {rows_per_message}")
    fmt = format_of(value_format)
    worker = scope.worker
    from confluent_kafka import Producer
    count = topic_partitions(Producer(producer_config(brokers, add_config)), brokers, [topic])[topic]
    workers = worker.initial_peers
    owner = [p % workers for p in range(count)]
    owned = [] if worker.is_joiner else [p for p in range(count) if owner[p] == worker.index]
    state = KafkaSinkState(brokers, topic, add_config, fmt, owned, rows_per_message, timeout)

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
