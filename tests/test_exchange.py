"""The ``Exchange`` partition (``timely.dataflow.exchange``): both twins, and the pact.

Protects: ``Exchange`` is a cross-process contract (a key must reach the same worker
from every process, and in-process as across processes), so (a) the compiled twin
(``timely.dataflow._cexchange.partition``) returns exactly the buckets of the pure twin
for any records and keys (ints big and small, bools, floats, text, bytes, None, nested
tuples), and raises the same exceptions (bad ``peers``, unsupported keys, a key
function that raises); (b) in both twins every record lands in exactly one bucket, in
input order, and its bucket is timely's route: ``key % peers`` for a non-negative int
key (``exchange(|x| *x)`` sends 8 to worker 2 of 3), ``stable_hash64(key) % peers``,
Megaphone's hash, for any other key; (c) a
dataflow's ``Exchange`` and ``stream.exchange`` route records that way in-process too,
and ``broadcast`` still reaches every worker once (it routes by index, not by hash);
(d) across processes an exchange carries credit (``timely.communication.credit``): a
receiving worker that falls behind makes its sender hold back, with the bytes in
flight and delivered to it bounded by the credit, and every record still arrives
once, in both twins.

A compiled twin that is not importable makes the twin tests FAIL (a broken build must be
noticed) unless ``TIMELY_NO_CYTHON=1`` says it was skipped on purpose: then they skip.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from operator import itemgetter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bounded import execute_bounded

from timely import Exchange
from timely.dataflow import exchange
from timely.launch import LocalCluster
from timely.megaphone.bins import py_stable_hash64
from timely._twin import pure_python_forced
from twin_calls import outcome

PURE_ONLY = pure_python_forced()
TWIN_NEEDS = ("exchange",)


# ---- strategies ----------------------------------------------------------------------
ints = st.one_of(st.integers(), st.integers(-2**63, 2**64 - 1), st.integers(-2**200, 2**200),
                 st.sampled_from([0, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -2**63 - 1, 10**600]))
scalars = st.one_of(ints, st.booleans(), st.floats(allow_nan=True), st.integers(-2**70, 2**70).map(float),
                    st.text(st.characters(codec="utf-8")), st.binary(), st.none())
keys = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=8)
peers_counts = st.one_of(st.integers(1, 8), st.integers(9, 300))
batches = st.lists(keys, max_size=60)


def expected_route(key, peers):
    """The contract, written out: an int that is >= 0 (bools and integral floats are
    the int they equal) is its own route; every other key goes by its stable hash."""
    if type(key) in (int, bool) and key >= 0:
        return int(key) % peers
    if type(key) is float and math.isfinite(key) and key >= 0 and key == math.floor(key):
        return int(key) % peers
    return py_stable_hash64(key) % peers


def check_partition(buckets, records, keys_of, peers):
    """Every record in exactly one bucket, at ``expected_route(key, peers)``, in order."""
    assert type(buckets) is list and len(buckets) == peers
    assert all(type(b) is list for b in buckets)
    # Walk the input: each record must be the next one of its hash's bucket; then
    # every bucket must be used up (nothing placed twice, nothing invented).
    positions = {w: iter(b) for w, b in enumerate(buckets)}
    for record, key in zip(records, keys_of):
        w = expected_route(key, peers) if peers > 1 else 0
        assert next(positions[w]) is record        # the next record of its bucket: order kept
    assert all(next(it, None) is None for it in positions.values())


# ---- the twins agree -------------------------------------------------------------------
@given(keys, peers_counts)
def test_twins_agree_on_one_route(compiled_exchange, key, peers):
    assert outcome(compiled_exchange.route, key, peers) == outcome(exchange.py_route, key, peers)
    if compiled_exchange.route is not exchange.py_route:
        assert exchange.py_route(key, peers) == expected_route(key, peers)


@given(batches, peers_counts)
def test_twins_agree_records_as_keys(compiled_exchange, records, peers):
    got = compiled_exchange.partition(records, None, peers)
    expected = exchange.py_partition(records, None, peers)
    assert [[id(r) for r in b] for b in got] == [[id(r) for r in b] for b in expected]


@given(st.lists(st.tuples(keys, st.integers()), max_size=60), peers_counts)
def test_twins_agree_with_a_key_function(compiled_exchange, records, peers):
    got = compiled_exchange.partition(records, itemgetter(0), peers)
    expected = exchange.py_partition(records, itemgetter(0), peers)
    assert [[id(r) for r in b] for b in got] == [[id(r) for r in b] for b in expected]


@given(batches, peers_counts)
def test_twins_agree_on_any_iterable(compiled_exchange, records, peers):
    # A generator or a tuple, not a list: the compiled twin's generic loop.
    for make in (tuple, iter):
        got = compiled_exchange.partition(make(records), None, peers)
        assert [[id(r) for r in b] for b in got] == \
            [[id(r) for r in b] for b in exchange.py_partition(records, None, peers)]


BAD_PEERS = [0, -1, 1.0, 2.5, True, "2", None, 2**31, 2**70]


@pytest.mark.parametrize("peers", BAD_PEERS, ids=repr)
def test_bad_peers_raise_the_same_value_error(compiled_exchange, peers):
    expected = outcome(exchange.py_partition, [1, 2], None, peers)
    assert expected[0] is ValueError and "peers must be an int between 1 and" in expected[1]
    assert outcome(compiled_exchange.partition, [1, 2], None, peers) == expected


class _Key:
    pass


@pytest.mark.parametrize("bad", [[1], {1: 2}, {1}, frozenset(), _Key(), 1j, (1, [2])],
                         ids=lambda k: type(k).__name__)
def test_unsupported_keys_raise_the_same_type_error(compiled_exchange, bad):
    records = ["ok", bad, "never reached"]
    expected = outcome(exchange.py_partition, records, None, 2)
    assert expected[0] is TypeError and "keys must be int, float, str, bytes, None" in expected[1]
    assert outcome(compiled_exchange.partition, records, None, 2) == expected
    assert outcome(compiled_exchange.partition, records, lambda r: r, 3) == \
        outcome(exchange.py_partition, records, lambda r: r, 3)


def test_a_raising_key_function_propagates_in_both_twins(exchange_twin):
    calls = []

    def key(record):
        calls.append(record)
        if record == 3:
            raise KeyError("no key for 3")
        return record

    with pytest.raises(KeyError, match="no key for 3"):
        exchange_twin.partition([1, 2, 3, 4], key, 2)
    assert calls == [1, 2, 3]


# ---- the contract, in both twins --------------------------------------------------------
@given(batches, peers_counts)
def test_every_record_lands_once_in_order_at_its_hash(exchange_twin, records, peers):
    check_partition(exchange_twin.partition(records, None, peers), records, records, peers)


@given(st.lists(st.tuples(keys, st.integers()), max_size=60), peers_counts)
def test_a_key_function_routes_by_its_key(exchange_twin, records, peers):
    buckets = exchange_twin.partition(records, itemgetter(0), peers)
    check_partition(buckets, records, [r[0] for r in records], peers)


def test_one_peer_copies_the_batch_and_computes_no_key(exchange_twin):
    records = [[1], {2}, object()]          # unhashable: no key may be computed
    buckets = exchange_twin.partition(records, None, 1)
    assert buckets == [records] and buckets[0] is not records
    assert exchange_twin.partition([], lambda r: 1 / 0, 1) == [[]]


def test_equal_keys_of_different_types_share_a_bucket(exchange_twin):
    # The hash's own rules: 3 == 3.0 == True + 2, and equal keys must meet.
    records = [3, 3.0, 1, True, 1.0, (1, 2.0), (True, 2)]
    buckets = exchange_twin.partition(records, None, 7)
    where = {w for w, b in enumerate(buckets) for r in b if r == 3}
    assert len(where) == 1 and len(buckets[where.pop()]) >= 2
    assert len({w for w, b in enumerate(buckets) for r in b if r == 1}) == 1
    assert len({w for w, b in enumerate(buckets) for r in b if r == (1, 2)}) == 1
    assert sum(map(len, buckets)) == len(records)


def test_known_buckets_never_change(exchange_twin):
    # The cross-process contract: a change here re-routes every key of every dataflow.
    # Timely's: an integer key is the route (seed 003's hello: 8 goes to worker 8 % 3).
    assert exchange_twin.partition(list(range(10)), None, 3) == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert [len(b) for b in exchange_twin.partition(list(range(100)), None, 4)] == [25] * 4
    assert exchange_twin.partition([2**80, 2.0**70, 7.0, True], None, 5) == [
        [], [2**80, True], [7.0], [], [2.0**70]]      # beyond 64 bits too: int(key) % peers
    words = ["alpha", "beta", "gamma", "delta", b"x", None, (1, "a"), -5, 2.5]
    assert exchange_twin.partition(words, None, 3) == [
        [w for w in words if py_stable_hash64(w) % 3 == i] for i in range(3)]


def test_the_module_uses_the_compiled_twin(compiled_exchange):
    if PURE_ONLY:
        assert exchange.IMPLEMENTATION == "python" and exchange.partition is exchange.py_partition
    else:
        assert exchange.IMPLEMENTATION == "cython"
        assert exchange.partition is compiled_exchange.partition


def test_timely_pure_python_forces_the_pure_twin():
    out = subprocess.run([sys.executable, "-c", "import timely.dataflow.exchange as x; "
                          "print(x.IMPLEMENTATION, x.partition is x.py_partition)"],
                         env={**os.environ, "TIMELY_PURE_PYTHON": "1"}, capture_output=True, text=True)
    assert out.stdout.split() == ["python", "True"], out.stderr


# ---- the pact: in-process workers route by the same hash --------------------------------
@pytest.mark.parametrize("how", ["stream.exchange", "Exchange(None)", "Exchange(key, pinned=True)"])
def test_in_process_exchange_routes_like_timely(how):
    workers = 3
    words = [f"w{i}" for i in range(50)] + [("t", 1), b"b", 7, -2**70, None, 2.5]

    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            if how == "stream.exchange":
                routed = stream.exchange(lambda r: r)
            else:
                pact = Exchange(None) if how == "Exchange(None)" else Exchange(lambda r: r, pinned=True)

                def constructor(cap, info):
                    cap.drop()

                    def logic(input, output):
                        for c, records in input:
                            output.give_batch(c, list(records))
                    return logic
                routed = stream.unary(pact, "Route", constructor)
            return handle, routed.capture(), routed.probe()

        handle, captured, probe = worker.dataflow(dataflow)
        handle.send_batch(words[worker.index::workers])
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        handle.close()
        worker.run()
        return worker.index, [r for _, rs in captured.batches for r in rs]

    seen = dict(execute_bounded(workers, build))
    assert sorted(map(repr, (r for rs in seen.values() for r in rs))) == sorted(map(repr, words))
    for w, records in seen.items():
        assert all(expected_route(r, workers) == w for r in records), (w, records)


def test_broadcast_reaches_every_worker_once():
    workers = 3

    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            out = stream.broadcast()
            return handle, out.capture(), out.probe()

        handle, captured, probe = worker.dataflow(dataflow)
        handle.send_batch([(worker.index, i) for i in range(4)])
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        handle.close()
        worker.run()
        return sorted(r for _, rs in captured.batches for r in rs)

    results = execute_bounded(workers, build)
    everything = sorted((w, i) for w in range(workers) for i in range(4))
    assert results == [everything] * workers


# ---- credit: a slow receiver holds its sender back -------------------------------------------
SLOW_RECEIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "slow_receiver_job.py")


def test_a_slow_receiver_holds_its_sender_back_and_every_record_arrives_once(exchange_twin, tmp_path):
    """Worker 1 (another process) blocks on its first record until worker 0 has been held
    by the credit: meanwhile worker 0 cannot have more than the credit and one batch in
    flight, nor worker 1 more delivered; then everything arrives, once."""
    env = {"TIMELY_PURE_PYTHON": "1" if exchange_twin.name == "python" else "0"}
    batches, per_batch, limit = 100, 500, 1 << 20
    job = [SLOW_RECEIVER, "--release", str(tmp_path / "release"), "--batches", str(batches),
           "--per-batch", str(per_batch)]
    with LocalCluster(job, slots=2, extra=["--exchange-credit", "1M", "--timeout", "20"], env=env) as cluster:
        cluster.start(2)
        codes = cluster.wait(60)
        log = "\n".join(cluster.interleaved())
        lines = [line for p in cluster.processes for _, line in p.lines if line.startswith("result ")]
    assert codes == [0, 0], log
    results = {r["worker"]: r for r in (json.loads(line[len("result "):]) for line in lines)}
    sender, receiver = results[0], results[1]
    assert sender["twins"] == receiver["twins"] == [exchange_twin.name] * 2
    batch = len(json.dumps([(1, 0, "x" * 100)] * per_batch))      # a batch's frame, about
    assert sender["held"] >= 1, "the sender never held: the receiver was never behind"
    assert sender["limit"] == limit and sender["most_in_flight"] <= limit + batch, sender
    assert receiver["delivered"] <= limit + batch, receiver
    assert batches * per_batch * 110 > 4 * (limit + batch), "the test sends too little to need credit"
    n = batches * per_batch
    assert (receiver["count"], receiver["sum"]) == (n, n * (n - 1) // 2)
