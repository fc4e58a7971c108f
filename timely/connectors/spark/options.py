"""The options of the ``timely-kafka`` data source: Spark's Kafka option names, read into
the configurations of a read and of a write.

Options (case-insensitive; Spark lower-cases them): ``kafka.bootstrap.servers``
(required); ``subscribe`` (comma-separated topics, to read) or ``topic`` (to write);
``startingOffsets`` (``earliest``, the default; ``latest``, streaming only: skip the
epochs already complete; or JSON ``{"topic": {"0": offset}}``, -2 = earliest);
``endingOffsets`` (batch reads: ``latest``, the default, or JSON, -1 = latest);
``maxOffsetsPerTrigger`` (streaming reads); ``valueFormat`` (``json`` or ``msgpack``: how
packed records are split and packed); ``epoch`` (batch writes: one epoch for all rows);
``epochOffset`` (streaming writes: epoch = micro-batch id + this, default 0);
``rowsPerMessage`` (writes: pack that many values into one record, as a ``valueFormat``
array with the contract's ``rows`` header; default ``PACKED_ROWS`` = 100 when the rows
have no ``key`` column, since a packed record has one key, else 1, and by default a
value that is not valid ``valueFormat`` is written alone, as before; ``1`` writes one
value per record, for readers other than pytimely's); any other ``kafka.X`` goes to the
confluent-kafka client as ``X``.

Costs: parsing is free; a read's ``partitions`` and a write's configuration ask the
broker for the topics' partition counts (one metadata request each).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from confluent_kafka import Consumer, Producer
from pyspark.sql.types import BinaryType, IntegerType, LongType, ShortType, StringType, StructType

from timely.connectors import client, epochs

NAME = "timely-kafka"
PACKED_ROWS = epochs.PACKED_ROWS      # values per record a write packs without rowsPerMessage
EARLIEST, LATEST = -2, -1
TopicPart = tuple[str, int]


@dataclass(frozen=True)
class _Kafka:
    """The brokers and the extra client configuration (``kafka.X`` options)."""
    brokers: str
    extra: dict

    def consumer(self) -> Consumer:
        return Consumer(client.consumer_config(self.brokers, None, self.extra))

    def producer(self) -> Producer:
        return Producer(client.producer_config(self.brokers, self.extra))

    def shared_producer(self) -> Producer:
        """This process's producer for these brokers and options, made once: an
        idempotent producer's first delivery waits for its producer id (0.5 s on Tansu,
        once per producer), which every Spark task and every epoch's write paid again
        when each made its own. Spark's Python workers run one task at a time, and a
        forked process makes its own (librdkafka does not survive a fork)."""
        key = (os.getpid(), self.brokers, tuple(sorted((k, str(v)) for k, v in self.extra.items())))
        found = _PRODUCERS.get(key)
        if found is None:
            found = _PRODUCERS[key] = self.producer()
        return found


#: shared_producer's producers, by process, brokers and options
_PRODUCERS: dict[tuple, Producer] = {}


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


@dataclass(frozen=True)
class _WriteConf:
    kafka: _Kafka
    topic: str
    partitions: int
    epoch: Optional[int]            # batch: the option's epoch for all rows
    epoch_offset: int               # streaming: epoch = batch id + this
    rows_per_message: int
    rows_auto: bool                 # rowsPerMessage not given: a value that is not valid in
                                    # the format goes alone instead of failing the write
    format: epochs.Format
    has_key: bool
    has_partition: bool
    has_epoch: bool


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
    # Packed by default: one record per event made Spark's writes and the dataflow's reads
    # 2.7x and 3.8x slower (benchmarks/pipeline.py); a key column cannot be packed.
    rows = _int_option(opts, "rowsPerMessage", 1 if "key" in fields else PACKED_ROWS, 1)
    if rows > 1 and "key" in fields:
        raise ValueError(f"{NAME}: rowsPerMessage packs {rows} values into one record, which has one "
                         "key: drop the 'key' column")
    # Spark plans each write in a Python worker it keeps: a producer made per write cost
    # 1-3 ms of CPU and up to 55 ms of connecting before the metadata came back.
    counts = client.topic_partitions(kafka.shared_producer(), kafka.brokers, [topic])
    return _WriteConf(kafka, topic, counts[topic], epoch, _int_option(opts, "epochOffset", 0, 0),
                      rows, "rowspermessage" not in opts, _value_format(opts), "key" in fields,
                      "partition" in fields, "epoch" in fields)
