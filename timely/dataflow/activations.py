"""Activations: which operators a worker must schedule next, now or after a delay.

An operator is named by its path: (dataflow, child, grandchild, ...). Activating a path
marks every scope along it, so the worker schedules the dataflow, each scope its child,
and so on down to the operator. ``take(scope_path)`` hands a scope the children marked
under it and forgets them.

``activate_after(path, delay)`` is timely's: the path is activated once ``delay`` seconds
have passed (``advance``, at the start of every step), and until then a worker with
nothing else to do parks (``empty_for`` bounds its wait) instead of spinning; a message
that arrives meanwhile still wakes it at once. A source that polls something outside
the dataflow (a Kafka consumer) asks to be scheduled again this way when it found
nothing, rather than blocking the worker inside the poll.

Costs: ``activate`` O(depth), ``take`` O(marked children), ``activate_after`` and each
activation that ``advance`` makes due O(log delayed), ``advance`` with none due O(1).

>>> a = Activations()
>>> a.activate((0, 3, 2)); a.activate((0, 1))
>>> a.take(()), sorted(a.take((0,))), a.take((0, 3)), a.take((0,))
([0], [1, 3], [2], [])
>>> now = [10.0]
>>> a = Activations(clock=lambda: now[0])
>>> a.activate_after((0, 4), 0.5); a.advance()
>>> a.is_idle(), a.empty_for()
(True, 0.5)
>>> now[0] = 10.5; a.advance()
>>> a.is_idle(), a.take(()), a.take((0,)), a.empty_for()
(False, [0], [4], None)
"""
from __future__ import annotations

import heapq
import time
from typing import Callable, Optional


class Activations:
    __slots__ = ("_pending", "_delayed", "_sequence", "_clock")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._pending: dict[tuple, set] = {}
        self._delayed: list[tuple[float, int, tuple]] = []   # heap of (due, sequence, path)
        self._sequence = 0
        self._clock = clock

    def activate(self, path: tuple) -> None:
        pending = self._pending
        for i in range(len(path)):
            prefix = path[:i]
            found = pending.get(prefix)
            if found is None:
                pending[prefix] = {path[i]}
            else:
                found.add(path[i])

    def activate_after(self, path: tuple, delay: float) -> None:
        """Activate ``path`` once ``delay`` seconds have passed (at once if ``delay <= 0``)."""
        if delay <= 0:
            self.activate(path)
            return
        self._sequence += 1
        heapq.heappush(self._delayed, (self._clock() + delay, self._sequence, path))

    def advance(self) -> None:
        """Activate the delayed paths whose time has come."""
        delayed = self._delayed
        if delayed:
            now = self._clock()
            while delayed and delayed[0][0] <= now:
                self.activate(heapq.heappop(delayed)[2])

    def empty_for(self) -> Optional[float]:
        """Seconds until the next delayed activation (0.0: one is due), or None if none is
        waiting; what a worker with nothing active may park for."""
        if not self._delayed:
            return None
        return max(0.0, self._delayed[0][0] - self._clock())

    def take(self, scope: tuple) -> list:
        found = self._pending.pop(scope, None)
        return list(found) if found else []

    def forget(self, path: tuple) -> None:
        """Drop what is pending at or under ``path`` (a dataflow that was dropped), delayed
        activations included."""
        if self._delayed:
            self._delayed = [d for d in self._delayed if d[2][:len(path)] != path]
            heapq.heapify(self._delayed)
        for prefix in [p for p in self._pending if p[:len(path)] == path]:
            del self._pending[prefix]
        if len(path) > 1:
            found = self._pending.get(path[:-1])
            if found is not None:
                found.discard(path[-1])
        elif path:
            found = self._pending.get(())
            if found is not None:
                found.discard(path[0])

    def is_idle(self) -> bool:
        return not self._pending
