"""Windowers: which event-time windows a record belongs to.

A window is a half-open interval of event time, ``Window(start, end)``: a record of
event time ``x`` is in it when ``start <= x < end``.

- ``Tumbling(length, origin=0)``: back-to-back windows ``[origin + k*length, origin +
  (k+1)*length)``; each record is in exactly one.
- ``Sliding(length, every, origin=0)``: windows of ``length`` starting at every
  ``origin + k*every`` (``every <= length``); a record is in ``ceil(length / every)``
  of them, or one less when it falls on a boundary they do not share. With ``every ==
  length`` it is ``Tumbling``. Spark's ``window(col, length, every)`` is the same
  window over seconds from the Unix epoch (origin 0).
- ``Session(gap)``: a key's records closer than ``gap`` in event time share a session;
  a record alone opens ``[x, x + gap)``, and sessions that overlap (a record bridging
  two) merge into one ``[first, last + gap)``.

Bounds are computed by floor division from the origin: exact for ints, and the same on
every worker for floats. Costs: ``starts`` O(windows of the record); sessions are
merged by the window operator (``timely.windows.open``), O(open sessions of the key)
per record.

>>> Tumbling(10).starts(25), Sliding(10, 5).starts(25), Sliding(10, 5, origin=2).starts(25)
([20], [20, 25], [17, 22])
>>> Sliding(60, 30).window_of(30)
Window(start=30, end=90)
"""
from __future__ import annotations

from typing import Any, NamedTuple, Union

from .clock import check_number

Number = Union[int, float]


class Window(NamedTuple):
    """An event-time window ``[start, end)``, as emitted with each result."""
    start: Number
    end: Number


class Windower:
    """What the window operator asks of a windower (see the subclasses)."""

    __slots__ = ()
    #: windows are fixed by the record's event time alone (False: sessions, which merge)
    fixed = True


class Tumbling(Windower):
    """Back-to-back windows of ``length`` from ``origin``."""

    __slots__ = ("length", "origin")

    def __init__(self, length: Number, origin: Number = 0) -> None:
        self.length = check_number(length, "Tumbling: length", positive=True)
        self.origin = check_number(origin, "Tumbling: origin")

    @property
    def every(self) -> Number:
        """Windows start every ``length``."""
        return self.length

    def starts(self, x: Number) -> list:
        """The start of the window holding event time ``x``."""
        return [self.origin + (x - self.origin) // self.length * self.length]

    def window_of(self, start: Number) -> Window:
        return Window(start, start + self.length)

    def __repr__(self) -> str:
        return f"Tumbling({self.length!r}, origin={self.origin!r})"


class Sliding(Windower):
    """Windows of ``length`` starting every ``every`` from ``origin`` (``0 < every <= length``)."""

    __slots__ = ("length", "every", "origin")

    def __init__(self, length: Number, every: Number, origin: Number = 0) -> None:
        self.length = check_number(length, "Sliding: length", positive=True)
        self.every = check_number(every, "Sliding: every", positive=True)
        if every > length:
            raise ValueError(f"Sliding: every ({every!r}) must be <= length ({length!r}): records "
                             f"between windows would belong to none")
        self.origin = check_number(origin, "Sliding: origin")

    def starts(self, x: Number) -> list:
        """The starts of the windows holding event time ``x``, ascending; each is
        ``origin + i * every`` for its index ``i`` (the same for every record of it)."""
        every, length, origin = self.every, self.length, self.origin
        i = (x - origin) // every
        out = []
        s = origin + i * every
        while s + length > x:
            out.append(s)
            i -= 1
            s = origin + i * every
        out.reverse()
        return out

    def window_of(self, start: Number) -> Window:
        return Window(start, start + self.length)

    def __repr__(self) -> str:
        return f"Sliding({self.length!r}, {self.every!r}, origin={self.origin!r})"


class Session(Windower):
    """A key's records closer than ``gap`` in event time share a window; windows that a
    record bridges merge."""

    __slots__ = ("gap",)
    fixed = False

    def __init__(self, gap: Number) -> None:
        self.gap = check_number(gap, "Session: gap", positive=True)

    def __repr__(self) -> str:
        return f"Session({self.gap!r})"


def check_windower(windower: Any) -> Windower:
    """``windower`` if it is one, else a TypeError saying what is expected."""
    if not isinstance(windower, Windower):
        raise TypeError(f"window: expected a windower (Tumbling, Sliding or Session), got {windower!r}")
    return windower
