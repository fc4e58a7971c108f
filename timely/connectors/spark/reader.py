"""Reading ``timely-kafka``: Spark's batch and streaming readers, and the tasks that read
one Kafka partition's range each.

Rows are ``key, value, topic, partition, offset, timestamp, epoch``, and only
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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Sequence

import pyarrow as pa
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
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
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from timely.connectors import client, epochs
from timely.connectors.markers import MarkerIndex, is_marker

from .options import EARLIEST, LATEST, NAME, TopicPart, _int_option, _offsets, _ReadConf

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
