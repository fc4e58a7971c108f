"""``kafka_source(fields=...)``'s two ways to the fields' tuples give the same items.

JSON values are decoded straight into the tuples (``json_projection``, msgspec) where
they can be; anything else takes the decode-then-project path. A reader relies on
getting, for any batch of values, exactly what decode-then-project gives: the tuple
of an event, a ``Rows`` of tuples for a packed value, and an ``Undecodable`` naming
the problem for a bad value or an event without the fields, in the value's place.
"""
from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from timely.connectors.epochs import JSON
from timely.connectors.kafka.projection import Rows, json_projection, projection

KEYS = ["page", "user", "ts", "weird key", "n"]
scalars = (st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=6)
events = st.dictionaries(st.sampled_from(KEYS), values, max_size=5)
bad = st.sampled_from([b"{", b"1,2", b'{"page": 1},{"user": 2}', b"[1", b"null", b"3", b'"s"', b"",
                       b"[{}]", b'[{"page": 1, "user": 2}, 7]', b'{"page": NaN}', b"\xff"])


# msgspec encodes integers past 64 bits, which orjson refuses
one_value = (events.map(msgspec.json.encode) | st.lists(events, max_size=4).map(msgspec.json.encode) | bad)


def same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert type(x) is type(y), (x, y)
        if type(x) in (tuple, Rows):
            assert x == y
        else:
            assert repr(x) == repr(y)


@given(st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True),
       st.lists(one_value, max_size=8))
def test_decoding_into_the_fields_gives_what_decoding_then_projecting_gives(fields, batch):
    fields = tuple(fields)
    project = projection(fields)

    def slow(vs):
        return project(JSON.decode_each(vs))
    same(json_projection(fields, slow)(batch), slow(batch))


@given(st.lists(st.sampled_from(KEYS[:2]), min_size=1, max_size=2, unique=True),
       st.lists(st.fixed_dictionaries({"page": st.integers(-(2 ** 70), 2 ** 70), "user": st.text(max_size=3)}),
                min_size=1, max_size=5))
def test_integers_past_64_bits_come_exact_both_ways(fields, evs):
    batch = [msgspec.json.encode(e) for e in evs]
    want = [tuple(e[f] for f in fields) for e in evs]
    project = projection(tuple(fields))
    assert json_projection(tuple(fields), lambda vs: project(JSON.decode_each(vs)))(batch) == want
    assert project(JSON.decode_each(batch)) == want


def test_a_packed_value_and_a_bad_event_in_one_batch():
    fields = ("page", "user")
    project = projection(fields)
    fast = json_projection(fields, lambda vs: project(JSON.decode_each(vs)))
    got = fast([b'[{"page": "/a", "user": 1, "ts": 0}, {"user": 2, "page": "/b"}]', b'{"page": "/c"}',
                b'{"user": 3, "page": "/d"}', None])
    assert got[0] == [("/a", 1), ("/b", 2)] and type(got[0]) is Rows
    assert repr(got[1]) == "Undecodable(\"event has no field 'user'; it has fields ['page']\")"
    assert got[2] == ("/d", 3)
    assert type(got[3]).__name__ == "Undecodable" and got[3].problem.startswith("value does not decode as json")
