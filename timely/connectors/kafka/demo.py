"""Demo clicks for examples/page_totals.py: a few epochs of page clicks, written under the epoch contract.

``clicks(epochs, per_epoch, pages, seed)`` makes the events, ``{"page": name, "user":
id}``, the same for the same arguments (pages are skewed: the i-th of ``PAGES`` is
clicked about 1/(i+1) as often as the first); ``running_totals`` is what a job that
counts clicks per page must find after each epoch; ``write_clicks`` creates the topic
if it is missing and writes epoch after epoch, each followed by its markers, with the
Kafka sink's own writer (``KafkaSinkState``, as ``kafka_sink`` writes), one click per
Kafka record, round robin over the partitions. A topic that already holds an epoch is
refused: its totals would not be the ones printed. ``python -m
timely.connectors.kafka demo-clicks`` is the command.

Costs: O(clicks) to make and count; writing is two flushes per epoch (records, then
markers) after one read of the topic's markers (empty on a new topic), and the
idempotent producer's first record waits ~0.5-1 s for its id on the test broker.
"""
from __future__ import annotations

import random
from collections import Counter
from typing import Iterator, Optional

from ..client import Brokers, ConnectorError, brokers_string, create_topics, producer_config, topic_partitions
from ..epochs import format_of
from .sink import KafkaSinkState

#: the pages clicks land on, most clicked first
PAGES = ("home", "search", "product", "cart", "checkout", "account", "help", "about")
#: users 0 .. USERS-1 click
USERS = 100

__all__ = ["PAGES", "USERS", "clicks", "running_totals", "write_clicks"]


def clicks(epochs: int, per_epoch: int, pages: int = 5, seed: int = 0) -> list[list[dict]]:
    """``epochs`` lists of ``per_epoch`` clicks on the first ``pages`` of ``PAGES``.

    >>> clicks(2, 3, pages=2, seed=1) == clicks(2, 3, pages=2, seed=1)
    True
    >>> sorted(clicks(1, 4, pages=1)[0][0])
    ['page', 'user']
    """
    if not 1 <= pages <= len(PAGES):
        raise ValueError(f"pages: between 1 and {len(PAGES)} ({', '.join(PAGES)}), got {pages}")
    if epochs < 1 or per_epoch < 1:
        raise ValueError(f"epochs and per_epoch must be >= 1, got {epochs} and {per_epoch}")
    rng = random.Random(seed)
    names = PAGES[:pages]
    weights = [1 / (i + 1) for i in range(pages)]
    return [[{"page": page, "user": rng.randrange(USERS)} for page in rng.choices(names, weights, k=per_epoch)]
            for _ in range(epochs)]


def running_totals(by_epoch: list[list[dict]]) -> list[dict[str, int]]:
    """After each epoch, the clicks of every page clicked so far.

    >>> running_totals([[{"page": "a"}, {"page": "b"}], [{"page": "a"}]])
    [{'a': 1, 'b': 1}, {'a': 2, 'b': 1}]
    """
    totals: Counter = Counter()
    out = []
    for events in by_epoch:
        totals.update(e["page"] for e in events)
        out.append(dict(sorted(totals.items())))
    return out


def write_clicks(brokers: Brokers, topic: str, by_epoch: list[list[dict]], partitions: int = 2,
                 add_config: Optional[dict] = None, timeout: float = 10.0) -> Iterator[tuple[int, int]]:
    """Write ``by_epoch[e]`` as epoch e of ``topic`` (created with ``partitions`` if
    missing; an existing topic keeps its own count), each epoch followed by one marker
    per partition; yields ``(epoch, partitions)`` as each epoch is acknowledged.
    Raises ``BrokerUnreachable``, or ``ConnectorError`` if the topic already holds an epoch."""
    from confluent_kafka import Producer
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    create_topics(brokers, {topic: partitions}, add_config, timeout)
    producer = Producer(producer_config(brokers, {"message.timeout.ms": int(timeout * 1000),
                                                  **(add_config or {})}))
    count = topic_partitions(producer, brokers, [topic], timeout)[topic]
    writer = KafkaSinkState(brokers, topic, add_config, format_of("json"), 1, timeout, producer)
    held: dict[int, list] = {p: [None, 0] for p in range(count)}
    writer.hold(held)                       # reads the topic's markers: what is there already
    there = [s[0] for s in held.values() if s[0] is not None]
    if there:
        raise ConnectorError(f"topic {topic!r} at {brokers_string(brokers)} already holds epochs "
                             f"up to {max(there)}: its totals would not be these; restart the "
                             f"broker, or write to another --topic")
    for epoch, events in enumerate(by_epoch):
        by_partition: dict[int, list] = {p: [] for p in range(count)}
        for i, event in enumerate(events):
            by_partition[i % count].append((None, event))
        writer.write(epoch, by_partition, held)
        yield epoch, count
