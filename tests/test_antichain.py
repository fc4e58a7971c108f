"""Antichain and MutableAntichain (both twins of the latter).

Protects: an Antichain holds exactly the minimal elements of what was inserted; a
MutableAntichain, after any batches of signed updates (ints and int tuples, counts that
go transiently negative, zero deltas, repeats and cancellations inside one batch), has
as frontier exactly the minimal timestamps with a positive accumulated count; the
changes ``update_iter`` returns, replayed onto the previous frontier as +1/-1, give
exactly the new frontier; ``count_for`` is the accumulated sum; ``less_than`` /
``less_equal`` / ``is_empty`` answer from the frontier.
"""
from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from timely.progress import Antichain

TWIN_NEEDS = ("MutableAntichain",)


# an order written out here, independent of timely.progress.timestamp
def le(a, b) -> bool:
    if isinstance(a, int):
        return a <= b
    return len(a) == len(b) and all(x <= y for x, y in zip(a, b))


def lt(a, b) -> bool:
    return a != b and le(a, b)


def minimal(elements) -> set:
    elements = set(elements)
    return {x for x in elements if not any(lt(y, x) for y in elements)}


ints = st.integers(0, 6)
pairs = st.tuples(st.integers(0, 3), st.integers(0, 3))
triples = st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2))
universes = st.sampled_from([("int", ints), ("pair", pairs), ("triple", triples)])


def probes(kind):
    if kind == "int":
        return list(range(-1, 9))
    if kind == "pair":
        return [(a, b) for a in range(5) for b in range(5)]
    return [(a, b, c) for a in range(4) for b in range(4) for c in range(4)]


# ---- Antichain ----------------------------------------------------------------------------


@given(st.data())
def test_antichain_keeps_exactly_the_minimal_elements(data):
    kind, times = data.draw(universes)
    inserted = data.draw(st.lists(times, max_size=25))
    a = Antichain()
    for i, x in enumerate(inserted):
        held_before = set(a)
        added = a.insert(x)
        assert added == (not any(le(y, x) for y in held_before))
        assert set(a) == minimal(inserted[:i + 1])
        assert len(a) == len(set(a))
    assert set(a) == minimal(inserted) == set(Antichain(inserted))
    assert a == Antichain(reversed(inserted))
    assert a.is_empty() == (not inserted)
    assert sorted(a.elements()) == sorted(minimal(inserted))
    for p in probes(kind):
        assert a.less_equal(p) == any(le(x, p) for x in inserted)
        assert a.less_than(p) == any(lt(x, p) for x in minimal(inserted))
    assert a.dominates(inserted)


def test_antichain_literal():
    a = Antichain([(2, 1), (1, 3), (3, 3)])
    assert set(a) == {(2, 1), (1, 3)}
    assert a.less_equal((1, 4)) and not a.less_equal((0, 9)) and not a.less_than((2, 1))
    assert a.insert((3, 0)) and set(a) == {(2, 1), (1, 3), (3, 0)}
    assert not a.insert((3, 3))
    assert a.insert((0, 0)) and set(a) == {(0, 0)}
    assert Antichain([5, 3, 9, 3]).elements() == [3]
    assert Antichain().is_empty() and len(Antichain()) == 0


# ---- MutableAntichain -------------------------------------------------------------------
deltas = st.sampled_from([-2, -1, -1, 0, 1, 1, 1, 2])


@st.composite
def update_histories(draw):
    """(kind, batches): random signed updates, plus retractions of earlier ones so
    counts return to zero and frontiers retreat as well as advance."""
    kind, times = draw(universes)
    batches, history = [], []
    for _ in range(draw(st.integers(1, 8))):
        batch = draw(st.lists(st.tuples(times, deltas), max_size=8))
        if history:
            back = draw(st.lists(st.sampled_from(history), max_size=4))
            batch += [(t, -d) for t, d in back]
        batch = draw(st.permutations(batch))
        history += batch
        batches.append(batch)
    return kind, batches


@given(update_histories())
def test_mutable_antichain_frontier_is_minimal_positive(twin, history):
    kind, batches = history
    m = twin.MutableAntichain()
    counts: Counter = Counter()
    assert m.frontier() == [] and m.is_empty()
    for batch in batches:
        before = list(m.frontier())
        changes = list(m.update_iter(batch))
        for t, d in batch:
            counts[t] += d
        expected = minimal(t for t, c in counts.items() if c > 0)

        frontier = m.frontier()
        assert len(frontier) == len(set(frontier)), f"duplicate in frontier {frontier}"
        assert set(frontier) == expected

        # the reported changes, replayed onto the old frontier, give the new one
        assert all(d in (1, -1) for _, d in changes), changes
        replay = Counter({t: 1 for t in before})
        for t, d in changes:
            replay[t] += d
        assert all(c in (0, 1) for c in replay.values()), (before, changes)
        assert {t for t, c in replay.items() if c == 1} == expected
        # ... and are exactly the real changes: nothing reported twice or cancelled
        assert len(changes) == len(set(changes))
        assert set(changes) == ({(t, -1) for t in set(before) - expected}
                                | {(t, 1) for t in expected - set(before)})

        for t in set(counts) | set(p for p in probes(kind)):
            assert m.count_for(t) == counts[t]
        for p in probes(kind):
            assert m.less_equal(p) == any(le(f, p) for f in expected)
            assert m.less_than(p) == any(lt(f, p) for f in expected)
        assert m.is_empty() == (not expected)


def test_mutable_antichain_literal(twin):
    m = twin.MutableAntichain()
    assert sorted(m.update_iter([((1, 3), 1), ((3, 1), 1), ((4, 4), 1)])) == [((1, 3), 1), ((3, 1), 1)]
    assert sorted(m.update_iter([((1, 3), -1)])) == [((1, 3), -1)]
    assert m.frontier() == [(3, 1)] and m.count_for((4, 4)) == 1
    # a change strictly beyond the frontier: nothing moves
    assert list(m.update_iter([((5, 5), 3)])) == []
    # a repeat and its cancellation in one batch: nothing moves
    assert list(m.update_iter([((0, 0), 1), ((0, 0), -1), ((2, 2), 0)])) == []
    assert m.count_for((0, 0)) == 0 and m.frontier() == [(3, 1)]
    # removing the last frontier element exposes what was behind it
    assert sorted(m.update_iter([((3, 1), -1)])) == [((3, 1), -1), ((4, 4), 1)]


def test_mutable_antichain_transiently_negative(twin):
    m = twin.MutableAntichain()
    assert list(m.update_iter([(2, -1)])) == []      # negative: not in the frontier
    assert m.count_for(2) == -1 and m.is_empty()
    assert list(m.update_iter([(5, 1)])) == [(5, 1)]
    assert list(m.update_iter([(2, 1)])) == []       # back to zero: still nothing at 2
    assert m.frontier() == [5]
    assert list(m.update_iter([(2, 1)])) and m.frontier() == [2]
    assert not m.less_than(2) and m.less_than(3) and m.less_equal(2) and not m.less_equal(1)


def test_mutable_antichain_new_bottom(twin):
    m = twin.MutableAntichain.new_bottom((0, 0))
    assert m.frontier() == [(0, 0)] and m.count_for((0, 0)) == 1
    assert sorted(m.update_iter([((0, 0), -1), ((0, 1), 1), ((1, 0), 1)])) == [
        ((0, 0), -1), ((0, 1), 1), ((1, 0), 1)]
