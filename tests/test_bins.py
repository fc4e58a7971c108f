"""Megaphone bins: the stable key hash (both twins), group_by_bin, bins, RoutingTable.

Protects: ``stable_hash64`` is a cross-process contract (every worker must route a key
to the same bin), so (a) the compiled twin (``timely._chash``) returns exactly
what the pure-Python twin returns for every key, big ints, bools, every float bit
pattern, any text, bytes, None and nested tuples included, and raises the same
``TypeError`` for anything else; (b) both follow the rules of the ``timely.hashing``
module docstring; (c) the known answers below never change. ``group_by_bin`` returns the same
dict in both twins (same bins in the same order, records in input order, the same
exceptions from the key function or ``record[0]``). ``bin_shift``, ``bin_of`` and
``RoutingTable`` behave as documented and refuse bad bin counts and indexes with a
clear ``ValueError``; 10,000 distinct strings leave none of 256 bins empty.

A compiled twin that is not importable makes the twin tests FAIL (a broken build must be
noticed) unless ``TIMELY_NO_CYTHON=1`` says it was skipped on purpose: then they skip.
"""
from __future__ import annotations

import enum
import math
import struct
import sys
from operator import itemgetter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timely import hashing
from timely.megaphone import bins
from timely.megaphone.bins import (MASK, RoutingTable, bin_of, bin_shift, py_group_by_bin,
                                   pack_runs, py_group_by_target, py_stable_hash64, runs_of)
from timely._twin import pure_python_forced
from twin_calls import outcome

PURE_ONLY = pure_python_forced()
# conftest fails the compiled-twin tests when it is not importable, or skips them when
# TIMELY_NO_CYTHON=1 says the build was left out on purpose.
TWIN_NEEDS = ("bins",)


# ---- strategies ----------------------------------------------------------------------
EDGE_INTS = [0, 1, -1, 2, 255, 256, 2**31 - 1, -2**31, 2**32, 2**63 - 1, 2**63, 2**63 + 1,
             -2**63, -2**63 + 1, -2**63 - 1, 2**64 - 2, 2**64 - 1, 2**64, 2**64 + 1, -2**64,
             2**70, -2**70, 10**19, 10**20, -10**20, 2**128 - 1, 10**600 - 1, 10**600,
             -10**600, 2**13000 + 1]
# More than 4300 digits: ``repr`` refuses them (sys.get_int_max_str_digits), so they stay
# out of hypothesis (its reports repr the example) and get their own ids.
HUGE_INTS = [10**5000, -10**5000 - 7, 3**20000, -(2**40000)]


def key_id(key) -> str:
    if type(key) is int and key.bit_length() > 10_000:
        return f"int of {key.bit_length()} bits"
    try:
        return repr(key)[:24]
    except ValueError:                  # a huge int inside
        return f"{type(key).__name__} holding a huge int"
ints = st.one_of(
    st.integers(),                                              # hypothesis' own mix
    st.integers(-2**63, 2**64 - 1),                             # the C fast paths
    st.integers(-2**200, 2**200),                               # beyond 64 bits
    st.builds(lambda sign, bits, low: sign * ((1 << bits) + low),  # near each power of two
              st.sampled_from([1, -1]), st.integers(0, 140), st.integers(-3, 3)),
    st.sampled_from(EDGE_INTS),
)


def _from_bits(u: int) -> float:
    return struct.unpack("<d", struct.pack("<Q", u))[0]


EDGE_FLOATS = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 3.0, 1e20, -1e20, 1e300, -1e300, 5e-324,
               2.0**63, -2.0**63, 2.0**64, -2.0**64, math.nextafter(2.0**63, 0.0),
               math.nextafter(2.0**64, 0.0), math.nextafter(-2.0**63, -math.inf),
               math.inf, -math.inf, math.nan, -math.nan, _from_bits(0x7FF0000000000001),
               _from_bits(0xFFF8000000000123), 1.7976931348623157e308]
floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),             # includes -0.0 and nan
    st.integers(-2**80, 2**80).map(float),                      # integral: the int rule
    st.integers(0, 2**64 - 1).map(_from_bits),                  # any bit pattern (nan payloads)
    st.sampled_from(EDGE_FLOATS),
)
# Lone surrogates have no UTF-8 (both twins raise UnicodeEncodeError: tested apart).
texts = st.one_of(st.text(st.characters(codec="utf-8")),
                  st.text(st.characters(codec="utf-8", min_codepoint=0x80)), st.just(""))
scalars = st.one_of(ints, st.booleans(), floats, texts, st.binary(), st.none())
keys = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4).map(tuple),
                    max_leaves=12)


# ---- stable_hash64: the twins agree --------------------------------------------------
@given(keys)
def test_hash_twins_agree(compiled_bins, key):
    h = compiled_bins.stable_hash64(key)
    assert type(h) is int and 0 <= h <= MASK
    assert h == py_stable_hash64(key), key


@pytest.mark.parametrize("key", EDGE_INTS + HUGE_INTS + EDGE_FLOATS
                         + [True, False, None, "", b"", (), ((),), (HUGE_INTS[0], (HUGE_INTS[1],))],
                         ids=key_id)
def test_hash_twins_agree_on_edges(compiled_bins, key):
    assert compiled_bins.stable_hash64(key) == py_stable_hash64(key)


class _Str(str):
    pass


class _Int(int):
    pass


class _Color(enum.IntEnum):
    RED = 1


class _Key:
    def __repr__(self):   # an address would make a repr-based hash differ per process
        return f"<key at {id(self):#x}>"


UNSUPPORTED = [[1], [], {}, {1: 2}, {1}, frozenset(), object(), _Key(), bytearray(b"x"),
               memoryview(b"x"), 1j, range(3), _Str("a"), _Int(1), _Color.RED, (1, [2]),
               ((1, {}),), int, len]


@pytest.mark.parametrize("key", UNSUPPORTED, ids=lambda k: type(k).__name__)
def test_unsupported_keys_raise_the_same_type_error(bins_twin, key):
    # Exact types only: a str or int subclass may override __eq__ or __str__.
    bad = key
    while type(bad) is tuple:
        bad = next(item for item in bad if type(item) is not int)
    message = (f"cannot hash a {type(bad).__name__} as a key: keys must be int, float, str, "
               f"bytes, None or tuples of them")
    with pytest.raises(TypeError) as info:
        bins_twin.stable_hash64(key)
    assert str(info.value) == message


def test_lone_surrogate_raises_the_same_unicode_error(compiled_bins):
    expected = outcome(py_stable_hash64, "a\ud800")
    assert expected[0] is UnicodeEncodeError
    assert outcome(compiled_bins.stable_hash64, "a\ud800") == expected
    assert outcome(compiled_bins.stable_hash64, ("x", "\udfff")) == outcome(py_stable_hash64, ("x", "\udfff"))


def test_deeply_nested_tuple_raises_recursion_error(bins_twin):
    deep = ()
    for _ in range(100_000):
        deep = (deep,)
    with pytest.raises(RecursionError):
        bins_twin.stable_hash64(deep)
    shallow = ()
    for _ in range(50):
        shallow = (shallow,)
    assert bins_twin.stable_hash64(shallow) == py_stable_hash64(shallow)


# ---- stable_hash64: the documented rules (both twins) --------------------------------
def _spec_mix(x):
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) % 2**64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) % 2**64
    return x ^ (x >> 31)


def _spec_fnv(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) % 2**64
    return h


def test_hash_follows_the_documented_rules(bins_twin):
    h = bins_twin.stable_hash64
    # Standard vectors: FNV-1a 64 and the splitmix64 stream from seed 0.
    assert _spec_fnv(b"a") == 0xAF63DC4C8601EC8C and _spec_fnv(b"foobar") == 0x85944171F73967E8
    assert h(None) == _spec_mix(0x9E3779B97F4A7C15) == 0xE220A8397B1DCDAF
    for k in (0, 1, -1, 12345, -2**63, 2**63, 2**64 - 1):
        assert h(k) == _spec_mix(k % 2**64)
    for k in (2**64, -2**63 - 1, 2**70, -(10**30)):
        assert h(k) == h(str(k)) == _spec_mix(_spec_fnv(str(k).encode()))
    assert h(True) == h(1) and h(False) == h(0) == 0
    for x in (3.0, -0.0, -7.0, 2.0**63, 2.0**64, 1e300):
        assert h(x) == h(int(x))
    for x in (0.5, -1.25, math.inf, -math.inf, math.nan, 5e-324):
        assert h(x) == h(struct.pack("<d", x)) == _spec_mix(_spec_fnv(struct.pack("<d", x)))
    for s in ("", "word", "é", "日本", "😀"):
        assert h(s) == h(s.encode("utf-8")) == _spec_mix(_spec_fnv(s.encode("utf-8")))
    for t in ((), (1,), (1, "a"), ((), (None, b"x"))):
        acc = 0xCBF29CE484222325 ^ len(t)
        for item in t:
            acc = ((acc ^ h(item)) * 0x100000001B3) % 2**64
            acc ^= acc >> 32
        assert h(t) == _spec_mix(acc)


def test_big_int_hash_ignores_the_int_str_digits_limit(bins_twin):
    """``sys.set_int_max_str_digits`` is a per-process setting: the hash must not
    depend on it (nor fail because of it)."""
    h = bins_twin.stable_hash64
    huge = [10**5000, -(3**20000), 2**20000 + 1]
    old = sys.get_int_max_str_digits()
    try:
        sys.set_int_max_str_digits(0)
        unlimited = [py_stable_hash64(str(n)) for n in huge]
        sys.set_int_max_str_digits(640)
        assert [h(n) for n in huge] == unlimited
    finally:
        sys.set_int_max_str_digits(old)


def test_pure_twin_does_not_call_the_compiled_one(monkeypatch):
    """``py_stable_hash64`` recurses into itself (tuples, integral floats) and
    ``py_group_by_bin`` uses it, even though ``stable_hash64`` names the compiled twin:
    otherwise comparing the twins would compare the compiled one with itself."""
    def forbidden(key):
        raise AssertionError("the pure twin called the public stable_hash64")
    monkeypatch.setattr(hashing, "stable_hash64", forbidden)
    monkeypatch.setattr(bins, "stable_hash64", forbidden)
    assert py_stable_hash64((1, ("a", 3.0))) == KNOWN_NESTED
    assert py_group_by_bin([((1, 2.0), 0)], None, 8) == {py_stable_hash64((1, 2)) >> 56: [((1, 2.0), 0)]}


def test_the_module_uses_the_compiled_twin(compiled_bins):
    c = compiled_bins
    if PURE_ONLY:
        assert bins.IMPLEMENTATION == hashing.IMPLEMENTATION == "python"
    else:
        assert bins.IMPLEMENTATION == hashing.IMPLEMENTATION == "cython"
        assert bins.stable_hash64 is c.stable_hash64 and bins.group_by_bin is c.group_by_bin
        assert bins.group_by_target is c.group_by_target


# ---- known answers: the cross-process contract ---------------------------------------
# Computed once with the pure twin. A change here re-routes every key of every running
# dataflow (and breaks mixed-version clusters): never update these values casually.
KNOWN_NESTED = py_stable_hash64((1, ("a", 3)))
KNOWN = [
    (0, 0x0),
    (1, 0x5692161D100B05E5),
    (-1, 0xB4D055FCF2CBBD7B),
    (2**63 - 1, 0x5A682AFE7965DEBD),
    (-2**63, 0x25C26EA579CEA98A),
    (-2**63 - 1, 0x96D523AA3EC4B1D3),
    (2**64 - 1, 0xB4D055FCF2CBBD7B),
    (2**64, 0x65429F6A084DE4E6),
    (2**70, 0xA9029CB663601A47),
    (-2**70, 0x1C216E95FB386833),
    (10**5000, 0x75B4797A86AA6441),
    (True, 0x5692161D100B05E5),
    (False, 0x0),
    ("word", 0xF90BA9A629D4DE95),
    ("", 0xF52A15E9A9B5E89B),
    ("é", 0x233403617480019E),
    (b"x", 0x2C782AC22891188E),
    (b"", 0xF52A15E9A9B5E89B),
    (b"foobar", 0x404DA9E3B74078C2),
    (None, 0xE220A8397B1DCDAF),
    ((), 0xF52A15E9A9B5E89B),
    ((1, "a"), 0xD82156A151563162),
    (((), (None,)), 0x0F870E21F10E7B86),
    (("word", 1, None, b"x", 0.5, (2**70,)), 0x1CB2C012FE9322F2),
    (0.5, 0x17847C978E28EE25),
    (1.5, 0xBFE3F4AC3B0EAAAA),
    (-0.0, 0x0),
    (3.0, 0x1E535EEDE31428F0),
    (1e20, 0xE1A9CABF3F877164),
    (math.inf, 0x9423DFEA9398290B),
    (math.nan, 0x3D77255CF2BEECE3),
]


@pytest.mark.parametrize("key,expected", KNOWN, ids=[key_id(k) for k, _ in KNOWN])
def test_known_answers(bins_twin, key, expected):
    assert bins_twin.stable_hash64(key) == expected


# ---- group_by_bin --------------------------------------------------------------------
def assert_same_groups(got: dict, expected: dict) -> None:
    assert list(got) == list(expected)                 # the same bins, in the same order
    for b in expected:
        assert type(got[b]) is list
        assert len(got[b]) == len(expected[b])
        assert all(x is y for x, y in zip(got[b], expected[b])), b   # the same records


def check_groups(groups: dict, records, key, k: int) -> None:
    """``groups`` is what the definition says: each record in the bin of its key, in
    input order."""
    expected: dict = {}
    for r in records:
        b = bin_of(py_stable_hash64(r[0] if key is None else key(r)), k)
        expected.setdefault(b, []).append(r)
    assert_same_groups(groups, expected)


KS = [0, 1, 8, 16]
record_lists = st.lists(st.tuples(keys, st.integers()), max_size=60)
skewed = st.lists(st.tuples(st.sampled_from(["a", "b", 7, None, (1, 2)]), st.integers()), max_size=60)


@given(st.one_of(record_lists, skewed), st.sampled_from(KS))
def test_group_by_bin_twins_agree(compiled_bins, records, k):
    got = compiled_bins.group_by_bin(records, None, k)
    assert_same_groups(got, py_group_by_bin(records, None, k))
    check_groups(got, records, None, k)


@given(st.lists(st.fixed_dictionaries({"id": keys, "n": st.integers()}), max_size=40),
       st.sampled_from(KS))
def test_group_by_bin_twins_agree_with_a_key_function(compiled_bins, records, k):
    def key(r):
        return r["id"]
    got = compiled_bins.group_by_bin(records, key, k)
    assert_same_groups(got, py_group_by_bin(records, key, k))
    check_groups(got, records, key, k)


@given(st.lists(st.lists(keys, min_size=1, max_size=3), max_size=30), st.sampled_from(KS + [3, 64]))
def test_group_by_bin_twins_agree_on_list_records_and_any_container(compiled_bins, records, k):
    """Records that are not tuples (``record[0]`` by subscription), in a list or tuple."""
    for container in (records, tuple(records)):
        got = compiled_bins.group_by_bin(container, None, k)
        assert_same_groups(got, py_group_by_bin(container, None, k))
    strings = ["".join(map(str, r)) or "x" for r in records]     # record[0]: a character
    assert_same_groups(compiled_bins.group_by_bin(strings, None, k), py_group_by_bin(strings, None, k))


@pytest.mark.parametrize("k", KS + [64])
def test_group_by_bin_empty_and_k_zero(bins_twin, k):
    group = bins_twin.group_by_bin
    assert group([], None, k) == {} and group((), len, k) == {}
    records = [("a", 1), ("b", 2), ("a", 3)]
    if k == 0:
        got = group(records, None, 0)
        assert got == {0: records} and got[0] is not records
    got = group(records, None, k)
    assert sum(len(v) for v in got.values()) == 3
    assert all(0 <= b < 2**k for b in got)
    if k == 64:
        assert set(got) == {py_stable_hash64("a"), py_stable_hash64("b")}


class Boom(Exception):
    pass


class _Exploding:
    def __getitem__(self, i):
        raise Boom(f"no item {i}")


@pytest.mark.parametrize("k", [1, 8, 16])
def test_group_by_bin_propagates_key_and_record_errors(compiled_bins, k):
    c = compiled_bins

    def key(r):
        if r[1] == 2:
            raise Boom("bad record")
        return r[0]
    records = [("a", 1), ("b", 2), ("c", 3)]
    for impl_group in (py_group_by_bin, c.group_by_bin):
        with pytest.raises(Boom, match="bad record"):
            impl_group(records, key, k)
    for bad in ([("a", 1), ()], [("a", 1), 5], [("a", 1), _Exploding()], [([1], 0)],
                [(("x", {}), 0)], [(_Str("s"), 0)]):
        expected = outcome(py_group_by_bin, bad, None, k)
        assert expected[0] in (IndexError, TypeError, Boom), expected
        assert outcome(c.group_by_bin, bad, None, k) == expected


def test_group_by_bin_k_zero_and_odd_k_match_the_pure_twin(compiled_bins):
    """With k=0 neither twin computes a key; a k outside 1..64 does what the pure
    twin's Python arithmetic does."""
    c = compiled_bins

    def key(r):
        raise Boom("called")
    records = [("a", 1), ([1], 2)]
    assert outcome(c.group_by_bin, records, key, 0) == outcome(py_group_by_bin, records, key, 0)
    ok = [("a", 1), ("b", 2)]
    for k in (65, -1, 8.0, None, "8", True, 2**70):
        assert outcome(c.group_by_bin, ok, None, k) == outcome(py_group_by_bin, ok, None, k), k


def test_ten_thousand_strings_fill_256_bins(bins_twin):
    records = [(f"key-{i}", 1) for i in range(10_000)]
    groups = bins_twin.group_by_bin(records, None, 8)
    assert sorted(groups) == list(range(256))           # no bin empty
    sizes = [len(g) for g in groups.values()]
    assert sum(sizes) == 10_000 and max(sizes) < 3 * 10_000 / 256


# ---- bin_shift, bin_of ---------------------------------------------------------------
def test_bin_shift_accepts_powers_of_two():
    for k in range(17):
        assert bin_shift(2**k) == k


@pytest.mark.parametrize("bins_", [0, -4, 3, 100, 255, 2**17, 256.0, True, "256", None])
def test_bin_shift_refuses_other_counts(bins_):
    with pytest.raises(ValueError) as info:
        bin_shift(bins_)
    assert str(info.value) == f"bins must be a power of two between 1 and 65536, got {bins_}"


@given(st.integers(0, MASK), st.integers(1, 64))
def test_bin_of_is_the_top_k_bits(h, k):
    b = bin_of(h, k)
    assert 0 <= b < 2**k and b == h >> (64 - k)
    assert bin_of(h, 0) == 0 and bin_of(h, 64) == h


# ---- RoutingTable --------------------------------------------------------------------
def test_round_robin_and_lookups():
    t = RoutingTable.round_robin(8, 3)
    assert t.table == (0, 1, 2, 0, 1, 2, 0, 1)
    assert len(t) == 8 and t[0] == 0 and t[5] == 2
    assert t.bins_of(0) == [0, 3, 6] and t.bins_of(2) == [2, 5] and t.bins_of(9) == []
    assert t.load(3) == [3, 3, 2] and t.load(2) == [3, 3] and t.load(4) == [3, 3, 2, 0]
    assert repr(t) == "RoutingTable(8 bins, load [3, 3, 2])"
    assert RoutingTable.round_robin(1, 5).table == (0,)


def test_with_moves_applies_in_order_and_copies():
    t = RoutingTable.round_robin(4, 2)
    moved = t.with_moves([(0, 1), (3, 5), (0, 2)])
    assert moved.table == (2, 1, 0, 5)
    assert t.table == (0, 1, 0, 1)                      # the original is unchanged
    assert t.with_moves([]) == t and t.with_moves([]) is not t
    assert hash(RoutingTable([0, 1, 0, 1])) == hash(t) and RoutingTable([0, 1, 0, 1]) == t
    assert moved != t and t != (0, 1, 0, 1)
    assert moved.load(6) == [1, 1, 1, 0, 0, 1] and moved.bins_of(1) == [1]


@pytest.mark.parametrize("bad_bin", [4, 100, -1])
def test_with_moves_refuses_a_bin_out_of_range(bad_bin):
    t = RoutingTable.round_robin(4, 2)
    with pytest.raises(ValueError, match=rf"^bin {bad_bin} is not in 0\.\.3$"):
        t.with_moves([(0, 1), (bad_bin, 0)])
    assert t.table == (0, 1, 0, 1)


@pytest.mark.parametrize("table", [[], [0, 1, 2], [0] * 6, [0] * (2**17)])
def test_table_size_must_be_a_power_of_two(table):
    with pytest.raises(ValueError, match=rf"^bins must be a power of two between 1 and 65536, got {len(table)}$"):
        RoutingTable(table)


def test_round_robin_refuses_bad_bin_counts():
    for count in (0, 3, 2**17):
        with pytest.raises(ValueError, match="bins must be a power of two"):
            RoutingTable.round_robin(count, 2)


@pytest.mark.parametrize("table", [[0, -1], [0, "1"], [0, 1.0], [None, 0]])
def test_workers_must_be_non_negative_ints(table):
    with pytest.raises(ValueError, match=r"a routing table maps every bin to a worker index \(an int >= 0\)"):
        RoutingTable(table)
    with pytest.raises(ValueError, match="worker index"):
        RoutingTable([0, 0]).with_moves([(1, table[0] if table[0] != 0 else table[1])])


# ---- group_by_target (F) ---------------------------------------------------------------
def expected_messages(records, key, k: int, table) -> list:
    """F's messages by the definition: per worker (in order of first appearance), its
    bins' ``(bin, count)`` runs in order of first appearance and their records, bin
    after bin, each bin's in input order."""
    per_target: dict = {}
    for b, rs in py_group_by_bin(records, key, k).items():
        runs, recs = per_target.setdefault(table[b], ([], []))
        runs.append((b, len(rs)))
        recs.extend(rs)
    return [(w, runs, recs) for w, (runs, recs) in per_target.items()]


def readable(messages: list) -> list:
    return [(w, runs_of(runs), list(recs)) for w, runs, recs in messages]


@settings(max_examples=max(50, settings().max_examples // 2))    # its lists are long: half the profile's
@given(st.one_of(record_lists, skewed, st.lists(st.tuples(keys, st.integers()), min_size=100, max_size=300)),
       st.sampled_from([0, 1, 4, 8, 16, 17]), st.integers(1, 4))
def test_group_by_target_twins_agree_and_follow_the_table(compiled_bins, records, k, workers):
    """Each bin's records go, whole and in order, to the worker the table gives that
    bin, with a run saying which; workers and their bins in order of first appearance;
    both twins give the same bytes and the same record objects (whether the compiled
    twin indexes bins directly, k <= 4 here, or by its hash table, or falls back)."""
    table = tuple((b * 7 + 3) % workers for b in range(1 << k))
    got = compiled_bins.group_by_target(records, None, k, table)
    assert outcome(py_group_by_target, records, None, k, table) == ("ok", got)
    assert readable(got) == expected_messages(records, None, k, table)
    for (_, _, recs), (_, _, want) in zip(got, expected_messages(records, None, k, table)):
        assert type(recs) is list and all(x is y for x, y in zip(recs, want))


def test_group_by_target_with_a_key_function_and_any_iterable(bins_twin):
    """A key function routes by what it returns; a generator of records is read once."""
    records = [(i, f"k{i % 37}") for i in range(500)]
    key = itemgetter(1)
    table = RoutingTable.round_robin(256, 3).table
    got = bins_twin.group_by_target((r for r in records), key, 8, table)
    assert readable(got) == expected_messages(records, key, 8, table)
    assert sorted(r for _, _, recs in got for r in recs) == records


def test_group_by_target_propagates_key_errors_like_the_pure_twin(bins_twin):
    def key(record):
        if record == 5:
            raise LookupError("no key for 5")
        return record
    assert outcome(bins_twin.group_by_target, list(range(10)), key, 8, (0,) * 256) == (LookupError, "no key for 5")
    assert outcome(bins_twin.group_by_target, [("a", 1), object()], None, 8, (0,) * 256) == \
        outcome(py_group_by_target, [("a", 1), object()], None, 8, (0,) * 256)


@pytest.mark.parametrize("table", [(0,), (0, 1), ()])
def test_group_by_target_refuses_a_table_too_short_like_the_pure_twin(bins_twin, table):
    """A table without an entry for a bin raises IndexError in both twins."""
    records = [(f"k{i}", i) for i in range(50)]
    assert outcome(bins_twin.group_by_target, records, None, 8, table)[0] is IndexError
    assert outcome(bins_twin.group_by_target, records, None, 8, table) == \
        outcome(py_group_by_target, records, None, 8, table)


# ---- apply_fold / fold_bins (S) --------------------------------------------------------
def fold_for_tests(key, value, state):
    """A running total that deletes its key at 0 (a None state), emits each change, and
    fails on the value 13 (or returns something that is not a pair, on 17)."""
    if value == 13:
        raise ZeroDivisionError(f"unlucky {key!r}")
    if value == 17:
        return None
    total = (state or 0) + value
    return (None if total == 0 else total), [(key, total)]


fold_records = st.lists(st.tuples(st.sampled_from(["a", "b", 3, (1, "c")]), st.integers(-3, 17)), max_size=40)


def run_fold(fn, make_state, records, bins_):
    """What ``fn`` (apply_fold or fold_bins) did: its outcome, the states after, what it emitted."""
    from types import SimpleNamespace
    from timely.megaphone.state import BinStates
    emitted: list = []
    if fn.__name__ == "apply_fold":
        state = make_state({"a": 5})
        result = outcome(fn, fold_for_tests, state, records, emitted.extend, "Op", 7)
        return result, dict(state), emitted
    states = BinStates("Op", 0, range(bins_))
    for b in states.bins.values():
        b.state = make_state({"a": 5})
    touched: list = []
    states.log = SimpleNamespace(touch=lambda b, keys: touched.append((b, list(keys))))
    # two messages (F's, to this worker), each with its runs of bins
    entries = [(0, runs, recs) for _, runs, recs in py_group_by_target(records[::2], None, 2, (0,) * 4)]
    entries += [(1, runs, tuple(recs)) for _, runs, recs in py_group_by_target(records[1::2], None, 2, (0,) * 4)]
    result = outcome(fn, fold_for_tests, states, entries, emitted.extend, "Op", 7)
    return result, {b: dict(bin.state) for b, bin in states.bins.items()}, emitted, touched


@given(fold_records, st.sampled_from([1, 4]))
def test_fold_twins_agree_on_state_outputs_and_errors(compiled_bins, records, bins_):
    """Same state, outputs and error (a StatefulError naming the operator, the key and
    the time, the fold's exception chained; the failing record not applied) from both
    twins, on plain dicts and TrackedDicts; fold_bins tells the log each bin's keys, and
    a bin not held is a StatefulError."""
    from timely.checkpoint.tracked import TrackedDict
    from timely.megaphone.state import py_apply_fold, py_fold_bins
    for make_state in (dict, TrackedDict):
        assert run_fold(compiled_bins.apply_fold, make_state, records, bins_) == \
            run_fold(py_apply_fold, make_state, records, bins_)
        got = run_fold(compiled_bins.fold_bins, make_state, records, bins_)
        assert got == run_fold(py_fold_bins, make_state, records, bins_)
        if any(v in (13, 17) for _, v in records):
            assert "StatefulError" in repr(got[0][0]) and "Op: fold failed for key" in got[0][1]
            assert "at time 7" in got[0][1]


def test_fold_errors_chain_the_original_and_a_missing_bin_is_named(bins_twin):
    from timely.megaphone.state import BinStates, StatefulError
    state = {"a": 1}
    with pytest.raises(StatefulError, match=r"Op: fold failed for key 'b' at time 3: ZeroDivisionError") as e:
        bins_twin.apply_fold(fold_for_tests, state, [("a", 1), ("b", 13), ("c", 1)], [].extend, "Op", 3)
    assert isinstance(e.value.__cause__, ZeroDivisionError)
    assert state == {"a": 2}                          # before the failure applied, after it not
    states = BinStates("Op", 4, [0])
    with pytest.raises(StatefulError, match=r"worker 4 received records of bin 1, which it does not hold"):
        bins_twin.fold_bins(fold_for_tests, states, [(0, pack_runs([1, 1]), [("a", 1)])], [].extend, "Op", 3)


def explode(entries: list) -> list:
    """``(input, bin, records)`` per run of F's messages ``(input, runs, records)``."""
    out = []
    for i, runs, recs in entries:
        pos = 0
        for b, c in runs_of(runs):
            out.append((i, b, list(recs[pos:pos + c])))
            pos += c
    return out


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 3)), max_size=12), st.sets(st.integers(0, 9)),
       st.integers(1, 3))
def test_split_held_twins_agree_and_keep_each_bins_records_in_order(compiled_bins, runs, held, messages):
    """``split_held`` puts each run, with its records in order, on the side of whether
    its bin is held; entries keep their order; when every bin is held the entries
    come back as they are (the same list)."""
    from timely.megaphone.state import BinStates, py_split_held
    entries, n = [], 0
    for m in range(messages):
        part = runs[m::messages]
        recs = [("r", n + i) for i in range(sum(c for _, c in part))]
        n += len(recs)
        entries.append((m % 2, pack_runs([x for run in part for x in run]), recs))
    states = BinStates("Op", 0, sorted(held))
    got = compiled_bins.split_held(entries, states)
    assert outcome(py_split_held, entries, states) == ("ok", got)
    want: tuple = ([], [])
    for run in explode(entries):
        want[run[1] not in held].append(run)
    assert (explode(got[0]), explode(got[1])) == want
    if all(b in held for b, _ in runs):
        assert got[0] is entries and got[1] == []


@pytest.mark.parametrize("runs, records, problem", [
    (b"\x01\x00\x00", [("a", 1)], "runs are 3 bytes, not a whole number"),
    (pack_runs([0, 2]), [("a", 1)], "runs count 2 records, but it carries 1"),
    (pack_runs([0, 1, 0, 1]), [("a", 1)] * 3, "runs count 2 records, but it carries 3"),
])
def test_malformed_runs_are_refused_by_name(bins_twin, runs, records, problem):
    """A message whose runs are ragged or do not add up to its records is a FrameError
    that says so, before any record is applied."""
    from timely.communication.codec import FrameError
    from timely.megaphone.state import BinStates
    states = BinStates("Op", 0, [0])
    with pytest.raises(FrameError, match=problem):
        bins_twin.fold_bins(fold_for_tests, states, [(0, runs, records)], [].extend, "Op", 3)
    assert states.bins[0].state == {}
    with pytest.raises(FrameError, match=problem):
        bins_twin.split_held([(0, runs, records)], states)


def test_bin_states_slots_follow_put_and_take():
    """``slots[b]`` is the bin held at ``b`` (None when not held): what the compiled S
    looks runs up in."""
    from timely.megaphone.state import Bin, BinStates
    states = BinStates("Op", 0, [1, 3])
    assert states.slots == [None, states.bins[1], None, states.bins[3]]
    moved = states.take(3)
    states.put(9, moved)
    assert states.slots[3] is None and states.slots[9] is moved and len(states.slots) == 10
    states.put(0, Bin())
    assert [b for b, x in enumerate(states.slots) if x is not None] == sorted(states.bins) == [0, 1, 9]
