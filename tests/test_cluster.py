"""Cluster mode and live rescaling, with real processes on 127.0.0.1.

Protects what a user of a growing cluster relies on: results do not depend on the
number of processes; a process joining mid-run (once, twice, during an iterative
dataflow) loses and duplicates nothing; a joiner dying mid-bootstrap does not disturb
the cluster; a dead peer stops everyone with an error naming it; strangers, garbage
and wrong secrets are refused without crashing anything. Every process is started on
free loopback ports, bounded in time, and reaped by PID.
"""
from __future__ import annotations

import json
import os
import re
import socket
import sys
import time

import networkx as nx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import wcc  # noqa: E402
from clusters import wait_for_line  # noqa: E402
from timely.launch import LocalCluster  # noqa: E402
from timely.dataflow.exchange import py_route  # noqa: E402

HELLO = os.path.join(ROOT, "examples", "hello.py")
WCC = os.path.join(ROOT, "examples", "wcc.py")
SEEN = re.compile(r"^worker (\d+): seen (\d+)$")


def seen_by_worker(cluster):
    seen = {}
    for proc in cluster.processes:
        for _, line in proc.lines:
            m = SEEN.match(line)
            if m:
                seen.setdefault(int(m.group(1)), []).append(int(m.group(2)))
    return seen


def all_seen(seen):
    return sorted(x for xs in seen.values() for x in xs)


def hello_cluster(rounds, delay, mode=(), **kw):
    return LocalCluster(HELLO, slots=kw.pop("slots", 3), workers=kw.pop("workers", 1),
                        extra=["--rounds", str(rounds), "--delay", str(delay), "--timeout", "8", *mode],
                        **kw)


def test_two_processes_route_like_one_cluster_of_two_workers(mode):
    with hello_cluster(rounds=10, delay=0.0, slots=2, mode=mode) as cluster:
        cluster.start(2)
        assert cluster.wait(60) == [0, 0], [p.output() for p in cluster.processes]
        seen = seen_by_worker(cluster)
    assert all_seen(seen) == list(range(10))
    # timely's routing, as threads in one process: an int key x goes to worker x % 2
    assert seen == {0: [0, 2, 4, 6, 8], 1: [1, 3, 5, 7, 9]}


def run_wcc_cluster(tmp_path, processes, workers, join=None, epochs=6, mode=()):
    """WCC on a cluster; with ``join=E`` a process joins once worker 0 fed epoch E, and
    worker 0 holds epoch E + 2 open until it has joined: the join lands while epochs
    are still arriving, whatever the machine's speed."""
    args = ["--vertices", "60", "--edges", "30", "--epochs", str(epochs), "--seed", "3",
            "--timeout", "8", "--output", str(tmp_path / "labels-{process}.json"), *mode]
    if join is not None:
        args += ["--epoch-delay", "0.1", "--hold-at", str(join + 2), "--await-joins", "1"]
    with LocalCluster(WCC, slots=processes + (1 if join is not None else 0), workers=workers, extra=args) as cluster:
        cluster.start(processes)
        if join is not None:
            wait_for_line(cluster.processes[0], rf"^worker 0 fed epoch {join}$", timeout=30)
            cluster.join(original=processes, bootstrap=1)
        codes = cluster.wait(90)
        assert codes == [0] * len(cluster.processes), "\n".join(cluster.interleaved())
        if join is not None:
            assert "finished joining" in cluster.processes[-1].output(), "\n".join(cluster.interleaved())
    got: dict = {}
    for name in os.listdir(tmp_path):
        with open(tmp_path / name) as f:
            for epoch, labels in json.load(f).items():
                got.setdefault(int(epoch), {}).update({v: label for v, label in labels})
    return got


def expected_wcc(epochs):
    graph = nx.Graph()
    expected = {}
    for epoch, batch in enumerate(wcc.random_batches(60, 30, epochs, 3)):
        graph.add_edges_from(batch)
        expected[epoch] = {v: min(c) for c in nx.connected_components(graph) for v in c}
    return expected


def test_wcc_on_two_processes_matches_networkx(tmp_path, mode):
    assert run_wcc_cluster(tmp_path, processes=2, workers=2, mode=mode) == expected_wcc(6)


def hello_with_a_join(rounds, delay, mode, watched, line):
    """Two hello processes; once process ``watched`` printed ``line``, a third joins
    (bootstrapped by worker 0). Every process must exit 0; returns (seen, log)."""
    with hello_cluster(rounds=rounds, delay=delay, mode=mode) as cluster:
        cluster.start(2)
        wait_for_line(cluster.processes[watched], line)
        cluster.join(original=2, bootstrap=0)
        codes = cluster.wait(60)
        log = "\n".join(cluster.interleaved())
        assert codes == [0, 0, 0], log
        return seen_by_worker(cluster), log


def test_join_mid_run_delivers_every_record_exactly_once(mode):
    seen, log = hello_with_a_join(24, 0.25, mode, 0, r"seen 2$")
    assert all_seen(seen) == list(range(24)), log
    assert seen.get(2), f"the joiner saw nothing:\n{log}"
    for worker, xs in seen.items():
        for x in xs:      # routed to x % 2 before the join, x % 3 after
            assert x % 2 == worker or x % 3 == worker, (worker, x)
    assert all(x % 3 == 2 for x in seen[2])
    joined_at = min(seen[2])
    assert all(x % 3 == w for w, xs in seen.items() for x in xs if x > joined_at)


def test_hello_prints_the_seeds_output(mode):
    # Seed 003 §4.1.1: two processes, a third joins before round 6; afterwards x goes to
    # worker x % 3, so the joiner sees 8 and worker 0 sees 6 and 9.
    seen, log = hello_with_a_join(10, 0.0, [*mode, "--wait-join", "6"], 1, r"seen 5$")
    assert seen == {0: [0, 2, 4, 6, 9], 1: [1, 3, 5, 7], 2: [8]}, log


def test_two_joins_in_a_row(mode):
    with hello_cluster(rounds=36, delay=0.2, slots=4, mode=mode) as cluster:
        cluster.start(2)
        wait_for_line(cluster.processes[0], r"seen 2$")
        cluster.join(original=2, bootstrap=0)
        wait_for_line(cluster.processes[2], r"seen \d+$")
        cluster.join(original=2, bootstrap=2)       # bootstrapped by the first joiner
        codes = cluster.wait(90)
        log = "\n".join(cluster.interleaved())
        assert codes == [0, 0, 0, 0], log
        seen = seen_by_worker(cluster)
    assert all_seen(seen) == list(range(36)), log
    assert seen.get(3) and all(x % 4 == 3 for x in seen[3]), log


def test_join_during_iterative_wcc(tmp_path, mode):
    assert run_wcc_cluster(tmp_path, processes=2, workers=2, join=2, epochs=8, mode=mode) == expected_wcc(8)


def test_joiner_killed_mid_bootstrap_leaves_cluster_correct(mode):
    with hello_cluster(rounds=24, delay=0.2, mode=mode) as cluster:
        cluster.start(2)
        wait_for_line(cluster.processes[0], r"seen 2$")
        cluster.env["TIMELY_FAULT_BOOTSTRAP_STALL"] = "30"
        joiner = cluster.join(original=2, bootstrap=0)
        cluster.env.pop("TIMELY_FAULT_BOOTSTRAP_STALL")
        wait_for_line(cluster.processes[0], r"is joining", timeout=20)
        wait_for_line(joiner, r"bootstrap stalls", timeout=20)      # killed mid-bootstrap
        cluster.kill(joiner)
        codes = [p.wait(60) for p in cluster.processes[:2]]
        log = "\n".join(cluster.interleaved())
        assert codes == [0, 0], log
        assert "lost before it finished joining" in log
        seen = seen_by_worker(cluster)
    assert all_seen(seen) == list(range(24)), log
    assert 2 not in seen


def test_peer_killed_mid_run_stops_the_others_with_its_name(mode):
    with hello_cluster(rounds=200, delay=0.05, slots=2, mode=mode) as cluster:
        p0, p1 = cluster.start(2)
        wait_for_line(p0, r"seen 4$")
        cluster.kill(p1)
        code = p0.wait(30)
        out = p0.output()
        assert code != 0, out
        assert re.search(rf"process 1 \(127\.0\.0\.1:{cluster.ports[1]}\) (disconnected|send failed)", out), out


def test_joiner_with_wrong_secret_is_refused():
    with hello_cluster(rounds=20, delay=0.15) as cluster:
        cluster.start(2)
        wait_for_line(cluster.processes[0], r"seen 2$")
        intruder = cluster.join(original=2, bootstrap=0, secret="not-the-secret")
        assert intruder.wait(30) != 0
        codes = [p.wait(60) for p in cluster.processes[:2]]
        log = "\n".join(cluster.interleaved())
        assert codes == [0, 0], log
        assert "refused" in intruder.output(), intruder.output()
        assert "refused a connection" in log
        seen = seen_by_worker(cluster)
    assert all_seen(seen) == list(range(20))
    assert 2 not in seen


def test_strangers_and_garbage_are_refused_without_crashing():
    with hello_cluster(rounds=20, delay=0.15, slots=2) as cluster:
        p0, p1 = cluster.start(2)
        wait_for_line(p0, r"seen 2$")
        for payload in (b"GET / HTTP/1.0\r\n\r\n", b"\x00" * 64, b"pytimely" + b"\xff" * 60):
            with socket.create_connection(("127.0.0.1", cluster.ports[0]), timeout=5) as s:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                s.settimeout(5)
                try:
                    while s.recv(4096):
                        pass
                except (ConnectionResetError, socket.timeout):
                    pass
        assert cluster.wait(60) == [0, 0], "\n".join(cluster.interleaved())
        log = p0.output()
        assert log.count("refused a connection") >= 3, log
        assert all_seen(seen_by_worker(cluster)) == list(range(20))


def test_silent_peer_stops_the_others_within_the_timeout():
    import signal
    with LocalCluster(HELLO, slots=2, extra=["--rounds", "400", "--delay", "0.05", "--timeout", "3"]) as cluster:
        p0, p1 = cluster.start(2)
        wait_for_line(p0, r"seen 4$")
        stopped = time.monotonic()
        cluster.kill(p1, signal.SIGSTOP)
        code = p0.wait(30)
        waited = time.monotonic() - stopped
        out = p0.output()
        assert code != 0, out
        assert re.search(r"process 1 \(127\.0\.0\.1:\d+\) silent for more than 3 s", out), out
        assert waited < 3 + 10, waited


def _operators_results(processes, workers):
    job = os.path.join(ROOT, "tests", "jobs", "operators_job.py")
    with LocalCluster(job, slots=processes, workers=workers, extra=["--timeout", "8"]) as cluster:
        cluster.start(processes)
        codes = cluster.wait(60)
        assert codes == [0] * processes, "\n".join(cluster.interleaved())
        rows = [json.loads(line[len("result "):]) for p in cluster.processes for _, line in p.lines
                if line.startswith("result ")]
    assert len(rows) == processes * workers
    return rows


def _merge(rows, key):
    merged = {}
    for row in rows:
        for t, records in row[key].items():
            merged.setdefault(t, []).extend(map(tuple, records))
    return {t: sorted(rs) for t, rs in merged.items()}


def test_exchange_broadcast_and_reductions_do_not_depend_on_the_cluster_shape():
    shapes = {(1, 1): _operators_results(1, 1), (2, 1): _operators_results(2, 1),
              (2, 2): _operators_results(2, 2)}
    one = shapes[(1, 1)]
    for shape, rows in shapes.items():
        peers = shape[0] * shape[1]
        assert _merge(rows, "exchanged") == _merge(one, "exchanged"), shape
        assert _merge(rows, "totals") == _merge(one, "totals"), shape
        # broadcast: every worker sees every broadcast record once
        for row in rows:
            assert row["broadcast"] == one[0]["broadcast"], shape
        for row in rows:      # exchange: each key lives on exactly the worker it routes to
            for records in row["exchanged"].values():
                assert all(py_route(k, peers) == row["worker"] for k, _, _ in records), shape
