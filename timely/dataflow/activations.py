"""Activations: which operators a worker must schedule next.

An operator is named by its path: (dataflow, child, grandchild, ...). Activating a path
marks every scope along it, so the worker schedules the dataflow, each scope its child,
and so on down to the operator. ``take(scope_path)`` hands a scope the children marked
under it and forgets them. Costs: ``activate`` O(depth), ``take`` O(marked children).

>>> a = Activations()
>>> a.activate((0, 3, 2)); a.activate((0, 1))
>>> a.take(()), sorted(a.take((0,))), a.take((0, 3)), a.take((0,))
([0], [1, 3], [2], [])
"""
from __future__ import annotations


class Activations:
    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: dict[tuple, set] = {}

    def activate(self, path: tuple) -> None:
        pending = self._pending
        for i in range(len(path)):
            prefix = path[:i]
            found = pending.get(prefix)
            if found is None:
                pending[prefix] = {path[i]}
            else:
                found.add(path[i])

    def take(self, scope: tuple) -> list:
        found = self._pending.pop(scope, None)
        return list(found) if found else []

    def forget(self, path: tuple) -> None:
        """Drop what is pending at or under ``path`` (a dataflow that was dropped)."""
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
