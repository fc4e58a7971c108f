"""Timestamps and path summaries (timely.progress.timestamp).

Protects: the product partial order on ints and int tuples (with incomparable pairs such
as (3, 1) and (1, 3)) and Python's ``<`` being a linear extension of it (worklists and
frontier rebuilds sort by it); ``results_in``/``followed_by`` (coordinate-wise, None
past TIME_MAX, composition law, monotone and advancing); ``is_identity``, ``minimum``,
``identity_summary``; and the documented protocol for user-defined timestamp/summary
objects, end to end through Antichain, MutableAntichain and Tracker (pure twin).
"""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timely.progress import (TIME_MAX, Antichain, Builder, Location, Source, Target,
                             followed_by, identity_summary, is_identity, less_equal,
                             less_than, minimum, results_in)

# ---- the product partial order ---------------------------------------------------------


def test_int_order():
    assert less_equal(3, 3) and less_equal(2, 3) and not less_equal(4, 3)
    assert less_than(2, 3) and not less_than(3, 3) and not less_than(4, 3)


def test_tuple_product_order_has_incomparables():
    assert not less_equal((3, 1), (1, 3))
    assert not less_equal((1, 3), (3, 1))
    assert not less_than((3, 1), (1, 3))
    assert not less_than((1, 3), (3, 1))
    assert less_equal((1, 3), (3, 3)) and less_than((1, 3), (3, 3))
    assert less_equal((1, 3), (1, 3)) and not less_than((1, 3), (1, 3))
    assert less_equal((0, 0, 0), (0, 5, 0)) and not less_equal((0, 5, 0), (0, 0, 1))
    # lexicographic < is not the partial order: (1, 3) < (3, 1) lexicographically only
    assert (1, 3) < (3, 1) and not less_than((1, 3), (3, 1))


pairs = st.tuples(st.integers(0, 6), st.integers(0, 6))
triples = st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4))
small = st.integers(0, 10**6)


@given(a=pairs | triples, b=pairs | triples, c=pairs | triples)
def test_tuple_order_laws(a, b, c):
    if len(a) != len(b) or len(b) != len(c):
        return
    assert less_equal(a, b) == all(x <= y for x, y in zip(a, b))
    assert less_than(a, b) == (less_equal(a, b) and a != b)
    assert less_equal(a, a)
    if less_equal(a, b) and less_equal(b, a):
        assert a == b
    if less_equal(a, b) and less_equal(b, c):
        assert less_equal(a, c)
    # Python's (lexicographic) < extends the product order
    if less_than(a, b):
        assert a < b


@given(a=small, b=small)
def test_int_order_is_total(a, b):
    assert less_equal(a, b) == (a <= b)
    assert less_than(a, b) == (a < b)


# ---- results_in / followed_by ------------------------------------------------------------


def test_results_in_literal():
    assert results_in(0, 7) == 7
    assert results_in(3, 4) == 7
    assert results_in((0, 1), (4, 7)) == (4, 8)
    assert results_in((2, 0), (4, 7)) == (6, 7)
    assert results_in((0, 0), (4, 7)) == (4, 7)


def test_results_in_none_past_time_max():
    assert results_in(0, TIME_MAX) == TIME_MAX
    assert results_in(1, TIME_MAX - 1) == TIME_MAX
    assert results_in(1, TIME_MAX) is None
    assert results_in(TIME_MAX, 1) is None
    assert results_in((0, 1), (TIME_MAX, 0)) == (TIME_MAX, 1)
    assert results_in((1, 0), (TIME_MAX, 0)) is None
    assert results_in((0, 1), (0, TIME_MAX)) is None


def test_followed_by_literal_and_overflow():
    assert followed_by(1, 2) == 3
    assert followed_by(0, 0) == 0
    assert followed_by((0, 1), (1, 0)) == (1, 1)
    assert followed_by((1, 2), (3, 4)) == (4, 6)
    assert followed_by(TIME_MAX, 0) == TIME_MAX
    assert followed_by(TIME_MAX, 1) is None
    assert followed_by((TIME_MAX, 0), (0, 1)) == (TIME_MAX, 1)
    assert followed_by((TIME_MAX, 0), (1, 0)) is None


@given(s1=pairs, s2=pairs, t=pairs, u=pairs)
def test_summary_laws_pairs(s1, s2, t, u):
    r = results_in(s1, t)
    assert r is not None and less_equal(t, r)                       # advances
    assert results_in(followed_by(s1, s2), t) == results_in(s2, r)  # composition
    if less_equal(t, u):                                            # monotone in the time
        assert less_equal(r, results_in(s1, u))
    if less_equal(s1, s2):                                          # monotone in the summary
        assert less_equal(r, results_in(s2, t))
    assert results_in(identity_summary(t), t) == t


@given(s1=small, s2=small, t=st.integers(0, TIME_MAX))
def test_summary_laws_ints_near_time_max(s1, s2, t):
    r = results_in(s1, t)
    if t + s1 > TIME_MAX:
        assert r is None
        assert results_in(followed_by(s1, s2), t) is None
        return
    assert r == t + s1 and less_equal(t, r)
    composed = followed_by(s1, s2)
    assert composed == s1 + s2
    assert results_in(composed, t) == results_in(s2, r)


def test_is_identity_minimum_identity_summary():
    assert is_identity(0) and is_identity((0, 0)) and is_identity((0, 0, 0))
    assert not is_identity(1) and not is_identity((0, 1)) and not is_identity((1, 0))
    assert minimum(17) == 0 and minimum((5, 6)) == (0, 0) and minimum((1, 2, 3)) == (0, 0, 0)
    assert identity_summary(17) == 0 and identity_summary((5, 6)) == (0, 0)
    assert is_identity(identity_summary((9, 9, 9)))


@pytest.mark.parametrize("bad", [-1, (0, -1), (-2, 0)])
def test_builder_rejects_negative_summaries(bad):
    b = Builder()
    with pytest.raises(ValueError):
        b.add_node(1, 1, 1, [[[bad]]])


# ---- a user-defined timestamp: divisibility order -------------------------------------
LIMIT = 1000


class Div:
    """A positive int, ordered by divisibility: a <= b iff a divides b.

    2 and 3 are incomparable, 6 is above both: a partial order unlike the product order,
    so only code that goes through the protocol methods handles it right.
    """

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n

    def less_equal(self, other: "Div") -> bool:
        return other.n % self.n == 0

    def less_than(self, other: "Div") -> bool:
        return self.n != other.n and other.n % self.n == 0

    def __lt__(self, other: "Div") -> bool:   # numeric order extends divisibility
        return self.n < other.n

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Div) and other.n == self.n

    def __hash__(self) -> int:
        return hash(("Div", self.n))

    def __repr__(self) -> str:
        return f"Div({self.n})"

    @classmethod
    def minimum(cls) -> "Div":
        return cls(1)

    @classmethod
    def identity_summary(cls) -> "Mul":
        return Mul(1)


class Mul:
    """A summary multiplying by k >= 1; a time past LIMIT cannot travel it (None)."""

    __slots__ = ("k",)

    def __init__(self, k: int) -> None:
        self.k = k

    def results_in(self, time: Div):
        n = time.n * self.k
        return Div(n) if n <= LIMIT else None

    def followed_by(self, other: "Mul"):
        k = self.k * other.k
        return Mul(k) if k <= LIMIT else None

    def less_equal(self, other: "Mul") -> bool:
        return other.k % self.k == 0

    def less_than(self, other: "Mul") -> bool:
        return self.k != other.k and other.k % self.k == 0

    def is_identity(self) -> bool:
        return self.k == 1

    def __lt__(self, other: "Mul") -> bool:
        return self.k < other.k

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mul) and other.k == self.k

    def __hash__(self) -> int:
        return hash(("Mul", self.k))

    def __repr__(self) -> str:
        return f"Mul({self.k})"


def D(*ns):
    return {Div(n) for n in ns}


def test_protocol_dispatch():
    assert less_equal(Div(2), Div(6)) and not less_equal(Div(2), Div(3))
    assert less_than(Div(3), Div(6)) and not less_than(Div(6), Div(6))
    assert results_in(Mul(3), Div(5)) == Div(15)
    assert results_in(Mul(2), Div(LIMIT)) is None
    assert followed_by(Mul(2), Mul(3)) == Mul(6)
    assert is_identity(Mul(1)) and not is_identity(Mul(2))
    assert minimum(Div(7)) == Div(1) and identity_summary(Div(7)) == Mul(1)


def test_user_timestamp_antichain():
    a = Antichain([Div(4), Div(6), Div(12), Div(2), Div(3), Div(9)])
    assert set(a) == D(2, 3)
    assert a.less_equal(Div(10)) and a.less_equal(Div(9)) and not a.less_equal(Div(5))
    assert not a.less_than(Div(2)) and a.less_than(Div(4))
    assert not a.insert(Div(8)) and a.insert(Div(5)) and set(a) == D(2, 3, 5)
    assert a.insert(Div(1)) and set(a) == D(1)


def test_user_timestamp_mutable_antichain(pure):
    m = pure.MutableAntichain()
    assert set(m.update_iter([(Div(6), 1), (Div(2), 1), (Div(3), 1)])) == {(Div(2), 1), (Div(3), 1)}
    assert set(m.frontier()) == D(2, 3)
    assert m.update_iter([(Div(2), -1)]) == [(Div(2), -1)]
    assert set(m.frontier()) == D(3)                      # 6 is still above 3
    assert set(m.update_iter([(Div(3), -1)])) == {(Div(3), -1), (Div(6), 1)}
    assert m.update_iter([(Div(12), 1)]) == []            # 6 divides 12
    assert set(m.update_iter([(Div(5), -1)])) == set()    # transiently negative, not minimal
    assert m.count_for(Div(5)) == -1
    assert set(m.update_iter([(Div(5), 2)])) == {(Div(5), 1)}
    assert set(m.frontier()) == D(5, 6)
    assert m.less_equal(Div(30)) and not m.less_equal(Div(7)) and not m.less_than(Div(5))


@given(st.lists(st.lists(st.tuples(st.integers(1, 24), st.integers(-2, 2)), max_size=6),
                max_size=6))
def test_user_timestamp_mutable_antichain_random(pure, batches):
    m = pure.MutableAntichain()
    counts: Counter = Counter()
    for batch in batches:
        before = Counter(m.frontier())
        changes = m.update_iter([(Div(n), d) for n, d in batch])
        for n, d in batch:
            counts[n] += d
        positive = {n for n, c in counts.items() if c > 0}
        expected = {Div(n) for n in positive
                    if not any(p != n and n % p == 0 for p in positive)}
        assert set(m.frontier()) == expected
        for t, d in changes:
            before[t] += d
        assert {t for t, c in before.items() if c} == expected
        assert all(c in (0, 1) for c in before.values())


def _div_loop(pure, feedback):
    """node 0: the scope (1 in, 1 out); 1: loop head (2 in, 1 out, identity); 2: the
    feedback operator, multiplying by each summary of ``feedback``."""
    b = Builder(minimum=Div(1))
    b.add_node(0, 1, 1, [[[]]])
    b.add_node(1, 2, 1, [[[Mul(1)]], [[Mul(1)]]])
    b.add_node(2, 1, 1, [[feedback]])
    b.add_edge(Source(0, 0), Target(1, 0))
    b.add_edge(Source(1, 0), Target(2, 0))
    b.add_edge(Source(2, 0), Target(1, 1))
    b.add_edge(Source(1, 0), Target(0, 0))
    return b


def test_user_timestamp_tracker(pure):
    tracker = _div_loop(pure, [Mul(2), Mul(3)]).build(tracker_class=pure.Tracker)
    assert type(tracker) is pure.Tracker

    def frontiers():
        return {loc: set(tracker.implications(loc).frontier()) for loc in (
            Location.source(0, 0), Location.target(1, 0), Location.target(1, 1),
            Location.source(1, 0), Location.target(2, 0), Location.source(2, 0),
            Location.target(0, 0))}

    tracker.update_source(Source(0, 0), Div(5), 1)
    tracker.propagate_all()
    assert frontiers() == {
        Location.source(0, 0): D(5), Location.target(1, 0): D(5),
        Location.source(1, 0): D(5), Location.target(2, 0): D(5),
        Location.source(2, 0): D(10, 15), Location.target(1, 1): D(10, 15),
        Location.target(0, 0): D(5)}
    # pointstamps at node 0 (the scope's own inputs) are the parent's business: timely
    # applies no output summaries to them, so they do not show in output_changes
    assert dict(tracker.output_changes[0].drain()) == {}

    # a message at the loop head's feedback input, time 2: incomparable with 5
    tracker.update_target(Target(1, 1), Div(2), 1)
    tracker.propagate_all()
    assert frontiers() == {
        Location.source(0, 0): D(5), Location.target(1, 0): D(5),
        Location.source(1, 0): D(2, 5), Location.target(2, 0): D(2, 5),
        Location.source(2, 0): D(4, 6, 10, 15), Location.target(1, 1): D(2, 15),
        Location.target(0, 0): D(2, 5)}
    assert dict(tracker.output_changes[0].drain()) == {Div(2): 1}
    assert tracker.is_global(Location.target(1, 1), Div(2))
    assert not tracker.is_global(Location.target(1, 1), Div(4))   # 2 < 4 holds it back

    # both retire: the scope input's capability drops, the message is consumed
    tracker.update_source(Source(0, 0), Div(5), -1)
    tracker.update_target(Target(1, 1), Div(2), -1)
    tracker.propagate_all()
    assert all(not f for f in frontiers().values())
    assert dict(tracker.output_changes[0].drain()) == {Div(2): -1}


def test_user_timestamp_tracker_drops_times_past_the_limit(pure):
    tracker = _div_loop(pure, [Mul(2)]).build(tracker_class=pure.Tracker)
    tracker.update_target(Target(2, 0), Div(LIMIT - 1), 1)     # 999 * 2 > LIMIT
    tracker.propagate_all()
    assert set(tracker.implications(Location.target(2, 0)).frontier()) == D(LIMIT - 1)
    assert tracker.implications(Location.source(2, 0)).frontier() == []
    assert tracker.implications(Location.target(0, 0)).frontier() == []


def test_user_timestamp_zero_cycle_rejected(pure):
    with pytest.raises(ValueError, match="does not advance"):
        _div_loop(pure, [Mul(1)]).build(tracker_class=pure.Tracker)
    # an antichain holding the identity is as bad as the identity alone
    with pytest.raises(ValueError, match="does not advance"):
        _div_loop(pure, [Mul(2), Mul(1)]).build(tracker_class=pure.Tracker)
