"""Megaphone (keyed state that migrates live between workers), on worker threads in one process.

Protects what a user of ``state_machine`` / ``stateful_unary`` / ``stateful_binary``
relies on while bins move between workers (the multi-process cluster tests live in
``test_megaphone_cluster.py``):

- exactness: whatever Map/Move commands arrive at whatever times (several at one time,
  a Map and Moves together, moves to every worker, a bin moved back and forth), every
  key's outputs at every time equal those of a 1-worker run without control, on 2-4
  workers and 1-256 bins, with progress checking on; the final state is the expected
  one, each key held by exactly one worker (the owner of its bin in the final routing
  table); and the same holds in Kafka progress mode;
- a notification scheduled by ``stateful_unary`` logic travels with its bin and fires
  exactly once, at its time, on the bin's new owner; notifying at the current or an
  earlier time is refused with ValueError;
- ``stateful_unary`` with ``combine``: the records folded as they arrive give what the
  records give, across moves, notifications' records included;
- ``stateful_binary``: both inputs' records of a key meet one state across moves;
- the errors a user gets: a failing fold (StatefulError naming operator and key, the
  original exception chained, the failing record not applied), timestamps that are
  not ints (TypeError at build time), bad bin counts (ValueError naming bins), and
  bad control commands (ControlError naming the problem, after waiting ``timeout`` for
  a worker that may be joining);
- the planner: ``plan_moves`` balances to within one bin with the fewest moves,
  deterministically; ``migration_steps`` groups moves per strategy; the rebalancer
  moves nothing when nobody joins;
- the ``rebalance`` / ``migration`` settings from arguments, environment and TOML.

Every computation runs under ``execute_bounded``: a hang is a test failure.
"""
from __future__ import annotations

import random
import time as clock
import uuid
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bounded import execute_bounded  # noqa: E402

from timely.config import Config, ConfigError
from timely.megaphone.bins import RoutingTable, bin_of, bin_shift, stable_hash64
from timely.megaphone.control import ControlError, Map, Move, compile_configuration
from timely.megaphone.rebalance import migration_steps, plan_moves
from timely.megaphone.state import StatefulError
from timely.metrics.instruments import operator_numbers

TIMEOUT = 60


# ---- helpers ------------------------------------------------------------------------------
def bin_for(key, bins):
    return bin_of(stable_hash64(key), bin_shift(bins))


def count_fold(key, value, state):
    """Running sum per key; a 0 deletes the key. Outputs ``(key, value, new state)``."""
    if value == 0:
        return None, [(key, 0, None)]
    total = (state or 0) + value
    return total, [(key, value, total)]


def running_total(key, value, state):
    """Running sum per key; outputs ``(key, new state)``."""
    total = (state or 0) + value
    return total, [(key, total)]


def final_table(schedule, bins, workers):
    """The routing table after every epoch's commands, as the F operators compile it."""
    table = RoutingTable.round_robin(bins, workers).table
    for epoch in sorted(schedule):
        commands = [c for _, c in schedule[epoch]]
        if commands:
            table = compile_configuration(table, commands, workers)
    return table


def model(data):
    """What ``count_fold`` must produce: ``{(epoch, key): [outputs]}`` and the final state."""
    state: dict = {}
    outputs: dict = defaultdict(list)
    for epoch, records in enumerate(data):
        for _sender, key, value in records:
            new, outs = count_fold(key, value, state.get(key))
            if new is None:
                state.pop(key, None)
            else:
                state[key] = new
            outputs[(epoch, key)].extend(outs)
    return dict(outputs), state


def run_counts(config, data, schedule, bins, sync=True):
    """Run ``count_fold`` over ``data`` (per epoch, ``[(sender, key, value)]``; the sender
    is taken modulo the worker count) with ``schedule`` (``{epoch: [(sender, command)]}``,
    or None for no control stream). Returns per worker ``(outputs by (time, key),
    snapshot, table, bins held, shipped, received)``."""
    def build(worker):
        peers = worker.peers

        def dataflow(scope):
            source, stream = scope.new_input()
            if schedule is None:
                csource, control = None, None
            else:
                csource, control = scope.new_input()
            out = stream.state_machine(count_fold, control=control, bins=bins, name="Counts")
            return source, csource, out.capture(), out.probe()

        source, csource, captured, probe = worker.dataflow(dataflow)
        for epoch, records in enumerate(data):
            source.send_batch([(k, v) for s, k, v in records if s % peers == worker.index])
            if csource is not None:
                csource.send_batch([c for s, c in schedule.get(epoch, []) if s % peers == worker.index])
                csource.advance_to(epoch + 1)
            source.advance_to(epoch + 1)
            if sync:
                worker.step_while(lambda: probe.less_than(source.time()))
        source.close()
        if csource is not None:
            csource.close()
        worker.run()
        outputs: dict = defaultdict(list)
        for t, records in captured.by_time().items():
            for key, value, total in records:
                outputs[(t, key)].append((key, value, total))
        st_ = worker.stateful_states[0]
        return (dict(outputs), st_.snapshot(), st_.table(), sorted(st_.bins), list(st_.shipped),
                list(st_.received))
    return execute_bounded(config, build, timeout=TIMEOUT)


def check_against_reference(results, data, bins, table):
    """Outputs equal the 1-worker run's (and the model's); the final state is the
    expected dict, each key on the owner of its bin, each bin on exactly one worker."""
    expected_outputs, expected_state = model(data)
    merged: dict = {}
    for w, (outputs, *_rest) in enumerate(results):
        for tk, outs in outputs.items():
            assert tk not in merged, f"{tk} produced output on two workers"
            merged[tk] = outs
    reference = run_counts(Config(workers=1), data, None, bins)
    assert reference[0][0] == expected_outputs
    assert merged == expected_outputs

    union: dict = {}
    for w, (_o, snapshot, tab, held, _s, _r) in enumerate(results):
        assert tab == table, f"worker {w} ended with another routing table"
        assert held == [b for b in range(bins) if table[b] == w], f"worker {w} holds the wrong bins"
        for key, value in snapshot.items():
            assert key not in union, f"key {key!r} is held by two workers"
            assert table[bin_for(key, bins)] == w
            union[key] = value
    assert union == expected_state
    shipped = sum(n for r in results for _t, n, _k in r[4])
    received = sum(n for r in results for _t, n, _k in r[5])
    assert shipped == received


# ---- 1. random schedules of Map / Move commands ----------------------------------------------
KEYS = st.one_of(
    st.text(max_size=4),
    st.integers(-2**63, 2**64 - 1),
    st.tuples(st.sampled_from(["a", "b"]), st.integers(-3, 3)),
    st.tuples(st.integers(0, 2), st.tuples(st.text(max_size=2), st.none())),
)


@st.composite
def scenarios(draw):
    workers = draw(st.integers(2, 4))
    bins = draw(st.sampled_from([1, 4, 16, 256]))
    epochs = draw(st.integers(2, 7))
    pool = draw(st.lists(KEYS, min_size=2, max_size=10, unique=True))
    rng = random.Random(draw(st.integers(0, 2**32)))       # dense data, cheaply
    data = []
    for _ in range(epochs):
        # One sender per key and epoch, so a key's records at one time keep their order.
        senders = [rng.randrange(4) for _ in pool]
        records = [rng.randrange(len(pool)) for _ in range(draw(st.integers(0, 30)))]
        data.append([(senders[i], pool[i], rng.randrange(6)) for i in records])
    key_bins = sorted({bin_for(k, bins) for k in pool})
    a_bin = st.one_of(st.sampled_from(key_bins), st.integers(0, bins - 1))
    a_worker = st.integers(0, workers - 1)
    schedule = {}
    for epoch in range(epochs):
        commands = []
        if draw(st.integers(0, 4)) == 0:
            commands.append(Map(draw(st.lists(a_worker, min_size=bins, max_size=bins))))
        moved: dict = {}
        for b, w in draw(st.lists(st.tuples(a_bin, a_worker), max_size=4)):
            w = moved.setdefault(b, w)      # one target per bin and time (repeats allowed)
            commands.append(Move(b, w))
        if commands:
            schedule[epoch] = [(draw(st.integers(0, 3)), c) for c in commands]
    sync = draw(st.booleans())
    return workers, bins, data, schedule, sync


@settings(max_examples=40)
@given(scenarios())
def test_random_moves_and_maps_give_the_results_of_one_worker(scenario):
    workers, bins, data, schedule, sync = scenario
    results = run_counts(Config(workers=workers, check_progress=True), data, schedule, bins, sync)
    check_against_reference(results, data, bins, final_table(schedule, bins, workers))


# ---- 2. a fixed schedule, in both progress modes ----------------------------------------------
FIXED_BINS = 16


def fixed_data():
    keys = ["w%d" % i for i in range(12)] + list(range(-3, 9)) + [("t", i) for i in range(6)]
    data = []
    for epoch in range(10):
        records = []
        for i in range(60):
            key = keys[(epoch * 7 + i * 13) % len(keys)]
            sender = (epoch + len(repr(key))) % 3       # one sender per key and epoch
            records.append((sender, key, 1 + (i + epoch) % 4))
        data.append(records)
    return data


def fixed_schedule():
    """Several commands at one time, a Map then Moves at one time, a bin moved back and
    forth on consecutive epochs, moves to every worker, and a move at the last epoch."""
    return {
        1: [(0, Move(3, 2)), (1, Move(4, 0)), (2, Move(5, 1))],
        2: [(1, Move(3, 0))],
        3: [(2, Move(3, 2))],
        5: [(0, Map([1] * FIXED_BINS)), (2, Move(0, 2)), (1, Move(7, 0))],
        6: [(0, Move(0, 1)), (0, Move(0, 1))],
        9: [(1, Move(1, 2)), (2, Move(2, 0))],
    }


def test_fixed_schedule_is_exact_and_moves_state():
    data, schedule = fixed_data(), fixed_schedule()
    results = run_counts(Config(workers=3, check_progress=True), data, schedule, FIXED_BINS)
    check_against_reference(results, data, FIXED_BINS, final_table(schedule, FIXED_BINS, 3))
    # State really moved: every worker took bins in and shipped bins out.
    assert all(r[4] and r[5] for r in results)


def test_fixed_schedule_in_kafka_progress_mode_equals_p2p(tansu):
    data, schedule = fixed_data(), fixed_schedule()
    p2p = run_counts(Config(workers=3), data, schedule, FIXED_BINS)
    kafka = run_counts(Config(workers=3, progress_mode="kafka", kafka_bootstrap=tansu.bootstrap,
                              kafka_prefix=f"mega{uuid.uuid4().hex[:10]}"),
                       data, schedule, FIXED_BINS)
    assert [r[:4] for r in kafka] == [r[:4] for r in p2p]
    check_against_reference(kafka, data, FIXED_BINS, final_table(schedule, FIXED_BINS, 3))


# ---- 3. stateful_unary: notifications travel with their bin ------------------------------------
def close_epoch(worker, probe, epoch, *inputs):
    """Advance ``inputs`` past ``epoch`` and step until ``probe`` has passed it."""
    for handle in inputs:
        handle.advance_to(epoch + 1)
    worker.step_while(lambda: probe.less_than(inputs[0].time()))


def finish(worker, *inputs):
    for handle in inputs:
        handle.close()
    worker.run()


def distinct_bin_keys(n, bins):
    keys, seen = [], set()
    i = 0
    while len(keys) < n:
        key = f"k{i}"
        if bin_for(key, bins) not in seen:
            seen.add(bin_for(key, bins))
            keys.append(key)
        i += 1
    return keys


def test_notification_moves_with_its_bin_and_fires_once_on_the_new_owner():
    bins, workers = 16, 2
    still, before, at_due, back_and_forth = distinct_bin_keys(4, bins)
    owner = {k: bin_for(k, bins) % workers for k in (still, before, at_due, back_and_forth)}
    other = {k: 1 - w for k, w in owner.items()}
    schedule = {
        2: [Move(bin_for(before, bins), other[before]),
            Move(bin_for(back_and_forth, bins), other[back_and_forth])],
        3: [Move(bin_for(at_due, bins), other[at_due]),
            Move(bin_for(back_and_forth, bins), owner[back_and_forth])],
    }
    keys = [still, before, at_due, back_and_forth]

    def build(worker):
        me = worker.index

        def logic(time, records, state, notificator, output):
            for key, what in records:
                if what == "later":
                    state[key] = state.get(key, 0) + 1
                    notificator.notify_at(time + 2, (key, "due"))
                elif what == "due":
                    output.append((me, time, key, "due", state.get(key)))
                elif what == "too-early":
                    for t in (time, time - 1):
                        try:
                            notificator.notify_at(t, (key, "never"))
                            output.append((me, time, key, "accepted", t))
                        except ValueError as e:
                            output.append((me, time, key, "refused", str(e)))
                else:
                    output.append((me, time, key, "unexpected", what))

        def dataflow(scope):
            source, stream = scope.new_input()
            csource, control = scope.new_input()
            out = stream.stateful_unary(control, lambda r: r[0], "Notify", logic, bins=bins)
            return source, csource, out.capture(), out.probe()

        source, csource, captured, probe = worker.dataflow(dataflow)
        for epoch in range(6):
            if me == 0:
                if epoch == 1:
                    source.send_batch([(k, "later") for k in keys])
                if epoch == 4:
                    source.send_batch([(still, "too-early")])
                csource.send_batch(schedule.get(epoch, []))
            close_epoch(worker, probe, epoch, source, csource)
        finish(worker, source, csource)
        return [r for _t, rs in captured.batches for r in rs], worker.stateful_states[0].snapshot()

    results = execute_bounded(Config(workers=workers, check_progress=True), build, timeout=TIMEOUT)
    outputs = [r for rs, _ in results for r in rs]
    due = sorted(r for r in outputs if r[3] == "due")
    expected_owner_at_3 = {still: owner[still], before: other[before], at_due: other[at_due],
                           back_and_forth: owner[back_and_forth]}
    # Exactly once each, at time 1 + 2, on the worker owning the bin at time 3, with the
    # state written at time 1 (it moved with the bin).
    assert due == sorted((expected_owner_at_3[k], 3, k, "due", 1) for k in keys)
    refused = [r for r in outputs if r[3] == "refused"]
    assert len(refused) == 2 and all(r[1] == 4 and "later time" in r[4] for r in refused)
    assert not [r for r in outputs if r[3] in ("accepted", "unexpected")]
    final = {}
    for w, (_rs, snapshot) in enumerate(results):
        for key in snapshot:
            assert key not in final
            assert w == expected_owner_at_3[key]
        final.update(snapshot)
    assert final == {k: 1 for k in keys}


def sums(acc, records):
    """``combine``: per key, the sum of the values of its records."""
    acc = {} if acc is None else acc
    for key, value in records:
        acc[key] = acc.get(key, 0) + value
    return acc


def run_totals(config, data, schedule, combine):
    """Per-key running totals with ``stateful_unary``, its logic given the records
    (``combine`` None) or their per-key sums; a sum below 100 divisible by 4 schedules a
    record of 100 for two epochs later. Returns per worker (Counter of outputs, final state)."""
    def logic(time, given, state, notificator, output):
        per_key = given if combine is not None else sums(None, given)
        for key, value in sorted(per_key.items(), key=repr):
            state[key] = state.get(key, 0) + value
            output.append((time, key, state[key]))
            if value < 100 and value % 4 == 0:
                notificator.notify_at(time + 2, (key, 100))

    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            csource, control = scope.new_input()
            out = stream.stateful_unary(control, lambda r: r[0], "Totals", logic, bins=FIXED_BINS,
                                        combine=combine)
            return source, csource, out.capture(), out.probe()

        source, csource, captured, probe = worker.dataflow(dataflow)
        for epoch, records in enumerate(data + [[], []]):
            source.send_batch([(k, v) for s, k, v in records if s % worker.peers == worker.index])
            if worker.index == 0:
                csource.send_batch([c for _, c in schedule.get(epoch, [])])
            close_epoch(worker, probe, epoch, source, csource)
        finish(worker, source, csource)
        return (Counter(r for rs in captured.by_time().values() for r in rs),
                worker.stateful_states[0].snapshot())
    return execute_bounded(config, build, timeout=TIMEOUT)


def test_combined_records_give_what_the_records_give_across_moves():
    """``combine`` folds a bin's records as they arrive, on whichever worker owns the bin
    at their time; notifications' records are combined at their time: the outputs and
    the final state equal those of the logic given the records, on 3 workers with bins
    moving and on 1."""
    data, schedule = fixed_data(), fixed_schedule()
    one = run_totals(Config(workers=1), data, {}, None)
    for combine in (None, sums):
        many = run_totals(Config(workers=3, check_progress=True), data, schedule, combine)
        outputs = sum((c for c, _ in many), Counter())
        state: dict = {}
        for _, snapshot in many:
            assert not set(snapshot) & set(state)
            state.update(snapshot)
        assert outputs == one[0][0], combine
        assert state == one[0][1], combine
    # the notifications fired: some totals include a scheduled 100
    assert any(total >= 100 for _t, _k, total in one[0][0])


# ---- 4. stateful_binary: both inputs of a key meet one state ------------------------------------
def join_logic(time, lefts, rights, state, notificator, output):
    """A symmetric hash join: each pair is emitted once, at the later of its two times."""
    for key, a in lefts:
        entry = state.setdefault(key, ([], []))
        output.extend((key, a, b) for b in entry[1])
        entry[0].append(a)
    for key, b in rights:
        entry = state.setdefault(key, ([], []))
        output.extend((key, a, b) for a in entry[0])
        entry[1].append(b)


def run_join(config, lefts, rights, schedule, bins=8):
    def build(worker):
        def dataflow(scope):
            s1, left = scope.new_input()
            s2, right = scope.new_input()
            cs, control = scope.new_input()
            out = left.stateful_binary(right, control, lambda r: r[0], lambda r: r[0], "Join",
                                       join_logic, bins=bins)
            return s1, s2, cs, out.capture(), out.probe()

        s1, s2, cs, captured, probe = worker.dataflow(dataflow)
        peers = worker.peers
        for epoch in range(len(lefts)):
            s1.send_batch([r for i, r in enumerate(lefts[epoch]) if i % peers == worker.index])
            s2.send_batch([r for i, r in enumerate(rights[epoch]) if (i + 1) % peers == worker.index])
            if worker.index == 0 and schedule is not None:
                cs.send_batch(schedule.get(epoch, []))
            for h in (s1, s2, cs):
                h.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(s1.time()))
        for h in (s1, s2, cs):
            h.close()
        worker.run()
        return ({t: Counter(rs) for t, rs in captured.by_time().items()},
                {k: (sorted(v[0]), sorted(v[1])) for k, v in worker.stateful_states[0].snapshot().items()})
    return execute_bounded(config, build, timeout=TIMEOUT)


def test_stateful_binary_join_across_moves_equals_one_worker():
    keys = ["a", "b", 7, ("c", 2), "y", "e"]          # "a" and 7 share a bin (of 8)
    n = len(keys)
    lefts = [[(keys[(e + i) % n], ("L", e, i)) for i in range(e % 3 + 2)] for e in range(8)]
    rights = [[(keys[(2 * e + i) % n], ("R", e, i)) for i in range(3 - e % 2)] for e in range(8)]
    b = {k: bin_for(k, 8) for k in keys}
    assert len({b["a"], b["y"], b["b"], b[("c", 2)]}) == 4
    schedule = {1: [Move(b["a"], 2), Move(b["y"], 1)], 3: [Move(b["a"], 0), Map([2] * 8)],
                4: [Move(b["b"], 1), Move(b[("c", 2)], 0)], 6: [Map([0, 1, 2, 0, 1, 2, 0, 1])]}
    many = run_join(Config(workers=3, check_progress=True), lefts, rights, schedule)
    one = run_join(Config(workers=1), lefts, rights, None)

    # Independent expectation: every (left, right) pair of a key, at the later time.
    expected: dict = defaultdict(Counter)
    for e1, batch1 in enumerate(lefts):
        for k1, a in batch1:
            for e2, batch2 in enumerate(rights):
                for k2, bb in batch2:
                    if k1 == k2:
                        expected[max(e1, e2)][(k1, a, bb)] += 1
    merged: dict = defaultdict(Counter)
    for outputs, _ in many:
        for t, c in outputs.items():
            merged[t] += c
    assert dict(merged) == dict(expected) == one[0][0]
    union: dict = {}
    for _, snapshot in many:
        assert not set(snapshot) & set(union)
        union.update(snapshot)
    assert union == one[0][1]
    assert set(union) == set(keys)


# ---- 5. errors ----------------------------------------------------------------------------------
def test_a_failing_fold_raises_stateful_error_naming_operator_and_key_and_keeps_state():
    seen = {}

    def fold(key, value, state):
        if key == ("bad", 1) and value == 2:
            raise KeyError("boom")
        return (state or 0) + value, []

    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            return source, stream.state_machine(fold, name="Fragile", bins=4).probe()

        source, probe = worker.dataflow(dataflow)
        seen[worker.index] = worker.stateful_states[0]
        if worker.index == 0:
            source.send_batch([(("bad", 1), 1), ("ok", 1)])
        source.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        if worker.index == 0:
            source.send_batch([(("bad", 1), 2)])
        source.advance_to(2)
        worker.step_while(lambda: probe.less_than(2))
        source.close()

    for workers in (1, 3):
        seen.clear()
        with pytest.raises(StatefulError) as info:
            execute_bounded(Config(workers=workers), build, timeout=TIMEOUT)
        message = str(info.value)
        assert "Fragile" in message and repr(("bad", 1)) in message and "boom" in message
        assert isinstance(info.value.__cause__, KeyError)
        # The failing record was not applied: the key keeps the state of time 0.
        union = {}
        for states in seen.values():
            union.update(states.snapshot())
        assert union == {("bad", 1): 1, "ok": 1}


def test_logic_error_in_stateful_unary_is_a_stateful_error_chaining_the_original():
    def logic(time, records, state, notificator, output):
        notificator.notify_at(time, None)       # not later than now: refused

    def build(worker):
        def dataflow(scope):
            return scope.to_stream([("x", 1)]).stateful_unary(None, lambda r: r[0], "Early", logic, bins=1)
        worker.dataflow(dataflow)

    with pytest.raises(StatefulError, match="Early") as info:
        execute_bounded(1, build, timeout=TIMEOUT)
    assert isinstance(info.value.__cause__, ValueError)


def test_a_failing_combine_is_a_stateful_error_naming_the_operator_bin_and_time():
    def combine(acc, records):
        raise KeyError("no such page")

    def build(worker):
        def dataflow(scope):
            return scope.to_stream([("x", 1)]).stateful_unary(None, lambda r: r[0], "Pages",
                                                              lambda *a: None, bins=1, combine=combine)
        worker.dataflow(dataflow)

    with pytest.raises(StatefulError, match=r"Pages: combine failed on bin 0 at time 0: KeyError") as info:
        execute_bounded(1, build, timeout=TIMEOUT)
    assert isinstance(info.value.__cause__, KeyError)


@pytest.mark.parametrize("how", ["pair timestamps", "iterative scope"])
def test_state_machine_refuses_partially_ordered_timestamps_at_build_time(how):
    def build(worker):
        if how == "pair timestamps":
            worker.dataflow(lambda scope: scope.new_input()[1].state_machine(count_fold), minimum=(0, 0))
        else:
            def dataflow(scope):
                _, stream = scope.new_input()
                scope.iterative(lambda inner: stream.enter(inner).state_machine(count_fold))
            worker.dataflow(dataflow)

    with pytest.raises(TypeError, match=r"totally ordered timestamps \(int"):
        execute_bounded(1, build, timeout=TIMEOUT)


@pytest.mark.parametrize("bins", [100, 0, 2**17, 3])
def test_bad_bin_counts_are_refused(bins):
    def build(worker):
        worker.dataflow(lambda scope: scope.new_input()[1].state_machine(count_fold, bins=bins))

    with pytest.raises(ValueError, match=f"bins must be a power of two.*got {bins}$"):
        execute_bounded(1, build, timeout=TIMEOUT)


def run_control(config, commands, bins=16):
    """Send ``commands`` at time 1 (on worker 0) to a state_machine named 'Ctl'."""
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            csource, control = scope.new_input()
            out = stream.state_machine(count_fold, control=control, bins=bins, name="Ctl")
            return source, csource, out.probe()

        source, csource, probe = worker.dataflow(dataflow)
        for epoch in range(3):
            source.send_batch([(f"k{epoch}{worker.index}", 1)])
            if worker.index == 0 and epoch == 1:
                csource.send_batch(commands)
            source.advance_to(epoch + 1)
            csource.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(source.time()))
        source.close()
        csource.close()
    return execute_bounded(config, build, timeout=TIMEOUT)


@pytest.mark.parametrize("commands, message", [
    ([Map([0] * 16), Map([1] * 16)], "2 different Map commands at one time"),
    ([Move(3, 0), Move(3, 1)], "bin 3 moved to workers 0 and 1 at one time"),
    ([Move(16, 0)], "bin 16 is not in 0..15"),
    ([Map([0] * 8)], "Map of 8 bins, but the operator has 16"),
    ([("jump", 1)], "not a control command: ('jump', 1)"),
    ([Move(2, 0), "move"], "not a control command: 'move'"),
])
def test_bad_control_commands_raise_control_error(commands, message):
    with pytest.raises(ControlError) as info:
        run_control(Config(workers=2), commands)
    assert message in str(info.value)


@pytest.mark.parametrize("command", [Move(1, 2), Map([0, 5] * 8)])
def test_a_move_to_a_missing_worker_waits_for_a_joiner_then_fails(command):
    start = clock.monotonic()
    with pytest.raises(ControlError) as info:
        run_control(Config(workers=2, timeout=1.0), [command])
    elapsed = clock.monotonic() - start
    assert "Ctl at time 1" in str(info.value)
    assert "the cluster has workers 0..1" in str(info.value)
    assert 1.0 <= elapsed < 30


# ---- 6. plan_moves and migration_steps --------------------------------------------------------
def apply_moves(table, moves):
    table = list(table)
    for b, w in moves:
        table[b] = w
    return table


def fewest_moves(table, workers):
    """The least number of bins that must move: orphans, plus what the workers hold over
    quotas chosen to give the extra bins to the workers that hold most."""
    counts = sorted((sum(1 for x in table if x == w) for w in range(workers)), reverse=True)
    base, extra = divmod(len(table), workers)
    orphans = sum(1 for x in table if x >= workers)
    return orphans + sum(max(0, c - (base + (i < extra))) for i, c in enumerate(counts))


@st.composite
def tables(draw):
    """A routing table of 1..1024 bins over owners 0..15 (uniform or skewed onto a few),
    and a worker count 1..12: owners at or above it are gone."""
    bins = 2 ** draw(st.integers(0, 10))
    workers = draw(st.integers(1, 12))
    owners = draw(st.integers(1, 16))
    hot = draw(st.integers(1, owners))
    rng = random.Random(draw(st.integers(0, 2**32)))
    skewed = draw(st.booleans())
    table = [rng.randrange(hot if skewed and rng.random() < 0.8 else owners) for _ in range(bins)]
    return table, workers


@settings(max_examples=300)
@given(tables())
def test_plan_moves_balances_within_one_bin_with_fewest_moves(case):
    table, workers = case
    moves = plan_moves(table, workers)
    assert moves == plan_moves(tuple(table), workers) == sorted(moves)      # deterministic
    after = apply_moves(table, moves)
    base = len(table) // workers
    load = [after.count(w) for w in range(workers)]
    assert all(w < workers for w in after)
    assert all(base <= n <= base + 1 for n in load)
    assert sum(load) == len(table)
    moved_bins = [b for b, _ in moves]
    assert len(moved_bins) == len(set(moved_bins))           # a bin moves at most once
    assert all(table[b] != w for b, w in moves)               # never to itself
    assert len(moves) == fewest_moves(table, workers)
    sources = {table[b] for b, _ in moves}
    targets = {w for _, w in moves}
    assert not sources & targets                              # nobody gives and takes
    for w in sources:
        if w < workers:       # a live worker gives bins only down to its quota
            assert load[w] in (base, base + 1) and table.count(w) > load[w]


def test_plan_moves_examples():
    assert plan_moves((0, 1, 0, 1, 0, 1, 0, 1), 3) == [(6, 2), (7, 2)]
    assert plan_moves((0, 1, 2, 0), 3) == []                   # already balanced
    assert plan_moves((0, 0, 5, 5), 2) == [(2, 1), (3, 1)]     # worker 5 is gone
    assert plan_moves((0,), 4) == []


def is_subsequence(part, whole):
    it = iter(whole)
    return all(any(m == x for x in it) for m in part)


@settings(max_examples=200)
@given(st.data())
def test_migration_steps_group_every_move_once_in_order(data):
    bins = 2 ** data.draw(st.integers(0, 6))
    workers = data.draw(st.integers(1, 8))
    table = data.draw(st.lists(st.integers(0, workers - 1), min_size=bins, max_size=bins))
    moves = data.draw(st.lists(st.tuples(st.integers(0, bins - 1), st.integers(0, workers + 2)),
                               max_size=30))
    if data.draw(st.booleans()):
        moves = plan_moves(table, data.draw(st.integers(1, workers + 3)))
    assert migration_steps(moves, "all-at-once", table) == ([moves] if moves else [])
    assert migration_steps(moves, "fluid", table) == [[m] for m in moves]
    for tab in (table, ()):
        steps = migration_steps(moves, "batched", tab)
        assert all(steps)
        assert Counter(m for step in steps for m in step) == Counter(moves)
        owner = list(tab)
        for step in steps:
            # No worker gives or takes twice in a step (the giver is the bin's owner when the
            # step runs), no bin moves twice in a step, and input order is kept within it.
            involved = [w for b, w in step for w in ({w, owner[b]} if tab else {w})]
            assert len(involved) == len(set(involved)), f"a worker is in two moves of {step}"
            assert len({b for b, _ in step}) == len(step)
            assert is_subsequence(step, moves)
            owner = apply_moves(owner, step) if tab else owner
        # Applying the steps one after another ends where applying the moves in order does
        # (a bin moved twice is not reordered).
        assert apply_moves(table, [m for step in steps for m in step]) == apply_moves(table, moves)


def test_migration_steps_examples_and_unknown_strategy():
    assert migration_steps([(6, 2), (7, 2), (0, 3)], "batched") == [[(6, 2), (0, 3)], [(7, 2)]]
    # With the table, a bin's current owner counts too: (2, 2) gives from worker 0.
    assert (migration_steps([(0, 1), (1, 0), (2, 2)], "batched", (0, 1, 0, 3))
            == [[(0, 1)], [(1, 0)], [(2, 2)]])
    assert migration_steps([(0, 1), (3, 2)], "batched", (0, 1, 0, 3)) == [[(0, 1), (3, 2)]]
    assert migration_steps([], "all-at-once") == []
    # A bin moved twice keeps the order of its moves (and moves once per step).
    assert migration_steps([(0, 1), (0, 1), (0, 0)], "batched") == [[(0, 1)], [(0, 1)], [(0, 0)]]
    assert migration_steps([(1, 2), (0, 2), (0, 3)], "batched", (0, 1)) == [[(1, 2)], [(0, 2)], [(0, 3)]]
    with pytest.raises(ValueError, match="migration strategy must be one of .*'sideways'"):
        migration_steps([(0, 1)], "sideways")


# ---- 7. the rebalancer, with nobody joining -------------------------------------------------------
@pytest.mark.parametrize("migration", ["all-at-once", "fluid", "batched"])
def test_rebalancer_moves_nothing_when_nobody_joins(migration):
    data = fixed_data()
    results = run_counts(Config(workers=3, check_progress=True, migration=migration), data, None,
                         FIXED_BINS)
    check_against_reference(results, data, FIXED_BINS, RoutingTable.round_robin(FIXED_BINS, 3).table)
    assert all(r[4] == [] and r[5] == [] for r in results)


@pytest.mark.parametrize("workers", [1, 2])
def test_state_machine_applies_records_of_the_open_epoch_as_they_arrive(workers):
    """The rebalancer issues commands one epoch after the data's frontier, so records at
    the open epoch do not hold the control stream there: F routes them and S applies
    them while the epoch is still open on every worker, not one progress round across
    the cluster later. The epoch is never closed while we wait (a wait that cannot end
    fails by the bound)."""
    seen: list = []                     # every worker's S outputs (worker threads)

    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            stream.state_machine(running_total, bins=16).inspect(seen.append)
            return source
        source = worker.dataflow(dataflow)
        source.send_batch([(f"k{worker.index}-{i}", 1) for i in range(5)])    # epoch 0 stays open
        while len(seen) < 5 * worker.peers:
            worker.step_or_park(0.01)
        applied = sorted(seen)
        source.close()
        worker.run()
        return applied

    results = execute_bounded(Config(workers=workers, worker_mode="threads"), build, timeout=20)
    assert results[0] == sorted((f"k{w}-{i}", 1) for w in range(workers) for i in range(5))


def test_state_machine_loops_back_its_frontier_not_its_records():
    """F and the rebalancer read only S's frontier: S's records must not travel the
    feedback edge (each batch would be a message on it, a progress update to every
    worker and one more step per epoch before it is drained)."""
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            stream.state_machine(running_total, bins=16).probe()
            return source
        source = worker.dataflow(dataflow)
        subgraph = worker.dataflow_subgraph(worker.dataflows()[-1])
        for epoch in range(3):
            source.send_batch([(f"k{i}", 1) for i in range(10)])
            source.advance_to(epoch + 1)
        source.close()
        worker.run()
        cores = {child.operator.name: child.operator for child in subgraph.children[1:]
                 if child.operator is not None}
        numbers = {name: operator_numbers(core) for name, core in cores.items()}
        return {name: (n["records_in"], n["records_out"]) for name, n in numbers.items()}

    counts = execute_bounded(1, build)[0]
    assert counts["StateMachine"][1] == 30          # S emitted every record's count
    assert counts["Feedback"] == (0, 0), counts


# ---- 8. configuration -------------------------------------------------------------------------
def test_rebalance_and_migration_settings():
    c = Config.from_args([], env={})
    assert (c.rebalance, c.migration) == ("auto", "batched")
    c = Config.from_args(["--rebalance", "off", "--migration", "fluid"], env={})
    assert (c.rebalance, c.migration) == ("off", "fluid")
    c = Config.from_args([], env={"TIMELY_REBALANCE": "off", "TIMELY_MIGRATION": "all-at-once"})
    assert (c.rebalance, c.migration) == ("off", "all-at-once")
    # Arguments beat the environment.
    c = Config.from_args(["--migration", "batched"], env={"TIMELY_MIGRATION": "fluid"})
    assert c.migration == "batched"


def test_rebalance_from_toml(tmp_path):
    path = tmp_path / "timely.toml"
    path.write_text('rebalance = "off"\nmigration = "fluid"\n')
    c = Config.from_args(["--config", str(path)], env={})
    assert (c.rebalance, c.migration) == ("off", "fluid")
    c = Config.from_args([], env={"TIMELY_CONFIG": str(path), "TIMELY_MIGRATION": "batched"})
    assert (c.rebalance, c.migration) == ("off", "batched")
    bad = tmp_path / "bad.toml"
    bad.write_text('[timely]\nmigration = "teleport"\n')
    with pytest.raises(ConfigError, match="migration"):
        Config.from_args(["--config", str(bad)], env={})


@pytest.mark.parametrize("argv, env, setting", [
    (["--rebalance", "sometimes"], {}, "rebalance"),
    (["--migration", "teleport"], {}, "migration"),
    ([], {"TIMELY_REBALANCE": "on"}, "rebalance"),
    ([], {"TIMELY_MIGRATION": ""}, "migration"),
])
def test_bad_rebalance_settings_raise_config_error(argv, env, setting):
    with pytest.raises(ConfigError, match=f"^{setting} must be"):
        Config.from_args(argv, env=env)
    with pytest.raises(ConfigError, match=setting):
        Config(**{setting: "nope"}).validate()
