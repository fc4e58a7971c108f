"""The Spark side of the pipeline: a Spark 4 Python Data Source ``timely-kafka`` that reads
and writes Kafka topics under the epoch contract (``timely.connectors.epochs``).

There is no spark-sql-kafka here (no Maven access), so this data source speaks Spark's
Kafka option names over confluent-kafka::

    spark = local_session()                       # registers the data source
    df = (spark.read.format("timely-kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "clicks").load())
    (partition_for_kafka(events, 4, "user").write.format("timely-kafka")
     .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("topic", "clicks")
     .mode("append").save())

Options (case-insensitive; Spark lower-cases them): ``kafka.bootstrap.servers``
(required); ``subscribe`` (comma-separated topics, to read) or ``topic`` (to write);
``startingOffsets`` (``earliest``, the default; ``latest``, streaming only: skip the
epochs already complete; or JSON ``{"topic": {"0": offset}}``, -2 = earliest);
``endingOffsets`` (batch reads: ``latest``, the default, or JSON, -1 = latest);
``maxOffsetsPerTrigger`` (streaming reads); ``valueFormat`` (``json`` or ``msgpack``: how
packed records are split and packed); ``epoch`` (batch writes: one epoch for all rows);
``epochOffset`` (streaming writes: epoch = micro-batch id + this, default 0);
``rowsPerMessage`` (writes: pack that many values into one record, default 1); any
other ``kafka.X`` goes to the confluent-kafka client as ``X``.

Reading. Rows are ``key, value, topic, partition, offset, timestamp, epoch``, and only
epochs complete in every partition of the subscribed topics are returned: the cutoff is
the least last-complete epoch over the partitions, decided by epoch-end markers, never
by the broker's end offsets. Records outside a marker's range (a crashed or retried
writer's) and replays of a complete epoch are dropped, as ``PartitionEpochs`` does.
A packed record (header ``rows``) becomes one row per value. Cost: the driver reads
every record between the start offsets and the partitions' ends once to find the
markers (it decodes the headers of empty-valued records only), then one Spark task per
Kafka partition reads its range again with its own consumer and yields Arrow batches.
A streaming read keeps that driver scan incremental: each trigger reads only what is
new, and every micro-batch ends just after markers of an epoch complete in all
partitions (with ``maxOffsetsPerTrigger``: the largest such epoch within the limit, but
at least one epoch). Offsets are ``{"topic:partition": offset}``.

Writing. Input columns: ``value`` (binary or string), optional ``key`` (binary or
string), optional ``partition`` (the Kafka partition; absent: the Spark partition id
modulo the topic's partition count), and for batch writes ``epoch`` (or the ``epoch``
option). Each Kafka partition must be written by one Spark task: ``partition_for_kafka``
lays a DataFrame out that way (one Kafka partition per Spark partition, rows in epoch
order). A batch task writes each epoch's rows of a partition, waits for their delivery
to learn their offsets, then appends the epoch's marker with that range; the driver's
commit appends (empty-epoch) markers to the partitions no task wrote, and raises if two
tasks wrote one partition (their rows are written by then; the second task's rows fall
outside the first marker and readers drop them). A streaming task writes data rows
only, with epoch = micro-batch id + ``epochOffset``; the driver's commit, which runs
after all of the micro-batch's tasks returned, appends one marker per partition. An
aborted write appends nothing, so its records stay orphans that no marker covers.
Costs: one produce call per record, two delivery callbacks per (partition, epoch), one
wait for delivery per (partition, epoch) in batch writes.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Optional, Sequence

import pyarrow as pa
from confluent_kafka import Consumer, Producer, TopicPartition
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from timely.connectors import client, epochs
from timely.connectors.markers import MarkerIndex, is_marker

NAME = "timely-kafka"
READ_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("epoch", LongType()),
])
# Spark checks a yielded batch's schema for equality with this one.
_ARROW_SCHEMA = to_arrow_schema(READ_SCHEMA, timezone="UTC")
_BATCH_ROWS = 8192
EARLIEST, LATEST = -2, -1
TopicPart = tuple[str, int]


# ---- options ------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Kafka:
    """The brokers and the extra client configuration (``kafka.X`` options)."""
    brokers: str
    extra: dict

    def consumer(self) -> Consumer:
        return Consumer(client.consumer_config(self.brokers, None, self.extra))

    def producer(self) -> Producer:
        return Producer(client.producer_config(self.brokers, self.extra))


def _options(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): v for k, v in options.items()}


def _required(opts: dict[str, str], name: str, what: str) -> str:
    value = opts.get(name.lower())
    if value is None or not str(value).strip():
        raise ValueError(f"{NAME}: option {name!r} is required: {what}")
    return str(value).strip()


def _kafka(opts: dict[str, str]) -> _Kafka:
    brokers = _required(opts, "kafka.bootstrap.servers", "the Kafka brokers, 'host:port[,host:port]'")
    extra = {k[len("kafka."):]: v for k, v in opts.items()
             if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}
    return _Kafka(brokers, extra)


def _int_option(opts: dict[str, str], name: str, default: Optional[int], least: int) -> Optional[int]:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{NAME}: option {name!r} must be an integer, got {raw!r}") from None
    if value < least:
        raise ValueError(f"{NAME}: option {name!r} must be at least {least}, got {value}")
    return value


def _value_format(opts: dict[str, str]) -> epochs.Format:
    name = opts.get("valueformat", "json")
    if name not in ("json", "msgpack"):
        raise ValueError(f"{NAME}: option 'valueFormat' must be json or msgpack, got {name!r}")
    return epochs.format_of(name)


def _offsets(opts: dict[str, str], name: str, topics: Sequence[str], words: dict[str, int],
             allowed: tuple[int, ...]) -> tuple[int, dict[TopicPart, int]]:
    """Option ``name``: a word from ``words`` for every partition, or Spark's JSON
    ``{"topic": {"partition": offset}}``; returns (default, {(topic, partition): offset})."""
    raw = opts.get(name.lower())
    default = next(iter(words.values()))
    if raw is None:
        return default, {}
    raw = raw.strip()
    if raw.lower() in words:
        return words[raw.lower()], {}
    try:
        spec = json.loads(raw)
        explicit = {}
        for topic, parts in spec.items():
            if topic not in topics:
                raise ValueError(f"topic {topic!r} is not subscribed")
            for partition, offset in parts.items():
                offset = int(offset)
                if offset < 0 and offset not in allowed:
                    raise ValueError(f"offset {offset} of {topic}[{partition}]")
                explicit[(topic, int(partition))] = offset
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(f"{NAME}: option {name!r} must be {' or '.join(map(repr, words))} or JSON "
                         f'{{"topic": {{"0": offset}}}} with offsets >= 0 or {allowed}; '
                         f"got {raw!r} ({exc})") from None
    return default, explicit


@dataclass(frozen=True)
class _ReadConf:
    kafka: _Kafka
    topics: tuple[str, ...]
    format: epochs.Format

    @classmethod
    def parse(cls, opts: dict[str, str]) -> "_ReadConf":
        kafka = _kafka(opts)
        subscribe = _required(opts, "subscribe", "the topics to read, comma-separated")
        topics = tuple(t.strip() for t in subscribe.split(",") if t.strip())
        return cls(kafka, topics, _value_format(opts))

    def partitions(self, consumer: Consumer) -> list[TopicPart]:
        """Every partition of the subscribed topics (a ``TopicMissing`` or
        ``BrokerUnreachable`` naming the topic or the brokers)."""
        counts = client.topic_partitions(consumer, self.kafka.brokers, self.topics)
        return [(t, p) for t, n in counts.items() for p in range(n)]


def _resolve_earliest(consumer: Consumer, starts: dict[TopicPart, int]) -> dict[TopicPart, int]:
    """``starts`` with EARLIEST replaced by the partition's first offset (the low
    watermark, which Tansu reports right; its high watermark is wrong)."""
    resolved = {}
    for (t, p), offset in starts.items():
        if offset == EARLIEST:
            offset = consumer.get_watermark_offsets(TopicPartition(t, p), timeout=10.0, cached=False)[0]
        resolved[(t, p)] = offset
    return resolved





# ---- reading a range (tasks) --------------------------------------------------------------
@dataclass
class _Range(InputPartition):
    """One Kafka partition's offsets ``[start, end)``; ``end`` is just after a marker."""
    topic: str
    partition: int
    start: int
    end: int


class _Rows:
    """Columns of the rows read so far, as one Arrow batch at a time."""

    def __init__(self, topic: str, partition: int, fmt: epochs.Format) -> None:
        self.topic, self.partition, self.format = topic, partition, fmt
        self._clear()

    def _clear(self) -> None:
        self.keys: list = []
        self.values: list = []
        self.offsets: list = []
        self.times: list = []
        self.epochs: list = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, epoch: int, records: list) -> None:
        # PartitionEpochs keeps a record's value opaque: it was handed the whole message.
        for offset, m, rows in records:
            kind, ms = m.timestamp()
            micros = ms * 1000 if ms >= 0 else None
            if rows is None:
                values = (m.value(),)
            else:
                events = self.format.decode([m.value()], [rows], self.topic, self.partition, [offset])
                values = [self.format.dumps(e) for e in events]
            key = m.key()
            for value in values:
                self.keys.append(key)
                self.values.append(value)
                self.offsets.append(offset)
                self.times.append(micros)
                self.epochs.append(epoch)

    def take(self) -> pa.RecordBatch:
        n = len(self.offsets)
        batch = pa.RecordBatch.from_arrays([
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([self.topic] * n, pa.string()),
            pa.array([self.partition] * n, pa.int32()),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.times, _ARROW_SCHEMA.field("timestamp").type),
            pa.array(self.epochs, pa.int64()),
        ], schema=_ARROW_SCHEMA)
        self._clear()
        return batch


def _read_range(conf: _ReadConf, part: InputPartition) -> Iterator[pa.RecordBatch]:
    """The rows of the epochs that complete within ``part``'s range."""
    if not isinstance(part, _Range):       # Spark's placeholder when there is nothing to read
        return
    topic, partition, start, end = part.topic, part.partition, part.start, part.end
    state = epochs.PartitionEpochs(topic, partition)
    rows = _Rows(topic, partition, conf.format)
    # Reading from the record before the start finds the marker there, if any: then
    # replays of the epoch it completed are known as such.
    first = start - 1 if start > 0 else start
    consumer = conf.kafka.consumer()
    reached = False
    try:
        for messages in client.scan(consumer, {(topic, partition): first}):
            for m in messages:
                offset = m.offset()
                if offset >= end:
                    reached = True
                    break
                headers = m.headers()
                if offset < start:
                    if is_marker(headers):
                        state.record(offset, headers, None)
                    continue
                for epoch, records in state.record(offset, headers, m):
                    rows.add(epoch, records)
                if offset == end - 1:
                    reached = True
                    break
            if len(rows) >= _BATCH_ROWS:
                yield rows.take()
            if reached:
                break
        if not reached and end > max(start, 0):
            raise client.ConnectorError(
                f"{topic}[{partition}] ended at offset {state.position} before offset {end}, "
                f"which the driver planned to read up to")
        if len(rows):
            yield rows.take()
    finally:
        consumer.close()


# ---- batch and streaming readers ----------------------------------------------------------
class _BatchReader(DataSourceReader):
    def __init__(self, conf: _ReadConf, opts: dict[str, str]) -> None:
        self.conf = conf
        if opts.get("startingoffsets", "").strip().lower() == "latest":
            raise ValueError(f"{NAME}: startingOffsets 'latest' is for streaming reads; a batch "
                             "read starts at 'earliest' or at JSON offsets")
        self.starting = _offsets(opts, "startingOffsets", conf.topics, {"earliest": EARLIEST},
                                 (EARLIEST,))
        self.ending = _offsets(opts, "endingOffsets", conf.topics, {"latest": LATEST}, (LATEST,))
        consumer = conf.kafka.consumer()
        try:
            conf.partitions(consumer)          # fails here, at load(), on a missing topic
        finally:
            consumer.close()

    def partitions(self) -> list[InputPartition]:
        consumer = self.conf.kafka.consumer()
        try:
            parts = self.conf.partitions(consumer)
            default, explicit = self.starting
            starts = _resolve_earliest(consumer, {tp: explicit.get(tp, default) for tp in parts})
            default, explicit = self.ending
            limits = {tp: explicit[tp] for tp in parts if explicit.get(tp, default) != LATEST}
            markers = MarkerIndex()
            markers.read(consumer, starts, limits)
        finally:
            consumer.close()
        cutoff = markers.cutoff(parts)
        if cutoff is None:
            return []
        ends = markers.ends(starts, cutoff)
        return [_Range(t, p, starts[(t, p)], ends[(t, p)]) for t, p in parts
                if ends[(t, p)] > starts[(t, p)]]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_range(self.conf, partition)


def _key(tp: TopicPart) -> str:
    return f"{tp[0]}:{tp[1]}"


def _parse_key(key: str) -> TopicPart:
    topic, partition = key.rsplit(":", 1)
    return topic, int(partition)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark pickles this object into its read tasks too: the consumer and the marker
    scan are made on first use on the driver and left out of the pickle."""

    def __init__(self, conf: _ReadConf, opts: dict[str, str]) -> None:
        self.conf = conf
        raw = opts.get("startingoffsets", "").strip().lower()
        self.start_latest = raw == "latest"
        self.starting = ((EARLIEST, {}) if self.start_latest else
                         _offsets(opts, "startingOffsets", conf.topics, {"earliest": EARLIEST},
                                  (EARLIEST,)))
        self.max_offsets = _int_option(opts, "maxOffsetsPerTrigger", None, 1)
        self.available_now = False
        self.target: Optional[int] = None
        self._consumer: Optional[Consumer] = None
        self._markers: Optional[MarkerIndex] = None
        consumer = conf.kafka.consumer()
        try:
            conf.partitions(consumer)
        finally:
            consumer.close()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_consumer": None, "_markers": None}

    def _scan(self) -> tuple[Consumer, MarkerIndex]:
        if self._consumer is None:
            self._consumer = self.conf.kafka.consumer()
            self._markers = MarkerIndex()
        return self._consumer, self._markers

    def initialOffset(self) -> dict:
        consumer, markers = self._scan()
        parts = self.conf.partitions(consumer)
        default, explicit = self.starting
        starts = _resolve_earliest(consumer, {tp: explicit.get(tp, default) for tp in parts})
        if self.start_latest:
            markers.read(consumer, starts)
            cutoff = markers.cutoff(parts)
            if cutoff is not None:
                starts = markers.ends(starts, cutoff)
        return {_key(tp): starts[tp] for tp in parts}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.max_offsets is None else ReadMaxRows(self.max_offsets)

    def prepareForTriggerAvailableNow(self) -> None:
        # The target is the cutoff of the first scan after this call (see latestOffset).
        self.available_now = True
        self.target = None

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        consumer, markers = self._scan()
        parts = self.conf.partitions(consumer)       # picks up partitions added meanwhile
        given = {_parse_key(k): v for k, v in start.items()}
        starts = _resolve_earliest(consumer, {tp: given.get(tp, EARLIEST) for tp in parts})
        markers.read(consumer, starts)
        markers.forget(starts)
        cutoff = markers.cutoff(parts)
        if self.available_now:
            if self.target is None:
                self.target = cutoff
            if cutoff is not None and self.target is not None:
                cutoff = min(cutoff, self.target)
        if cutoff is None:
            return start
        if isinstance(limit, ReadMaxRows):
            cutoff = markers.largest_within(starts, cutoff, limit.max_rows)
        ends = markers.ends(starts, cutoff)
        if all(ends[tp] == given.get(tp) for tp in parts):
            return start
        return {_key(tp): ends[tp] for tp in parts}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = []
        for key, stop in end.items():
            begin = start.get(key, EARLIEST)
            if stop > max(begin, 0):
                ranges.append(_Range(*_parse_key(key), begin, stop))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_range(self.conf, partition)

    def commit(self, end: dict) -> None:
        if self._markers is not None:
            self._markers.forget({_parse_key(k): v for k, v in end.items()})

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


# ---- writing (tasks) ----------------------------------------------------------------------
@dataclass(frozen=True)
class _WriteConf:
    kafka: _Kafka
    topic: str
    partitions: int
    epoch: Optional[int]            # batch: the option's epoch for all rows
    epoch_offset: int               # streaming: epoch = batch id + this
    rows_per_message: int
    format: epochs.Format
    has_key: bool
    has_partition: bool
    has_epoch: bool


@dataclass
class _Written(WriterCommitMessage):
    """What one task wrote: ``{Kafka partition: [(epoch, first, end)]}``."""
    task: int
    runs: dict = field(default_factory=dict)


class _Run:
    """One epoch's records in one Kafka partition, being written by this task.

    The first record and the last one are produced with a delivery callback, which
    gives the offsets ``[first, end)``; the last record is held back until the run ends
    so that it is known to be the last."""

    __slots__ = ("partition", "epoch", "headers", "held", "packed", "records", "first", "end", "error")

    def __init__(self, partition: int, epoch: int) -> None:
        self.partition, self.epoch = partition, epoch
        self.headers = epochs.data_headers(epoch)
        self.held: Optional[tuple] = None
        self.packed: list = []
        self.records = 0
        self.first: Optional[int] = None
        self.end: Optional[int] = None
        self.error: Any = None

    def on_first(self, error: Any, message: Any) -> None:
        if error is not None:
            self.error = error
        else:
            self.first = message.offset()

    def on_last(self, error: Any, message: Any) -> None:
        if error is not None:
            self.error = error
        else:
            self.end = message.offset() + 1


class _TaskWriter:
    """One Spark task's writes: runs per Kafka partition, in ascending epoch order."""

    def __init__(self, conf: _WriteConf, epoch: Optional[int], markers: bool) -> None:
        context = TaskContext.get()
        self.task = context.partitionId() if context is not None else 0
        self.conf = conf
        self.fixed_epoch = epoch
        self.markers = markers
        self.producer = conf.kafka.producer()
        self.open: dict[int, _Run] = {}
        self.last: dict[int, int] = {}
        self.written: dict[int, list] = {}
        self.marker_errors: list = []
        self.packing = conf.rows_per_message > 1

    def write(self, batches: Iterator[pa.RecordBatch]) -> _Written:
        conf = self.conf
        default_partition = self.task % conf.partitions
        try:
            for batch in batches:
                values = batch.column("value").to_pylist()
                keys = batch.column("key").to_pylist() if conf.has_key else None
                parts = batch.column("partition").to_pylist() if conf.has_partition else None
                eps = batch.column("epoch").to_pylist() if conf.has_epoch else None
                open_runs = self.open
                for i, value in enumerate(values):
                    p = default_partition if parts is None else parts[i]
                    e = self.fixed_epoch if eps is None else eps[i]
                    run = open_runs.get(p)
                    if run is None or run.epoch != e:
                        run = self._start(p, e)
                    if self.packing:
                        run.packed.append(value)
                        if len(run.packed) == conf.rows_per_message:
                            self._pack(run)
                    else:
                        self._emit(run, None if keys is None else keys[i], value, run.headers)
            for p in sorted(self.open):
                self._finish(self.open[p])
            self.open.clear()
        except BaseException:
            # Records never sent cannot become orphans that a retry of this task has to
            # step over: drop them.
            self.producer.purge()
            self.producer.flush(10.0)
            raise
        remaining = self.producer.flush(60.0)
        if remaining:
            raise client.ConnectorError(f"{remaining} records to {conf.topic!r} not delivered "
                                        f"within 60 s by Spark task {self.task}")
        if self.marker_errors:
            raise client.ConnectorError(f"writing markers to {conf.topic!r}: {self.marker_errors[0]}")
        return _Written(self.task, self.written)

    def _start(self, partition: int, epoch: Optional[int]) -> _Run:
        conf = self.conf
        if not isinstance(partition, int) or not 0 <= partition < conf.partitions:
            raise ValueError(f"{NAME}: column 'partition' holds {partition!r}, but topic {conf.topic!r} "
                             f"has partitions 0..{conf.partitions - 1}")
        if epoch is None:
            raise ValueError(f"{NAME}: a row for {conf.topic}[{partition}] has a null epoch")
        last = self.last.get(partition)
        if last is not None and epoch < last:
            raise ValueError(
                f"{NAME}: {conf.topic}[{partition}]: Spark task {self.task} got a row of epoch {epoch} "
                f"after rows of epoch {last}: the rows of each Kafka partition must come in ascending "
                f"epoch order (lay the DataFrame out with partition_for_kafka)")
        previous = self.open.get(partition)
        if previous is not None:
            self._finish(previous)
        run = self.open[partition] = _Run(partition, epoch)
        self.last[partition] = epoch
        return run

    def _emit(self, run: _Run, key: Any, value: Any, headers: list) -> None:
        if run.records == 0:
            self._produce(run.partition, key, value, headers, run.on_first)
        else:
            if run.held is not None:
                self._produce(run.partition, *run.held, None)
            run.held = (key, value, headers)
        run.records += 1

    def _pack(self, run: _Run) -> None:
        fmt = self.conf.format
        try:
            value = fmt.dumps_many([fmt.loads(v) for v in run.packed])
        except Exception as exc:  # noqa: BLE001 - any decoder error names the format
            raise ValueError(f"{NAME}: rowsPerMessage packs values as a {fmt.name} array, but a "
                             f"value for {self.conf.topic}[{run.partition}] is not {fmt.name}: {exc}") from None
        self._emit(run, None, value, epochs.data_headers(run.epoch, rows=len(run.packed)))
        run.packed = []

    def _produce(self, partition: int, key: Any, value: Any, headers: list, callback: Any) -> None:
        while True:
            try:
                if callback is None:
                    self.producer.produce(self.conf.topic, value, key, partition, headers=headers)
                else:
                    self.producer.produce(self.conf.topic, value, key, partition, headers=headers,
                                          on_delivery=callback)
                return
            except BufferError:            # the local queue is full: let it drain
                self.producer.poll(0.05)

    def _finish(self, run: _Run) -> None:
        """End ``run``: wait until its offsets are known, then append its marker (batch
        writes) or note its range for the driver (streaming writes)."""
        conf = self.conf
        if run.packed:
            self._pack(run)
        if run.held is not None:
            self._produce(run.partition, *run.held, run.on_last)
            run.held = None
        single = run.records == 1
        while run.error is None and (run.first is None or (run.end is None and not single)):
            self.producer.poll(0.05)
        if single and run.error is None:
            run.end = run.first + 1
        if run.error is not None:
            raise client.ConnectorError(f"writing epoch {run.epoch} to {conf.topic}[{run.partition}]: "
                                        f"{run.error.str() if hasattr(run.error, 'str') else run.error}")
        if run.end - run.first != run.records:
            raise client.ConnectorError(
                f"epoch {run.epoch} of {conf.topic}[{run.partition}]: Spark task {self.task} wrote "
                f"{run.records} records, but they span offsets {run.first}-{run.end}: a record was "
                f"lost or another writer wrote to this partition at the same time")
        if self.markers:
            self.producer.produce(conf.topic, b"", None, run.partition,
                                  headers=epochs.marker_headers(run.epoch, run.first, run.end),
                                  on_delivery=self._marker_delivered)
        self.written.setdefault(run.partition, []).append((run.epoch, run.first, run.end))

    def _marker_delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.marker_errors.append(f"{message.topic()}[{message.partition()}]: {error.str()}")


# ---- writing (driver) ---------------------------------------------------------------------
_INT_TYPES = (IntegerType, LongType, ShortType)


def _write_conf(opts: dict[str, str], schema: StructType, streaming: bool) -> _WriteConf:
    kafka = _kafka(opts)
    topic = _required(opts, "topic", "the topic to write to")
    fields = {f.name.lower(): f for f in schema.fields}
    value = fields.get("value")
    if value is None or not isinstance(value.dataType, (BinaryType, StringType)):
        raise ValueError(f"{NAME}: writing needs a column 'value' of type binary or string; the "
                         f"columns are {', '.join(schema.fieldNames())}")
    for name, types in (("key", (BinaryType, StringType)), ("partition", _INT_TYPES), ("epoch", _INT_TYPES)):
        if name in fields and not isinstance(fields[name].dataType, types):
            raise ValueError(f"{NAME}: column {name!r} has type {fields[name].dataType.simpleString()}, "
                             f"expected {' or '.join(t().simpleString() for t in types)}")
    epoch = _int_option(opts, "epoch", None, 0)
    if streaming:
        if "epoch" in fields or epoch is not None:
            raise ValueError(f"{NAME}: a streaming write's epoch is its micro-batch id (+ option "
                             "'epochOffset'); drop the 'epoch' column and option")
    elif "epoch" in fields and epoch is not None:
        raise ValueError(f"{NAME}: give the epoch as a column 'epoch' or as the option 'epoch', not both")
    elif "epoch" not in fields and epoch is None:
        raise ValueError(f"{NAME}: a batch write needs a column 'epoch' or the option 'epoch'")
    rows = _int_option(opts, "rowsPerMessage", 1, 1)
    if rows > 1 and "key" in fields:
        raise ValueError(f"{NAME}: rowsPerMessage packs {rows} values into one record, which has one "
                         "key: drop the 'key' column")
    producer = kafka.producer()
    try:
        counts = client.topic_partitions(producer, kafka.brokers, [topic])
    finally:
        producer.flush(1.0)
    return _WriteConf(kafka, topic, counts[topic], epoch, _int_option(opts, "epochOffset", 0, 0),
                      rows, _value_format(opts), "key" in fields, "partition" in fields, "epoch" in fields)


def _owners(conf: _WriteConf, messages: Sequence[Optional[WriterCommitMessage]]) -> dict[int, _Written]:
    """``{Kafka partition: what its task wrote}``; raises if two tasks wrote one partition."""
    owners: dict[int, _Written] = {}
    for message in messages:
        if not isinstance(message, _Written):
            continue
        for partition in message.runs:
            other = owners.setdefault(partition, message)
            if other is not message:
                raise client.ConnectorError(
                    f"{conf.topic}[{partition}] was written by two Spark tasks ({other.task} and "
                    f"{message.task}): each Kafka partition must be written by one task. Lay the "
                    f"DataFrame out with partition_for_kafka(df, {conf.partitions}, key_col)")
    return owners


def _append_markers(conf: _WriteConf, markers: list[tuple[int, list]]) -> None:
    """Append ``[(partition, marker headers)]`` in order and wait for their delivery."""
    if not markers:
        return
    errors: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(f"{message.topic()}[{message.partition()}]: {error.str()}")

    producer = conf.kafka.producer()
    for partition, headers in markers:
        producer.produce(conf.topic, b"", None, partition, headers=headers, on_delivery=delivered)
    remaining = producer.flush(60.0)
    if remaining or errors:
        raise client.ConnectorError(f"appending epoch-end markers to {conf.topic!r}: "
                                    f"{errors[0] if errors else f'{remaining} not delivered within 60 s'}")


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, conf: _WriteConf) -> None:
        self.conf = conf

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Written:
        return _TaskWriter(self.conf, self.conf.epoch, markers=True).write(iterator)

    def commit(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        conf = self.conf
        owners = _owners(conf, messages)
        written = {e for m in owners.values() for runs in m.runs.values() for e, _, _ in runs}
        if conf.epoch is not None:
            written.add(conf.epoch)
        # The partitions no task wrote still need each epoch's marker to complete it.
        _append_markers(conf, [(p, epochs.marker_headers(e)) for e in sorted(written)
                               for p in range(conf.partitions) if p not in owners])

    def abort(self, messages: list[Optional[WriterCommitMessage]]) -> None:
        # Nothing to undo: a partition's records without their marker are never read.
        return None


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, conf: _WriteConf) -> None:
        self.conf = conf

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Written:
        batch_id = TaskContext.get().getLocalProperty("streaming.sql.batchId")
        if batch_id is None:
            raise client.ConnectorError(f"{NAME}: the Spark task has no micro-batch id "
                                        "(local property streaming.sql.batchId)")
        epoch = int(batch_id) + self.conf.epoch_offset
        return _TaskWriter(self.conf, epoch, markers=False).write(iterator)

    def commit(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        conf = self.conf
        epoch = batchId + conf.epoch_offset
        owners = _owners(conf, messages)
        markers = []
        for p in range(conf.partitions):
            runs = owners[p].runs[p] if p in owners else []
            headers = (epochs.marker_headers(epoch, runs[0][1], runs[0][2]) if runs
                       else epochs.marker_headers(epoch))
            markers.append((p, headers))
        _append_markers(conf, markers)

    def abort(self, messages: list[Optional[WriterCommitMessage]], batchId: int) -> None:
        # The micro-batch is run again with the same id; this attempt's records fall
        # outside the range of the marker that run appends.
        return None


# ---- the data source ----------------------------------------------------------------------
class TimelyKafkaDataSource(DataSource):
    """``spark.read/readStream/write/writeStream.format("timely-kafka")``: Kafka under the
    epoch contract, with Spark's Kafka option names (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = _options(self.options)
        return _BatchReader(_ReadConf.parse(opts), opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = _options(self.options)
        return _StreamReader(_ReadConf.parse(opts), opts)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        if overwrite:
            raise ValueError(f"{NAME}: a Kafka topic can only be appended to: use mode('append')")
        return _BatchWriter(_write_conf(_options(self.options), schema, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return _StreamWriter(_write_conf(_options(self.options), schema, streaming=True))


def partition_for_kafka(df: DataFrame, partitions: int, key_col: Optional[str] = None) -> DataFrame:
    """``df`` laid out for the writer: ``partitions`` Spark partitions, Spark partition i
    holding exactly the rows of Kafka partition i (column ``partition``), by the hash of
    ``key_col`` (Spark's ``hash``, as ``pmod(hash(key), partitions)``) or round-robin,
    and, in a batch DataFrame with an ``epoch`` column, sorted by epoch. Costs a shuffle
    (and a sort within each partition)."""
    df = df.repartition(partitions, F.col(key_col)) if key_col else df.repartition(partitions)
    df = df.withColumn("partition", F.spark_partition_id())
    if "epoch" in df.columns and not df.isStreaming:
        df = df.sortWithinPartitions("epoch")
    return df


def register(spark: SparkSession) -> None:
    """Make ``format("timely-kafka")`` available in ``spark``."""
    spark.dataSource.register(TimelyKafkaDataSource)


def local_session(app_name: str = "pytimely", cores: int = 2) -> SparkSession:
    """A local SparkSession set up as FACTS.md measured it (loopback only, this Python
    for the workers, no UI, small shuffles, a light JVM), with ``timely-kafka``
    registered. Starting one takes about 4 s."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master(f"local[{cores}]").appName(app_name)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
