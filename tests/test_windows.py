"""Event-time windows (``timely.windows``) on worker threads in one process.

Protects what a user of ``stream.window`` relies on:

- exactness against a plain Python oracle, for each windower (tumbling, sliding,
  sessions), random records arriving at random epochs (some late, some early), random
  allowed lateness, event times as epochs or in ``Epochs(length, origin)``, on 1-3
  workers while Megaphone moves bins at random epochs: every window's result, at the
  epoch that closes it, and every late record, with the windows it missed;
- a window is emitted once the frontier passes its closing epoch, not at the end;
- closed windows hold no state: once the frontier has passed every closing epoch the
  bins hold no key and no notification, and a long run with a steady key set keeps
  both flat;
- sessions merge when a record bridges two;
- ``reduce_window`` and ``collect_window``;
- late records nobody reads are logged, not dropped silently;
- bad input gets errors naming the problem (window length <= 0, ``every > length``,
  an event time that is not a number, sessions without ``merge``, negative lateness).

The fixed windows' fold runs in both twins (``windows_twin``: Cython and pure Python).
"""
from __future__ import annotations

import logging
import math
import random
from collections import Counter
from contextlib import contextmanager
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bounded import execute_bounded
from test_megaphone import close_epoch, finish

from timely.config import Config
from timely.megaphone.bins import bin_of, bin_shift, stable_hash64
from timely.megaphone.control import Map, Move
from timely.megaphone.state import StatefulError
from timely.windows import Epochs, Session, Sliding, Tumbling, Window
from timely.windows import open as opened

TIMEOUT = 60
BINS = 16
TWIN_NEEDS = ("windows",)


# ---- the oracle: plain Python, no timely ----------------------------------------------------
def last_before(x, clock):
    """The greatest epoch holding an event time below ``x`` (exact, by Fraction)."""
    length, origin = clock
    return math.ceil(Fraction(x - origin) / Fraction(length)) - 1


def epoch_of(x, clock):
    length, origin = clock
    return math.floor(Fraction(x - origin) / Fraction(length))


def fixed_windows(x, length, every, origin):
    """Every ``[s, s + length)`` with ``s = origin + k * every`` holding ``x``, by search."""
    k = math.floor(Fraction(x - origin) / Fraction(every))
    found = []
    while True:
        s = origin + k * every
        if s + length <= x:
            return sorted(found)
        if s <= x:
            found.append((s, s + length))
        k -= 1


def oracle(records, kind, params, lateness, clock):
    """``(windows, late)``: Counters of ``(epoch, key, (start, end), (count, sum))`` and of
    ``(epoch, key, event time, ((start, end), ...))``. ``records``: ``(epoch, key, x, value)``."""
    windows: dict = {}
    late = Counter()
    if kind in ("tumbling", "sliding"):
        length, every, origin = params
        for t, k, x, v in records:
            missed = []
            for w in fixed_windows(x, length, every, origin):
                c = last_before(w[1] + lateness, clock)
                if t > c:
                    missed.append(w)
                    continue
                n, total = windows.get((c, k, w), (0, 0))
                windows[(c, k, w)] = (n + 1, total + v)
            if missed:
                late[(t, k, x, tuple(missed))] += 1
        return Counter((c, k, w, acc) for (c, k, w), acc in windows.items()), late
    # sessions: the connected components of the on-time records' [x, x + gap)
    (gap,) = params
    on_time: dict = {}
    for t, k, x, v in records:
        if epoch_of(x + lateness, clock) < t:
            late[(t, k, x, ((x, x + gap),))] += 1
        else:
            on_time.setdefault(k, []).append((x, v))
    out = Counter()
    for k, items in on_time.items():
        items.sort()
        start, end, n, total = None, None, 0, 0
        for x, v in items:
            if start is not None and x < end:
                end, n, total = max(end, x + gap), n + 1, total + v
                continue
            if start is not None:
                out[(last_before(end + lateness, clock), k, (start, end), (n, total))] += 1
            start, end, n, total = x, x + gap, 1, v
        out[(last_before(end + lateness, clock), k, (start, end), (n, total))] += 1
    return out, late


# ---- the dataflow under test ---------------------------------------------------------------
@contextmanager
def twin_in_use(twin):
    """The window operator folds fixed windows with ``twin``'s ``absorb_fixed`` meanwhile."""
    before = opened.absorb_fixed
    opened.absorb_fixed = twin.absorb_fixed
    try:
        yield
    finally:
        opened.absorb_fixed = before


def make_windower(kind, params):
    if kind == "tumbling":
        return Tumbling(params[0], origin=params[2])
    if kind == "sliding":
        return Sliding(params[0], params[1], origin=params[2])
    return Session(params[0])


def count_sum(acc, record):
    return acc[0] + 1, acc[1] + record[3]


def merge_counts(a, b):
    return a[0] + b[0], a[1] + b[1]


def run_windows(workers, records, kind, params, lateness, clock, epochs, moves=None, sync=True,
                worker_mode="threads"):
    """Run a window operator over ``records`` (``(epoch, key, x, value)``), each sent by
    worker ``hash % workers`` at its epoch; ``moves``: ``{epoch: [Move]}`` sent by
    worker 0. Returns per worker ``(windows Counter, late Counter, keys and pending
    notifications left)``."""
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            csource, control = scope.new_input() if moves is not None else (None, None)
            out = stream.window(make_windower(kind, params), key=lambda r: r[1], event_time=lambda r: r[2],
                                fold=count_sum, init=(0, 0), merge=merge_counts, allowed_lateness=lateness,
                                epoch_of=None if clock == (1, 0) else Epochs(*clock), bins=BINS,
                                control=control)
            return source, csource, out.capture(), out.late.capture(), out.probe()

        source, csource, captured, late, probe = worker.dataflow(dataflow)
        inputs = [h for h in (source, csource) if h is not None]
        for epoch in range(epochs):
            source.send_batch([r for i, r in enumerate(records) if r[0] == epoch and i % worker.peers == worker.index])
            if csource is not None and worker.index == 0:
                csource.send_batch(moves.get(epoch, []))
            if sync:
                close_epoch(worker, probe, epoch, *inputs)
            else:
                for handle in inputs:
                    handle.advance_to(epoch + 1)
        finish(worker, *inputs)
        got = Counter((t, k, tuple(w), tuple(acc)) for t, rs in captured.by_time().items() for k, w, acc in rs)
        lates = Counter((t, r.key, r.event_time, tuple(tuple(w) for w in r.windows))
                        for t, rs in late.by_time().items() for r in rs)
        assert all(r.time == t and r.reason for t, rs in late.by_time().items() for r in rs)
        states = worker.stateful_states[0]
        left = (states.keys(), sum(len(b.pending) for b in states.bins.values()))
        return got, lates, left
    return execute_bounded(Config(workers=workers, worker_mode=worker_mode), build, timeout=TIMEOUT)


def check(results, records, kind, params, lateness, clock):
    want_windows, want_late = oracle(records, kind, params, lateness, clock)
    got_windows, got_late = Counter(), Counter()
    for windows, lates, left in results:
        got_windows += windows
        got_late += lates
        assert left == (0, 0), f"state left once every window closed: {left}"
    assert got_windows == want_windows
    assert got_late == want_late


@st.composite
def scenarios(draw):
    kind = draw(st.sampled_from(["tumbling", "sliding", "session"]))
    if draw(st.booleans()):
        clock = (1, 0)                              # event times are epochs
    else:
        clock = (draw(st.integers(2, 7)), draw(st.integers(-20, 20)))
    if kind == "tumbling":
        length = draw(st.integers(1, 12))
        params = (length, length, draw(st.integers(-5, 5)))
    elif kind == "sliding":
        every = draw(st.integers(1, 6))
        params = (every * draw(st.integers(1, 4)) + draw(st.integers(0, every - 1)), every, draw(st.integers(-5, 5)))
    else:
        params = (draw(st.integers(1, 9)),)
    # event times: ints, on the half (floats, exact), or thirds (Fractions: Python's own arithmetic)
    numbers = draw(st.sampled_from(["ints", "halves", "thirds"]))
    halves = numbers == "halves"
    lateness = draw(st.sampled_from([0, 0, 1, 3])) + (0.5 if halves and draw(st.booleans()) else 0)
    epochs = draw(st.integers(2, 8))
    workers = draw(st.integers(1, 3))
    rng = random.Random(draw(st.integers(0, 2**32)))
    keys = ["a", "b", 7, ("t", 1)][:draw(st.integers(1, 4))]
    records = []
    length, origin = clock
    for _ in range(draw(st.integers(0, 60))):
        t = rng.randrange(epochs)
        # mostly in its epoch's event times, some behind (late or not), a few ahead
        x = origin + t * length + rng.choice([0, 0, 0, 1, -1, -2, -length * 2, -length * 4, length, 2])
        if halves:
            x += 0.5 * rng.randrange(2)
        elif numbers == "thirds":
            x += Fraction(rng.randrange(3), 3)
        records.append((t, rng.choice(keys), x, rng.randrange(10)))
    moves = None
    if workers > 1 and draw(st.booleans()):
        moves = {}
        for e in range(epochs):
            targets = {rng.randrange(BINS): rng.randrange(workers) for _ in range(rng.randrange(3))}
            moves[e] = [Move(b, w) for b, w in targets.items()]     # one target per bin and time
    return workers, records, kind, params, lateness, clock, epochs, moves, draw(st.booleans())


@settings(max_examples=max(20, settings().max_examples // 6))     # (ci: 66 per twin; nightly: 1,666)
@given(scenarios())
def test_windows_equal_the_oracle_on_any_workers_across_moves(windows_twin, scenario):
    workers, records, kind, params, lateness, clock, epochs, moves, sync = scenario
    with twin_in_use(windows_twin):
        results = run_windows(workers, records, kind, params, lateness, clock, epochs, moves, sync)
    check(results, records, kind, params, lateness, clock)


@pytest.mark.parametrize("kind, params", [("sliding", (6, 2, 1)), ("session", (3,))])
def test_windows_equal_the_oracle_on_forked_workers_moving_bins(windows_twin, kind, params):
    """Workers as processes: records and bins (open windows, notifications) cross as msgpack."""
    rng = random.Random(5)
    records = [(t, rng.choice("abcdefg"), t + rng.choice([0, 0, 1, -1, -3, -7]), rng.randrange(5))
               for t in range(12) for _ in range(15)]
    moves = {e: [Move(b, (b + e) % 3) for b in range(e % 5, BINS, 5)] for e in range(1, 12, 2)}
    with twin_in_use(windows_twin):
        results = run_windows(3, records, kind, params, 2, (1, 0), 12, moves, worker_mode="processes")
    check(results, records, kind, params, 2, (1, 0))


# ---- when windows close, and what they leave behind ---------------------------------------------
def test_a_window_is_emitted_once_the_frontier_passes_its_close_and_its_state_is_freed():
    """Tumbling(10) over epochs as event times: window [0, 10) is out once epoch 9 is
    complete, while the input is still open, and the bins then hold nothing for it;
    once the input has advanced past every window's end (still open), they hold no key
    and no notification at all."""
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            out = stream.window(Tumbling(10), key=lambda r: r[0], event_time=lambda r: r[1],
                                fold=lambda n, r: n + 1, init=0, bins=BINS)
            return source, out.capture(), out.probe()
        source, captured, probe = worker.dataflow(dataflow)
        states = worker.stateful_states[0]
        seen = []
        for epoch in range(13):
            if worker.index == 0:
                source.send_batch([(k, epoch) for k in ("a", "b", "c")])
            source.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(source.time()))
            closed = sorted(r for t, rs in captured.by_time().items() for r in rs)
            seen.append((epoch, len(closed), states.keys()))
        source.advance_to(100)                  # past every end; the input stays open
        worker.step_while(lambda: probe.less_than(source.time()))
        after = (states.keys(), sum(len(b.pending) for b in states.bins.values()),
                 sorted(r for rs in captured.by_time().values() for r in rs), sorted(captured.by_time()))
        source.close()
        worker.run()
        return seen, after
    results = execute_bounded(Config(workers=2, worker_mode="threads"), build, timeout=TIMEOUT)
    for epoch in (8, 9, 10):
        closed = sum(seen[epoch][1] for seen, _ in results)
        keys = sum(seen[epoch][2] for seen, _ in results)
        # up to epoch 8: [0, 10) open (3 keys); from epoch 9 on it is out and freed; from
        # epoch 10 on, [10, 20) is open (3 keys)
        assert (closed, keys) == {8: (0, 3), 9: (3, 0), 10: (3, 3)}[epoch], (epoch, results)
    for _seen, (keys, pending, windows, times) in results:
        assert (keys, pending) == (0, 0)
    everything = sorted(w for _s, after in results for w in after[2])
    assert everything == sorted([(k, Window(0, 10), 10) for k in "abc"] + [(k, Window(10, 20), 3) for k in "abc"])
    assert sorted({t for _s, after in results for t in after[3]}) == [9, 19]


def held_times(worker, operator):
    """The times at which ``worker`` holds capabilities of the operator named ``operator``."""
    from timely.rescaling.leave import subgraphs
    found = set()
    for index in worker.dataflows():
        for scope in subgraphs(worker.dataflow_subgraph(index)):
            found.update(t for (loc, t), c in scope.held
                         if c and getattr(scope.children[loc.node], "name", None) == operator)
    return found


def test_a_worker_whose_bins_moved_away_holds_nothing_for_their_windows():
    """Windows of 100 epochs open on both workers; at epoch 2 every bin moves to worker 0
    (as a leaver's do). Worker 1 then holds no capability for the windows' closing epoch
    (99): it could leave at once, not when the windows close; worker 0 holds it, and
    every window comes out once, on worker 0."""
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            csource, control = scope.new_input()
            out = stream.window(Tumbling(100), key=lambda r: r[0], event_time=lambda r: r[1],
                                fold=lambda n, r: n + 1, init=0, bins=BINS, control=control, name="Long")
            return source, csource, out.capture(), out.probe()
        source, csource, captured, probe = worker.dataflow(dataflow)
        for epoch in range(5):
            if epoch < 2:
                source.send_batch([(f"k{i}", epoch) for i in range(worker.index, 20, 2)])
            if epoch == 2 and worker.index == 0:
                csource.send_batch([Map([0] * BINS)])
            close_epoch(worker, probe, epoch, source, csource)
        held = held_times(worker, "Long")
        finish(worker, source, csource)
        return held, [(t, r) for t, rs in captured.by_time().items() for r in rs]
    [(held0, out0), (held1, out1)] = execute_bounded(Config(workers=2, worker_mode="threads"), build,
                                                     timeout=TIMEOUT)
    assert held0 == {99} and held1 == set(), (held0, held1)
    assert out1 == [] and sorted(out0) == sorted((99, (f"k{i}", Window(0, 100), 2)) for i in range(20))


def test_memory_stays_flat_over_a_long_run_with_a_steady_key_set():
    """200 epochs, 50 keys, sliding windows: the keys (with their open windows) and
    notifications held never exceed what the open windows need, and drop to zero at the
    end."""
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            out = stream.window(Sliding(8, 4), key=lambda r: r[0], event_time=lambda r: r[1],
                                fold=lambda n, r: n + 1, init=0, bins=BINS)
            return source, out.probe()
        source, probe = worker.dataflow(dataflow)
        states = worker.stateful_states[0]
        held = []
        for epoch in range(200):
            source.send_batch([(f"k{i}", epoch) for i in range(worker.index, 50, worker.peers)])
            source.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(source.time()))
            held.append((states.keys(), sum(len(p) for b in states.bins.values() for p in b.pending.values())))
        source.close()
        worker.run()
        return held, states.keys()
    results = execute_bounded(Config(workers=2, worker_mode="threads"), build, timeout=TIMEOUT)
    per_epoch = [tuple(map(sum, zip(*(r[0][e] for r in results)))) for e in range(200)]
    # after each epoch, each key holds the windows still open (length 8, every 4: two,
    # or one right after a window closed with the epoch), one notification each
    assert per_epoch == [(50, 50) if e % 4 == 3 else (50, 100) for e in range(200)], per_epoch
    assert [r[1] for r in results] == [0, 0]


def test_sessions_merge_when_a_record_bridges_two():
    """Gap 5: records at 0 and 8 open two sessions; 4 at a later epoch (still on time:
    lateness 10) bridges them into one [0, 13); a record at 30 is a session of its own."""
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            out = stream.collect_window(Session(5), key=lambda r: r[0], event_time=lambda r: r[1],
                                        value=lambda r: r[1], allowed_lateness=10)
            return source, out.capture()
        source, captured = worker.dataflow(dataflow)
        source.send_batch([("a", 0), ("a", 8)])
        source.advance_to(9)
        source.send_batch([("a", 4), ("a", 30)])
        source.close()
        worker.run()
        return sorted((t, r) for t, rs in captured.by_time().items() for r in rs)
    [got] = execute_bounded(1, build, timeout=TIMEOUT)
    # [0, 13) closes once epoch 22 (the last before 13 + 10) is complete
    assert got == [(22, ("a", Window(0, 13), [0, 4, 8])), (44, ("a", Window(30, 35), [30]))]


def test_reduce_and_collect_windows():
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            key, at = (lambda r: r[0]), (lambda r: r[1])
            sums = stream.reduce_window(Tumbling(5), lambda a, b: a + b, key=key, event_time=at,
                                        value=lambda r: r[2])
            lists = stream.collect_window(Sliding(4, 2), key=key, event_time=at, value=lambda r: r[2])
            return source, sums.capture(), lists.capture()
        source, sums, lists = worker.dataflow(dataflow)
        source.send_batch([("a", 3, 1), ("a", 1, 2), ("b", 4, 3), ("a", 6, 4)])
        source.close()
        worker.run()
        flat = lambda c: sorted(r for rs in c.by_time().values() for r in rs)  # noqa: E731
        return flat(sums), flat(lists)
    [(sums, lists)] = execute_bounded(1, build, timeout=TIMEOUT)
    assert sums == [("a", Window(0, 5), 3), ("a", Window(5, 10), 4), ("b", Window(0, 5), 3)]
    assert lists == [("a", Window(-2, 2), [2]), ("a", Window(0, 4), [2, 1]), ("a", Window(2, 6), [1]),
                     ("a", Window(4, 8), [4]), ("a", Window(6, 10), [4]),
                     ("b", Window(2, 6), [3]), ("b", Window(4, 8), [3])]


def test_a_function_epoch_of_maps_event_times_like_epochs():
    """``epoch_of`` as a function (minutes here) closes windows where ``Epochs(60)`` does."""
    def run(epoch_of):
        def build(worker):
            def dataflow(scope):
                source, stream = scope.new_input()
                out = stream.window(Sliding(90, 30), key=lambda r: r[0], event_time=lambda r: r[1],
                                    fold=lambda n, r: n + 1, init=0, epoch_of=epoch_of)
                return source, out.capture(), out.late.capture()
            source, captured, late = worker.dataflow(dataflow)
            for epoch in range(4):
                source.send_batch([("p", epoch * 60 + s) for s in (0, 29, 59)] + [("p", epoch * 60 - 20)])
                source.advance_to(epoch + 1)
            source.close()
            worker.run()
            return (sorted((t, r) for t, rs in captured.by_time().items() for r in rs),
                    sorted((t, r.event_time, r.windows) for t, rs in late.by_time().items() for r in rs))
        return execute_bounded(1, build, timeout=TIMEOUT)[0]
    by_function = run(lambda x: int(x // 60))
    assert by_function == run(Epochs(60))
    windows, late = by_function
    # [-60, 30) holds 0, 29 and -20 of epoch 0, and closes with it
    assert (0, ("p", Window(-60, 30), 3)) in windows
    # event time 100 at epoch 2: [30, 120) closed with epoch 1 (119 is its last second);
    # [60, 150) and [90, 180) are open and count it
    assert (2, 100, (Window(30, 120),)) in late and len(late) == 4
    assert (2, ("p", Window(60, 150), 6)) in windows         # 60, 89, 119; 120, 149, 100


def test_late_records_go_to_the_late_stream_and_the_callback_with_a_reason():
    seen = []

    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            out = stream.window(Tumbling(5), key=lambda r: r[0], event_time=lambda r: r[1],
                                fold=lambda n, r: n + 1, init=0, late=seen.append)
            return source, out.capture(), out.late.capture()
        source, captured, late = worker.dataflow(dataflow)
        source.send_batch([("a", 1)])
        source.advance_to(7)
        source.send_batch([("a", 2), ("a", 7)])         # 2 is late: [0, 5) closed at epoch 4
        source.close()
        worker.run()
        return (sorted(r for rs in captured.by_time().values() for r in rs),
                [(t, r) for t, rs in late.by_time().items() for r in rs])
    [(windows, late)] = execute_bounded(1, build, timeout=TIMEOUT)
    assert windows == [("a", Window(0, 5), 1), ("a", Window(5, 10), 1)]
    [(t, record)] = late
    assert (t, record.key, record.event_time, record.record, record.time, record.windows) == \
        (7, "a", 2, ("a", 2), 7, (Window(0, 5),))
    assert "closed once epoch 4 was complete" in record.reason and "came at epoch 7" in record.reason
    assert seen == [record]


def test_late_records_nobody_reads_are_logged_not_dropped_silently(caplog):
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            out = stream.window(Tumbling(5), key=lambda r: r[0], event_time=lambda r: r[1],
                                fold=lambda n, r: n + 1, init=0, name="Clicks")
            return source, out.probe()
        source, _probe = worker.dataflow(dataflow)
        source.advance_to(9)
        source.send_batch([("a", 2), ("b", 3)])
        source.close()
        worker.run()
    with caplog.at_level(logging.WARNING, logger="timely.windows"):
        execute_bounded(1, build, timeout=TIMEOUT)
    found = [r.getMessage() for r in caplog.records if r.name == "timely.windows"]
    assert len(found) == 1 and found[0].startswith("Clicks: 2 late record(s) at epoch 9"), found
    assert ".late" in found[0]


# ---- errors that name the problem ---------------------------------------------------------------
@pytest.mark.parametrize("make, error, message", [
    (lambda: Tumbling(0), ValueError, "Tumbling: length must be > 0, got 0"),
    (lambda: Tumbling(-3), ValueError, "Tumbling: length must be > 0, got -3"),
    (lambda: Tumbling("10"), TypeError, "Tumbling: length must be a number, got '10'"),
    (lambda: Sliding(10, 20), ValueError, "Sliding: every (20) must be <= length (10)"),
    (lambda: Sliding(10, 0), ValueError, "Sliding: every must be > 0, got 0"),
    (lambda: Session(float("nan")), ValueError, "Session: gap must be finite, got nan"),
    (lambda: Epochs(0), ValueError, "Epochs: length must be > 0, got 0"),
])
def test_bad_windowers_are_refused_by_name(make, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def build_with(**options):
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            args = dict(key=lambda r: r[0], event_time=lambda r: r[1], fold=lambda n, r: n + 1, init=0)
            args.update(options)
            windower = args.pop("windower", Tumbling(5))
            out = stream.window(windower, name="Clicks", **args)
            return source, out.probe()
        source, _ = worker.dataflow(dataflow)
        source.send_batch([("a", 1), ("b", "12:00")])
        source.close()
        worker.run()
    return build


@pytest.mark.parametrize("options, error, message", [
    ({"windower": Session(3)}, TypeError, "Clicks: Session(3) merges sessions a record bridges: pass merge="),
    ({"allowed_lateness": -1}, ValueError, "Clicks: allowed_lateness must be >= 0, got -1"),
    ({"windower": "tumbling"}, TypeError, "window: expected a windower (Tumbling, Sliding or Session), got 'tumbling'"),
    ({"fold": 3}, TypeError, "Clicks: fold must be a function, got 3"),
    ({"epoch_of": 60}, TypeError, "epoch_of must be an Epochs or a function event time -> epoch, got 60"),
])
def test_bad_window_arguments_are_refused_when_the_dataflow_is_built(options, error, message):
    with pytest.raises(error) as e:
        execute_bounded(1, build_with(**options), timeout=TIMEOUT)
    assert message in str(e.value)


@pytest.mark.parametrize("windower", [Tumbling(5), Tumbling(5.0), Session(5)], ids=["ints", "floats", "session"])
@pytest.mark.parametrize("bad, message", [("12:00", "event time must be a number, got '12:00' (str)"),
                                          (float("nan"), "event time must be finite, got nan"),
                                          (float("-inf"), "event time must be finite, got -inf")])
def test_an_event_time_that_is_not_a_finite_number_is_a_stateful_error_naming_it(windows_twin, windower, bad,
                                                                                   message):
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            out = stream.window(windower, key=lambda r: r[0], event_time=lambda r: r[1], fold=lambda n, r: n + 1,
                                init=0, merge=lambda a, b: a + b, name="Clicks")
            return source, out.probe()
        source, _ = worker.dataflow(dataflow)
        source.send_batch([("a", 1), ("b", bad)])
        source.close()
        worker.run()
    with pytest.raises(StatefulError) as e, twin_in_use(windows_twin):
        execute_bounded(1, build, timeout=TIMEOUT)
    assert f"Clicks: event_time returned {bad!r} for record ('b', {bad!r})" in str(e.value)
    assert message in str(e.value)


def test_a_failing_fold_is_a_stateful_error_naming_the_key_and_time(windows_twin):
    def fold(n, r):
        if r[0] == "b":
            raise KeyError("boom")
        return n + 1
    with pytest.raises(StatefulError) as e, twin_in_use(windows_twin):
        execute_bounded(1, build_with(fold=fold, event_time=lambda r: 1), timeout=TIMEOUT)
    assert "Clicks: fold failed for key 'b' at time 0: KeyError: 'boom'" in str(e.value)


def test_keys_of_a_bin_hash_where_megaphone_routes_them():
    """(a check of the test's own assumption: the oracle and the operator route by the
    same stable hash, so moving a bin moves exactly its keys' windows)"""
    assert bin_of(stable_hash64("a"), bin_shift(BINS)) == bin_of(stable_hash64("a"), bin_shift(BINS))
