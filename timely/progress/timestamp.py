"""Timestamps and path summaries: the partial orders progress tracking is built on.

A timestamp is an ``int`` (an epoch) or a ``tuple`` of ints (an epoch plus one loop
counter per enclosing iterative scope), ordered by the product partial order: ``a <= b``
when every coordinate of ``a`` is at most the matching coordinate of ``b``. Python's own
``<`` on tuples is a *linear extension* of that order (lexicographic), which is what the
worklists sort by.

A path summary says what must happen to a timestamp travelling along a path. For an int
timestamp it is a non-negative int increment; for a tuple timestamp a tuple of
non-negative increments of the same length, applied coordinate-wise. Summaries are
ordered the same way as timestamps, and composed by ``followed_by``.

``results_in`` returns ``None`` when a coordinate would pass ``TIME_MAX`` (the largest
value the Cython hot paths store in an int64): a timestamp cannot travel such a path.

Any other object can be a timestamp or summary if it implements the same protocol as
methods (``less_equal``, ``less_than``, ``results_in``, ``followed_by``), a total order
``__lt__`` that extends the partial order, ``__hash__``/``__eq__``, and, for summaries,
``is_identity()``. Only the pure-Python twins accept such objects.

Costs: every operation is O(d) for a d-coordinate timestamp.

>>> less_equal((1, 3), (2, 3)), less_equal((3, 1), (1, 3)), less_equal((1, 3), (3, 1))
(True, False, False)
>>> results_in((0, 1), (4, 7)), followed_by(1, 2), results_in(1, TIME_MAX)
((4, 8), 3, None)
>>> minimum((5, 6)), identity_summary((5, 6))
((0, 0), (0, 0))
"""
from __future__ import annotations

from typing import Any, Optional

TIME_MAX = 2**63 - 1

Timestamp = Any  # int | tuple[int, ...] | an object implementing the protocol
Summary = Any


def less_equal(a: Timestamp, b: Timestamp) -> bool:
    """The product partial order ``a <= b`` (also used for summaries)."""
    ta = type(a)
    if ta is int:
        return a <= b
    if ta is tuple:
        for x, y in zip(a, b):
            if x > y:
                return False
        return True
    return a.less_equal(b)


def less_than(a: Timestamp, b: Timestamp) -> bool:
    """``a <= b`` and ``a != b``."""
    ta = type(a)
    if ta is int:
        return a < b
    if ta is tuple:
        return a != b and less_equal(a, b)
    return a.less_than(b)


def results_in(summary: Summary, time: Timestamp) -> Optional[Timestamp]:
    """The timestamp ``time`` becomes along a path summarised by ``summary``, or None."""
    ts = type(summary)
    if ts is int:
        r = time + summary
        return r if r <= TIME_MAX else None
    if ts is tuple:
        r = tuple(t + s for t, s in zip(time, summary))
        for x in r:
            if x > TIME_MAX:
                return None
        return r
    return summary.results_in(time)


def followed_by(first: Summary, then: Summary) -> Optional[Summary]:
    """The summary of a path ``first`` followed by a path ``then``, or None."""
    ts = type(first)
    if ts is int:
        r = first + then
        return r if r <= TIME_MAX else None
    if ts is tuple:
        r = tuple(a + b for a, b in zip(first, then))
        for x in r:
            if x > TIME_MAX:
                return None
        return r
    return first.followed_by(then)


def is_identity(summary: Summary) -> bool:
    """True for the summary that leaves every timestamp unchanged.

    A cycle whose summaries are all identities does not advance timestamps; any cycle
    with one non-identity summary of non-negative increments does.
    """
    ts = type(summary)
    if ts is int:
        return summary == 0
    if ts is tuple:
        return not any(summary)
    return summary.is_identity()


def minimum(like: Timestamp) -> Timestamp:
    """The least timestamp of the same shape as ``like``."""
    t = type(like)
    if t is int:
        return 0
    if t is tuple:
        return (0,) * len(like)
    return type(like).minimum()


def identity_summary(like: Timestamp) -> Summary:
    """The summary that changes nothing, for timestamps shaped like ``like``."""
    t = type(like)
    if t is int:
        return 0
    if t is tuple:
        return (0,) * len(like)
    return type(like).identity_summary()


def check_summary(summary: Summary) -> None:
    """Raise ValueError when ``summary`` is not a valid (non-negative) path summary."""
    ts = type(summary)
    if ts is int:
        if summary < 0:
            raise ValueError(f"path summary {summary!r} has a negative increment")
    elif ts is tuple:
        if not all(type(x) is int for x in summary):
            raise ValueError(f"path summary {summary!r} must hold ints")
        if any(x < 0 for x in summary):
            raise ValueError(f"path summary {summary!r} has a negative increment")
    elif not (hasattr(summary, "results_in") and hasattr(summary, "followed_by")):
        raise ValueError(f"path summary {summary!r} implements neither ints, tuples nor the summary protocol")
