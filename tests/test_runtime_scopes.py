"""Frontiers, notifications, capabilities and nested scopes, run for real.

Protects:
- ``unary_notify`` delivers each requested time once, in an order consistent with the
  partial order, and only once the input frontier has passed it; with int epochs, with
  pair timestamps (``dataflow(minimum=(0, 0))``), and inside an iterative scope;
- an operator holding a capability holds back every downstream frontier (on every
  worker) until it downgrades or drops it; capability misuse raises CapabilityError;
- iterative scopes: a loop that runs exactly k rounds, whose output leaves at the outer
  epoch it entered at, with exchanges inside and several workers; nested loops; loops
  over pair timestamps; a feedback loop in the root scope;
- regions pass data and frontiers through unchanged;
- building errors: loop_variable outside an iterative scope, entering a scope that is
  not a child, leaving the root, an input from another scope, a loop connected twice.
"""
from __future__ import annotations

from collections import Counter

import pytest

from bounded import execute_bounded
from timely import CapabilityError, Exchange, Pipeline
from timely.progress.timestamp import less_equal, less_than

WORKERS = (1, 3)


# ---- helpers ----------------------------------------------------------------------------


def notify_logic(log, pass_through=True):
    """A unary_notify logic: asks to be notified once per time it sees; at each
    notification logs (time, the input frontier then, records seen for that time)."""
    counts: dict = {}

    def logic(input, output, notificator):
        for cap, records in input:
            if cap.time not in counts:
                notificator.notify_at(cap.retain())
            counts[cap.time] = counts.get(cap.time, 0) + len(records)
            if pass_through:
                output.give_batch(cap, list(records))
        for cap in notificator:
            log.append((cap.time, input.frontier.frontier(), counts.pop(cap.time, 0),
                        input.frontier.less_equal(cap.time)))
    return logic


def assert_partial_order_respected(times):
    """No time is delivered after a time strictly greater than it."""
    for i, earlier in enumerate(times):
        for later in times[i + 1:]:
            assert not less_than(later, earlier), f"{later} delivered after {earlier}"


def tagger(cap, info):
    """unary constructor: records become (record, time)."""
    cap.drop()

    def logic(input, output):
        for c, records in input:
            output.give_batch(c, [(r, c.time) for r in records])
    return logic


def only_times(predicate):
    """unary constructor: passes batches whose time satisfies ``predicate``."""
    def constructor(cap, info):
        cap.drop()

        def logic(input, output):
            for c, records in input:
                if predicate(c.time):
                    output.give_batch(c, list(records))
        return logic
    return constructor


# ---- notifications ------------------------------------------------------------------------
@pytest.mark.parametrize("workers", WORKERS)
def test_unary_notify_once_per_time_in_order_after_the_frontier_passed(workers):
    epochs = 5

    def build(worker):
        log: list = []

        def dataflow(scope):
            handle, stream = scope.new_input()
            out = stream.unary_notify(Exchange(lambda r: r), "Notify", [], notify_logic(log))
            return handle, out.probe()

        handle, probe = worker.dataflow(dataflow)
        held_back = []
        for epoch in range(epochs):
            if epoch != 2:                       # epoch 2 has no records: no notification
                handle.send_batch([epoch * 10 + i for i in range(workers * 2)])
            handle.flush()
            for _ in range(10):                  # not advanced yet: epoch is not complete
                worker.step()
            held_back.append(any(t == epoch for t, *_ in log))
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
        handle.close()
        worker.step_while(lambda: not probe.done())
        return held_back, log

    results = execute_bounded(workers, build)
    per_time: Counter = Counter()
    for held_back, log in results:
        assert held_back == [False] * epochs
        times = [t for t, *_ in log]
        assert times == sorted(set(times)), "a time notified twice or out of order"
        for time, frontier, count, frontier_le in log:
            assert not frontier_le, f"notified at {time} while the frontier was {frontier}"
            per_time[time] += count
    # every record was counted before its time's notification, on the worker it went to
    assert per_time == Counter({e: workers * workers * 2 for e in range(epochs) if e != 2})


@pytest.mark.parametrize("workers", WORKERS)
def test_unary_notify_initial_times_without_data(workers):
    def build(worker):
        log: list = []

        def dataflow(scope):
            handle, stream = scope.new_input()
            out = stream.unary_notify(Pipeline(), "Init", [5, 2], notify_logic(log))
            return handle, out.probe()

        handle, probe = worker.dataflow(dataflow)
        handle.advance_to(3)
        worker.step_while(lambda: probe.less_than(3))
        at_3 = [t for t, *_ in log]
        handle.advance_to(6)
        worker.step_while(lambda: probe.less_than(6))
        at_6 = [t for t, *_ in log]
        handle.close()
        return at_3, at_6, log

    for at_3, at_6, log in execute_bounded(workers, build):
        assert at_3 == [2]
        assert at_6 == [2, 5]
        assert all(not le for *_, le in log)


def test_unary_notify_delivers_requests_made_out_of_order_in_time_order():
    def build(worker):
        log: list = []

        def dataflow(scope):
            handle, stream = scope.new_input()

            def logic(input, output, notificator):
                for cap, records in input:
                    for t in records:
                        notificator.notify_at(cap.delayed(t))
                for cap in notificator:
                    log.append((cap.time, input.frontier.frontier()))
            stream.unary_notify(Pipeline(), "Delayed", [], logic)
            return handle

        handle = worker.dataflow(dataflow)
        handle.send_batch([3, 1, 7, 2])
        handle.advance_to(3)
        for _ in range(20):
            worker.step()
        partial = list(log)
        handle.close()
        worker.run()
        return partial, log

    [(partial, log)] = execute_bounded(1, build)
    assert partial == [(1, [3]), (2, [3])]
    assert [t for t, _ in log] == [1, 2, 3, 7]
    assert [f for _, f in log[2:]] == [[], []]


def test_unary_notify_coalesces_repeated_requests_for_one_time():
    """Requesting a notification at t once per received batch (timely's idiom) yields
    one notification at t, as in timely's Notificator."""
    def build(worker):
        seen: list = []

        def dataflow(scope):
            handle, stream = scope.new_input()

            def logic(input, output, notificator):
                for cap, records in input:
                    notificator.notify_at(cap.retain())
                for cap in notificator:
                    seen.append(cap.time)
            stream.unary_notify(Pipeline(), "Repeat", [], logic)
            return handle

        handle = worker.dataflow(dataflow)
        handle.send_batch([1])
        handle.send_batch([2])                   # two batches at time 0
        handle.advance_to(1)
        handle.close()
        worker.run()
        return seen

    assert execute_bounded(1, build) == [[0]]


@pytest.mark.parametrize("workers", WORKERS)
def test_unary_notify_with_pair_timestamps(workers):
    steps = [(0, 0), (1, 0), (1, 3), (2, 3)]

    def build(worker):
        log: list = []

        def dataflow(scope):
            handle, stream = scope.new_input()
            out = stream.unary_notify(Exchange(lambda r: r[1]), "Pairs", [], notify_logic(log))
            return handle, out.probe(), out.capture()

        handle, probe, captured = worker.dataflow(dataflow, minimum=(0, 0))
        assert handle.time() == (0, 0)
        progress = []
        for now, nxt in zip(steps, steps[1:] + [(5, 5)]):
            handle.send_batch([(now, worker.index * 10 + i) for i in range(3)])
            handle.advance_to(nxt)
            worker.step_while(lambda: probe.less_than(nxt))
            for _ in range(10):
                worker.step()
            progress.append((nxt, probe.frontier(), sorted({t for t, *_ in log})))
        # The partial order, not Python's tuple order, decides what is complete.
        at_55 = (probe.less_equal((5, 5)), probe.less_equal((6, 4)), probe.less_than((5, 6)),
                 probe.less_than((5, 5)))
        with pytest.raises(CapabilityError):
            handle.advance_to((6, 0))            # not >= (5, 5): cannot go there
        handle.close()
        worker.step_while(lambda: not probe.done())
        return progress, at_55, log, captured.by_time()

    results = execute_bounded(workers, build)
    notified: Counter = Counter()
    for index, (progress, at_55, log, by_time) in enumerate(results):
        for nxt, frontier, _ in progress:
            assert frontier == [nxt]
        assert at_55 == (True, False, True, False)
        times = [t for t, *_ in log]
        assert len(times) == len(set(times))
        assert_partial_order_respected(times)
        for time, frontier, count, frontier_le in log:
            assert not frontier_le, f"notified at {time} while the frontier was {frontier}"
            notified[time] += count
        for time, records in by_time.items():
            assert all(r[0] == time for r in records)   # records keep their pair time
    assert notified == Counter({t: 3 * workers for t in steps})
    # each worker saw a notification only once the input had moved past that time
    for progress, *_ in results:
        for (nxt, _, seen_then) in progress:
            assert all(not less_equal(nxt, t) for t in seen_then)


@pytest.mark.parametrize("workers", WORKERS)
def test_binary_notify_with_one_lagging_input(workers):
    def build(worker):
        log: list = []

        def dataflow(scope):
            h1, s1 = scope.new_input()
            h2, s2 = scope.new_input()

            def logic(in1, in2, output, notificator):
                for port in (in1, in2):
                    for cap, _ in port:
                        notificator.notify_at(cap.retain())
                for cap in notificator:
                    log.append((cap.time, in1.frontier.less_equal(cap.time),
                                in2.frontier.less_equal(cap.time)))
            out = s1.binary_notify(s2, Pipeline(), Pipeline(), "Both", [0, 1], logic)
            return h1, h2, out.probe()

        h1, h2, probe = worker.dataflow(dataflow)
        h1.advance_to(4)
        for _ in range(20):
            worker.step()
        before = list(log)
        h2.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        for _ in range(20):
            worker.step()
        middle = list(log)
        h1.close()
        h2.close()
        worker.run()
        return before, middle, log

    for before, middle, log in execute_bounded(workers, build):
        assert before == []
        assert [t for t, *_ in middle] == [0]
        assert log == [(0, False, False), (1, False, False)]


# ---- capabilities -------------------------------------------------------------------------
@pytest.mark.parametrize("workers", WORKERS)
def test_a_held_capability_holds_back_downstream_frontiers(workers):
    def build(worker):
        state: dict = {"held": None, "command": None}

        def dataflow(scope):
            handle, stream = scope.new_input()

            def constructor(cap, info):
                cap.drop()
                state["activate"] = info.activator(worker)

                def logic(input, output):
                    for c, records in input:
                        if state["held"] is None:
                            state["held"] = c.retain()
                        output.give_batch(c, list(records))
                    command, state["command"] = state["command"], None
                    if command is not None:
                        if command[0] == "downgrade":
                            state["held"].downgrade(command[1])
                            output.give(state["held"], "from held")
                        else:
                            state["held"].drop()
                return logic
            held = stream.unary(Pipeline(), "Hold", constructor)
            return handle, held.map(lambda r: r).probe(), held.capture()

        handle, probe, captured = worker.dataflow(dataflow)
        handle.advance_to(1)
        if worker.index == 0:
            handle.send("x")                     # worker 0 retains a capability at 1
        handle.advance_to(6)
        observed = {}
        if worker.index == 0:
            worker.step_while(lambda: state["held"] is None or probe.less_than(1))
            for _ in range(30):
                worker.step()
            observed["held"] = probe.frontier()
            state["command"] = ("downgrade", 3)
            state["activate"]()
            worker.step_while(lambda: probe.less_than(3))
            for _ in range(30):
                worker.step()
            observed["downgraded"] = probe.frontier()
            state["command"] = ("drop",)
            state["activate"]()
        worker.step_while(lambda: probe.less_than(6))
        observed["dropped"] = probe.frontier()
        handle.close()
        worker.step_while(lambda: not probe.done())
        return observed, captured.by_time()

    results = execute_bounded(workers, build)
    for index, (observed, by_time) in enumerate(results):
        assert observed["dropped"] == [6]
        if index == 0:
            assert observed["held"] == [1]
            assert observed["downgraded"] == [3]
            assert by_time == {1: ["x"], 3: ["from held"]}
        else:
            assert by_time == {}


@pytest.mark.parametrize("workers", WORKERS)
def test_the_constructor_capability_holds_the_minimum_until_dropped(workers):
    def build(worker):
        state: dict = {}

        def dataflow(scope):
            handle, stream = scope.new_input()

            def constructor(cap, info):
                state["cap"] = cap
                state["activate"] = info.activator(worker)

                def logic(input, output):
                    for c, records in input:
                        output.give_batch(c, list(records))
                    if state.get("release") and state["cap"] is not None:
                        output.give(state["cap"], "initial")
                        state["cap"].drop()
                        state["cap"] = None
                return logic
            out = stream.unary(Pipeline(), "Initial", constructor)
            return handle, out.probe(), out.capture()

        handle, probe, captured = worker.dataflow(dataflow)
        handle.advance_to(4)
        for _ in range(30):
            worker.step()
        stuck = probe.frontier()
        state["release"] = True
        state["activate"]()
        worker.step_while(lambda: probe.less_than(4))
        handle.close()
        worker.step_while(lambda: not probe.done())
        return stuck, captured.by_time()

    for stuck, by_time in execute_bounded(workers, build):
        assert stuck == [0]
        assert by_time == {0: ["initial"]}


def test_capability_misuse_raises_capability_error():
    def build(worker):
        outcomes: dict = {}
        shared: dict = {}

        def attempt(name, fn):
            try:
                fn()
                outcomes[name] = "ok"
            except CapabilityError:
                outcomes[name] = "CapabilityError"

        def dataflow(scope):
            handle, stream = scope.new_input()

            def other(cap, info):
                shared["foreign"] = cap          # a capability of another operator

                def logic(input, output):
                    for _ in input:
                        pass
                    if input.frontier.is_empty():
                        cap.drop()
                return logic

            stream.unary(Pipeline(), "Other", other)

            def constructor(cap, info):
                cap.drop()

                def logic(input, output):
                    for c, records in input:
                        t = c.time
                        attempt("input delayed earlier", lambda: c.delayed(t - 1))
                        attempt("input delayed later", lambda: c.delayed(t + 1).drop())
                        held = c.retain()
                        attempt("delayed earlier", lambda: held.delayed(t - 1))
                        attempt("downgrade earlier", lambda: held.downgrade(t - 1))
                        attempt("give_batch before the capability",
                                lambda: output.give_batch(held, ["x"], time=t - 1))
                        attempt("give_batch at a later time",
                                lambda: output.give_batch(held, ["later"], time=t + 2))
                        attempt("give with a foreign capability",
                                lambda: output.give(shared["foreign"], "x"))
                        held.drop()
                        held.drop()              # idempotent
                        attempt("give with a dropped capability", lambda: output.give(held, "x"))
                        attempt("give_batch with a dropped capability",
                                lambda: output.give_batch(held, ["x"]))
                        attempt("delayed from a dropped capability", lambda: held.delayed(t + 1))
                        attempt("downgrade a dropped capability", lambda: held.downgrade(t + 1))
                return logic
            out = stream.unary(Pipeline(), "Misuse", constructor)
            return handle, out.capture()

        handle, captured = worker.dataflow(dataflow)
        handle.advance_to(5)
        handle.send("go")
        handle.flush()
        worker.step_while(lambda: not outcomes)
        handle.close()
        worker.run()
        return outcomes, captured.by_time()

    [(outcomes, by_time)] = execute_bounded(1, build)
    assert outcomes == {
        "input delayed earlier": "CapabilityError",
        "input delayed later": "ok",
        "delayed earlier": "CapabilityError",
        "downgrade earlier": "CapabilityError",
        "give_batch before the capability": "CapabilityError",
        "give_batch at a later time": "ok",
        "give with a foreign capability": "CapabilityError",
        "give with a dropped capability": "CapabilityError",
        "give_batch with a dropped capability": "CapabilityError",
        "delayed from a dropped capability": "CapabilityError",
        "downgrade a dropped capability": "CapabilityError",
    }
    assert by_time == {7: ["later"]}


def test_pair_capabilities_only_move_forward_in_the_partial_order():
    def build(worker):
        outcomes: dict = {}

        def dataflow(scope):
            handle, stream = scope.new_input()

            def constructor(cap, info):
                def logic(input, output):
                    for _ in input:
                        pass
                    if cap.time == (0, 0) and not outcomes:
                        c = cap.delayed((1, 2))
                        for name, target in (("(2,1)", (2, 1)), ("(0,5)", (0, 5)),
                                             ("(1,1)", (1, 1)), ("(2,2)", (2, 2)),
                                             ("(1,2)", (1, 2))):
                            try:
                                c.delayed(target).drop()
                                outcomes[name] = "ok"
                            except CapabilityError:
                                outcomes[name] = "CapabilityError"
                        c.drop()
                        cap.drop()
                return logic
            stream.unary(Pipeline(), "Pairs", constructor)
            return handle

        handle = worker.dataflow(dataflow, minimum=(0, 0))
        handle.close()
        worker.run()
        return outcomes

    [outcomes] = execute_bounded(1, build)
    assert outcomes == {"(2,1)": "CapabilityError", "(0,5)": "CapabilityError",
                        "(1,1)": "CapabilityError", "(2,2)": "ok", "(1,2)": "ok"}


# ---- iterative scopes ---------------------------------------------------------------------
def rounds_loop(stream, k, key=None):
    """An iterative scope in which every record circulates exactly ``k`` times; returns
    the leaving stream of (record, inner time) observed in the last round, and the
    stream of (record, inner time) for every round (left too)."""
    def inner(scope):
        handle, loop = scope.loop_variable(1)
        body = stream.enter(scope).concat(loop)
        if key is not None:
            body = body.exchange(key)
        tagged = body.unary(Pipeline(), "Tag", tagger)
        body.unary(Pipeline(), "Again", only_times(lambda t: t[-1] < k)).connect_loop(handle)
        last = tagged.filter(lambda p: p[1][-1] == k)
        return last.leave(), tagged.leave()
    return stream.scope.iterative(inner)


@pytest.mark.parametrize("workers", WORKERS)
def test_iterative_loop_runs_exactly_k_rounds_and_leaves_at_the_outer_epoch(workers):
    k = 4

    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            last, every = rounds_loop(stream, k, key=lambda r: r)
            return handle, last.capture(), every.capture(), last.probe()

        handle, last, every, probe = worker.dataflow(dataflow)
        complete_at = []
        for epoch in range(3):
            handle.send_batch([epoch * 100 + worker.index * 10 + i for i in range(2)])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
            complete_at.append({t: sorted(v) for t, v in last.by_time().items()})
        handle.close()
        worker.step_while(lambda: not probe.done())
        return complete_at, last.batches, every.batches

    results = execute_bounded(workers, build)
    sent = {e: [e * 100 + w * 10 + i for w in range(workers) for i in range(2)] for e in range(3)}
    last_all = [(t, p) for _, batches, _ in results for t, rs in batches for p in rs]
    assert Counter(last_all) == Counter((e, (r, (e, k))) for e in sent for r in sent[e])
    every_all = [(t, p) for _, _, batches in results for t, rs in batches for p in rs]
    assert Counter(every_all) == Counter((e, (r, (e, j)))
                                         for e in sent for r in sent[e] for j in range(k + 1))
    # once a worker's probe passed epoch e, all of e's output had reached that worker
    for complete_at, batches, _ in results:
        final: dict = {}
        for t, rs in batches:
            final.setdefault(t, []).extend(rs)
        for epoch in range(3):
            assert complete_at[epoch].get(epoch) == (sorted(final[epoch]) if epoch in final else None)
            assert all(t <= epoch for t in complete_at[epoch])


@pytest.mark.parametrize("workers", WORKERS)
def test_notifications_inside_an_iterative_scope(workers):
    k = 3

    def build(worker):
        log: list = []

        def dataflow(scope):
            handle, stream = scope.new_input()

            def inner(sc):
                loop_handle, loop = sc.loop_variable(1)
                body = stream.enter(sc).concat(loop)
                notified = body.unary_notify(Exchange(lambda r: r), "Inner", [], notify_logic(log))
                notified.unary(Pipeline(), "Again", only_times(lambda t: t[1] < k)).connect_loop(loop_handle)
                return notified.leave()
            out = scope.iterative(inner)
            return handle, out.probe()

        handle, probe = worker.dataflow(dataflow)
        for epoch in range(2):
            handle.send_batch([epoch * 10 + worker.index, epoch * 10 + worker.index + 5])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
        handle.close()
        worker.step_while(lambda: not probe.done())
        return log

    results = execute_bounded(workers, build)
    counts: Counter = Counter()
    for log in results:
        times = [t for t, *_ in log]
        assert len(times) == len(set(times))
        assert_partial_order_respected(times)
        assert times == sorted(times)          # int epochs: rounds of an epoch in order
        for time, frontier, count, frontier_le in log:
            assert not frontier_le, f"notified at {time} while the frontier was {frontier}"
            counts[time] += count
    assert counts == Counter({(e, r): 2 * workers for e in range(2) for r in range(k + 1)})


def test_iterative_scope_over_pair_timestamps():
    def build(worker):
        log: list = []

        def dataflow(scope):
            handle, stream = scope.new_input()

            def inner(sc):
                loop_handle, loop = sc.loop_variable(1)
                body = stream.enter(sc).concat(loop)
                notified = body.unary_notify(Pipeline(), "N", [], notify_logic(log))
                notified.unary(Pipeline(), "Again", only_times(lambda t: t[-1] < 2)).connect_loop(loop_handle)
                return notified.unary(Pipeline(), "Tag", tagger).leave()
            out = scope.iterative(inner)
            return handle, out.capture()

        handle, captured = worker.dataflow(dataflow, minimum=(0, 0))
        handle.send("a")
        handle.advance_to((1, 0))
        handle.send("b")
        handle.advance_to((1, 3))
        handle.send("c")
        handle.close()
        worker.run()
        return log, captured.by_time()

    [(log, by_time)] = execute_bounded(1, build)
    times = [t for t, *_ in log]
    outer = [(0, 0), (1, 0), (1, 3)]
    assert sorted(times) == sorted(o + (r,) for o in outer for r in range(3))
    assert_partial_order_respected(times)
    assert all(not le for *_, le in log)
    assert {t: sorted(v) for t, v in by_time.items()} == {
        (0, 0): [("a", (0, 0, r)) for r in range(3)],
        (1, 0): [("b", (1, 0, r)) for r in range(3)],
        (1, 3): [("c", (1, 3, r)) for r in range(3)],
    }


def test_nested_iterative_scopes_count_both_loops():
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()

            def outer(sc1):
                h1, l1 = sc1.loop_variable(1)
                b1 = stream.enter(sc1).concat(l1)

                def inner(sc2):
                    h2, l2 = sc2.loop_variable(1)
                    b2 = b1.enter(sc2).concat(l2)
                    b2.unary(Pipeline(), "Inner", only_times(lambda t: t[2] < 2)).connect_loop(h2)
                    return b2.unary(Pipeline(), "Tag", tagger).leave()
                res = sc1.iterative(inner)
                b1.unary(Pipeline(), "Outer", only_times(lambda t: t[1] < 1)).connect_loop(h1)
                return res.leave()
            out = scope.iterative(outer)
            return handle, out.capture()

        handle, captured = worker.dataflow(dataflow)
        handle.advance_to(3)
        handle.send("x")
        handle.close()
        worker.run()
        return captured.by_time()

    [by_time] = execute_bounded(1, build)
    assert list(by_time) == [3]
    assert sorted(by_time[3]) == sorted(("x", (3, i, j)) for i in range(2) for j in range(3))


@pytest.mark.parametrize("workers", WORKERS)
def test_feedback_loop_in_the_root_scope(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            loop_handle, loop = scope.feedback(1)
            body = stream.concat(loop).exchange(lambda x: x)
            body.filter(lambda x: x > 0).map(lambda x: x - 1).connect_loop(loop_handle)
            return handle, body.capture()

        handle, captured = worker.dataflow(dataflow)
        if worker.index == 0:
            handle.send_batch([3, 5])
        handle.close()
        worker.run()
        return captured.batches

    results = execute_bounded(workers, build)
    got = Counter((t, r) for batches in results for t, rs in batches for r in rs)
    # x counts down by one per trip round the loop, each trip one epoch later
    assert got == Counter([(i, 3 - i) for i in range(4)] + [(i, 5 - i) for i in range(6)])


# ---- regions ------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", WORKERS)
def test_region_passes_data_and_frontiers_unchanged(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            outside = stream.probe()

            def region(r):
                entered = stream.enter(r)
                inside_probe = entered.probe()
                inner = entered.exchange(lambda x: x).map(lambda x: x * 2)
                return inside_probe, inner.leave()
            inside, left = scope.region(region)
            return handle, outside, inside, left.probe(), left.capture()

        handle, outside, inside, after, captured = worker.dataflow(dataflow)
        frontiers = []
        for epoch in range(3):
            handle.send_batch([epoch * 10 + worker.index])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: after.less_than(epoch + 1))
            frontiers.append((outside.frontier(), inside.frontier(), after.frontier()))
        handle.close()
        worker.step_while(lambda: not after.done())
        frontiers.append((outside.frontier(), inside.frontier(), after.frontier()))
        return frontiers, captured.batches

    results = execute_bounded(workers, build)
    for frontiers, _ in results:
        assert frontiers == [([1], [1], [1]), ([2], [2], [2]), ([3], [3], [3]), ([], [], [])]
    got = Counter((t, r) for _, batches in results for t, rs in batches for r in rs)
    assert got == Counter((e, 2 * (e * 10 + w)) for e in range(3) for w in range(workers))


def test_region_inside_an_iterative_scope_keeps_inner_times():
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()

            def inner(sc):
                loop_handle, loop = sc.loop_variable(1)
                body = stream.enter(sc).concat(loop)
                through = sc.region(lambda r: body.enter(r).unary(Pipeline(), "Tag", tagger).leave())
                body.unary(Pipeline(), "Again", only_times(lambda t: t[1] < 2)).connect_loop(loop_handle)
                return through.leave()
            return handle, scope.iterative(inner).capture()

        handle, captured = worker.dataflow(dataflow)
        handle.advance_to(7)
        handle.send("r")
        handle.close()
        worker.run()
        return captured.by_time()

    [by_time] = execute_bounded(1, build)
    assert {t: sorted(v) for t, v in by_time.items()} == {7: [("r", (7, i)) for i in range(3)]}


# ---- building errors ----------------------------------------------------------------------
def _building_error(fn):
    """The message of the ValueError that building ``fn(scope)`` raises (or None)."""
    def build(worker):
        try:
            worker.dataflow(fn)
        except ValueError as e:
            return str(e)
        return None
    [message] = execute_bounded(1, build)
    assert message is not None, "building did not raise ValueError"
    return message


def test_loop_variable_needs_an_iterative_scope():
    assert "iterative" in _building_error(lambda scope: scope.loop_variable(1))
    assert "iterative" in _building_error(
        lambda scope: scope.region(lambda r: r.loop_variable(1)))


def test_enter_needs_a_child_scope_and_leave_a_parent():
    def enter_grandchild(scope):
        s = scope.to_stream([1])
        scope.region(lambda r: r.region(lambda rr: s.enter(rr)))

    assert "not a child" in _building_error(enter_grandchild)
    assert "root" in _building_error(lambda scope: scope.to_stream([1]).leave())


def test_an_operator_cannot_read_a_stream_of_another_scope():
    def use_outer_stream_inside(scope):
        s = scope.to_stream([1])
        scope.region(lambda r: s.map(lambda x: x).concat(r.to_stream([2])))

    assert "enter/leave" in _building_error(use_outer_stream_inside)


def test_a_loop_connects_once():
    def connect_twice(scope):
        def inner(sc):
            handle, loop = sc.loop_variable(1)
            loop.connect_loop(handle)
            loop.connect_loop(handle)
        scope.iterative(inner)

    assert "already connected" in _building_error(connect_twice)
