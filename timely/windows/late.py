"""Late data: records that arrive for windows already closed, and why.

A window operator never drops a record silently: a record whose window has closed
(its end plus the allowed lateness behind the watermark, ``timely.windows.clock``) comes
out of its late stream as a ``Late``: the record, its key and event time, the epoch it
came at, the windows it missed and a sentence saying why. A sliding-window record late
for some of its windows is folded into the others and reported once, naming the ones
it missed. Whether a record is late depends only on its epoch and event time, so every
run of a dataflow (any number of workers, across joins, leaves and rollbacks) reports
the same late records.

Costs: one ``Late`` per late record, built only for those.

>>> from timely.windows.windowers import Window
>>> Late("a", 3, ("a", 3), 12, (Window(0, 10),), "closed").windows
(Window(start=0, end=10),)
"""
from __future__ import annotations

from typing import Any, NamedTuple


class Late(NamedTuple):
    """A record that came after its window closed (see the module docstring)."""
    key: Any
    event_time: Any
    record: Any
    time: int
    windows: tuple
    reason: str


def fixed_reason(event_time: Any, missed: list, closes: list, lateness: Any, time: int, windows: int) -> str:
    """Why a record of a fixed window (tumbling, sliding) is late.

    >>> from timely.windows.windowers import Window
    >>> fixed_reason(5, [Window(0, 10)], [9], 0, 12, 1)
    'event time 5 is in window [0, 10), closed once epoch 9 was complete (end 10 + allowed lateness 0); the record came at epoch 12'
    """
    parts = ", ".join(f"[{w.start!r}, {w.end!r})" for w in missed)
    what = "window" if len(missed) == 1 else "windows"
    some = "" if len(missed) == windows else f" ({len(missed)} of its {windows} windows; it is in the others)"
    ends = " and ".join(f"epoch {c}" for c in closes)
    return (f"event time {event_time!r} is in {what} {parts}{some}, closed once {ends} was complete "
            f"(end {missed[-1].end!r} + allowed lateness {lateness!r}); the record came at epoch {time}")


def session_reason(event_time: Any, lateness: Any, epoch: int, time: int) -> str:
    """Why a session record is late.

    >>> session_reason(5, 0, 5, 12)
    'event time 5 + allowed lateness 0 was behind the watermark: it belongs to epoch 5, and the record came at epoch 12, when a session it belongs to could have closed'
    """
    return (f"event time {event_time!r} + allowed lateness {lateness!r} was behind the watermark: it belongs "
            f"to epoch {epoch}, and the record came at epoch {time}, when a session it belongs to could "
            f"have closed")
