"""Antichain and MutableAntichain: frontiers of partially ordered timestamps.

An ``Antichain`` is a set of mutually incomparable elements (minimal elements of
whatever was inserted); it represents a frontier or a set of path summaries.
``insert`` costs O(n) comparisons for n elements held.

A ``MutableAntichain`` keeps a signed count per timestamp and its frontier: the minimal
timestamps with a positive count. Counts may be transiently negative. ``update_iter``
applies a batch of count changes and returns the changes to the frontier (each element
entering with +1, leaving with -1). It only rebuilds the frontier when an update could
move it — an update strictly beyond the frontier, or a decrement of a time the frontier
does not cover, cannot — so the common case costs O(f) comparisons per update for a
frontier of f elements; a rebuild costs O(k log k) for k distinct times held.

This is the pure-Python twin; ``timely.progress.MutableAntichain`` is the compiled one
when it is built.

>>> a = Antichain([(2, 1), (1, 3), (3, 3)])
>>> sorted(a), a.less_equal((1, 4)), a.less_than((2, 1))
([(1, 3), (2, 1)], True, False)
>>> m = MutableAntichain()
>>> sorted(m.update_iter([((1, 3), 1), ((3, 1), 1), ((4, 4), 1)]))
[((1, 3), 1), ((3, 1), 1)]
>>> sorted(m.update_iter([((1, 3), -1)]))
[((1, 3), -1)]
>>> m.frontier(), m.count_for((4, 4))
([(3, 1)], 1)
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

from .timestamp import less_equal, less_than


class Antichain:
    """A set of mutually incomparable elements under the product partial order."""

    __slots__ = ("_elements",)

    def __init__(self, elements: Iterable[Any] = ()) -> None:
        self._elements: list[Any] = []
        for e in elements:
            self.insert(e)

    def insert(self, element: Any) -> bool:
        """Add ``element`` unless something held is <= it; drop what it is < of.

        Returns True when the element was added.
        """
        els = self._elements
        for e in els:
            if less_equal(e, element):
                return False
        self._elements = [e for e in els if not less_equal(element, e)]
        self._elements.append(element)
        return True

    def less_equal(self, time: Any) -> bool:
        """Some element is <= ``time``."""
        for e in self._elements:
            if less_equal(e, time):
                return True
        return False

    def less_than(self, time: Any) -> bool:
        """Some element is strictly < ``time``."""
        for e in self._elements:
            if less_than(e, time):
                return True
        return False

    def dominates(self, other: Iterable[Any]) -> bool:
        """Every element of ``other`` is >= some element of this antichain."""
        return all(self.less_equal(t) for t in other)

    def elements(self) -> list[Any]:
        return list(self._elements)

    def is_empty(self) -> bool:
        return not self._elements

    def __iter__(self) -> Iterator[Any]:
        return iter(self._elements)

    def __len__(self) -> int:
        return len(self._elements)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Antichain):
            return set(self._elements) == set(other._elements)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(frozenset(self._elements))

    def __repr__(self) -> str:
        return f"Antichain({sorted(self._elements)!r})"


class MutableAntichain:
    """Signed counts per timestamp, and the frontier of those with positive count."""

    __slots__ = ("_counts", "_frontier")

    def __init__(self) -> None:
        self._counts: dict[Any, int] = {}
        self._frontier: list[Any] = []

    @classmethod
    def new_bottom(cls, time: Any) -> "MutableAntichain":
        """A MutableAntichain holding ``time`` once."""
        m = cls()
        m.update_iter([(time, 1)])
        return m

    def update_iter(self, updates: Iterable[tuple[Any, int]]) -> list[tuple[Any, int]]:
        """Apply count changes; return the frontier changes they cause."""
        counts = self._counts
        frontier = self._frontier
        rebuild = False
        for time, delta in updates:
            if not delta:
                continue
            if not rebuild:
                beyond = False
                covered = False
                for f in frontier:
                    if less_equal(f, time):
                        covered = True
                        if f != time:
                            beyond = True
                            break
                # A time strictly beyond the frontier cannot change it; nor can a
                # decrement of a time that no frontier element covers (its count was
                # not positive, so it is not, and will not become, minimal-positive).
                rebuild = not (beyond or (delta < 0 and not covered))
            c = counts.get(time, 0) + delta
            if c:
                counts[time] = c
            else:
                del counts[time]
        if not rebuild:
            return []
        return self._rebuild()

    def _rebuild(self) -> list[tuple[Any, int]]:
        old = self._frontier
        new: list[Any] = []
        for time in sorted(t for t, c in self._counts.items() if c > 0):
            # sorted order extends the partial order: nothing later is < anything earlier
            for f in new:
                if less_equal(f, time):
                    break
            else:
                new.append(time)
        self._frontier = new
        if new == old:
            return []
        olds = set(old)
        news = set(new)
        return [(t, -1) for t in old if t not in news] + [(t, 1) for t in new if t not in olds]

    def frontier(self) -> list[Any]:
        """The minimal timestamps with a positive count."""
        return list(self._frontier)

    def count_for(self, time: Any) -> int:
        """The accumulated count of ``time``."""
        return self._counts.get(time, 0)

    def less_than(self, time: Any) -> bool:
        """Some frontier element is strictly < ``time``."""
        for f in self._frontier:
            if less_than(f, time):
                return True
        return False

    def less_equal(self, time: Any) -> bool:
        """Some frontier element is <= ``time``."""
        for f in self._frontier:
            if less_equal(f, time):
                return True
        return False

    def is_empty(self) -> bool:
        """The frontier is empty (no positive count)."""
        return not self._frontier

    def counts(self) -> list[tuple[Any, int]]:
        """Every timestamp with a non-zero count, and its count."""
        return list(self._counts.items())

    def __repr__(self) -> str:
        return f"MutableAntichain(frontier={self._frontier!r})"
