"""The epoch contract's reader (PartitionEpochs) and value formats (Format), no broker.

Protects:
- a writer that writes epochs in order, crashing mid-epoch and rewriting the epoch
  (its crashed attempt left without a marker), or replaying an epoch after it was
  complete (records and marker again): the reader delivers every epoch exactly once
  with exactly the intended records, in offset order; ``bound()`` never exceeds an
  epoch still to be completed; the commit points sit just past each completing marker,
  and a reader resuming there (knowing the epoch committed) delivers exactly the rest;
- a marker without ``offsets`` completes the earlier unmarked epochs (their records
  are kept), one with ``offsets`` drops what lies outside its range;
- errors name topic, partition and offset: EpochOrderError for an epoch going back
  (records or markers), ContractError for a missing or garbled header, DecodeError for
  a value that does not decode (also when batch decoding would have hidden it) or a
  ``rows`` header that does not match its value;
- json and msgpack round-trip any events, one per record or packed (``rows``).
"""
from __future__ import annotations

import itertools

import msgpack
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from timely.connectors.epochs import (JSON, MSGPACK, RAW, ContractError, DecodeError, EpochOrderError,
                                      Format, PartitionEpochs, complete_epochs, data_headers,
                                      Undecodable, format_of, marker_headers)

T, P = "clicks", 3


def feed(state: PartitionEpochs, log: list, start: int = 0) -> list:
    """Read ``log`` [(headers, value)] from offset ``start``; the epochs delivered."""
    out = []
    for offset in range(start, len(log)):
        headers, value = log[offset]
        out.extend((e, [r[1] for r in records]) for e, records in state.record(offset, headers, value))
    return out


# ---- the crashing, replaying writer ---------------------------------------------------------
crash = st.tuples(st.just("crash"), st.integers(0, 4))
replay = st.tuples(st.just("replay"), st.integers(0, 4), st.booleans())
ops = st.lists(st.one_of(crash, replay), max_size=3)


@st.composite
def histories(draw):
    """A partition's log as a crashing, replaying writer leaves it, and what a reader
    must make of it."""
    first = draw(st.integers(0, 3))
    gaps = draw(st.lists(st.integers(1, 3), min_size=1, max_size=6))
    epochs = list(itertools.accumulate(gaps, initial=first))[:-1]
    log: list = []
    expect = {"deliveries": [], "marker_at": {}, "orphans": 0, "duplicates": 0}
    previous = None         # (epoch, intended values) of the last complete epoch

    def write(headers, value):
        log.append((headers, value))
        return len(log) - 1

    def run_ops(plan, epoch, attempt_base):
        for n, op in enumerate(plan):
            if op[0] == "crash" and epoch is not None:
                for i in range(op[1]):
                    write(data_headers(epoch), f"orphan:{epoch}:{attempt_base + n}:{i}".encode())
            elif op[0] == "replay" and previous is not None:
                e, values = previous
                offsets = [write(data_headers(e), f"replay:{e}:{n}:{i}".encode())
                           for i in range(min(op[1], len(values) + 1))]
                expect["duplicates"] += len(offsets)
                if op[2]:       # the replay got as far as its marker
                    write(marker_headers(e, *((offsets[0], offsets[-1] + 1) if offsets else (0, 0))), b"")
                    expect["duplicates"] += 1

    for epoch in epochs:
        plan = draw(ops)
        run_ops(plan, epoch, 0)
        crashed = sum(op[1] for op in plan if op[0] == "crash")
        expect["orphans"] += crashed
        values = [f"ok:{epoch}:{i}".encode() for i in range(draw(st.integers(0, 4)))]
        offsets = [write(data_headers(epoch), v) for v in values]
        # a writer that never crashed may leave out the range; one that did must give it
        ranged = crashed > 0 or draw(st.booleans())
        span = (offsets[0], offsets[-1] + 1) if offsets else (0, 0)
        expect["marker_at"][epoch] = write(marker_headers(epoch, *span) if ranged else marker_headers(epoch), b"")
        if values:
            expect["deliveries"].append((epoch, values))
        previous = (epoch, values)
    # after the last epoch: replays of it, maybe a crash in the next one (never completed)
    trailing = epochs[-1] + draw(st.integers(1, 3))
    run_ops(draw(ops), trailing, 10)
    expect["unfinished"] = trailing if any(h[0] == ("epoch", str(trailing).encode()) for h, _ in log) else None
    return log, expect


@given(histories())
def test_crashing_replaying_writer_is_read_exactly_once(history):
    log, expect = history
    state = PartitionEpochs(T, P)
    assert state.bound() is None
    # the epoch of each completing marker, by offset: bound() must never pass one still ahead
    ahead = sorted((offset, e) for e, offset in expect["marker_at"].items())
    delivered = []
    for offset, (headers, value) in enumerate(log):
        for e, records in state.record(offset, headers, value):
            assert offset == expect["marker_at"][e], "an epoch delivered other than at its marker"
            delivered.append((e, [r[1] for r in records]))
            assert [r[0] for r in records] == sorted(r[0] for r in records)
        still = [e for o, e in ahead if o > offset]
        if still and state.bound() is not None:
            assert state.bound() <= min(still), (offset, state.bound(), still)
    assert delivered == expect["deliveries"]
    last = max(expect["marker_at"])
    assert state.completed == last
    assert state.bound() == (expect["unfinished"] if expect["unfinished"] is not None else last + 1)
    assert (state.orphans, state.duplicates) == (expect["orphans"], expect["duplicates"])
    # commit points: just past each completing marker, found by epoch
    for e, offset in expect["marker_at"].items():
        assert state.commit_offset(e) == offset + 1
        assert state.commit_offset(e + 1) == offset + 1 or e + 1 in expect["marker_at"]
    assert state.commit_offset(min(expect["marker_at"]) - 1) is None
    assert state.commit_offset() == expect["marker_at"][last] + 1
    # a reader resuming at a commit point, told the epoch it committed, delivers the rest
    for e, offset in expect["marker_at"].items():
        resumed = PartitionEpochs(T, P, completed=e)
        assert feed(resumed, log, offset + 1) == [d for d in expect["deliveries"] if d[0] > e]
    # committed epochs are forgotten; later ones stay
    middle = sorted(expect["marker_at"])[len(expect["marker_at"]) // 2]
    state.forget_commits(middle)
    assert state.commit_offset(middle) is None
    assert state.commit_offset() == (None if middle == last else expect["marker_at"][last] + 1)


@given(histories(), st.lists(st.booleans(), min_size=1), st.data())
def test_records_handed_on_early_less_those_withdrawn_are_what_the_markers_deliver(history, early_at, data):
    """A reader that hands records on before their marker (``early`` / ``hand_on``, at
    random offsets, sometimes only part of what waits) gives, per epoch, the records
    handed on early plus those the marker returns, less those it withdraws: exactly
    what a reader that waits for the markers delivers, and every record withdrawn
    was handed on early."""
    log, expect = history
    state = PartitionEpochs(T, P)
    handed: dict = {}
    withdrawn: dict = {}
    delivered: dict = {}
    for offset, (headers, value) in enumerate(log):
        for e, records in state.record(offset, headers, value):
            delivered.setdefault(e, []).extend(r[1] for r in records)
        for e, records in state.withdrawn:
            withdrawn.setdefault(e, []).extend(r[1] for r in records)
        state.withdrawn.clear()
        if early_at[offset % len(early_at)]:
            for e in sorted(state.pending):
                waiting = state.early(e)
                n = data.draw(st.integers(0, len(waiting)))
                state.hand_on(e, n)
                handed.setdefault(e, []).extend(r[1] for r in waiting[:n])
                assert state.early(e) == waiting[n:]
    for e, values in withdrawn.items():
        left = list(handed.get(e, []))
        for v in values:
            left.remove(v)          # raises if a record withdrawn was never handed on
    counted = {}
    for e in set(handed) | set(delivered):
        kept = list(handed.get(e, []))
        for v in withdrawn.get(e, []):
            kept.remove(v)
        if e != expect["unfinished"]:
            kept += delivered.get(e, [])
            if kept:
                counted[e] = sorted(kept)
    assert counted == {e: sorted(values) for e, values in expect["deliveries"]}
    assert (state.orphans, state.duplicates) == (expect["orphans"], expect["duplicates"])
    # what a reader giving the partition away withdraws: the unfinished epoch's early records
    unfinished = expect["unfinished"]
    assert {e: [r[1] for r in rs] for e, rs in state.handed_early()} == (
        {unfinished: handed[unfinished]} if unfinished is not None and handed.get(unfinished) else {})


# ---- markers ---------------------------------------------------------------------------------
def test_marker_without_offsets_completes_earlier_unmarked_epochs():
    log = [(data_headers(1), b"a"), (data_headers(1), b"b"), (data_headers(2), b"c"),
           (marker_headers(2), b"")]
    state = PartitionEpochs(T, P)
    assert feed(state, log) == [(1, [b"a", b"b"]), (2, [b"c"])]
    assert (state.completed, state.orphans, state.bound(), state.commit_offset()) == (2, 0, 3, 4)


def test_marker_with_offsets_drops_what_lies_outside_its_range():
    log = [(data_headers(1), b"crashed-1"), (data_headers(2), b"crashed-2"), (data_headers(2), b"c"),
           (marker_headers(2, 2, 3), b"")]
    state = PartitionEpochs(T, P)
    assert feed(state, log) == [(2, [b"c"])]
    assert state.orphans == 2


def test_empty_epochs_complete_without_delivering():
    state = PartitionEpochs(T, P)
    assert feed(state, [(marker_headers(0, 0, 0), b""), (marker_headers(4), b"")]) == []
    assert (state.completed, state.bound(), state.commit_offset(0), state.commit_offset()) == (4, 5, 1, 2)


def test_bound_is_the_least_unfinished_epoch():
    state = PartitionEpochs(T, P)
    state.record(10, data_headers(3), b"x")
    assert state.bound() == 3
    state.record(11, data_headers(3), b"y")
    assert state.bound() == 3
    assert state.record(12, marker_headers(3, 10, 12), b"") == [(3, [(10, b"x", None), (11, b"y", None)])]
    assert state.bound() == 4
    state.record(13, data_headers(5), b"z")
    assert state.bound() == 5
    assert state.record(14, marker_headers(5, 13, 14), b"") == [(5, [(13, b"z", None)])]
    assert state.bound() == 6


def test_complete_epochs_is_the_least_over_partitions():
    a, b = PartitionEpochs(T, 0), PartitionEpochs(T, 1)
    assert complete_epochs([a, b]) is None
    a.record(0, marker_headers(4), b"")
    assert complete_epochs([a, b]) is None
    b.record(0, marker_headers(2), b"")
    assert complete_epochs([a, b]) == 2
    assert complete_epochs([]) is None


def test_a_reader_told_its_committed_epoch_drops_its_replay():
    state = PartitionEpochs(T, P, completed=4)
    assert state.bound() == 5
    assert feed(state, [(data_headers(4), b"r"), (marker_headers(4, 0, 1), b""),
                        (data_headers(5), b"n"), (marker_headers(5, 2, 3), b"")]) == [(5, [b"n"])]
    assert state.duplicates == 2


# ---- errors name topic, partition and offset -------------------------------------------------
def raises_at(cls, log, offset, match):
    state = PartitionEpochs(T, P)
    with pytest.raises(cls, match=match) as info:
        feed(state, log)
    assert type(info.value) is cls
    assert (info.value.topic, info.value.partition, info.value.offset) == (T, P, offset)
    assert str(info.value).startswith(f"{T}[{P}] offset {offset}: ")


@pytest.mark.parametrize("log, offset", [
    # a record of an epoch before a record read earlier
    ([(data_headers(5), b"x"), (data_headers(4), b"y")], 1),
    # a marker of an epoch before a record read earlier (bound() said 5: epoch 3 cannot complete)
    ([(data_headers(5), b"x"), (marker_headers(3, 0, 0), b"")], 1),
], ids=["record-after-record", "marker-after-record"])
def test_an_epoch_going_back_is_an_epoch_order_error(log, offset):
    raises_at(EpochOrderError, log, offset, "epoch")


def test_late_copies_of_complete_epochs_are_dropped_and_counted():
    """A writer replaced while paused sends, once resumed, what its client still held:
    records and a marker of epochs the partition completed long ago. They change
    nothing, and the partition stays readable."""
    state = PartitionEpochs(T, P)
    log = [(data_headers(2), b"a"), (marker_headers(2, 0, 1), b""),
           (data_headers(3), b"b"), (marker_headers(3, 2, 3), b""),
           (data_headers(2), b"late"), (marker_headers(2, 0, 1), b""),      # the zombie's
           (data_headers(4), b"c"), (marker_headers(4, 6, 7), b"")]
    assert feed(state, log) == [(2, [b"a"]), (3, [b"b"]), (4, [b"c"])]
    assert state.duplicates == 2 and state.completed == 4


@pytest.mark.parametrize("headers, match", [
    ([], "no 'epoch' header"),
    ([("key", b"1")], "no 'epoch' header"),
    ([("epoch", None)], "no 'epoch' header"),
    ([("epoch", b"")], "decimal epoch"),
    ([("epoch", b"-1")], "decimal epoch"),
    ([("epoch", b"x7")], "decimal epoch"),
    ([("epoch", b"1"), ("rows", b"two")], "'rows' must be a count"),
    ([("epoch", b"1"), ("marker", b"epoch_start")], "unknown marker"),
    ([("epoch", b"1"), ("marker", b"epoch_end"), ("offsets", b"3")], "'offsets' must be"),
    ([("epoch", b"1"), ("marker", b"epoch_end"), ("offsets", b"a-b")], "'offsets' must be"),
])
def test_a_garbled_record_is_a_contract_error(headers, match):
    raises_at(ContractError, [(data_headers(0), b"ok"), (headers, b"v")], 1, match)


# ---- formats ---------------------------------------------------------------------------------
def test_packed_values_decode_in_json_and_msgpack():
    for fmt in (JSON, MSGPACK):
        values = [fmt.dumps({"a": 1}), fmt.dumps_many([1, 2, 3]), fmt.dumps([4, 5]), fmt.dumps_many([])]
        assert fmt.decode(values, [None, 3, None, 0], T, P, [0, 1, 2, 3]) == [{"a": 1}, 1, 2, 3, [4, 5]]


@pytest.mark.parametrize("fmt", [JSON, MSGPACK], ids=lambda f: f.name)
@pytest.mark.parametrize("value, rows, match", [
    ([1, 2], 3, "'rows: 3' but the value holds 2"),
    ({"a": 1}, 1, "'rows: 1' but the value holds no array"),
])
def test_rows_header_not_matching_the_value_is_a_decode_error(fmt, value, rows, match):
    with pytest.raises(DecodeError, match=match) as info:
        fmt.decode([fmt.dumps([0]), fmt.dumps(value)], [1, rows], T, P, [40, 41])
    assert (info.value.topic, info.value.partition, info.value.offset) == (T, P, 41)


@pytest.mark.parametrize("fmt, bad", [
    (JSON, b'{"user": 1'), (JSON, b"1,2"), (JSON, b"[1"), (JSON, b""), (JSON, None),
    (MSGPACK, b"\xc1"), (MSGPACK, b"\x92\x01"), (MSGPACK, None),
], ids=lambda x: getattr(x, "name", repr(x)))
def test_a_bad_value_is_a_decode_error_naming_it(fmt, bad):
    values = [fmt.dumps(1), bad, fmt.dumps(3)]
    with pytest.raises(DecodeError, match=f"{T}\\[{P}\\] offset 8: value does not decode as {fmt.name}") as info:
        fmt.decode(values, [None] * 3, T, P, [7, 8, 9])
    assert info.value.offset == 8


json_events = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6)


@settings(max_examples=200)
@given(st.sampled_from([JSON, MSGPACK]), st.lists(json_events, max_size=12), st.data())
def test_any_events_round_trip_packed_or_not(fmt, events, data):
    values, rows, i = [], [], 0
    while i < len(events):
        n = data.draw(st.integers(0, 4))
        if n == 0:                      # one event, one record
            values.append(fmt.dumps(events[i]))
            rows.append(None)
            i += 1
        else:
            chunk = events[i:i + n]
            values.append(fmt.dumps_many(chunk))
            rows.append(len(chunk))
            i += len(chunk)
    assert fmt.decode(values, rows, T, P, list(range(len(values)))) == events


bad_json = st.sampled_from([b"1,2", b"[1", b"2]", b'"a', b"", b" ", b"}", b"tru", b"1 2", b",", b"[]]",
                            b'{"a":1},{"b":2}']) | st.binary(max_size=6)


@given(st.lists(json_events, max_size=6), st.data())
def test_one_bad_value_in_a_json_batch_is_found(events, data):
    values = [orjson.dumps(e) for e in events]
    bad = data.draw(bad_json)
    try:
        JSON.loads(bad)
        return                      # (random bytes that happen to be JSON)
    except ValueError:              # (msgspec.DecodeError is one)
        pass
    at = data.draw(st.integers(0, len(values)))
    values.insert(at, bad)
    with pytest.raises(DecodeError) as info:
        JSON.decode(values, [None] * len(values), T, P, [100 + k for k in range(len(values))])
    assert info.value.offset == 100 + at


@given(st.sampled_from([JSON, MSGPACK]), st.lists(json_events, max_size=8), st.data())
def test_decode_each_never_raises_and_marks_exactly_the_bad_values(fmt, events, data):
    """What a reader decodes before a record is known to count: one item per value,
    the event where it decodes, an Undecodable where it does not (markers' empty
    values included), so the decision waits for the marker."""
    values: list = [fmt.dumps(e) for e in events]
    for at in sorted(data.draw(st.sets(st.integers(0, len(values)), max_size=3)), reverse=True):
        values.insert(at, data.draw(st.sampled_from([b"", None, b"\xc1", b"[1"])))   # bad in both formats
    bad = {i for i, v in enumerate(values) if v in (b"", None, b"\xc1", b"[1")}
    items = fmt.decode_each(values)
    assert [i for i, item in enumerate(items) if isinstance(item, Undecodable)] == sorted(bad)
    assert all(items[i].value == values[i] and fmt.name in items[i].problem for i in bad)
    assert [item for i, item in enumerate(items) if i not in bad] == events


def test_raw_and_custom_formats():
    assert RAW.decode([b"a", b"bc"], [None, None], T, P, [0, 1]) == [b"a", b"bc"]
    upper = Format("upper", lambda s: s.upper().encode(), lambda b: b.decode().lower())
    assert format_of(upper) is upper and format_of("json") is JSON
    assert upper.decode([upper.dumps("x")], [None], T, P, [0]) == ["x"]
    assert msgpack.unpackb(MSGPACK.dumps_many([1, "a"])) == [1, "a"]
    with pytest.raises(ValueError, match="unknown value format 'yaml'"):
        format_of("yaml")


@given(st.lists(json_events.map(orjson.dumps) | bad_json | st.text(max_size=4).map(str.encode), min_size=1,
                max_size=6), st.booleans())
def test_json_join_packs_values_as_written_only_when_each_is_one_json_value(values, as_str):
    """Spark's writer packs JSON values without decoding and encoding them again when
    ``join_many`` says they are each one JSON value: the packed value must then read
    back as exactly those values, one event each; any other batch gives None (and the
    writer takes the per-value path, which names or sends alone the bad ones)."""
    if as_str:
        try:
            values = [v.decode() for v in values]
        except UnicodeDecodeError:
            return
    def is_json(value) -> bool:
        try:
            JSON.loads(value)
            return True
        except ValueError:
            return False
    valid = list(map(is_json, values))
    joined = JSON.join_many(values)
    if joined is None:
        # None only where some value is bad, or has whitespace around it
        assert not all(valid) or any(v != v.strip() for v in values)
        return
    assert all(valid)
    assert JSON.decode([joined], [len(values)], T, P, [0]) == [JSON.loads(v) for v in values]
