"""Checkpoints of keyed state and exact restarts, in one process (threads as workers).

Protects: (a) a ``BinLog`` fed any sequence of applied records, crossings and bins
moving in and out writes entries from which ``fold_bin`` gives, at every boundary it
crossed, exactly the bin as it was then (a model dict says what that is); (b)
``TrackedDict`` marks every key a logic could have changed; (c) a job stopped after
some epochs and started again with the same command resumes from its last checkpoint:
its later results (running totals included) are exactly those of a run that never
stopped, for ``state_machine`` and ``stateful_unary`` (notifications pending across the
restart), with another number of workers, and with a checkpoint interval; (d) a corrupt
record, a missing bin and a program whose stateful operators changed are refused with
an error that names them, never restored silently; (e) both twins of the codec's
``pack_items`` (a delta's keys straight from the bin to bytes) give the same entries.
"""
from __future__ import annotations

import sqlite3
from contextlib import nullcontext

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import timely
from timely.checkpoint.binlog import BinLog
from timely.checkpoint.records import (CheckpointCorrupt, CheckpointError, CheckpointMissing, Entry,
                                       decode, fold_bin)
from timely.communication.codec import GONE

TWIN_NEEDS = ("tracked", "codec")      # the compiled twins these tests compare (conftest)


# ---- BinLog against a model ----------------------------------------------------------
class _Bin:
    def __init__(self) -> None:
        self.state: dict = {}
        self.pending: dict = {}


class _Writer:
    def __init__(self) -> None:
        self.records: list = []

    def write(self, record) -> int:
        self.records.append(record)
        return len(self.records)

    def durable(self, ticket: int) -> bool:
        return True

    def hold(self):
        return nullcontext()


@settings(max_examples=300)
@given(st.integers(1, 3), st.lists(st.tuples(st.integers(0, 2), st.integers(0, 1),
                                             st.sampled_from(["put", "del", "bump", "cross", "move", "settle"]),
                                             st.integers(0, 3), st.integers(0, 9)), max_size=80),
       st.booleans())
# a bin settled, then written again (a put; a value read and changed in place) before the
# crossing: the later marks must win over what settle packed
@example(1, [(0, 0, "put", 0, 1), (0, 0, "settle", 0, 0), (0, 0, "put", 0, 2), (1, 0, "cross", 0, 0),
             (0, 1, "cross", 1, 0)], True)
@example(1, [(0, 0, "put", 0, 1), (0, 0, "settle", 0, 0), (0, 0, "bump", 0, 1), (1, 0, "cross", 0, 0),
             (0, 1, "cross", 1, 0)], True)
def test_binlog_entries_fold_to_the_state_at_every_boundary_crossed(codec_twin, interval, steps, tracked):
    """Two workers' BinLogs, one store. Time only grows; a step makes worker w apply a
    record at time t to a bin it holds (put or delete a key, or read its value and
    change it in place), cross at t, ship one of its bins to the other worker at t, or
    settle a bin (its logic returned: what it marked is packed now, and later marks of
    the same crossing must still win).
    At every boundary both workers crossed, ``fold_bin`` of every bin's entries must
    equal the bin as of then: the fold of every record before the boundary. The bins
    are plain dicts whose keys the operator touches (state_machine), or TrackedDicts
    that record what changed (stateful_unary: the checkpoint packs the values they
    recorded). Run with each twin of the codec's ``pack_items``."""
    from timely.checkpoint import binlog
    chosen, binlog.pack_items = binlog.pack_items, codec_twin.pack_items
    try:
        _binlog_model_run(interval, steps, tracked)
    finally:
        binlog.pack_items = chosen


def _binlog_model_run(interval: int, steps: list, tracked: bool = False) -> None:
    writer = _Writer()
    held = [{0: _Bin(), 2: _Bin()}, {1: _Bin(), 3: _Bin()}]
    logs = [BinLog("op", held[w], interval, writer, "i", w, 0, tracked=tracked) for w in (0, 1)]
    for log, bins in zip(logs, held):
        for bin in bins.values():
            bin.state = log.adopt(bin.state)
        log.start(0)
    history: list[tuple[int, int, int, object]] = []      # (time, bin, key, value or None)
    t = 0
    for step, (dt, w, kind, b, key) in enumerate(steps):
        t += dt
        log, bins = logs[w], held[w]
        if b not in bins:
            continue
        if kind == "cross":
            log.cross(t)
        elif kind == "settle":
            log.settle(b)
        elif kind == "move":                   # F ships at t: everything before t applied here
            if log.applied_max is not None and t <= log.applied_max:
                continue
            log.cross(t)
            log.leave(b)
            held[1 - w][b] = bins.pop(b)
            logs[1 - w].arrive(b, t)
        else:
            log.cross(t)
            log.applied(t)
            state = bins[b].state
            if kind == "bump":                 # a value read, then changed in place
                found = state.get(key)
                if found is None:
                    continue
                found.append(step)
                value = tuple(found)
            elif kind == "put":
                state[key] = [step]
                value = (step,)
            else:
                state.pop(key, None)
                value = None
            if tracked:
                log.touch_bin(b)               # the operator names the bin; the dict, the keys
            else:
                log.touch(b, [key])
            history.append((t, b, key, value))
    entries = [r for r in writer.records if isinstance(r, Entry)]
    durable = min(lg.durable() for lg in logs)          # every boundary up to here is covered
    for boundary in range(0, durable + 1, interval):
        for b in range(4):
            expected: dict = {}
            for time, bb, key, value in history:
                if bb == b and time < boundary:
                    if value is None:
                        expected.pop(key, None)
                    else:
                        expected[key] = value
            mine = [e for e in entries if e.bin == b]
            assert fold_bin(mine, boundary, f"bin {b}")[0] == expected, (boundary, b)


@settings(max_examples=300)
@given(st.dictionaries(st.integers(0, 20), st.integers(-2 ** 63, 2 ** 64 - 1) | st.text(max_size=3)
                       | st.tuples(st.integers(-2 ** 63, 2 ** 63), st.floats(allow_nan=False))),
       st.none() | st.lists(st.integers(0, 25), max_size=30), st.booleans())
def test_pack_items_twins_agree(compiled_codec, state, keys, tracked):
    """Both twins of ``pack_items`` give the same bytes: the msgpack of the pairs still
    held (every item when ``keys`` is None), their count and the keys missing, in the
    order asked, and read a TrackedDict without marking anything."""
    from timely.checkpoint import tracked as tracked_mod
    from timely.communication import codec
    asked = list(state) if keys is None else keys
    pairs = [(k, state[k]) for k in asked if k in state]
    for pack_items in (codec.py_pack_items, compiled_codec.pack_items):
        bin_state = tracked_mod.TrackedDict(state) if tracked else dict(state)
        packed, count, missing = pack_items(bin_state, keys)
        assert packed == codec.py_packb(pairs), pack_items
        assert (count, missing) == (len(pairs), [k for k in asked if k not in state]), pack_items
        assert codec.PyDecoder().decode(packed) == tuple(pairs), pack_items
        if tracked:
            assert bin_state.take_changed() == {}, pack_items


def test_pack_items_outside_the_fast_path_gives_the_librarys_bytes(codec_twin):
    """A value the compiled packer hands on (an int past 64 bits, a set) is packed by the
    library for the whole call, as ``packb`` does."""
    from timely.communication import codec
    state = {"big": 2 ** 70, "s": {3, 1}, "n": 1}
    assert codec_twin.pack_items(state, ["n", "s", "x"])[1:] == (2, ["x"])
    with pytest.raises(TypeError):          # msgpack cannot pack an int past 64 bits either
        codec_twin.pack_items(state, ["big"])
    assert codec_twin.pack_items(state, ["n", "s"])[0] == codec.py_packb([("n", 1), ("s", [1, 3])])


def test_pack_items_of_a_whole_dict_takes_gone_for_a_deleted_key(codec_twin):
    """A TrackedDict's record of what changed holds ``GONE`` for a key deleted: packed as
    it is, that key is missing, not a pair."""
    from timely.communication import codec
    assert codec_twin.pack_items({"a": 1, "b": GONE, "c": (2,)}) == (codec.py_packb([("a", 1), ("c", (2,))]), 2, ["b"])


def test_pack_items_refuses_what_is_not_a_bin(codec_twin):
    with pytest.raises(TypeError):
        codec_twin.pack_items([1, 2], [1])
    with pytest.raises(TypeError):              # an unhashable key is the caller's bug
        codec_twin.pack_items({}, [[1]])


def test_tracked_dict_marks_what_a_logic_may_change(tracked_twin):
    d = tracked_twin.TrackedDict({"a": [1], "b": 2, "c": 3})
    d.get("a").append(9)          # read, then mutated in place
    d["x"] = 1
    del d["b"]
    d.setdefault("y", []).append(1)
    d.pop("zz", None)
    assert "c" in d and len(d) == 4 and d.get("nope") is None
    changed = d.take_changed()    # each key with the very object the bin holds, or GONE
    assert changed == {"a": [1, 9], "x": 1, "b": GONE, "y": [1]}
    assert changed["a"] is dict.__getitem__(d, "a") and changed["y"] is dict.__getitem__(d, "y")
    for _ in d:                   # keys only: nothing changes
        pass
    assert d["c"] == 3 and d.get("x") == 1 and d.get("t") is None
    d["t"] = (1, "s", None)
    assert d.take_changed() == {"t": (1, "s", None)}
    assert d["t"] == (1, "s", None)         # reads of what nothing changes in place mark nothing
    assert d.take_changed() == {}
    d["t"] = (1, [2])
    assert d.take_changed() == {"t": (1, [2])} and d.get("t") == (1, [2])
    assert d.take_changed() == {"t": (1, [2])}       # a tuple holding a list: its list may change
    del d["t"]
    assert d.take_changed() == {"t": GONE}
    for v in d.values():          # every value handed out: the whole bin
        pass
    assert d.take_changed() is None
    d.update(q=1)
    d |= {"r": 2}
    assert d.take_changed() == {"q": 1, "r": 2}
    assert type(d.copy()) is dict and d.copy() == {"a": [1, 9], "c": 3, "x": 1, "y": [1], "q": 1, "r": 2}
    import msgpack
    assert msgpack.unpackb(msgpack.packb(d), strict_map_key=False) == d.copy()   # crosses the wire as a dict


_OPS = st.lists(st.tuples(st.sampled_from(["set", "del", "get", "getitem", "setdefault", "pop", "popitem",
                                           "update", "items", "keys", "clear", "take"]),
                          st.integers(0, 5), st.integers(0, 9)), max_size=40)


@settings(max_examples=300)
@given(_OPS)
def test_tracked_dict_twins_agree(compiled_tracked, ops):
    """Both twins give the same answers, hold the same items and mark the same keys
    after any operations, and every key whose value changed is marked (or the bin is)."""
    from timely.checkpoint import tracked
    twins = [tracked.PyTrackedDict(), compiled_tracked.TrackedDict()]
    plain: dict = {}
    since: set = set()               # keys changed since the last take_changed
    for op, k, v in ops:
        outcomes = []
        for d in twins:
            try:
                if op == "set":
                    d[k] = v
                elif op == "del":
                    del d[k]
                elif op == "get":
                    outcomes.append(d.get(k))
                elif op == "getitem":
                    outcomes.append(d[k])
                elif op == "setdefault":
                    outcomes.append(d.setdefault(k, v))
                elif op == "pop":
                    outcomes.append(d.pop(k, None))
                elif op == "popitem":
                    outcomes.append(d.popitem())
                elif op == "update":
                    d.update({k: v, k + 1: v})
                elif op == "items":
                    outcomes.append(sorted(d.items()))
                elif op == "keys":
                    outcomes.append(sorted(d))
                elif op == "clear":
                    d.clear()
                else:
                    outcomes.append(d.take_changed())
            except KeyError:
                outcomes.append("KeyError")
        half = len(outcomes) // 2
        assert outcomes[:half] == outcomes[half:], (op, outcomes)
        assert twins[0].copy() == twins[1].copy()
        assert twins[0].changed == twins[1].changed
        before, plain = plain, twins[1].copy()
        since = set() if op == "take" else since | {key for key in set(before) | set(plain)
                                                    if before.get(key, "-") != plain.get(key, "-")}
        for d in twins:               # what a checkpoint packs is what the bin holds now
            marked = d.changed
            assert marked is None or since <= set(marked)
            for key, value in (marked or {}).items():
                assert value is GONE and key not in d or value is dict.__getitem__(d, key), (key, value)


def test_tracked_dict_twins_refuse_an_unhashable_key_alike(compiled_tracked):
    """A key dict refuses (unhashable) raises dict's TypeError from every access, in
    both twins, and marks nothing; a missing key is dict's KeyError."""
    from timely.checkpoint import tracked
    from twin_calls import outcome
    for d in (tracked.PyTrackedDict({"a": 1}), compiled_tracked.TrackedDict({"a": 1})):
        for access in (lambda: d.get([1]), lambda: d[[1]], lambda: d.__setitem__([1], 2),
                       lambda: d.__delitem__([1])):
            assert outcome(access) == (TypeError, "unhashable type: 'list'")
        assert outcome(lambda: d["b"]) == (KeyError, "'b'")
        assert outcome(lambda: d.__delitem__("b"))[0] is KeyError
        assert set(d.changed) <= {"b"} and dict(d) == {"a": 1}


# ---- whole jobs, stopped and started again -------------------------------------------
def _count(key, value, state):
    total = value if state is None else state + value
    return total, [(key, total)]


def _words(epoch: int) -> list:
    return [(f"w{(epoch * 7 + i) % 13}", 1 + (i % 3)) for i in range(20)]


def _state_machine_job(upto: int, args: list) -> dict:
    """Feed epochs from where the input starts (0, or the restored epoch) to ``upto``;
    returns every output by epoch."""
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            return source, stream.state_machine(_count, bins=16).capture()
        source, captured = worker.dataflow(dataflow)
        start = source.time()
        for epoch in range(start, upto):
            if worker.index == 0:
                source.send_batch(_words(epoch))
            source.advance_to(epoch + 1)
        source.close()
        worker.run()
        return start, captured.by_time()
    out: dict = {}
    starts = set()
    for start, by_time in timely.execute_from_args(args, build):
        starts.add(start)
        for t, rs in by_time.items():
            out.setdefault(t, []).extend(rs)
    return {"start": starts, "by_time": {t: sorted(rs) for t, rs in out.items()}}


@pytest.mark.parametrize("workers", [(2, 2), (2, 3), (3, 1)])
def test_a_restart_resumes_exactly_where_the_last_checkpoint_was(tmp_path, workers):
    first, second = workers
    store = ["--checkpoint", f"dir:{tmp_path}"]
    whole = _state_machine_job(10, ["-w", "2", "--checkpoint", "off"])
    before = _state_machine_job(6, ["-w", str(first), *store])
    assert before["start"] == {0}
    assert before["by_time"] == {t: rs for t, rs in whole["by_time"].items() if t < 6}
    after = _state_machine_job(10, ["-w", str(second), *store])
    assert after["start"] == {6}                       # every worker starts at the checkpoint
    assert after["by_time"] == {t: rs for t, rs in whole["by_time"].items() if t >= 6}


def test_an_interval_resumes_at_its_last_multiple(tmp_path):
    store = ["--checkpoint", f"dir:{tmp_path}", "--checkpoint-interval", "4"]
    whole = _state_machine_job(11, ["-w", "2", "--checkpoint", "off"])
    _state_machine_job(7, ["-w", "2", *store])
    after = _state_machine_job(11, ["-w", "2", *store])
    assert after["start"] == {4}
    assert after["by_time"] == {t: rs for t, rs in whole["by_time"].items() if t >= 4}


def _sessions(time, records, state, notificator, output):
    """Per key: add up values; a key's total is emitted 2 epochs after its last record
    (notifications travel with the bin, and with the checkpoint)."""
    for key, value in records:
        if key is None:                       # a notification: emit if still due
            continue
        total, last = state.get(key, (0, -1))
        state[key] = (total + value, time)
        notificator.notify_at(time + 2, (None, key))
    for key, value in records:
        if key is None and value in state and state[value][1] + 2 == time:
            output.append((value, state[value][0]))


def _unary_job(upto: int, args: list) -> dict:
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            out = stream.stateful_unary(None, lambda r: r[0] if r[0] is not None else r[1], "Sessions",
                                        _sessions, bins=8)
            return source, out.capture()
        source, captured = worker.dataflow(dataflow)
        for epoch in range(source.time(), upto):
            if worker.index == 0 and epoch % 3 != 2:
                source.send_batch([(f"s{(epoch + i) % 5}", i) for i in range(4)])
            source.advance_to(epoch + 1)
        source.close()
        worker.run()
        return captured.by_time()
    return _merged(timely.execute_from_args(args, build))


def _merged(per_worker: list) -> dict:
    """Every worker's ``captured.by_time()`` as one, each time's records sorted."""
    out: dict = {}
    for by_time in per_worker:
        for t, rs in by_time.items():
            out.setdefault(t, []).extend(rs)
    return {t: sorted(rs) for t, rs in out.items()}


def test_stateful_unary_keeps_its_pending_notifications_across_a_restart(tmp_path):
    store = ["--checkpoint", f"dir:{tmp_path}"]
    whole = _unary_job(12, ["-w", "2", "--checkpoint", "off"])
    assert sum(len(rs) for rs in whole.values()) > 5
    _unary_job(7, ["-w", "2", *store])
    after = _unary_job(12, ["-w", "3", *store])
    assert after == {t: rs for t, rs in whole.items() if t >= 7}


def _churn_job(upto: int, args: list) -> dict:
    """Every epoch changes every one of 2,000 keys: each bin is written whole every
    few epochs (BASE_AFTER), so a store that is never compacted holds every epoch."""
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            counts = stream.state_machine(_count, bins=4)
            return source, counts.capture(), counts.probe()
        source, captured, probe = worker.dataflow(dataflow)
        for epoch in range(source.time(), upto):
            if worker.index == 0:
                source.send_batch([(f"k{i}", epoch) for i in range(2000)])
            source.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))   # a checkpoint per epoch
        source.close()
        worker.run()
        return captured.by_time()
    return _merged(timely.execute_from_args(args, build))


def _entry_rows(path) -> int:
    db = sqlite3.connect(next(path.glob("*.sqlite")))
    try:
        return db.execute("SELECT count(*) FROM records WHERE kind = 'E'").fetchone()[0]
    finally:
        db.close()


def test_the_store_is_compacted_as_the_job_runs_and_still_restores_exactly(tmp_path, monkeypatch):
    """The engine compacts its checkpoint store as it writes (timely.checkpoint.compaction):
    a long run keeps a few epochs of entries per bin, not all of them, and a restart
    from the compacted store gives the same results as a run that never stopped."""
    from timely.checkpoint import compaction
    whole = _churn_job(30, ["-w", "2", "--checkpoint", "off"])
    kept, compacted = tmp_path / "kept", tmp_path / "compacted"
    monkeypatch.setattr(compaction, "MIN_KEYS", 10**12)
    _churn_job(24, ["-w", "2", "--checkpoint", f"dir:{kept}"])
    monkeypatch.setattr(compaction, "MIN_KEYS", 1)
    monkeypatch.setattr(compaction, "GROWTH", 2)
    _churn_job(24, ["-w", "2", "--checkpoint", f"dir:{compacted}"])
    assert _entry_rows(compacted) * 3 < _entry_rows(kept), (_entry_rows(compacted), _entry_rows(kept))
    # what is left is what a restore needs: per bin, its latest base and what follows
    from timely.checkpoint.compaction import bases_before
    from timely.checkpoint.records import restore_point
    from timely.checkpoint.store import DirStore
    store = DirStore(str(compacted), next(compacted.glob("*.sqlite")).stem)
    try:
        contents = store.read()
        rp = restore_point(contents.incarnations, contents.commits)
        heads = store.read([rp.inc.id], heads=True).entries
    finally:
        store.close()
    floors = bases_before(heads, rp.label)
    assert len(floors) == 4 and all(h.label >= floors[(h.op, h.bin)] for h in heads), (rp.label, floors)
    after = _churn_job(30, ["-w", "2", "--checkpoint", f"dir:{compacted}"])
    assert after == {t: rs for t, rs in whole.items() if t >= 24}


# ---- what must be refused ------------------------------------------------------------
def _rows(tmp_path):
    db = sqlite3.connect(next(tmp_path.glob("*.sqlite")))
    return db, list(db.execute("SELECT seq, kind, data FROM records ORDER BY seq"))


def test_a_corrupt_record_is_named(tmp_path):
    store = ["--checkpoint", f"dir:{tmp_path}"]
    _state_machine_job(4, ["-w", "2", *store])
    db, rows = _rows(tmp_path)
    seq = next(s for s, kind, _ in rows if kind == "C")
    with db:
        db.execute("UPDATE records SET data = ? WHERE seq = ?", (b"\x00garbage\x01\x02", seq))
    with pytest.raises(CheckpointCorrupt, match=f"row {seq} "):
        _state_machine_job(8, ["-w", "2", *store])


def test_a_missing_bin_is_named(tmp_path):
    store = ["--checkpoint", f"dir:{tmp_path}"]
    _state_machine_job(4, ["-w", "2", *store])
    db, rows = _rows(tmp_path)
    victims = [s for s, kind, data in rows if kind == "E" and decode(data).bin == 5]
    assert victims
    with db:
        db.executemany("DELETE FROM records WHERE seq = ?", [(s,) for s in victims])
    with pytest.raises(CheckpointMissing, match="StateMachine@.* bin 5: no base"):
        _state_machine_job(8, ["-w", "2", *store])


def test_a_changed_program_is_refused(tmp_path):
    store = ["--checkpoint", f"dir:{tmp_path}"]
    _state_machine_job(4, ["-w", "2", *store])

    def other(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            stream.state_machine(_count, bins=32)          # other bins: not the same state
            return source
        source = worker.dataflow(dataflow)
        source.close()
        worker.run()
    with pytest.raises(CheckpointError, match="holds stateful operators .*bins|this dataflow builds"):
        timely.execute_from_args(["-w", "2", *store], other)
