"""Open windows in a Megaphone bin: how the window operator keeps, folds and closes them.

The window operator (``timely.windows.operator``) is an S operator of Megaphone
(``timely.megaphone.state.stateful_epochs``): each worker holds some bins, and a bin's
state is a dict that moves with the bin when the cluster grows or shrinks and is
checkpointed with it. Here is what that dict holds, and what happens to it at each
complete epoch ``t``:

- fixed windows (``Tumbling``, ``Sliding``): one entry per key with open windows,
  ``key -> {start: accumulator}``. A record at ``t`` is folded into each of its windows
  whose closing epoch (``clock.last_before(end + allowed_lateness)``) is ``t`` or
  later; the others have closed, and the record is reported late for them. A window's
  first record schedules a notification (Megaphone's, travelling with the bin) at its
  closing epoch, carrying ``(key, start)``.
- sessions (``Session``): one entry per key with open sessions, ``key -> [[start, end,
  accumulator], ...]`` sorted by start (``end`` is the last record's event time plus the
  gap). The key's records at ``t`` are taken in event-time order; one whose event time
  plus the allowed lateness is in an epoch before ``t`` is late (a session it belongs to
  could have closed); the others open a session ``[x, x + gap)`` or are folded into the
  one they overlap, merging those they bridge (``merge``, in start order). A session
  whose closing epoch is new schedules a notification there, carrying the key.

At the closing epoch, once the epoch's records are folded, each due window is emitted
as ``(key, Window(start, end), finish(accumulator))`` and its entry deleted at once: a
key with no open window holds nothing. A session's notification that finds its
session extended does nothing; the later one closes it.

Costs: per record, one ``key``, one ``event_time``, one dict lookup of the key and per
window one lookup of its start and one ``fold`` (sessions: plus O(open sessions of the
key)); per closed window one dict deletion; memory O(open windows + their
notifications). Each key changed is named to the bin's checkpoint log (``touch``), so a
checkpoint writes only the keys an epoch touched, with their open windows.
"""
from __future__ import annotations

from itertools import chain
from operator import itemgetter
from typing import Any, Callable

from .._twin import compiled
from ..megaphone.bin_states import StatefulError
from .clock import NUMBER_TYPES, Clock, check_number
from .late import Late, fixed_reason, session_reason
from .windowers import Session, Window

_MISSING = object()
_first = itemgetter(0)
#: closing epochs remembered per window start; forgotten wholesale past this many (memory
#: stays flat over a long run)
_CLOSES_KEPT = 4096


class Functions:
    """The user's functions of one window operator, and the names errors use."""

    __slots__ = ("name", "key", "event_time", "init", "fold", "merge", "finish", "lateness", "clock")

    def __init__(self, name: str, key: Callable, event_time: Callable, init: Any, fold: Callable,
                 merge: Any, finish: Any, lateness: Any, clock: Clock) -> None:
        self.name = name
        self.key = key
        self.event_time = event_time
        self.init = init if callable(init) else (lambda: init)
        self.fold = fold
        self.merge = merge
        self.finish = finish
        self.lateness = lateness
        self.clock = clock

    def checked_time(self, x: Any, record: Any) -> Any:
        """``x`` if it is a finite number, else a StatefulError naming the record."""
        try:
            return check_number(x, "event time")
        except (TypeError, ValueError) as e:
            raise StatefulError(f"{self.name}: event_time returned {x!r} for record {record!r}: {e}") from None

    def failed(self, what: str, key: Any, time: int, e: Exception) -> StatefulError:
        return StatefulError(f"{self.name}: {what} failed for key {key!r} at time {time!r}: "
                             f"{type(e).__name__}: {e}")


class FixedWindows:
    """Open tumbling or sliding windows: bin state ``key -> {start: accumulator}``."""

    def __init__(self, windower: Any, f: Functions) -> None:
        self.windower = windower
        self.f = f
        self.closes: dict = {}      # window start -> its closing epoch

    def close_of(self, start: Any) -> int:
        """The epoch whose completion closes the window starting at ``start`` (remembered)."""
        c = self.closes.get(start)
        if c is None:
            if len(self.closes) >= _CLOSES_KEPT:
                self.closes.clear()
            c = self.closes[start] = self.f.clock.last_before(start + self.windower.length + self.f.lateness)
        return c

    def absorb(self, state: dict, runs: list, t: int, schedule: Callable, changed: list, closing: list,
               emitted: list) -> None:
        """Fold the records of ``runs`` (sequences of records of complete epoch ``t``) into
        their open windows (see the module docstring; the loop: ``absorb_fixed``)."""
        f, w = self.f, self.windower
        late = absorb_fixed(state, runs, t, f.key, f.event_time, f.fold, f.init, w.length, w.every, w.origin,
                            self.closes, self.close_of, schedule, changed, closing, f.checked_time, f.failed)
        for k, x, r, missed in late:
            emitted.append(self.late(k, x, r, t, missed[::-1]))

    def late(self, k: Any, x: Any, r: Any, t: int, missed: list) -> Late:
        windows = tuple(self.windower.window_of(s) for s, _c in missed)
        reason = fixed_reason(x, list(windows), [c for _s, c in missed], self.f.lateness, t,
                              len(self.windower.starts(x)))
        return Late(k, x, r, t, windows, reason)

    def close(self, state: dict, sk: Any, t: int, emitted: list, changed: list) -> None:
        """Emit and delete window ``sk`` = ``(key, start)``, due at ``t``."""
        k, s = sk
        windows = state.get(k)
        acc = _MISSING if windows is None else windows.pop(s, _MISSING)
        if acc is _MISSING:
            raise StatefulError(f"{self.f.name}: window {sk!r} is due at time {t!r} but not open "
                                f"(its state and notification disagree)")
        if not windows:
            del state[k]
        emitted.append((k, self.windower.window_of(s), self.f.finish(acc) if self.f.finish else acc))
        changed.append(k)


def absorb_fixed(state: dict, runs: list, t: int, key_of: Callable, time_of: Callable, fold: Callable,
                 init: Callable, length: Any, every: Any, origin: Any, closes: dict, close_of: Callable,
                 schedule: Callable, changed: list, closing: list, checked_time: Callable,
                 failed: Callable) -> list:
    """Fixed windows' S at one bin and epoch ``t``: fold each record of ``runs`` into
    its windows ``[origin + i*every, ... + length)`` still open (``state``: ``key ->
    {start: acc}``; a new window's ``init()``, and a notification ``(key, start)`` at its
    closing epoch (``closes[start]``, else ``close_of(start)``) by ``schedule``, or into
    ``closing`` if that is ``t``), naming each key touched in ``changed``. A window's
    start is computed from its index, so every record of a window names it alike,
    floats included. Returns ``(key, event time, record, [(start, closing epoch), ...])``
    for each record late for some window (latest window first). The compiled twin
    (``timely.windows._cwindows``) replaces this name when built; ``py_absorb_fixed`` is
    always this one.

    >>> state, closing = {}, []
    >>> absorb_fixed(state, [[("a", 3), ("a", 12)]], 5, lambda r: r[0], lambda r: r[1],
    ...              lambda n, r: n + 1, lambda: 0, 10, 5, 0, {}, lambda start: start + 9,
    ...              lambda c, sk, i: None, [], closing, None, None)
    [('a', 3, ('a', 3), [(-5, 4)])]
    >>> sorted(state["a"].items())
    [(0, 1), (5, 1), (10, 1)]
    """
    get = state.get
    late: list = []
    for r in chain.from_iterable(runs):
        k = key_of(r)
        x = time_of(r)
        if x.__class__ not in NUMBER_TYPES or x - x != 0:      # (not a number, or not finite)
            x = checked_time(x, r)
        i = (x - origin) // every           # the last window holding x, then back
        s = origin + i * every
        missed = None
        windows = None                      # the key's open windows, once one is folded into
        while s + length > x:
            c = closes.get(s)
            if c is None:
                c = close_of(s)
            if c < t:
                if missed is None:
                    missed = []
                missed.append((s, c))
            else:
                if windows is None:
                    windows = get(k)
                    if windows is None:
                        windows = state[k] = {}
                acc = windows.get(s, _MISSING)
                try:
                    if acc is _MISSING:
                        acc = init()
                        if c > t:
                            schedule(c, (k, s), 0)
                        else:
                            closing.append((k, s))
                    windows[s] = fold(acc, r)
                except StatefulError:
                    raise
                except Exception as e:
                    raise failed("fold", k, t, e) from e
            i -= 1
            s = origin + i * every
        if windows is not None:
            changed.append(k)
        if missed is not None:
            late.append((k, x, r, missed))
    return late


class Sessions:
    """Open sessions: bin state ``key -> [[start, end, accumulator], ...]``."""

    def __init__(self, windower: Session, f: Functions) -> None:
        self.gap = windower.gap
        self.f = f

    def close_of(self, end: Any) -> int:
        return self.f.clock.last_before(end + self.f.lateness)

    def absorb(self, state: dict, runs: list, t: int, schedule: Callable, changed: list, closing: list,
               emitted: list) -> None:
        f = self.f
        key_of, time_of = f.key, f.event_time
        by_key: dict = {}
        for r in chain.from_iterable(runs):
            x = time_of(r)
            if x.__class__ not in NUMBER_TYPES or x - x != 0:  # (not a number, or not finite)
                x = f.checked_time(x, r)
            k = key_of(r)
            found = by_key.get(k)
            if found is None:
                by_key[k] = [(x, r)]
            else:
                found.append((x, r))
        for k, items in by_key.items():
            self._absorb_key(state, k, items, t, schedule, changed, closing, emitted)

    def _absorb_key(self, state: dict, k: Any, items: list, t: int, schedule: Callable, changed: list,
                    closing: list, emitted: list) -> None:
        f, gap, lateness = self.f, self.gap, self.f.lateness
        epoch_of = f.clock.epoch_of
        items.sort(key=_first)          # event-time order (ties: as they came)
        held = state.get(k)
        sessions = [list(s) for s in held] if held else []
        notified = {self.close_of(s[1]) for s in sessions}
        touched = False
        for x, r in items:
            e = epoch_of(x + lateness)
            if e < t:
                emitted.append(Late(k, x, r, t, (Window(x, x + gap),), session_reason(x, lateness, e, t)))
                continue
            lo, hi = x, x + gap
            merged = None
            kept = []
            try:
                for s in sessions:
                    if s[0] < hi and lo < s[1]:
                        if merged is None:
                            merged = s
                        else:
                            merged = [min(merged[0], s[0]), max(merged[1], s[1]), f.merge(merged[2], s[2])]
                    else:
                        kept.append(s)
                if merged is None:
                    merged = [lo, hi, f.init()]
                else:
                    merged = [min(merged[0], lo), max(merged[1], hi), merged[2]]
                merged[2] = f.fold(merged[2], r)
            except StatefulError:
                raise
            except Exception as exc:
                raise f.failed("fold or merge", k, t, exc) from exc
            kept.append(merged)
            kept.sort(key=_first)
            sessions = kept
            touched = True
        if not touched:
            return
        state[k] = sessions
        changed.append(k)
        for s in sessions:
            c = self.close_of(s[1])
            if c not in notified:
                notified.add(c)
                if c > t:
                    schedule(c, k, 0)
                else:
                    closing.append(k)

    def close(self, state: dict, k: Any, t: int, emitted: list, changed: list) -> None:
        """Emit and delete key ``k``'s sessions due at ``t`` (none: a session extended since)."""
        held = state.get(k)
        if not held:
            return
        kept = []
        finish = self.f.finish
        for s in held:
            if self.close_of(s[1]) <= t:
                emitted.append((k, Window(s[0], s[1]), finish(s[2]) if finish else s[2]))
            else:
                kept.append(s)
        if len(kept) == len(held):
            return
        if kept:
            state[k] = kept
        else:
            del state[k]
        changed.append(k)


# The pure-Python twin stays importable as ``py_absorb_fixed``; the compiled one replaces
# the public name when built (see timely._twin).
py_absorb_fixed = absorb_fixed
_compiled = compiled("timely.windows._cwindows")
IMPLEMENTATION = "python" if _compiled is None else "cython"
if _compiled is not None:
    absorb_fixed = _compiled.absorb_fixed  # noqa: F811
