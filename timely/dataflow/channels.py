"""Channels between operators, and the contracts that route records over them.

A message is ``(time, records)``: a list of records sharing one timestamp, so engine
costs are per batch and the per-record cost is the user's own function. A producer's
output is a ``Tee``: it counts what was produced (records per time, into the output's
``produceds``) once, and hands each batch to every connected channel.

Parallelization contracts (timely's names):
- ``Pipeline``: records stay on this worker (no copy, no routing);
- ``Exchange(key)``: a record goes to worker ``route(key(record), peers)`` of the workers
  routed to (``worker.routing_workers``: without those that left): ``k % peers`` for a
  non-negative int key ``k`` (timely's rule), else Megaphone's stable hash ``% peers``;
  the same worker in-process and across processes (``timely.dataflow.exchange``);
- ``Direct(target)``: a record goes to worker ``target(record)``, an index the producer
  chose (Megaphone's routing tables), refused if no such worker exists.
(Broadcasting is an operator, ``Stream.broadcast``: every copy must be a record of its
own for progress tracking to count it, so it is built from an exchange.)

Costs: Pipeline O(1) per batch; Exchange O(records + peers), the hash and the buckets
in C (compiled twin) plus one key call per record when a key function is given.
"""
from __future__ import annotations

from typing import Any, Callable

from .exchange import partition


class Pipeline:
    """Keep records on the worker that produced them."""

    def connect(self, worker: Any, channel: int, path: tuple) -> tuple[Any, Any]:
        pusher, puller = worker.allocate_pipeline(channel, path)
        return _PipelinePusher(pusher), puller


class Exchange:
    """Route each record to the worker chosen by ``key(record)`` (the record itself
    when ``key`` is None, which saves a call per record).

    By default the route is ``route(key, current peers)``: once a process has joined, some
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
        if self.pinned:
            worker.pinned_routing = True     # a process hosting these workers cannot leave
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
    """Routes to ``worker.routing_workers[route(key, len(routing_workers))]``: the
    workers change when a process joins or leaves."""

    __slots__ = ("_pushers", "_key", "_worker", "_pinned")

    def __init__(self, pushers: list, key: Callable | None, worker: Any, pinned: bool) -> None:
        self._pushers = pushers
        self._key = key
        self._worker = worker
        self._pinned = pinned

    def give(self, time: Any, records: list) -> None:
        worker = self._worker
        pushers = self._pushers
        if self._pinned:
            targets = worker.initial_workers
            peers = len(targets)
            if targets[-1] == peers - 1:
                targets = None
        else:
            targets = worker.routing_workers
            peers = len(targets)
            if targets[-1] == peers - 1:      # 0..peers-1: no process has left
                targets = None
        if peers == 1:
            pushers[0 if targets is None else targets[0]].push((time, records))
            return
        for target, bucket in enumerate(partition(records, self._key, peers)):
            if bucket:
                pushers[target if targets is None else targets[target]].push((time, bucket))


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
