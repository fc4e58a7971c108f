"""Whether a Kafka job is already complete, from its consumer group's commits.

``kafka_commit`` commits, per partition, the offset just past the epoch-end marker of
the last epoch whose results and state are durable (and ``epoch=E`` beside it, which
not every broker keeps: Tansu drops it). So the marker just before a committed offset
says which epochs are done. A process restarted after its job finished (a
supervisor restarts whatever exits) can read that before it waits for peers that have
gone: ``job_complete`` is the check ``timely.execute(..., complete=)`` takes.

- ``committed_epoch(brokers, topics, group_id)``: the least E over every partition of
  ``topics`` (None while a partition has no such commit);
- ``job_complete(brokers, topics, group_id, end_epoch)``: a check that returns why the
  job is complete (every epoch before ``end_epoch`` committed), or None.

Costs: a metadata request, a committed-offsets request and a fetch of one record per
partition, each bounded by ``timeout``.
"""
from __future__ import annotations

import time
from typing import Callable, Iterable, Optional, Union

from ..client import Brokers, brokers_string, consumer_config, drain, topic_partitions
from ..epochs import EPOCH, EPOCH_END, MARKER

__all__ = ["committed_epoch", "job_complete"]


def committed_epoch(brokers: Brokers, topics: Union[str, Iterable[str]], group_id: str,
                    add_config: Optional[dict] = None, timeout: float = 10.0) -> Optional[int]:
    """The least ``E`` that ``group_id``'s commits on every partition of ``topics`` say
    is next (every epoch before it done); None if some partition has none."""
    from confluent_kafka import Consumer, TopicPartition
    topics = [topics] if isinstance(topics, str) else list(topics)
    consumer = Consumer(consumer_config(brokers, group_id, add_config))
    try:
        counts = topic_partitions(consumer, brokers, topics, timeout=timeout)
        found = consumer.committed([TopicPartition(t, p) for t in topics for p in range(counts[t])],
                                   timeout=timeout)
        if any(tp.offset <= 0 for tp in found):
            return None
        epochs = _marker_epochs(consumer, {(tp.topic, tp.partition): tp.offset - 1 for tp in found}, timeout)
    finally:
        consumer.close()
    if epochs is None:
        return None
    return min(epochs.values()) + 1


def _marker_epochs(consumer, before: dict, timeout: float) -> Optional[dict]:
    """``{(topic, partition): epoch}`` of the marker at each offset of ``before``; None
    if one is not a marker (or cannot be read within ``timeout``)."""
    from confluent_kafka import TopicPartition
    consumer.assign([TopicPartition(t, p, o) for (t, p), o in before.items()])
    epochs: dict = {}
    deadline = time.monotonic() + timeout
    while len(epochs) < len(before) and time.monotonic() < deadline:
        for m in drain(consumer, len(before), 0.1):
            tp = (m.topic(), m.partition())
            if m.error() is not None or tp in epochs or m.offset() != before.get(tp):
                continue
            headers = dict(m.headers() or ())
            if headers.get(MARKER) != EPOCH_END or EPOCH not in headers:
                return None
            epochs[tp] = int(headers[EPOCH])
    return epochs if len(epochs) == len(before) else None


def job_complete(brokers: Brokers, topics: Union[str, Iterable[str]], group_id: str, end_epoch: int,
                 add_config: Optional[dict] = None) -> Callable[[], Optional[str]]:
    """A check for ``timely.execute(..., complete=)``: why the job reading ``topics`` as
    ``group_id`` up to ``end_epoch`` (``kafka_source(end_epoch=)``) is complete, or None.

    >>> check = job_complete("127.0.0.1:9092", "clicks", "pipeline", 20)
    >>> callable(check)
    True
    """
    def check() -> Optional[str]:
        done = committed_epoch(brokers, topics, group_id, add_config)
        if done is None or done < end_epoch:
            return None
        return (f"consumer group {group_id!r} at {brokers_string(brokers)} has committed every epoch "
                f"before {end_epoch} of {topics!r}")
    return check

