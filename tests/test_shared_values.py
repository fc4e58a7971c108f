"""Decoded events' shared field values (``timely.connectors.kafka.shared_values``), both twins.

Protects: sharing never changes an event (equal values, the same types: a bool stays a
bool, a float equal to an int stays a float), equal strs and ints become one object,
a tuple somebody else holds is never changed in place, and the tables stay bounded.
"""
from __future__ import annotations

import gc
import importlib
import sys
import weakref

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timely.connectors.kafka.projection import Rows, json_projection
from timely.connectors.kafka.shared_values import SharedValues, py_row, py_rows

TWINS = {"python": (py_row, py_rows)}
_compiled = importlib.import_module("timely.connectors.kafka._cshared_values")
TWINS["cython"] = (_compiled.row, _compiled.rows)

values = st.one_of(st.text(max_size=4), st.integers(-300, 300), st.integers(), st.booleans(),
                   st.floats(allow_nan=False), st.none(), st.binary(max_size=3))
events = st.lists(st.tuples(values, values, values), max_size=30)


@pytest.fixture(params=sorted(TWINS))
def twin(request):
    return TWINS[request.param]


@given(events)
def test_sharing_changes_no_value_and_no_type(events):
    for row, rows in TWINS.values():
        strs, ints = {}, {}
        got = rows([tuple(e) for e in events], strs, ints, Rows)
        assert type(got) is Rows and got == events
        assert [[type(v) for v in e] for e in got] == [[type(v) for v in e] for e in events]
        # equal strs and ints are one object, whichever event they came in
        seen: dict = {}
        for e in got:
            for v in e:
                if type(v) in (str, int):
                    assert seen.setdefault((type(v), v), v) is v
        assert [row(e, strs, ints) for e in events] == events


def test_a_bool_or_a_float_is_not_taken_for_an_equal_int(twin):
    row, _ = twin
    strs, ints = {}, {}
    assert row((1, 0), strs, ints) == (1, 0)
    got = row((True, 1.0, False), strs, ints)
    assert [type(v) for v in got] == [bool, float, bool]


def test_a_tuple_held_elsewhere_is_not_changed(twin):
    row, rows = twin
    strs, ints = {}, {}
    first = row(("page-" + str(7), 10_000 + 7), strs, ints)
    held = ("page-" + str(7), 10_000 + 7)           # equal values, other objects
    items = list(held)
    got = row(held, strs, ints)
    assert got == held and got[0] is first[0] and got[1] is first[1]
    assert held[0] is items[0] and held[1] is items[1]
    [got] = rows([held], strs, ints, list)
    assert got[0] is first[0] and held[0] is items[0]


def test_a_fresh_tuple_is_shared_in_place_and_every_reference_stays_right(twin):
    row, rows = twin
    strs, ints = {}, {}
    got = rows((("p" + str(i % 3), 1000 + i % 2) for i in range(1000)), strs, ints, list)
    assert len(strs) == 3 and len(ints) == 2
    assert {id(e[0]) for e in got} == {id(v) for v in strs.values()}
    before = sys.getrefcount(strs["p1"])
    del got
    assert sys.getrefcount(strs["p1"]) < before       # the events' references were released


def test_the_compiled_twin_keeps_the_collector_off_atomic_events_only():
    _, rows = TWINS["cython"]
    fresh = rows((("p" + str(i), 1000 + i, 0.5, None, True) for i in range(3)), {}, {}, list)
    assert not any(gc.is_tracked(e) for e in fresh)     # nothing in them can make a cycle
    # an event holding an object can be part of a cycle: the collector must still see it
    class Box:
        pass
    box = Box()
    [held] = rows([("p", box)], {}, {}, list)
    box.event = held
    gone = weakref.ref(box)
    del held, box
    gc.collect()
    assert gone() is None               # the cycle box -> event -> box was found and freed


def test_the_tables_start_again_past_their_limit():
    shared = SharedValues(limit=10)
    for i in range(100):
        shared.row((f"id-{i}", 10_000 + i))
    assert len(shared.strs) <= 11 and len(shared.ints) <= 11
    assert shared.row(("id-5", 5)) == ("id-5", 5)


def test_the_json_source_shares_its_events_values():
    decode = json_projection(("page", "user"), lambda vs: ["slow"] * len(vs))
    items = decode([b'[{"page": "/a", "user": 1000}, {"page": "/a", "user": 1000}]', b'{"page": "/a", "user": 1000}'])
    assert items == [[("/a", 1000), ("/a", 1000)], ("/a", 1000)]
    (a, b), c = items
    assert a[0] is b[0] is c[0] and a[1] is b[1] is c[1]
