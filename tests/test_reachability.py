"""Reachability: Builder, summarize_outputs and the Tracker (both twins).

Protects the correctness claim of the progress core (DESIGN.md, seed 002 section 5):
after ``propagate_all``, the implication frontier at EVERY location equals
``implied_frontier`` — the frontier of the sum over all locations l' of the positive
accumulated pointstamps at l' pushed through every minimal path summary from l' to l.
The oracle (``timely.verify.oracle``, shared with the protocol harness) computes that
definition directly (path summaries by a fixpoint over antichains, written independently
of ``summarize_outputs`` and the Tracker) and is compared with the Tracker on random
graphs (DAGs and graphs with advancing feedback cycles, several ports per operator,
partial and multi-summary internal connections, int and pair timestamps) under random
batches of positive and negative pointstamp changes.
Also: the exact implication multisets and ``is_global``; ``pushed_changes`` and
``output_changes`` as exact deltas; the Cython and pure Trackers agreeing exactly;
Builder's checks (zero-summary cycles named, unknown operators/ports, duplicates); and
seed 002's WCC running example checked by hand.
"""
from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from timely.progress import Builder, Location, Source, Target, summarize_outputs, twins
# The oracle: an order, a summary algebra, path summaries and implied_frontier written out
# independently of summarize_outputs and the Tracker (shared with tests/test_verify.py).
from timely.verify.oracle import (TIME_MAX, Graph, Oracle, apply, identity, lt, minimal,
                                  pointstamp_frontier, simple_path_summaries, zero_cycle)

TWIN_NEEDS = ("Tracker",)

# Case counts scale with the loaded hypothesis profile (conftest.py): with "ci" (200)
# each oracle test runs 200 scenarios per twin, 800 per twin over the four of them;
# HYPOTHESIS_PROFILE=nightly runs 10,000 each.
PROFILE_EXAMPLES = settings().max_examples
ORACLE_EXAMPLES = PROFILE_EXAMPLES
SELF_CHECK_EXAMPLES = max(50, PROFILE_EXAMPLES // 2)

# =========================================================================================
# Strategies
# =========================================================================================
ONE_SUMMARY = {"int": st.sampled_from([0, 0, 0, 1, 2]),
               "pair": st.sampled_from([(0, 0), (0, 0), (0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (2, 0)])}
ADVANCING = {"int": st.sampled_from([1, 2]), "pair": st.sampled_from([(0, 1), (1, 0), (1, 1)])}
TIMES = {"int": st.integers(0, 4), "pair": st.tuples(st.integers(0, 3), st.integers(0, 3))}
DELTAS = st.sampled_from([1, 2, -1, 1, 3, 0, 1, -2, 1])  # simplest (first) is +1


def summary_lists(kind):
    options = [st.just([]),                                             # not connected
               st.lists(ONE_SUMMARY[kind], min_size=1, max_size=1),
               st.lists(ONE_SUMMARY[kind], min_size=1, max_size=3)]
    if kind == "pair":
        options.append(st.just([(1, 0), (0, 1)]))                       # incomparable pair
    return st.one_of(options)


SUMMARY_LISTS = {kind: summary_lists(kind) for kind in ("int", "pair")}   # built once


@st.composite
def graphs(draw, kind: str, cyclic: bool, fix_cycles: bool = True) -> Graph:
    n_ops = draw(st.integers(1, 5))
    scope_outputs, scope_inputs = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    shapes = [(scope_outputs, scope_inputs)]
    summaries = [[[[] for _ in range(scope_inputs)] for _ in range(scope_outputs)]]
    for _ in range(n_ops):
        ins, outs = draw(st.integers(0, 3)), draw(st.integers(0, 3))
        shapes.append((ins, outs))
        summaries.append([[draw(SUMMARY_LISTS[kind]) for _ in range(outs)] for _ in range(ins)])
    graph = Graph(kind, shapes, summaries)
    all_sources = [(n, p) for n, (_, outs) in enumerate(shapes) for p in range(outs)]
    for node, (ins, _) in enumerate(shapes):
        if cyclic or node == 0:
            candidates = all_sources
        else:   # a DAG: feed from the scope inputs and from earlier operators only
            candidates = [(n, p) for n, p in all_sources if n < node]
        for port in range(ins):
            if candidates:
                for s in draw(st.lists(st.sampled_from(candidates), max_size=2)):
                    graph.edges.append((s, (node, port)))
    if cyclic:
        # and at least one feedback loop: a ring through 1..3 operators that have ports
        ring_ops = [n for n in range(1, len(shapes)) if shapes[n][0] and shapes[n][1]]
        if ring_ops:
            ring = draw(st.lists(st.sampled_from(ring_ops), min_size=1, max_size=3, unique=True))
            ports = [(draw(st.integers(0, shapes[n][0] - 1)), draw(st.integers(0, shapes[n][1] - 1)))
                     for n in ring]
            for k, n in enumerate(ring):
                i, o = ports[k]
                if not summaries[n][i][o]:
                    summaries[n][i][o] = draw(st.lists(ONE_SUMMARY[kind], min_size=1, max_size=2))
                nxt, (ni, _) = ring[(k + 1) % len(ring)], ports[(k + 1) % len(ring)]
                graph.edges.append(((n, o), (nxt, ni)))
    if cyclic and fix_cycles:
        # every cycle must strictly advance: drop identity summaries from internal
        # connections on zero cycles until none is left
        while (cycle := zero_cycle(graph)) is not None:
            internal = [(a, b) for a, b in zip(cycle, cycle[1:]) if not a.is_source]
            a, b = draw(st.sampled_from(internal))
            row = graph.summaries[a.node][a.port]
            kept = [s for s in row[b.port] if s != identity(kind)]
            row[b.port] = kept or [draw(ADVANCING[kind])]
    return graph


def has_cycle(graph: Graph) -> bool:
    succ = {loc: [] for loc in graph.locations()}
    for a, b, _ in graph.steps():
        succ[a].append(b)
    seen: dict = {}

    def dfs(loc):
        seen[loc] = 1
        for nxt in succ[loc]:
            if seen.get(nxt) == 1 or (nxt not in seen and dfs(nxt)):
                return True
        seen[loc] = 2
        return False

    return any(dfs(loc) for loc in succ if loc not in seen)


@st.composite
def scenarios(draw, kind: str, cyclic: bool):
    """A graph and 1..5 rounds of pointstamp changes: random changes at any source or
    target (node 0's included), plus retractions of earlier changes so that counts
    return to zero and frontiers advance as well as appear."""
    graph = draw(graphs(kind, cyclic))
    locations = graph.locations()
    rounds, history = [], []
    change = st.tuples(st.sampled_from(locations), TIMES[kind], DELTAS) if locations else None
    for _ in range(draw(st.integers(1, 5))):
        batch = []
        if locations:
            batch = draw(st.lists(change, min_size=0 if history else 1, max_size=6))
        if history:
            batch += [(loc, t, -d) for loc, t, d in draw(st.lists(st.sampled_from(history), max_size=4))]
        history += batch
        rounds.append(batch)
    if cyclic:
        event(f"graph has a cycle: {has_cycle(graph)}")
    return graph, rounds


def record(tracker, loc, time, delta) -> None:
    if loc.is_source:
        tracker.update_source(Source(loc.node, loc.port), time, delta)
    else:
        tracker.update_target(Target(loc.node, loc.port), time, delta)


def loc_key(loc) -> Location:
    node, port, is_source = tuple(loc)
    return Location(node, port, bool(is_source))


def drain_pushed(tracker) -> dict:
    out: Counter = Counter()
    for (loc, t), d in tracker.pushed_changes().drain():
        out[(loc_key(loc), t)] += d
    return {k: v for k, v in out.items() if v}


def probe_times(kind):
    if kind == "int":
        return list(range(0, 7))
    return [(a, b) for a in range(5) for b in range(5)]


# =========================================================================================
# The oracle tests
# =========================================================================================


def check_against_oracle(graph: Graph, rounds, tracker_class) -> None:
    oracle = Oracle(graph)
    tracker = graph.builder().build(tracker_class=tracker_class)
    assert type(tracker) is tracker_class
    scope_outputs = graph.shapes[0][0]
    P: dict = {loc: Counter() for loc in oracle.locations}
    before = {loc: set() for loc in oracle.locations}
    replay: Counter = Counter()
    outputs = [Counter() for _ in range(scope_outputs)]
    times = set(probe_times(graph.kind))
    largest = nonempty = 0

    for batch in rounds:
        for loc, t, d in batch:
            record(tracker, loc, t, d)
            P[loc][t] += d
            times.add(t)
        tracker.propagate_all()
        F = oracle.implied_frontiers(P)

        largest = max(largest, max(map(len, F.values()), default=0))
        nonempty = max(nonempty, sum(1 for f in F.values() if f))

        # 1. every location's implication frontier is the implied frontier
        for loc in oracle.locations:
            got = tracker.implications(loc).frontier()
            assert len(got) == len(set(got)), f"duplicate in frontier at {loc}: {got}"
            assert set(got) == F[loc], f"implications at {loc}"

        # 2. pointstamps are the accumulated counts
        for loc in oracle.locations:
            pts = tracker.pointstamps(loc)
            assert set(pts.frontier()) == pointstamp_frontier(P, loc), f"pointstamps at {loc}"
            for t in P[loc]:
                assert pts.count_for(t) == P[loc][t]

        # 3. pushed_changes of this round: exactly the implication frontier changes
        pushed = drain_pushed(tracker)
        expected = {}
        for loc in oracle.locations:
            expected.update({(loc, t): 1 for t in F[loc] - before[loc]})
            expected.update({(loc, t): -1 for t in before[loc] - F[loc]})
        assert pushed == expected, "pushed_changes"
        replay.update(pushed)
        assert {k: v for k, v in replay.items() if v} == {(loc, t): 1 for loc in F for t in F[loc]}
        before = F

        # 4. output_changes accumulate to the pointstamp frontiers outside node 0 pushed
        #    through their summaries to each scope output; so their minimal elements are
        #    the implied frontier at the scope output counting only those pointstamps
        assert len(tracker.output_changes) == scope_outputs
        for o in range(scope_outputs):
            outputs[o].update(dict(tracker.output_changes[o].drain()))
            outputs[o] = Counter({t: c for t, c in outputs[o].items() if c})  # zeros only
            assert outputs[o] == oracle.output_multiset(P, o), f"output_changes[{o}]"
            assert minimal(outputs[o]) == oracle.implied_frontier(
                P, Location.target(0, o), where=lambda l: l.node != 0)

        # 5. the exact implication counts, and is_global as timely defines it
        counts = oracle.implication_counts(P, F)
        for loc in oracle.locations:
            imp = tracker.implications(loc)
            if hasattr(imp, "counts"):
                assert {t: c for t, c in imp.counts() if c} == dict(+counts[loc]), f"counts at {loc}"
            for t in set(counts[loc]) | times:
                assert imp.count_for(t) == counts[loc][t], f"count_for({t}) at {loc}"
                dominated = any(lt(f, t) for f in F[loc])
                assert tracker.is_global(loc, t) == (not dominated and counts[loc][t] <= 1), \
                    f"is_global({loc}, {t})"

        if hasattr(tracker, "tracking_anything"):
            assert tracker.tracking_anything() == any(
                pointstamp_frontier(P, loc) for loc in oracle.locations)
    event(f"largest implied frontier: {min(largest, 3)}")
    event(f"most locations with a non-empty frontier: {'0' if not nonempty else '1-4' if nonempty < 5 else '5+'}")


CASES = [("int", False), ("int", True), ("pair", False), ("pair", True)]
CASE_IDS = ["int-dag", "int-cyclic", "pair-dag", "pair-cyclic"]


@pytest.mark.parametrize("kind,cyclic", CASES, ids=CASE_IDS)
@settings(max_examples=ORACLE_EXAMPLES)
@given(data=st.data())
def test_tracker_matches_implied_frontier(twin, kind, cyclic, data):
    graph, rounds = data.draw(scenarios(kind, cyclic), label="scenario")
    check_against_oracle(graph, rounds, twin.Tracker)


@settings(max_examples=ORACLE_EXAMPLES)
@given(data=st.data())
def test_twins_agree_exactly(both_twins, data):
    """Same graph, same changes: identical frontiers, counts, drained pushed_changes
    and output_changes, and is_global answers, round after round."""
    py, cy = both_twins
    kind = data.draw(st.sampled_from(["int", "pair"]), label="kind")
    cyclic = data.draw(st.booleans(), label="cyclic")
    graph, rounds = data.draw(scenarios(kind, cyclic), label="scenario")
    a = graph.builder().build(tracker_class=py.Tracker)
    b = graph.builder().build(tracker_class=cy.Tracker)
    locations = graph.locations()
    times = set(probe_times(kind))
    for batch in rounds:
        for loc, t, d in batch:
            record(a, loc, t, d)
            record(b, loc, t, d)
            times.add(t)
        a.propagate_all()
        b.propagate_all()
        assert drain_pushed(a) == drain_pushed(b)
        for o in range(graph.shapes[0][0]):
            assert dict(a.output_changes[o].drain()) == dict(b.output_changes[o].drain())
        for loc in locations:
            assert sorted(a.implications(loc).frontier()) == sorted(b.implications(loc).frontier())
            assert sorted(a.pointstamps(loc).frontier()) == sorted(b.pointstamps(loc).frontier())
            for t in times:
                assert a.implications(loc).count_for(t) == b.implications(loc).count_for(t)
                assert a.is_global(loc, t) == b.is_global(loc, t), f"is_global({loc}, {t})"


# ---- the oracle's own ingredients ---------------------------------------------------------


@settings(max_examples=SELF_CHECK_EXAMPLES)
@given(data=st.data())
def test_oracle_fixpoint_equals_simple_path_enumeration(data):
    kind = data.draw(st.sampled_from(["int", "pair"]))
    graph = data.draw(graphs(kind, cyclic=True))
    oracle = Oracle(graph)
    for a in oracle.locations:
        for b in oracle.locations:
            assert oracle.path_summary(a, b) == simple_path_summaries(graph, a, b), (a, b)


@given(data=st.data())
def test_summarize_outputs_matches_path_summaries(data):
    """summarize_outputs (the Builder's backward walk) finds, from every location to
    every scope output, exactly the minimal path summaries; the scope output itself has
    only its non-empty paths (none: node 0 has no internal connections)."""
    kind = data.draw(st.sampled_from(["int", "pair"]))
    graph = data.draw(graphs(kind, cyclic=data.draw(st.booleans())))
    oracle = Oracle(graph)
    results = summarize_outputs(graph.builder(), identity(kind))
    for loc in oracle.locations:
        for o in range(graph.shapes[0][0]):
            got = set(results[loc][o]) if loc in results else set()
            if loc == Location.target(0, o):
                assert got == set()
            else:
                assert got == oracle.path_summary(loc, Location.target(0, o)), (loc, o)
    # the scope's own summary, [scope input][scope output], as the pure Tracker reports it
    tracker = graph.builder().build(tracker_class=twins("Tracker")["python"])
    scope_outputs, scope_inputs = graph.shapes[0]
    summary = tracker.scope_summary()
    assert len(summary) == scope_inputs
    for i in range(scope_inputs):
        assert len(summary[i]) == scope_outputs
        for o in range(scope_outputs):
            assert set(summary[i][o]) == oracle.path_summary(Location.source(0, i),
                                                             Location.target(0, o))


# =========================================================================================
# Builder checks
# =========================================================================================
LOC_RE = re.compile(r"(Source|Target)\((\d+), (\d+)\)")


def named_locations(message: str) -> list:
    return [Location(int(n), int(p), kind == "Source") for kind, n, p in LOC_RE.findall(message)]


def test_zero_summary_self_loop_is_rejected_and_named():
    b = Builder()
    b.add_node(0, 0, 0, [])
    b.add_node(1, 1, 1, [[[(0, 0)]]])
    b.add_edge(Source(1, 0), Target(1, 0))
    with pytest.raises(ValueError) as info:
        b.build()
    message = str(info.value)
    assert "Source(1, 0)" in message and "Target(1, 0)" in message, message


def test_zero_summary_cycle_through_two_operators_is_named():
    b = Builder()
    b.add_node(0, 1, 1, [[[]]])
    b.add_node(1, 2, 1, [[[0]], [[0]]])      # loop head: concat, no advance
    b.add_node(2, 1, 1, [[[0, 3]]])          # the "feedback" forgot to advance (0 <= 3)
    b.add_edge(Source(0, 0), Target(1, 0))
    b.add_edge(Source(1, 0), Target(2, 0))
    b.add_edge(Source(2, 0), Target(1, 1))
    b.add_edge(Source(1, 0), Target(0, 0))
    with pytest.raises(ValueError) as info:
        b.build()
    message = str(info.value)
    for name in ("Target(1, 1)", "Source(1, 0)", "Target(2, 0)", "Source(2, 0)"):
        assert name in message, message
    assert "Source(0, 0)" not in message and "Target(1, 0)" not in message


@pytest.mark.parametrize("advance", [[(0, 1)], [(1, 0), (0, 1)], [(0, 1), (0, 2)]])
def test_cycle_carrying_an_advance_is_accepted(advance):
    b = Builder()
    b.add_node(0, 0, 0, [])
    b.add_node(1, 2, 1, [[[(0, 0)]], [[(0, 0)]]])
    b.add_node(2, 1, 1, [[advance]])
    b.add_edge(Source(1, 0), Target(2, 0))
    b.add_edge(Source(2, 0), Target(1, 1))
    tracker = b.build()
    tracker.update_target(Target(1, 0), (0, 0), 1)
    tracker.propagate_all()
    expected = minimal(apply(s, (0, 0)) for s in advance)
    assert set(tracker.implications(Location.target(1, 1)).frontier()) == expected


def test_int_cycle_with_summary_one_is_accepted():
    b = Builder()
    b.add_node(0, 0, 0, [])
    b.add_node(1, 1, 1, [[[1]]])
    b.add_edge(Source(1, 0), Target(1, 0))
    tracker = b.build()
    tracker.update_source(Source(1, 0), 3, 1)
    tracker.propagate_all()
    assert tracker.implications(Location.target(1, 0)).frontier() == [3]
    assert tracker.implications(Location.source(1, 0)).frontier() == [3]
    assert tracker.implications(Location.target(1, 0)).count_for(3) == 1
    assert tracker.implications(Location.source(1, 0)).count_for(4) == 1


@given(data=st.data())
def test_builder_rejects_exactly_the_zero_cycles(data):
    """Unrepaired random graphs: build() raises iff a non-advancing cycle exists, and
    the locations it names form such a cycle."""
    kind = data.draw(st.sampled_from(["int", "pair"]))
    graph = data.draw(graphs(kind, cyclic=True, fix_cycles=False))
    expected = zero_cycle(graph)
    if expected is None:
        graph.builder().build()
        return
    with pytest.raises(ValueError) as info:
        graph.builder().build()
    named = named_locations(str(info.value))
    assert len(named) >= 3 and named[0] == named[-1], str(info.value)
    steps = {(a, b) for a, b, s in graph.steps() if identity(kind) in s}
    for a, b in zip(named, named[1:]):
        assert (a, b) in steps, f"{a} -> {b} is not an identity step: {info.value}"


def test_add_edge_to_unknown_operator_or_port():
    b = Builder()
    b.add_node(0, 1, 1, [[[]]])
    b.add_node(1, 1, 2, [[[0], [1]]])
    with pytest.raises(ValueError, match=r"operator 7"):
        b.add_edge(Source(1, 0), Target(7, 0))
    with pytest.raises(ValueError, match=r"operator 5"):
        b.add_edge(Source(5, 0), Target(1, 0))
    with pytest.raises(ValueError, match=r"port 3"):
        b.add_edge(Source(1, 3), Target(1, 0))
    with pytest.raises(ValueError, match=r"port 2"):
        b.add_edge(Source(1, 0), Target(1, 2))
    with pytest.raises(ValueError, match=r"port 1"):
        b.add_edge(Source(0, 1), Target(1, 0))
    b.add_node(3, 1, 0, [[]])
    with pytest.raises(ValueError, match=r"operator 2"):   # a gap: never declared
        b.add_edge(Source(2, 0), Target(3, 0))
    b.add_edge(Source(1, 1), Target(3, 0))                 # the valid ones still work
    b.add_edge(Source(1, 0), Target(0, 0))
    b.build()


@pytest.mark.parametrize("source,target", [(Source(-1, 0), Target(1, 0)),
                                           (Source(1, 0), Target(-1, 0))])
def test_add_edge_to_negative_operator_raises(source, target):
    b = Builder()
    b.add_node(0, 1, 0, [[]])
    b.add_node(1, 1, 1, [[[0]]])
    with pytest.raises(ValueError, match=r"operator -1"):
        b.add_edge(source, target)


def test_add_node_twice_and_bad_shapes_raise():
    b = Builder()
    b.add_node(1, 1, 1, [[[0]]])
    with pytest.raises(ValueError, match="1"):
        b.add_node(1, 1, 1, [[[0]]])
    with pytest.raises(ValueError):
        b.add_node(2, 2, 1, [[[0]]])             # summary has 1 input row, not 2
    with pytest.raises(ValueError):
        b.add_node(3, 1, 2, [[[0]]])             # 1 output column, not 2


# =========================================================================================
# Hand-checked examples
# =========================================================================================


def test_times_past_time_max_do_not_travel(twin):
    b = Builder(minimum=0)
    b.add_node(0, 0, 0, [])
    b.add_node(1, 1, 1, [[[1]]])
    b.add_node(2, 1, 0, [[]])
    b.add_edge(Source(1, 0), Target(2, 0))
    tracker = b.build(tracker_class=twin.Tracker)
    tracker.update_target(Target(1, 0), TIME_MAX, 1)
    tracker.propagate_all()
    assert tracker.implications(Location.target(1, 0)).frontier() == [TIME_MAX]
    assert tracker.implications(Location.source(1, 0)).frontier() == []
    assert tracker.implications(Location.target(2, 0)).frontier() == []
    tracker.update_target(Target(1, 0), TIME_MAX - 1, 1)
    tracker.propagate_all()
    assert tracker.implications(Location.target(2, 0)).frontier() == [TIME_MAX]


# Seed 002's running example (Figure 2, WCC), one worker, inside a scope (node 0, whose
# single input is the scope output b.3 also feeds):
#   a = node 1: the input operator, output a.1 = Source(1, 0)
#   b = node 2: inputs b.1 = Target(2, 0) (labels), b.2 = Target(2, 1) (edges),
#               output b.3 = Source(2, 0); both inputs reach b.3 unchanged
#   c = node 3: the feedback, c.1 = Target(3, 0) -> c.2 = Source(3, 0), summary (0, 1)
#   channels: a.1 -> b.2, b.3 -> c.1, c.2 -> b.1, b.3 -> scope output Target(0, 0)
A1, B1, B2, B3 = Location.source(1, 0), Location.target(2, 0), Location.target(2, 1), Location.source(2, 0)
C1, C2, OUT = Location.target(3, 0), Location.source(3, 0), Location.target(0, 0)


def wcc(tracker_class):
    b = Builder(minimum=(0, 0))
    b.add_node(0, 1, 0, [[]])
    b.add_node(1, 0, 1, [])
    b.add_node(2, 2, 1, [[[(0, 0)]], [[(0, 0)]]])
    b.add_node(3, 1, 1, [[[(0, 1)]]])
    b.add_edge(Source(1, 0), Target(2, 1))
    b.add_edge(Source(2, 0), Target(3, 0))
    b.add_edge(Source(3, 0), Target(2, 0))
    b.add_edge(Source(2, 0), Target(0, 0))
    return b.build(tracker_class=tracker_class)


def frontiers(tracker) -> dict:
    return {name: sorted(tracker.implications(loc).frontier())
            for name, loc in (("a.1", A1), ("b.1", B1), ("b.2", B2), ("b.3", B3),
                              ("c.1", C1), ("c.2", C2), ("out", OUT))}


def test_wcc_running_example(twin):
    t = wcc(twin.Tracker)

    # a holds (0, 0) on a.1; b holds (0, 0) on b.3 ("each instance of b starts with a
    # pointstamp on b.3 at timestamp (0, 0)")
    t.update_source(Source(1, 0), (0, 0), 1)
    t.update_source(Source(2, 0), (0, 0), 1)
    t.propagate_all()
    assert frontiers(t) == {"a.1": [(0, 0)], "b.1": [(0, 1)], "b.2": [(0, 0)], "b.3": [(0, 0)],
                            "c.1": [(0, 0)], "c.2": [(0, 1)], "out": [(0, 0)]}
    # b.3's (0, 0) is implied twice: by its own capability and by a's, through b.2
    assert t.implications(B3).count_for((0, 0)) == 2
    assert t.implications(B3).count_for((0, 1)) == 1        # the loop's way back
    assert not t.is_global(B3, (0, 0))                      # redundant: a also holds it
    assert t.is_global(A1, (0, 0))                          # a's alone
    assert not t.is_global(B1, (0, 2))                      # (0, 1) < (0, 2) dominates
    assert dict(t.output_changes[0].drain()) == {(0, 0): 2}
    assert drain_pushed(t) == {
        (A1, (0, 0)): 1, (B2, (0, 0)): 1, (B3, (0, 0)): 1, (C1, (0, 0)): 1, (C2, (0, 1)): 1,
        (B1, (0, 1)): 1, (OUT, (0, 0)): 1}

    # a moves on to the next input version: (0, 0) -> (1, 0)
    t.update_source(Source(1, 0), (1, 0), 1)
    t.update_source(Source(1, 0), (0, 0), -1)
    t.propagate_all()
    assert frontiers(t) == {"a.1": [(1, 0)], "b.1": [(0, 1)], "b.2": [(1, 0)], "b.3": [(0, 0)],
                            "c.1": [(0, 0)], "c.2": [(0, 1)], "out": [(0, 0)]}
    assert t.implications(B3).count_for((0, 0)) == 1
    assert t.is_global(B3, (0, 0))          # now only b's capability holds (0, 0) back
    assert dict(t.output_changes[0].drain()) == {(0, 0): -1, (1, 0): 1}
    assert drain_pushed(t) == {
        (A1, (0, 0)): -1, (A1, (1, 0)): 1, (B2, (0, 0)): -1, (B2, (1, 0)): 1}

    # b sends labels at (0, 0) to c.1 and drops its capability (one atomic batch)
    t.update_target(Target(3, 0), (0, 0), 1)
    t.update_source(Source(2, 0), (0, 0), -1)
    t.propagate_all()
    assert frontiers(t) == {"a.1": [(1, 0)], "b.1": [(0, 1)], "b.2": [(1, 0)],
                            "b.3": [(0, 1), (1, 0)], "c.1": [(0, 0)], "c.2": [(0, 1)],
                            "out": [(0, 1), (1, 0)]}
    assert t.is_global(C1, (0, 0))
    assert t.is_global(B3, (0, 1)) and t.is_global(B3, (1, 0))   # one precursor each
    assert not t.is_global(B3, (1, 1))                           # dominated
    assert dict(t.output_changes[0].drain()) == {(0, 0): -1, (0, 1): 1}
    assert drain_pushed(t) == {(B3, (0, 0)): -1, (B3, (0, 1)): 1, (B3, (1, 0)): 1,
                               (OUT, (0, 0)): -1, (OUT, (0, 1)): 1, (OUT, (1, 0)): 1}

    # c consumes them and sends them on, one round later, to b.1
    t.update_target(Target(3, 0), (0, 0), -1)
    t.update_target(Target(2, 0), (0, 1), 1)
    t.propagate_all()
    assert frontiers(t) == {"a.1": [(1, 0)], "b.1": [(0, 1)], "b.2": [(1, 0)],
                            "b.3": [(0, 1), (1, 0)], "c.1": [(0, 1), (1, 0)],
                            "c.2": [(0, 2), (1, 1)], "out": [(0, 1), (1, 0)]}
    assert dict(t.output_changes[0].drain()) == {}
    assert drain_pushed(t) == {(C1, (0, 0)): -1, (C1, (0, 1)): 1, (C1, (1, 0)): 1,
                               (C2, (0, 1)): -1, (C2, (0, 2)): 1, (C2, (1, 1)): 1}
    assert t.is_global(B1, (0, 1))

    # b consumes the labels and has nothing new to send: input version 0 is done, the
    # frontier at b.1 is past every (0, t2)
    t.update_target(Target(2, 0), (0, 1), -1)
    t.propagate_all()
    assert frontiers(t) == {"a.1": [(1, 0)], "b.1": [(1, 1)], "b.2": [(1, 0)], "b.3": [(1, 0)],
                            "c.1": [(1, 0)], "c.2": [(1, 1)], "out": [(1, 0)]}
    assert dict(t.output_changes[0].drain()) == {(0, 1): -1}
    assert drain_pushed(t) == {(B1, (0, 1)): -1, (B1, (1, 1)): 1, (B3, (0, 1)): -1,
                               (C1, (0, 1)): -1, (C2, (0, 2)): -1, (OUT, (0, 1)): -1}

    # a closes its input: nothing is left anywhere
    t.update_source(Source(1, 0), (1, 0), -1)
    t.propagate_all()
    assert all(f == [] for f in frontiers(t).values())
    assert dict(t.output_changes[0].drain()) == {(1, 0): -1}
    assert drain_pushed(t) == {(A1, (1, 0)): -1, (B1, (1, 1)): -1, (B2, (1, 0)): -1,
                               (B3, (1, 0)): -1, (C1, (1, 0)): -1, (C2, (1, 1)): -1,
                               (OUT, (1, 0)): -1}


@pytest.mark.parametrize("order", ["ascending", "descending", "shuffled", "sliding"])
def test_twins_agree_while_many_times_come_and_go(both_twins, order):
    """Hundreds of distinct times at one port, retracted from the front, the back, at
    random, or as a sliding window of epochs (new times in at the back while old ones
    leave at the front): the compiled Tracker's rows (which leave from whichever end is
    nearer) keep the same counts and frontiers as the pure twin's, round after round."""
    import random
    py, cy = both_twins
    trackers = []
    for twin in (py, cy):
        b = Builder(minimum=0)
        b.add_node(0, 1, 1, [[[]]])
        b.add_node(1, 1, 1, [[[0]]])
        b.add_node(2, 1, 1, [[[1]]])
        b.add_edge(Source(0, 0), Target(1, 0))
        b.add_edge(Source(1, 0), Target(2, 0))
        b.add_edge(Source(2, 0), Target(0, 0))
        trackers.append(b.build(tracker_class=twin.Tracker))
    rng = random.Random(order)
    times = list(range(1, 301))
    rounds = [[(t, 1) for t in rng.sample(times, len(times))]]
    if order == "sliding":
        for t in times[:250]:
            rounds.append([(t, -1), (t + 300, 1)])
        rounds.append([(t, -1) for t in range(251, 551)])
    else:
        gone = {"ascending": times, "descending": times[::-1], "shuffled": rng.sample(times, len(times))}[order]
        rounds += [[(t, -1)] for t in gone[:200]] + [[(t, -1) for t in gone[200:]]]
    probes = [Location(1, 0, True), Location(2, 0, False), Location(0, 0, False)]
    for batch in rounds:
        for tracker in trackers:
            for t, d in batch:
                tracker.update_source(Source(1, 0), t, d)
            tracker.propagate_all()
        a, b = trackers
        assert drain_pushed(a) == drain_pushed(b)
        assert dict(a.output_changes[0].drain()) == dict(b.output_changes[0].drain())
        for loc in probes:
            assert a.pointstamps(loc).frontier() == b.pointstamps(loc).frontier()
            assert a.implications(loc).frontier() == b.implications(loc).frontier()
            assert sorted(a.implications(loc).counts()) == sorted(b.implications(loc).counts())
    assert all(t.implications(Location(0, 0, False)).is_empty() for t in trackers)


@settings(max_examples=SELF_CHECK_EXAMPLES)
@given(data=st.data())
def test_grants_from_the_least_held_times_equal_grants_from_all(data):
    """``grants.implied_times`` feeds its Tracker only the least times held at each
    location; the grants equal those of a Tracker fed every held count (the definition:
    the least implied time strictly above what is held), on random graphs, ints and
    pairs, with many held times per location and some counts not positive."""
    from timely.progress import ChangeBatch
    from timely.progress.reachability import Tracker as PyTracker
    from timely.rescaling.grants import _least, _successor, implied_times
    kind = data.draw(st.sampled_from(["int", "pair"]), label="kind")
    graph = data.draw(graphs(kind, data.draw(st.booleans(), label="cyclic")), label="graph")
    locations = graph.locations()
    if not locations:
        return
    held = ChangeBatch(data.draw(st.lists(st.tuples(st.tuples(st.sampled_from(locations), TIMES[kind]), DELTAS),
                                          max_size=40), label="held"))
    outputs = graph.sources()
    got = implied_times(graph.builder(), held, outputs)
    want = {}
    positive = [(loc, t, c) for (loc, t), c in held if c > 0]
    for loc in outputs if positive else ():
        tracker = graph.builder().build(tracker_class=PyTracker)
        candidates = [_successor(t) for l, t, _ in positive if l == loc]
        for l, t, c in positive:
            if l != loc:
                tracker.update(l, t, c)
        tracker.propagate_all()
        candidates.extend(tracker.implications(loc).frontier())
        if candidates:
            want[loc] = _least(candidates)
    assert got == want
