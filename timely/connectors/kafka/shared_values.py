"""Decoded events share their field values: one object per distinct str or int.

A decoder makes a new object for every field of every event: a million clicks on 40
pages hold a million page strings. ``SharedValues`` replaces each str and int field
value (bools excluded: ``True == 1``) with the equal object it saw first, so the
events of a page all hold the same string. The fresh copies die at once, in memory the
next event reuses, and every later pass over the events (hashing to route them,
folding them per key) touches a few objects that stay in the CPU's caches instead of
one scattered object per event (``docs/backlog.md``).

The tables are bounded: past ``limit`` distinct values of a kind they start again, so
a field with a value per event (an id) costs a lookup and no memory.

Costs: one dict lookup per str or int field and one tuple per event (``row``), in C
with the compiled twin (``timely.connectors.kafka._cshared_values``).

>>> shared = SharedValues()
>>> a, b = shared.rows([("p1", 700, 1.5), ("p1", 700, True)])
>>> a == ("p1", 700, 1.5) and a[0] is b[0] and a[1] is b[1] and b[2] is True
True
"""
from __future__ import annotations

from typing import Any, Iterable

from ..._twin import compiled

__all__ = ["IMPLEMENTATION", "SharedValues", "py_row", "py_rows", "row", "rows"]

#: distinct values of one kind kept before a table starts again
LIMIT = 1 << 16


def py_row(values: tuple, strs: dict, ints: dict) -> tuple:
    """``values`` with each str and int item replaced by the equal one in ``strs`` /
    ``ints`` (added there if it is new)."""
    return tuple([strs.setdefault(v, v) if type(v) is str else ints.setdefault(v, v) if type(v) is int else v
                  for v in values])


def py_rows(values: Iterable[tuple], strs: dict, ints: dict, kind: type = list) -> list:
    """A ``kind`` (list or a subclass) of ``row`` of each tuple in ``values``."""
    return kind([py_row(t, strs, ints) for t in values])


_compiled = compiled("timely.connectors.kafka._cshared_values")
row, rows = (py_row, py_rows) if _compiled is None else (_compiled.row, _compiled.rows)
IMPLEMENTATION = "python" if _compiled is None else "cython"


class SharedValues:
    """The tables of one decoder (see the module)."""

    __slots__ = ("strs", "ints", "limit")

    def __init__(self, limit: int = LIMIT) -> None:
        self.strs: dict = {}
        self.ints: dict = {}
        self.limit = limit

    def bound(self) -> None:
        """Start a table again if it holds more than ``limit`` values (the methods do it
        on each call; a decoder calling ``row`` and ``rows`` itself does it per batch)."""
        if len(self.strs) > self.limit:
            self.strs.clear()
        if len(self.ints) > self.limit:
            self.ints.clear()

    def row(self, values: tuple) -> tuple:
        """One event's values, shared."""
        self.bound()
        return row(values, self.strs, self.ints)

    def rows(self, values: Iterable[tuple], kind: type = list) -> Any:
        """A packed value's events' values, shared, as a ``kind``."""
        self.bound()
        return rows(values, self.strs, self.ints, kind)
