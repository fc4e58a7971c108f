"""The Kafka client under broker/: confluent-kafka (librdkafka) configuration and admin calls.

broker/ uses confluent-kafka only: on these machines it produces ~20x and consumes ~1.4x
faster than kafka-python (FACTS.md), and its network threads run without the GIL, so a
progress record costs the worker threads about one Python call to produce and one to
deliver. The settings suit a progress log:

- producer: ``linger.ms=0`` (a progress batch is latency-critical and small),
  ``acks=all``, one request in flight (retries cannot reorder a log; records queued
  meanwhile go in the next request), a delivery timeout long enough to ride out a
  paused broker. Not idempotent: librdkafka's idempotent producer waits up to a second
  for its producer id before it sends anything (measured against Tansu), and a
  duplicate from a retry is harmless: every record carries its log sequence number and
  readers skip what they have applied;
- consumer: a short fetch wait (``fetch.wait.max.ms``, default ``FETCH_WAIT_MS``). A
  hop through Tansu took 1.9-2.7 ms p50 at waits of 1 to 10 ms (benchmarks/kafka_hop.py,
  50 records/s), but each fetch costs the broker CPU that, on a small machine, the
  workers need too: 5 ms gave lower epoch latency than 2 ms (p50 12 vs
  17 ms at 50 epochs/s, 25 vs 33 ms at 200/s, 2+1 processes x 2 workers) and 1 ms
  saturated the broker; no auto-commit; ``auto.offset.reset=error``: a position
  past a log's end means the broker lost records, which must stop the computation.

User ``options`` (librdkafka property names, e.g. ``{"fetch.wait.max.ms": 10}``) go to
every client on top of these; a property that does not apply to a client type is
dropped for that client, so one option list serves the producer, consumer and admin.
Every admin call here is one broker round trip, bounded by ``timeout``.

>>> consumer_config("127.0.0.1:9092", "g", {"fetch.wait.max.ms": 10})["fetch.wait.max.ms"]
10
>>> "fetch.wait.max.ms" in producer_config("127.0.0.1:9092", {"fetch.wait.max.ms": 10})
False
"""
from __future__ import annotations

import logging
from typing import Any, Iterable, Optional

log = logging.getLogger("broker")
rdlog = logging.getLogger("broker.rdkafka")

FETCH_WAIT_MS = 5


class BrokerError(RuntimeError):
    """The broker cannot be used: unreachable, refusing, or misconfigured."""


class BrokerLostError(BrokerError):
    """The broker lost progress records (e.g. it restarted empty): frontiers would be
    wrong, so the computation must stop."""


# librdkafka properties that only one kind of client takes: passing them to the other
# kind makes librdkafka print a warning for every client created.
_CONSUMER_ONLY = ("fetch.", "group.", "enable.auto.", "auto.", "enable.partition.eof", "isolation.level",
                  "max.poll.", "session.timeout.ms", "heartbeat.", "queued.", "max.partition.fetch.bytes",
                  "check.crcs", "allow.auto.create.topics", "partition.assignment.strategy",
                  "coordinator.query.interval.ms", "enable.auto.commit", "offset.store.method")
_PRODUCER_ONLY = ("linger.ms", "queue.buffering.", "batch.", "acks", "request.required.acks",
                  "enable.idempotence", "message.timeout.ms", "delivery.timeout.ms", "retries",
                  "message.send.max.retries", "retry.backoff.", "compression.", "transactional.",
                  "max.in.flight", "partitioner", "sticky.partitioning.", "enable.gapless.guarantee",
                  "queue.buffering.max.ms", "request.timeout.ms", "delivery.report.only.error")


def _for(kind: str, options: Optional[dict]) -> dict:
    skip = {"producer": _CONSUMER_ONLY, "consumer": _PRODUCER_ONLY,
            "admin": _CONSUMER_ONLY + _PRODUCER_ONLY}[kind]
    return {k: v for k, v in (options or {}).items() if not k.startswith(skip)}


def base_config(bootstrap: str, kind: str, options: Optional[dict],
                error_cb: Optional[Any] = None) -> dict:
    """Settings every client shares: the address, and its lines and errors sent to the
    address's ``broker.health`` (with ``error_cb``, the client's own, after it)."""
    from .health import hooks
    return {"bootstrap.servers": bootstrap, **hooks(bootstrap, rdlog, error_cb), "log.connection.close": False,
            **_for(kind, options)}


def producer_config(bootstrap: str, options: Optional[dict], error_cb: Optional[Any] = None) -> dict:
    return {"linger.ms": 0, "acks": "all", "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 1, "message.timeout.ms": 600_000,
            "request.timeout.ms": 5000, "queue.buffering.max.messages": 1_000_000,
            **base_config(bootstrap, "producer", options, error_cb)}


def consumer_config(bootstrap: str, group: str, options: Optional[dict]) -> dict:
    return {"group.id": group, "enable.auto.commit": False, "enable.auto.offset.store": False,
            "auto.offset.reset": "error", "fetch.wait.max.ms": FETCH_WAIT_MS, "fetch.min.bytes": 1,
            "fetch.error.backoff.ms": 50, "allow.auto.create.topics": False,
            **base_config(bootstrap, "consumer", options)}


def connect_admin(bootstrap: str, options: Optional[dict] = None, timeout: float = 10.0) -> Any:
    """An AdminClient that has reached the broker, or ``BrokerError`` naming the address."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    from .health import attempt, retrying
    admin = AdminClient(base_config(bootstrap, "admin", options))
    try:
        retrying(bootstrap, lambda: admin.list_topics(timeout=attempt(timeout)))    # up to --broker-timeout
    except KafkaException as e:
        raise BrokerError(f"Kafka broker at {bootstrap} is unreachable: {describe(e)}") from None
    return admin


def describe(error: Any) -> str:
    """The text of a KafkaException / KafkaError."""
    inner = error.args[0] if getattr(error, "args", None) else error
    return inner.str() if hasattr(inner, "str") else str(error)


def ensure_topics(admin: Any, names: Iterable[str], timeout: float = 10.0,
                  config: Optional[dict] = None) -> None:
    """Create the single-partition topics ``names`` that do not exist yet, with the topic
    ``config`` given (e.g. no retention), else the broker's defaults."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic
    existing = set(admin.list_topics(timeout=timeout).topics)
    wanted = [n for n in names if n not in existing]
    if not wanted:
        return
    for name, future in admin.create_topics([NewTopic(n, 1, 1, config=dict(config or {})) for n in wanted],
                                            operation_timeout=timeout).items():
        try:
            future.result(timeout)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BrokerError(f"cannot create topic {name!r}: {describe(e)}") from None


def topic_ids(admin: Any, names: list[str], timeout: float = 5.0) -> dict[str, Optional[str]]:
    """``{topic: id}``, None for a topic the broker does not have. A broker that does
    not answer raises ``KafkaException`` (a stall, not a loss)."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection
    out: dict[str, Optional[str]] = {}
    for name, future in admin.describe_topics(TopicCollection(names), request_timeout=timeout).items():
        try:
            out[name] = str(future.result(timeout).topic_id)
        except KafkaException as e:
            if e.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                out[name] = None
            else:
                raise
    return out


def group_offsets(admin: Any, group: str, timeout: float = 10.0) -> dict[tuple[str, int], int]:
    """The committed offsets of consumer group ``group``: ``{(topic, partition): offset}``."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)
    result = found[group].result(timeout)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or ()
            if tp.offset is not None and tp.offset >= 0}


def set_group_offset(admin: Any, group: str, topic: str, offset: int, timeout: float = 10.0) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    found = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, offset)])], request_timeout=timeout)
    found[group].result(timeout)


def list_groups(admin: Any, timeout: float = 10.0) -> list[str]:
    return [g.group_id for g in admin.list_consumer_groups(request_timeout=timeout).result(timeout).valid]
