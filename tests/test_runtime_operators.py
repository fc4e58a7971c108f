"""The operator library, run for real on 1 and on several worker threads.

Protects: what each operator does to records and their timestamps (map, flat_map,
filter, map_batch, inspect, inspect_batch, exchange, broadcast, concat, partition,
accumulate, count, to_stream, unary, binary, binary_notify, probe, probe_with, capture),
where records end up across workers (Pipeline keeps them local, Exchange routes every record to
exactly one worker chosen by its key, Broadcast copies every record to every worker),
and the errors users get for misuse (a partition route out of range, sending on a
closed input, moving an input back in time).

Every computation runs under ``execute_bounded``: a hang is a test failure, not a
stuck suite.
"""
from __future__ import annotations

from collections import Counter

import pytest

from bounded import execute_bounded  # noqa: E402

import timely
from timely import CapabilityError, Exchange, Pipeline

WORKERS = (1, 3)


# ---- helpers ----------------------------------------------------------------------------


def feed(worker, handle, probe, epochs):
    """Send ``epochs[e]`` at epoch e, advance past it and wait for ``probe``; then close."""
    for epoch, records in enumerate(epochs):
        handle.send_batch(records)
        handle.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(handle.time()))
    handle.close()


def worker_records(index, epochs=3, per_epoch=7):
    """Distinct records for one worker: (worker, epoch, i)."""
    return [[(index, e, i) for i in range(per_epoch)] for e in range(epochs)]


def all_records(peers, epochs=3, per_epoch=7):
    return [r for w in range(peers) for batch in worker_records(w, epochs, per_epoch) for r in batch]


def timed(captured):
    """Every (time, record) a capture saw."""
    return [(t, r) for t, rs in captured.batches for r in rs]


# ---- record-at-a-time transforms ----------------------------------------------------------
@pytest.mark.parametrize("workers", WORKERS)
def test_map_flat_map_filter_map_batch_transform_records_and_keep_times(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            outs = {
                "map": stream.map(lambda r: (r, "m")),
                "flat_map": stream.flat_map(lambda r: [r] * (r[2] % 3)),
                "filter": stream.filter(lambda r: r[2] % 2 == 0),
                "map_batch": stream.map_batch(lambda rs: [len(rs)] + list(reversed(rs))),
            }
            caps = {name: s.capture() for name, s in outs.items()}
            return handle, caps, stream.probe()

        handle, caps, probe = worker.dataflow(dataflow)
        feed(worker, handle, probe, worker_records(worker.index))
        return {name: timed(c) for name, c in caps.items()}

    results = execute_bounded(workers, build)
    for index, got in enumerate(results):
        mine = [(e, r) for e, batch in enumerate(worker_records(index)) for r in batch]
        # Pipeline: every worker transforms exactly its own records, at their own times.
        assert got["map"] == [(t, (r, "m")) for t, r in mine]
        assert got["flat_map"] == [(t, r) for t, r in mine for _ in range(r[2] % 3)]
        assert got["filter"] == [(t, r) for t, r in mine if r[2] % 2 == 0]
        expected_batches = [(e, [len(b)] + list(reversed(b)))
                            for e, b in enumerate(worker_records(index))]
        assert [(t, r) for t, rs in expected_batches for r in rs] == got["map_batch"]


@pytest.mark.parametrize("workers", WORKERS)
def test_inspect_sees_every_record_and_passes_it_on(workers):
    seen: dict = {}
    seen_batches: dict = {}

    def build(worker):
        mine = seen.setdefault(worker.index, [])
        batches = seen_batches.setdefault(worker.index, [])

        def dataflow(scope):
            handle, stream = scope.new_input()
            out = (stream.inspect(mine.append)
                         .inspect_batch(lambda t, rs: batches.append((t, list(rs)))))
            return handle, out.capture(), out.probe()

        handle, captured, probe = worker.dataflow(dataflow)
        feed(worker, handle, probe, worker_records(worker.index))
        return timed(captured)

    results = execute_bounded(workers, build)
    for index in range(workers):
        expected = [(e, r) for e, b in enumerate(worker_records(index)) for r in b]
        assert seen[index] == [r for _, r in expected]
        assert [(t, r) for t, rs in seen_batches[index] for r in rs] == expected
        assert results[index] == expected
    assert Counter(r for w in seen.values() for r in w) == Counter(all_records(workers))


# ---- routing ------------------------------------------------------------------------------
@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("how", ["stream.exchange", "unary Exchange pact"])
def test_exchange_routes_every_record_to_exactly_one_worker_by_key(workers, how):
    key = lambda r: r[2] * 7 + r[1]   # noqa: E731 - many distinct int keys

    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            if how == "stream.exchange":
                routed = stream.exchange(key)
            else:
                def constructor(cap, info):
                    cap.drop()

                    def logic(input, output):
                        for c, records in input:
                            output.give_batch(c, list(records))
                    return logic
                routed = stream.unary(Exchange(key), "Route", constructor)
            return handle, routed.capture(), routed.probe()

        handle, captured, probe = worker.dataflow(dataflow)
        feed(worker, handle, probe, worker_records(worker.index))
        return timed(captured)

    results = execute_bounded(workers, build)
    # The records seen per worker partition the input: each record exactly once overall.
    union = Counter(r for got in results for _, r in got)
    assert union == Counter(all_records(workers))
    # Each record keeps its time.
    for got in results:
        assert all(t == r[1] for t, r in got)
    # A key determines one worker.
    owner: dict = {}
    for index, got in enumerate(results):
        for _, r in got:
            assert owner.setdefault(key(r), index) == index
    if workers > 1:
        assert sum(1 for got in results if got) > 1, "exchange sent everything to one worker"


@pytest.mark.parametrize("workers", WORKERS)
def test_broadcast_delivers_every_record_to_every_worker(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            out = stream.broadcast()
            return handle, out.capture(), out.probe()

        handle, captured, probe = worker.dataflow(dataflow)
        feed(worker, handle, probe, worker_records(worker.index))
        return timed(captured)

    results = execute_bounded(workers, build)
    expected = Counter((r[1], r) for r in all_records(workers))
    for got in results:
        assert Counter(got) == expected


@pytest.mark.parametrize("workers", WORKERS)
def test_broadcast_input_frontier_does_not_pass_a_time_with_records_still_to_deliver(workers):
    """An operator after ``broadcast`` must never be handed a batch at a time its input
    frontier says is finished (the safety property of progress tracking)."""
    epochs = 20

    def build(worker):
        late: list = []

        def dataflow(scope):
            handle, stream = scope.new_input()

            def constructor(cap, info):
                cap.drop()

                def logic(input, output):
                    for c, records in input:
                        if not input.frontier.less_equal(c.time):
                            late.append((c.time, input.frontier.frontier()))
                        output.give_batch(c, list(records))
                return logic
            return handle, stream.broadcast().unary(Pipeline(), "Check", constructor).probe()

        handle, probe = worker.dataflow(dataflow)
        for epoch in range(epochs):
            handle.send_batch(range(worker.index + 1))
            handle.advance_to(epoch + 1)
        handle.close()
        return late

    results = execute_bounded(workers, build)
    assert results == [[] for _ in range(workers)]


@pytest.mark.parametrize("workers", WORKERS)
def test_broadcast_progress_accounting_balances(workers):
    """With ``check_progress`` the runtime verifies its own counts: a broadcast must
    leave none behind (every copy delivered is a copy produced)."""
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            return handle, stream.broadcast().capture()

        handle, captured = worker.dataflow(dataflow)
        if worker.index == 0:
            handle.send_batch([1, 2])
        handle.close()
        return captured

    results = execute_bounded(timely.Config(workers=workers, check_progress=True), build)
    assert [sorted(c.records()) for c in results] == [[1, 2]] * workers


@pytest.mark.parametrize("workers", WORKERS)
def test_concat_merges_several_streams_keeping_times(workers):
    def build(worker):
        def dataflow(scope):
            inputs = [scope.new_input() for _ in range(3)]
            first, *rest = [s for _, s in inputs]
            merged = first.concat(*rest)
            return [h for h, _ in inputs], merged.capture(), merged.probe()

        handles, captured, probe = worker.dataflow(dataflow)
        for epoch in range(3):
            for k, handle in enumerate(handles):
                if (k + epoch) % 2 == 0:        # not every stream has data every epoch
                    handle.send_batch([(worker.index, k, epoch, i) for i in range(k + 1)])
                handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
        for handle in handles:
            handle.close()
        return timed(captured)

    results = execute_bounded(workers, build)
    for index, got in enumerate(results):
        expected = Counter((e, (index, k, e, i)) for e in range(3) for k in range(3)
                           if (k + e) % 2 == 0 for i in range(k + 1))
        assert Counter(got) == expected


def test_concat_of_a_stream_with_itself_duplicates_it():
    def build(worker):
        def dataflow(scope):
            s = scope.to_stream([1, 2])
            return s.concat(s, s).capture()
        return worker.dataflow(dataflow)

    [captured] = execute_bounded(1, build)
    assert sorted(captured.records()) == [1, 1, 1, 2, 2, 2]
    assert captured.done()


@pytest.mark.parametrize("workers", WORKERS)
def test_partition_routes_each_record_to_its_part(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            parts = stream.partition(3, lambda r: (r[2] % 3, (r, r[2] % 3)))
            return handle, [p.capture() for p in parts], stream.probe()

        handle, caps, probe = worker.dataflow(dataflow)
        feed(worker, handle, probe, worker_records(worker.index))
        return [timed(c) for c in caps]

    results = execute_bounded(workers, build)
    for index, parts in enumerate(results):
        mine = [(e, r) for e, b in enumerate(worker_records(index)) for r in b]
        for part, got in enumerate(parts):
            assert got == [(t, (r, part)) for t, r in mine if r[2] % 3 == part]


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("bad_part", [3, -1])
def test_partition_route_out_of_range_raises_from_execute(workers, bad_part):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            parts = stream.partition(3, lambda r: (bad_part if r == "bad" else 0, r))
            return handle, parts[0].probe()

        handle, probe = worker.dataflow(dataflow)
        handle.send_batch(["ok", "bad"] if worker.index == workers - 1 else ["ok"])
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        handle.close()

    with pytest.raises(ValueError, match=rf"part {bad_part}\b"):
        execute_bounded(workers, build)


def test_partition_needs_at_least_one_part():
    def build(worker):
        worker.dataflow(lambda scope: scope.to_stream([1]).partition(0, lambda r: (0, r)))

    with pytest.raises(ValueError, match="at least one part"):
        execute_bounded(1, build)


@pytest.mark.parametrize("workers", WORKERS)
def test_to_stream_gives_each_worker_its_records_at_the_minimum_time(workers):
    def build(worker):
        def dataflow(scope):
            return scope.to_stream(range(worker.index, worker.index + 5)).capture()
        return worker.dataflow(dataflow)

    results = execute_bounded(workers, build)
    for index, captured in enumerate(results):
        assert timed(captured) == [(0, r) for r in range(index, index + 5)]
        assert captured.done()


# ---- generic operators --------------------------------------------------------------------
@pytest.mark.parametrize("workers", WORKERS)
def test_unary_with_exchange_pact_counts_per_key_per_time(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()

            def constructor(cap, info):
                assert info.worker_index == worker.index and info.peers == workers
                cap.drop()

                def logic(input, output):
                    for c, records in input:
                        counts = Counter(r[2] % 4 for r in records)
                        output.give_batch(c, sorted(counts.items()))
                return logic
            out = stream.unary(Exchange(lambda r: r[2] % 4), "CountKeys", constructor)
            return handle, out.capture(), out.probe()

        handle, captured, probe = worker.dataflow(dataflow)
        feed(worker, handle, probe, worker_records(worker.index))
        return timed(captured)

    results = execute_bounded(workers, build)
    totals: Counter = Counter()
    for got in results:
        for t, (k, n) in got:
            totals[(t, k)] += n
    expected = Counter((r[1], r[2] % 4) for r in all_records(workers))
    assert totals == expected


@pytest.mark.parametrize("workers", WORKERS)
def test_accumulate_gives_one_value_per_time_and_worker_once_the_time_is_complete(workers):
    """Each worker folds its own batches of a time (no record moves) and gives the result
    only after the frontier passed that time; a time with no records gives nothing."""
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            seen = stream.accumulate(list, lambda acc, batch: acc + batch)
            counted = stream.count()
            frontier_when_given = []
            probe = seen.inspect_batch(
                lambda t, rs: frontier_when_given.append((t, handle.time()))).probe()
            return handle, seen.capture(), counted.capture(), probe, frontier_when_given

        handle, seen, counted, probe, given = worker.dataflow(dataflow)
        mine = worker_records(worker.index)
        for epoch, records in enumerate(mine):
            handle.send_batch(records[:3])
            worker.step()
            handle.send_batch(records[3:])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(handle.time()))
        handle.advance_to(5)                    # epochs 3 and 4: no records at all
        handle.close()
        worker.run()
        return mine, seen.by_time(), counted.by_time(), given

    for mine, seen, counted, given in execute_bounded(workers, build):
        assert seen == {e: [records] for e, records in enumerate(mine)}
        assert counted == {e: [len(records)] for e, records in enumerate(mine)}
        assert all(t < input_time for t, input_time in given)


@pytest.mark.parametrize("workers", WORKERS)
def test_accumulate_exchange_accumulate_counts_words_like_a_counter(workers):
    """Partial counts per worker, exchanged by word, merged: every word's total per epoch
    on exactly one worker, equal to a plain Counter over all workers' input."""
    def merge(totals, pairs):
        for word, n in pairs:
            totals[word] += n
        return totals

    def count(counts, words):
        counts.update(words)
        return counts

    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            totals = (stream.accumulate(Counter, count)
                      .flat_map(Counter.items)
                      .exchange(lambda pair: pair[0])
                      .accumulate(Counter, merge)
                      .flat_map(Counter.items))
            return handle, totals.capture(), totals.probe()

        handle, captured, probe = worker.dataflow(dataflow)
        feed(worker, handle, probe, [[f"w{(worker.index * 7 + i * i) % 11}" for i in range(40 + e)]
                                     for e in range(3)])
        return timed(captured)

    results = execute_bounded(workers, build)
    got = [(t, word, n) for out in results for t, (word, n) in out]
    assert len(got) == len({(t, word) for t, word, _ in got})      # one total per word and time
    expected = Counter((e, f"w{(w * 7 + i * i) % 11}") for w in range(workers)
                       for e in range(3) for i in range(40 + e))
    assert {(t, word): n for t, word, n in got} == expected


def test_accumulate_refuses_a_default_that_is_not_a_factory():
    def build(worker):
        worker.dataflow(lambda scope: scope.new_input()[1].accumulate(0, lambda n, b: n + len(b)))
    with pytest.raises(TypeError, match="default must be a factory"):
        execute_bounded(1, build)


def test_accumulate_names_a_logic_that_returns_nothing():
    """An in-place update without ``return acc`` would give None as the time's result."""
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            return handle, stream.accumulate(Counter, lambda c, batch: c.update(batch), name="Words").probe()
        handle, probe = worker.dataflow(dataflow)
        handle.send_batch(["a", "b"])
        handle.close()
        worker.step_while(lambda: not probe.done())
    with pytest.raises(TypeError, match="accumulate 'Words': logic returned None"):
        execute_bounded(1, build)


@pytest.mark.parametrize("workers", WORKERS)
def test_binary_reads_both_inputs_at_their_times(workers):
    def build(worker):
        def dataflow(scope):
            h1, s1 = scope.new_input()
            h2, s2 = scope.new_input()

            def constructor(cap, info):
                cap.drop()

                def logic(in1, in2, output):
                    for c, records in in1:
                        output.give_batch(c, [("left", r) for r in records])
                    for c, records in in2:
                        output.give_batch(c, [("right", r) for r in records])
                return logic
            out = s1.binary(s2, Pipeline(), Exchange(lambda r: r), "Tag", constructor)
            return h1, h2, out.capture(), out.probe()

        h1, h2, captured, probe = worker.dataflow(dataflow)
        for epoch in range(3):
            h1.send_batch([(worker.index, epoch, i) for i in range(2)])
            h2.send_batch([worker.index * 100 + epoch * 10 + i for i in range(3)])
            h1.advance_to(epoch + 1)
            h2.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
        h1.close()
        h2.close()
        return timed(captured)

    results = execute_bounded(workers, build)
    left = Counter((t, r) for got in results for t, (side, r) in got if side == "left")
    right = Counter((t, r) for got in results for t, (side, r) in got if side == "right")
    assert left == Counter((e, (w, e, i)) for w in range(workers) for e in range(3) for i in range(2))
    assert right == Counter((e, w * 100 + e * 10 + i)
                            for w in range(workers) for e in range(3) for i in range(3))
    for index, got in enumerate(results):   # Pipeline input 1 stays local
        assert all(r[0] == index for _, (side, r) in got if side == "left")


@pytest.mark.parametrize("workers", WORKERS)
def test_binary_notify_waits_for_both_inputs(workers):
    def build(worker):
        sums: dict = {}
        notified: list = []

        def dataflow(scope):
            h1, s1 = scope.new_input()
            h2, s2 = scope.new_input()

            def logic(in1, in2, output, notificator):
                for port in (in1, in2):
                    for c, records in port:
                        if c.time not in sums:
                            notificator.notify_at(c.retain())
                        sums[c.time] = sums.get(c.time, 0) + sum(records)
                for c in notificator:
                    notified.append((c.time, in1.frontier.frontier(), in2.frontier.frontier()))
                    output.give(c, (c.time, sums.pop(c.time)))
            out = s1.binary_notify(s2, Exchange(lambda r: 0), Exchange(lambda r: 0), "Sum", [], logic)
            return h1, h2, out.capture(), out.probe()

        h1, h2, captured, probe = worker.dataflow(dataflow)
        h1.send_batch([1, 2])
        h2.send_batch([10])
        h1.advance_to(3)                          # input 2 still at 0: nothing is complete
        for _ in range(30):
            worker.step()
        early = list(notified)
        h2.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        h1.close()
        h2.close()
        worker.run()
        return early, notified, timed(captured)

    results = execute_bounded(workers, build)
    for index, (early, notified, got) in enumerate(results):
        assert early == []
        if index == 0:      # everything was routed to worker 0
            assert got == [(0, (0, 3 * workers + 10 * workers))]
            assert [t for t, _, _ in notified] == [0]
            _, f1, f2 = notified[0]
            assert 0 not in f1 and 0 not in f2 and f2 == [1]
        else:
            assert got == [] and notified == []


# ---- observing ----------------------------------------------------------------------------
@pytest.mark.parametrize("workers", WORKERS)
def test_probe_reports_what_may_still_arrive(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            return handle, stream.map(lambda r: r).probe()

        handle, probe = worker.dataflow(dataflow)
        observed = [(probe.frontier(), probe.less_than(0), probe.less_equal(0), probe.done())]
        handle.send(1)
        handle.advance_to(4)
        worker.step_while(lambda: probe.less_than(4))
        observed.append((probe.frontier(), probe.less_than(4), probe.less_equal(4),
                         probe.less_than(5), probe.less_equal(3), probe.done()))
        handle.close()
        worker.step_while(lambda: not probe.done())
        observed.append((probe.frontier(), probe.less_equal(10**9), probe.done()))
        return observed

    for observed in execute_bounded(workers, build):
        assert observed[0] == ([0], False, True, False)
        assert observed[1] == ([4], False, True, True, False, False)
        assert observed[2] == ([], False, True)


def test_activate_after_runs_an_operator_once_its_delay_has_passed_and_not_before():
    """timely's ``activate_after``: an operator asked for later is not scheduled before
    its time (the worker parks meanwhile rather than spinning), and is scheduled once
    the time has come, with nothing else to wake the worker."""
    def build(worker):
        runs, where = [], {}

        def dataflow(scope):
            handle, stream = scope.new_input()

            def constructor(cap, info):
                where["path"] = info.path

                def logic(input, output):
                    for _ in input:
                        pass
                    runs.append(1)
                return logic
            return handle, stream.unary(Pipeline(), "Later", constructor).probe()

        handle, probe = worker.dataflow(dataflow)
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        before = len(runs)
        worker.activations.activate_after(where["path"], 3600)
        for _ in range(5):
            worker.step_or_park()
        not_yet = (len(runs), worker.activations.empty_for() > 3000)
        worker.activations.activate_after(where["path"], 0.05)
        worker.step_while(lambda: len(runs) == before)
        handle.close()
        worker.step_while(lambda: not probe.done())
        return before, not_yet, runs[before:before + 1]

    (before, not_yet, ran), = execute_bounded(1, build)
    assert not_yet == (before, True)
    assert ran == [1]


@pytest.mark.parametrize("workers", WORKERS)
def test_probe_with_one_handle_on_two_streams_reports_the_least_frontier(workers):
    def build(worker):
        def dataflow(scope):
            h1, s1 = scope.new_input()
            h2, s2 = scope.new_input()
            probe = timely.ProbeHandle()
            passed = s1.probe_with(probe)
            s2.probe_with(probe)
            return h1, h2, probe, passed.capture()

        h1, h2, probe, captured = worker.dataflow(dataflow)
        h1.send("a")
        h1.advance_to(5)
        h2.advance_to(2)
        worker.step_while(lambda: probe.less_than(2))
        observed = [probe.frontier(), probe.less_than(3), probe.less_equal(2), probe.less_than(2)]
        h2.advance_to(7)
        worker.step_while(lambda: probe.less_than(5))
        observed.append(probe.frontier())
        h1.close()
        h2.close()
        worker.step_while(lambda: not probe.done())
        observed.append(probe.frontier())
        return observed, timed(captured)

    for index, (observed, got) in enumerate(execute_bounded(workers, build)):
        assert observed[1:4] == [True, True, False]
        assert observed[5] == []
        assert got == [(0, "a")]            # probe_with passes records on unchanged
        # A frontier is an antichain: the least times that may still arrive.
        assert observed[0] == [2]
        assert observed[4] == [5]


@pytest.mark.parametrize("workers", WORKERS)
def test_capture_by_time_and_complete_times(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            return handle, stream.capture(), stream.probe()

        handle, captured, probe = worker.dataflow(dataflow)
        handle.send_batch(["a", "b"])
        handle.advance_to(1)
        handle.send("c")
        handle.advance_to(2)
        handle.send("d")
        handle.flush()
        worker.step_while(lambda: probe.less_than(2))
        while 2 not in captured.by_time():    # "d" at 2 is sent but 2 is not complete
            worker.step()
        mid = (captured.by_time(), captured.complete_times(), captured.frontier(), captured.done())
        handle.close()
        worker.step_while(lambda: not captured.done())
        end = (captured.by_time(), captured.complete_times(), captured.frontier(), captured.done())
        return mid, end

    for mid, end in execute_bounded(workers, build):
        assert mid == ({0: ["a", "b"], 1: ["c"], 2: ["d"]}, {0: ["a", "b"], 1: ["c"]}, [2], False)
        assert end == ({0: ["a", "b"], 1: ["c"], 2: ["d"]},) * 2 + ([], True)


# ---- input handles ------------------------------------------------------------------------
def test_input_handle_send_buffers_until_advance_and_keeps_times():
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            return handle, stream.capture(), stream.probe()

        handle, captured, probe = worker.dataflow(dataflow)
        for i in range(5000):                  # more than one internal buffer's worth
            handle.send(i)
        handle.advance_to(3)
        assert handle.time() == 3
        handle.send("late")
        handle.close()
        worker.step_while(lambda: not probe.done())
        return captured.by_time()

    [by_time] = execute_bounded(1, build)
    assert by_time == {0: list(range(5000)), 3: ["late"]}


def test_input_handle_misuse_is_reported():
    def build(worker):
        handle, stream = worker.dataflow(lambda scope: scope.new_input())
        handle.advance_to(2)
        errors = []
        with pytest.raises(CapabilityError):
            handle.advance_to(1)
        errors.append("back in time")
        handle.close()
        handle.close()                          # idempotent
        with pytest.raises(ValueError):
            handle.send(1)
        with pytest.raises(ValueError):
            handle.send_batch([1])
        with pytest.raises(ValueError):
            handle.advance_to(5)
        with pytest.raises(ValueError):
            handle.time()
        errors.append("closed")
        return errors

    assert execute_bounded(1, build) == [["back in time", "closed"]]
