"""The window operator: ``stream.window(windower, key=, event_time=, fold=, init=)``.

Event-time windows as keyed state on Megaphone: records are routed by ``key`` to the
worker holding the key's bin at their epoch (F), and the bins' S operator
(``stateful_epochs``) folds each complete epoch's records into the bin's open windows
(``timely.windows.open``). A bin's open windows are the bin's state, so they move with
it when a process joins or leaves, and are checkpointed with it (a rollback or a
restart restores them as of the checkpoint); their closing notifications travel with
the bin too.

When a window closes: the dataflow's frontier is the watermark. A record of event time
``x`` is expected at the epoch ``epoch_of(x)`` (``timely.windows.clock``: the identity
by default, ``Epochs(length, origin)`` for event times in ``length``-wide epochs, or any
non-decreasing function). A window ``[start, end)`` closes once the frontier has passed
the last epoch that may hold an event time below ``end + allowed_lateness``: its result
``(key, Window(start, end), value)`` is emitted at that epoch (so a sink writes it with
that epoch), and its state is deleted. When the input is exhausted (the frontier is
empty) every open window closes at once, each at its own closing epoch.

Late records (their window closed before they came) are never dropped silently: they
come out of ``windows.late``, a second stream of ``Late`` (record, key, event time,
epoch, the windows missed, and why; ``timely.windows.late``), or go to ``late=``, a
function called with each. If nothing reads ``windows.late`` and there is no ``late=``,
each epoch's late records are counted in a warning naming the operator.

Costs: routing as ``stateful_unary`` (one key hash per record); per record and window
one fold (``timely.windows.open``); per closed window one output record. Memory: the
open windows and one notification per window (fixed windows) or per key and closing
epoch (sessions); nothing for a closed window.

>>> import timely
>>> from timely.windows import Tumbling
>>> def build(worker):
...     def dataflow(scope):
...         source, clicks = scope.new_input()
...         counts = clicks.window(Tumbling(10), key=lambda c: c[0], event_time=lambda c: c[1],
...                                fold=lambda n, c: n + 1, init=0)
...         return source, counts.capture(), counts.late.capture()
...     source, counts, late = worker.dataflow(dataflow)
...     source.send_batch([("a", 3), ("b", 4), ("a", 9)])
...     source.advance_to(12)
...     source.send_batch([("a", 12), ("a", 5)])         # event time 5 comes at epoch 12: late
...     source.close()
...     worker.run()
...     return sorted(counts.by_time().items()), [(r.key, r.windows) for r in late.records()]
>>> [(windows, late)] = timely.execute(1, build)
>>> windows
[(9, [('a', Window(start=0, end=10), 2), ('b', Window(start=0, end=10), 1)]), (19, [('a', Window(start=10, end=20), 1)])]
>>> late
[('a', (Window(start=0, end=10),))]
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from ..dataflow.channels import Pipeline
from ..dataflow.stream import Stream
from ..megaphone.apply import _missing_bin, bin_slices
from ..megaphone.bins import DEFAULT_BINS
from ..megaphone.state import stateful_epochs
from .clock import as_clock, check_number
from .late import Late
from .open import FixedWindows, Functions, Sessions
from .windowers import Windower, check_windower

log = logging.getLogger("timely.windows")

__all__ = ["WindowStream", "window", "reduce_window", "collect_window"]


class WindowStream(Stream):
    """The windows' results ``(key, Window, value)``; ``late``: the stream of ``Late``
    records."""

    __slots__ = ("late",)

    def __init__(self, windows: Stream, late: Stream) -> None:
        super().__init__(windows.scope, windows.source, windows.tee)
        self.late = late


def _require(fn: Any, what: str, name: str) -> None:
    if not callable(fn):
        raise TypeError(f"{name}: {what} must be a function, got {fn!r}")


def window(stream: Stream, windower: Windower, *, key: Callable[[Any], Any], event_time: Callable[[Any], Any],
           fold: Callable[[Any, Any], Any], init: Any = None, merge: Optional[Callable[[Any, Any], Any]] = None,
           finish: Optional[Callable[[Any], Any]] = None, allowed_lateness: Any = 0,
           epoch_of: Optional[Callable[[Any], int]] = None, late: Optional[Callable[[Late], Any]] = None,
           name: str = "Window", bins: int = DEFAULT_BINS, control: Optional[Stream] = None) -> WindowStream:
    """Per key and event-time window of ``windower``, fold the records: ``acc =
    fold(acc, record)`` from ``init`` (a function returning a fresh accumulator, or an
    immutable value), in epoch order (within an epoch, as they come; sessions: by event
    time). ``merge(acc, acc)`` joins two sessions a record bridges (``Session`` needs
    it). Emits ``(key, Window(start, end), finish(acc))`` once per window, at the epoch
    whose completion closes it (see the module docstring: ``allowed_lateness`` is in
    event-time units, ``epoch_of`` maps event time to epochs). Accumulators and keys
    cross processes when bins move: msgpack types (a list comes back as a tuple).
    ``late(record)``: called with each ``Late``; they are on ``.late`` as well.
    ``control``: Megaphone commands (None: the cluster's rebalancer)."""
    check_windower(windower)
    for fn, what in ((key, "key"), (event_time, "event_time"), (fold, "fold")):
        _require(fn, what, name)
    if merge is not None:
        _require(merge, "merge", name)
    elif not windower.fixed:
        raise TypeError(f"{name}: {windower!r} merges sessions a record bridges: pass merge=(acc, acc) -> acc")
    if finish is not None:
        _require(finish, "finish", name)
    if late is not None:
        _require(late, "late", name)
    lateness = check_number(allowed_lateness, f"{name}: allowed_lateness", non_negative=True)
    clock = as_clock(epoch_of)
    functions = Functions(name, key, event_time, init, fold, merge, finish, lateness, clock)
    keeper = FixedWindows(windower, functions) if windower.fixed else Sessions(windower, functions)

    def make_apply(states, out, schedule):
        held = states.bins

        def apply(t, cap, entries, bins_due, _combined):
            per_bin: dict = {}          # bin -> its runs of records (lists, or tuples from afar)
            for _i, runs, records in entries:
                for b, these in bin_slices(runs, records):
                    found = per_bin.get(b)
                    if found is None:
                        per_bin[b] = [these]
                    else:
                        found.append(these)
            due: dict = {}
            for b in bins_due:
                bin = held.get(b)
                found = bin.pending.pop(t, None) if bin is not None else None
                if found:
                    due[b] = found
            emitted: list = []
            binlog = states.log
            for b in sorted(per_bin.keys() | due.keys()):
                bin = held.get(b)
                if bin is None:
                    raise _missing_bin(states, b)
                state = bin.state
                changed: list = []
                closing: list = []
                records = per_bin.get(b)
                if records:
                    keeper.absorb(state, records, t, schedule(b, cap), changed, closing, emitted)
                for _input, skey in due.get(b, ()):
                    keeper.close(state, skey, t, emitted, changed)
                for skey in closing:
                    keeper.close(state, skey, t, emitted, changed)
                if binlog is not None:
                    binlog.touch(b, changed)
                    if b in due:
                        binlog.touch_bin(b)     # its pending notifications changed
            if emitted:
                out.give_batch(cap, emitted)
        return apply

    results = stateful_epochs(stream, key, name, make_apply, bins, control=control)
    windows, late_records = _split(results, name, late is not None)
    if late is not None:
        late_records = late_records.inspect(late)
    return WindowStream(windows, late_records)


def _split(stream: Stream, name: str, handled: bool) -> tuple[Stream, Stream]:
    """The operator's output split into windows and ``Late`` records; warns, once per
    epoch, of late records that nothing reads (no ``late=``, nothing on ``.late``)."""
    builder = stream.scope.operator(f"{name} Late")
    builder.set_notify(False)
    port = builder.new_input(stream, Pipeline())
    (wout, windows), (lout, late) = builder.new_output(), builder.new_output()
    warned = {"time": None}

    def constructor(caps):
        for cap in caps:
            cap.drop()

        def logic():
            for time, records in port.batches():
                found = [r for r in records if type(r) is Late]
                if not found:
                    wout.give_unchecked(time, records)
                    continue
                rest = [r for r in records if type(r) is not Late]
                if rest:
                    wout.give_unchecked(time, rest)
                lout.give_unchecked(time, found)
                if not handled and not late.tee.pushers and warned["time"] != time:
                    warned["time"] = time
                    log.warning("%s: %d late record(s) at epoch %s, e.g. %s (read them from the "
                                "window stream's .late, or pass late=)", name, len(found), time, found[0].reason)
        return logic
    builder.build(constructor)
    return windows, late


def reduce_window(stream: Stream, windower: Windower, reducer: Callable[[Any, Any], Any], *,
                  key: Callable[[Any], Any], event_time: Callable[[Any], Any],
                  value: Optional[Callable[[Any], Any]] = None, **options: Any) -> WindowStream:
    """Per key and window, ``reducer(a, b)`` over the records' values (``value(record)``,
    default the record; not None), emitted as ``(key, Window, reduced)``; sessions merge
    with ``reducer`` too. ``options``: as ``window``."""
    _require(reducer, "reducer", options.get("name", "ReduceWindow"))
    get = value if value is not None else (lambda r: r)

    def fold(acc, record):
        v = get(record)
        return v if acc is None else reducer(acc, v)

    def merge(a, b):
        return a if b is None else b if a is None else reducer(a, b)
    options.setdefault("name", "ReduceWindow")
    return window(stream, windower, key=key, event_time=event_time, fold=fold, init=None, merge=merge, **options)


def collect_window(stream: Stream, windower: Windower, *, key: Callable[[Any], Any],
                   event_time: Callable[[Any], Any], value: Optional[Callable[[Any], Any]] = None,
                   **options: Any) -> WindowStream:
    """Per key and window, the list of its records' values (``value(record)``, default
    the record) in event-time order (ties: in the order folded), emitted as ``(key,
    Window, [values])``. ``options``: as ``window``."""
    get = value if value is not None else (lambda r: r)

    def fold(acc, record):
        if type(acc) is not list:       # init, or a tuple once its bin has moved
            acc = list(acc)
        acc.append((event_time(record), get(record)))
        return acc

    def finish(acc):
        return [v for _x, v in sorted(acc, key=lambda p: p[0])]
    options.setdefault("name", "CollectWindow")
    return window(stream, windower, key=key, event_time=event_time, fold=fold, init=(),
                  merge=lambda a, b: list(a) + list(b), finish=finish, **options)
