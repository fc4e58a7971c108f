"""ChangeBatch: a collection of ``(key, delta)`` updates, consolidated lazily.

Progress tracking moves counts around as batches of signed updates. A ChangeBatch
appends each update (O(1)) and only consolidates — sums equal keys, drops zeros — when
someone reads it, or when the unconsolidated tail grows past twice the consolidated
prefix (so memory stays within a constant factor of the distinct keys, and each update
is consolidated O(1) times amortised). Consolidation keeps first-seen key order, so no
ordering on keys is needed.

This is the pure-Python twin; ``timely.progress.ChangeBatch`` is the compiled one when
it is built.

>>> batch = ChangeBatch()
>>> batch.update("a", 3); batch.update("b", 1); batch.update("a", -3)
>>> batch.is_empty(), list(batch)
(False, [('b', 1)])
>>> batch.drain(), batch.is_empty()
([('b', 1)], True)
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator


class ChangeBatch:
    """Signed counts per key, compacted lazily (see the module docstring)."""

    __slots__ = ("_updates", "_clean")

    def __init__(self, updates: Iterable[tuple[Any, int]] | None = None) -> None:
        self._updates: list[tuple[Any, int]] = []
        self._clean = 0  # length of the consolidated prefix
        if updates is not None:
            self.extend(updates)

    @classmethod
    def new_from(cls, key: Any, delta: int) -> "ChangeBatch":
        """A batch holding the single update ``(key, delta)``."""
        batch = cls()
        batch.update(key, delta)
        return batch

    def update(self, key: Any, delta: int) -> None:
        """Add ``delta`` to ``key``'s count. O(1) amortised."""
        if delta:
            updates = self._updates
            updates.append((key, delta))
            if len(updates) > 32 and len(updates) >> 1 >= self._clean:
                self.compact()

    def extend(self, updates: Iterable[tuple[Any, int]]) -> None:
        """Add every ``(key, delta)`` of ``updates``."""
        own = self._updates
        own.extend(u for u in updates if u[1])
        if len(own) > 32 and len(own) >> 1 >= self._clean:
            self.compact()

    def compact(self) -> None:
        """Consolidate: one entry per key, no zero counts. O(n) in the entries held."""
        if self._clean < len(self._updates):
            acc: dict[Any, int] = {}
            get = acc.get
            for key, delta in self._updates:
                acc[key] = get(key, 0) + delta
            self._updates = [(k, v) for k, v in acc.items() if v]
        self._clean = len(self._updates)

    def is_empty(self) -> bool:
        """True when every key's count is zero. Compacts if it must.

        A consolidated prefix longer than the tail cannot be cancelled by it, so the
        answer is immediate; otherwise the batch is compacted (O(1) amortised)."""
        if self._clean > len(self._updates) >> 1:
            return False
        if not self._updates:
            return True
        self.compact()
        return not self._updates

    def __len__(self) -> int:
        """The number of keys with a non-zero count. Compacts."""
        self.compact()
        return len(self._updates)

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        self.compact()
        return iter(self._updates)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChangeBatch) and not hasattr(other, "drain"):
            return NotImplemented
        return dict(iter(self)) == dict(iter(other))  # type: ignore[call-overload]

    def __repr__(self) -> str:
        return f"ChangeBatch({list(self)!r})"

    def drain(self) -> list[tuple[Any, int]]:
        """Return the consolidated updates and empty the batch."""
        self.compact()
        out = self._updates
        self._updates = []
        self._clean = 0
        return out

    def into_inner(self) -> list[tuple[Any, int]]:
        """The consolidated updates, leaving the batch empty (timely's name)."""
        return self.drain()

    def drain_into(self, other: "ChangeBatch") -> None:
        """Move every update into ``other``."""
        other.extend(self.drain())

    def clear(self) -> None:
        """Forget every update."""
        self._updates = []
        self._clean = 0

    def unstable_len(self) -> int:
        """Entries held, consolidated or not (an instrument, not a count of keys)."""
        return len(self._updates)
