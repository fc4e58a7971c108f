"""ChangeBatch, both twins.

Protects: whatever sequence of ``update``/``extend`` calls (repeated keys that force
compaction, zero deltas, cancellations) and whenever it is read (iteration, ``len``,
``is_empty``, ``drain``), a batch holds exactly the per-key sums of its updates with
the zeros dropped, one entry per key; ``drain`` returns that and leaves the batch empty;
lazy compaction keeps the held entries within a constant factor of the distinct keys.
"""
from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

TWIN_NEEDS = ("ChangeBatch",)

keys = st.one_of(st.integers(0, 7), st.sampled_from(["a", "b", "c"]),
                 st.tuples(st.integers(0, 3), st.integers(0, 3)))
deltas = st.sampled_from([-3, -2, -1, -1, 0, 1, 1, 1, 2, 3])
ops = st.one_of(
    st.tuples(st.just("update"), keys, deltas),
    st.tuples(st.just("extend"), st.lists(st.tuples(keys, deltas), max_size=40)),
    st.tuples(st.just("read"), st.sampled_from(["iter", "len", "eq"])),
    st.tuples(st.just("drain")),
)


def expected_of(acc: Counter) -> dict:
    return {k: v for k, v in acc.items() if v}


def check_contents(batch, acc: Counter, how: str) -> None:
    expected = expected_of(acc)
    if how == "iter":
        items = list(batch)
        assert all(d != 0 for _, d in items), items
        assert len({k for k, _ in items}) == len(items), f"a key appears twice: {items}"
        assert dict(items) == expected
    elif how == "len":
        assert len(batch) == len(expected)
    else:
        assert dict(iter(batch)) == expected


@given(st.lists(ops, max_size=60))
def test_batch_equals_dict_sum(twin, program):
    batch = twin.ChangeBatch()
    acc: Counter = Counter()
    for op in program:
        if op[0] == "update":
            _, k, d = op
            batch.update(k, d)
            acc[k] += d
        elif op[0] == "extend":
            batch.extend(op[1])
            for k, d in op[1]:
                acc[k] += d
        elif op[0] == "read":
            check_contents(batch, acc, op[1])
        else:
            assert dict(batch.drain()) == expected_of(acc)
            acc.clear()
            assert list(batch) == [] and len(batch) == 0
    drained = batch.drain()
    assert all(d != 0 for _, d in drained)
    assert dict(drained) == expected_of(acc)
    assert len({k for k, _ in drained}) == len(drained)
    assert list(batch) == [] and len(batch) == 0 and batch.drain() == []


@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from([-1, 1, 0, 2])),
                min_size=1, max_size=300))
def test_many_repeats_compact(twin, updates):
    """Hundreds of updates over five keys: crosses every compaction threshold."""
    batch = twin.ChangeBatch()
    acc: Counter = Counter()
    for i, (k, d) in enumerate(updates):
        batch.update(k, d)
        acc[k] += d
        if hasattr(batch, "unstable_len"):
            assert batch.unstable_len() <= 64, "lazy compaction let the batch grow unbounded"
        if i % 97 == 96:
            check_contents(batch, acc, "iter")
    assert dict(batch.drain()) == expected_of(acc)


@given(st.lists(ops, max_size=60))
def test_is_empty_agrees_with_contents(twin, program):
    batch = twin.ChangeBatch()
    acc: Counter = Counter()
    for op in program:
        if op[0] == "update":
            batch.update(op[1], op[2])
            acc[op[1]] += op[2]
        elif op[0] == "extend":
            batch.extend(op[1])
            for k, d in op[1]:
                acc[k] += d
        elif op[0] == "read":
            check_contents(batch, acc, op[1])
        else:
            batch.drain()
            acc.clear()
        assert batch.is_empty() == (not expected_of(acc))


def test_is_empty_after_cancellation_of_compacted_update(twin):
    """A tail that cancels the consolidated prefix leaves the batch empty."""
    batch = twin.ChangeBatch()
    batch.update("a", 1)
    assert not batch.is_empty()        # compacts: "a" is now the consolidated prefix
    batch.update("a", -1)              # cancels it in the unconsolidated tail
    assert batch.is_empty()
    assert list(batch) == []


def test_literal(twin):
    batch = twin.ChangeBatch()
    assert batch.is_empty() and len(batch) == 0 and list(batch) == []
    batch.update("a", 3)
    batch.update("b", 1)
    batch.update("a", -3)
    batch.update("c", 0)
    assert not batch.is_empty()
    assert list(batch) == [("b", 1)] and len(batch) == 1
    assert batch.drain() == [("b", 1)]
    assert batch.is_empty() and batch.drain() == []


def test_zero_deltas_are_no_updates(twin):
    batch = twin.ChangeBatch()
    for _ in range(100):
        batch.update((1, 2), 0)
    batch.extend([((1, 2), 0)] * 100)
    assert batch.is_empty() and list(batch) == []


def test_extend_equals_updates(twin):
    updates = [((i % 3, i % 5), (-1) ** i * (i % 4)) for i in range(200)]
    a, b = twin.ChangeBatch(), twin.ChangeBatch()
    a.extend(updates)
    for k, d in updates:
        b.update(k, d)
    assert dict(a.drain()) == dict(b.drain())
    c = twin.ChangeBatch(updates)                  # the constructor extends too
    expected = Counter()
    for k, d in updates:
        expected[k] += d
    assert dict(c.drain()) == expected_of(expected)


def test_new_from_drain_into_clear(twin):
    a = twin.ChangeBatch.new_from(("x", 1), 5)
    assert list(a) == [(("x", 1), 5)]
    b = twin.ChangeBatch()
    b.update(("x", 1), -2)
    b.update("y", 1)
    a.drain_into(b)
    assert a.is_empty() and list(a) == []
    assert dict(b) == {("x", 1): 3, "y": 1}
    b.clear()
    assert b.is_empty() and list(b) == []


def test_equality_is_by_contents(twin):
    a, b = twin.ChangeBatch(), twin.ChangeBatch()
    a.update(1, 1)
    a.update(2, 2)
    b.update(2, 1)
    b.update(1, 1)
    b.update(2, 1)
    b.update(3, 0)
    assert a == b
    b.update(3, 1)
    assert a != b
