"""Channels between operators, and the contracts that route records over them.

A message is ``(time, records)``: a list of records sharing one timestamp, so engine
costs are per batch and the per-record cost is the user's own function. A producer's
output is a ``Tee``: it counts what was produced (records per time, into the output's
``produceds``) once, and hands each batch to every connected channel.

Parallelization contracts (timely's names):
- ``Pipeline``: records stay on this worker (no copy, no routing);
- ``Exchange(key)``: a record goes to worker ``route(key(record)) % peers``;
- ``Direct(target)``: a record goes to worker ``target(record)``, an index the producer
  chose (Megaphone's routing tables), refused if no such worker exists.
(Broadcasting is an operator, ``Stream.broadcast``: every copy must be a record of its
own for progress tracking to count it, so it is built from an exchange.)

Costs: Pipeline O(1) per batch; Exchange O(records), in C iterators plus one key call
per record.
"""
from __future__ import annotations

import operator
import zlib
from itertools import compress, repeat
from typing import Any, Callable

_mod = operator.mod


def stable_hash(key: Any) -> int:
    """A hash that is the same in every process (Python's str hash is salted per process).

    >>> stable_hash(7), stable_hash("word") == stable_hash("word"), stable_hash((1, "a")) >= 0
    (7, True, True)
    """
    t = type(key)
    if t is int:
        return key & 0x7FFFFFFFFFFFFFFF
    if t is str:
        return zlib.crc32(key.encode())
    if t is bytes:
        return zlib.crc32(key)
    if t is tuple:
        h = 0x345678
        for item in key:
            h = (h * 1000003 ^ stable_hash(item)) & 0x7FFFFFFFFFFFFFFF
        return h
    if t is float and key.is_integer():
        return int(key) & 0x7FFFFFFFFFFFFFFF
    return zlib.crc32(repr(key).encode())


class Pipeline:
    """Keep records on the worker that produced them."""

    def connect(self, worker: Any, channel: int, path: tuple) -> tuple[Any, Any]:
        pusher, puller = worker.allocate_pipeline(channel, path)
        return _PipelinePusher(pusher), puller


class Exchange:
    """Route each record to the worker chosen by ``key(record)`` (the record itself
    when ``key`` is None, which saves a call per record).

    By default the route is ``hash % current peers``: once a process has joined, some
    keys go to its workers. ``pinned=True`` routes over the workers the dataflow was
    built on, whatever joins later: use it in front of an operator whose per-key state
    must stay where it is (state does not migrate between workers)."""

    def __init__(self, key: Callable[[Any], Any] | None, pinned: bool = False) -> None:
        if key is not None and not callable(key):
            raise TypeError(f"Exchange needs a key function, got {key!r}")
        self.key = key
        self.pinned = pinned

    def connect(self, worker: Any, channel: int, path: tuple) -> tuple[Any, Any]:
        pushers, puller = worker.allocate(channel, path)
        if worker.peers == 1 and not worker.config.cluster:
            return _PipelinePusher(pushers[0]), puller
        return _ExchangePusher(pushers, self.key, worker, self.pinned), puller


class Direct:
    """Route each record to the worker whose index ``target(record)`` names.

    Unlike ``Exchange`` there is no hashing and no ``% peers``: the producer decided
    (a routing table), and a joined worker is reachable as soon as its pushers exist,
    whether or not this worker has started routing ``Exchange`` records to it."""

    def __init__(self, target: Callable[[Any], int]) -> None:
        if not callable(target):
            raise TypeError(f"Direct needs a target function, got {target!r}")
        self.target = target

    def connect(self, worker: Any, channel: int, path: tuple) -> tuple[Any, Any]:
        pushers, puller = worker.allocate(channel, path)
        if worker.peers == 1 and not worker.config.cluster:
            return _DirectSinglePusher(pushers[0], self.target), puller
        return _DirectPusher(pushers, self.target), puller


class _DirectSinglePusher:
    __slots__ = ("_push", "_target")

    def __init__(self, pusher: Any, target: Callable[[Any], int]) -> None:
        self._push = pusher.push
        self._target = target

    def give(self, time: Any, records: list) -> None:
        for target in set(map(self._target, records)):
            if target != 0:
                raise ValueError(f"record routed to worker {target}, but this computation "
                                 f"has only worker 0")
        self._push((time, records))


class _DirectPusher:
    __slots__ = ("_pushers", "_target")

    def __init__(self, pushers: list, target: Callable[[Any], int]) -> None:
        self._pushers = pushers
        self._target = target

    def give(self, time: Any, records: list) -> None:
        pushers = self._pushers
        buckets: dict = {}
        for record, target in zip(records, map(self._target, records)):
            bucket = buckets.get(target)
            if bucket is None:
                buckets[target] = [record]
            else:
                bucket.append(record)
        for target, bucket in buckets.items():
            if not 0 <= target < len(pushers):
                raise ValueError(f"record routed to worker {target}, but the cluster has "
                                 f"workers 0..{len(pushers) - 1}")
            pushers[target].push((time, bucket))


class _PipelinePusher:
    __slots__ = ("_push",)

    def __init__(self, pusher: Any) -> None:
        self._push = pusher.push

    def give(self, time: Any, records: list) -> None:
        self._push((time, records))


class _ExchangePusher:
    """Routes by ``hash % worker.routing_peers``: the count changes when a process joins."""

    __slots__ = ("_pushers", "_key", "_worker", "_pinned")

    def __init__(self, pushers: list, key: Callable | None, worker: Any, pinned: bool) -> None:
        self._pushers = pushers
        self._key = key
        self._worker = worker
        self._pinned = pinned

    def give(self, time: Any, records: list) -> None:
        worker = self._worker
        peers = worker.initial_peers if self._pinned else worker.routing_peers
        if peers == 1:
            self._pushers[0].push((time, records))
            return
        keys = records if self._key is None else map(self._key, records)
        # The routing runs in C iterators (map, compress): no Python-level loop per record.
        targets = list(map(_mod, map(worker.route_hash, keys), repeat(peers)))
        pushers = self._pushers
        for target in range(peers):
            bucket = list(compress(records, map(target.__eq__, targets)))
            if bucket:
                pushers[target].push((time, bucket))


class Tee:
    """An output port's fan-out: counts records produced, then feeds every channel."""

    __slots__ = ("pushers", "produced")

    def __init__(self, produced: Any) -> None:
        """``produced``: the ChangeBatch that counts records, or None when the scope
        accounts for them some other way (a scope's output, seen from outside)."""
        self.pushers: list = []
        self.produced = produced

    def give(self, time: Any, records: list) -> None:
        if records:
            if self.produced is not None:
                self.produced.update(time, len(records))
            for pusher in self.pushers:
                pusher.give(time, records)
