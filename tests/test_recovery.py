"""Restarts and crashes of a real cluster: the pipeline's own dataflow stays exact.

Protects what issue 21 reported, with ``examples/pipeline/dataflow.py`` on a real broker
(Tansu) and real processes, in both progress modes:
- a job run with ``--epochs 5`` and then again with ``--epochs 10`` and the same group
  resumes at epoch 5 with its keyed state as it was: every result of epochs 5-9,
  running totals included, is what one uninterrupted run gives, and no epoch is
  written twice;
- a restart with another number of processes restores every bin onto its new owner.

Results are read back by a reader that trusts the epoch-end markers, and compared with
the per-epoch and running figures computed here from the clicks written.
"""
from __future__ import annotations

import collections
import re
import os
import sys
import uuid

import orjson
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_kafka_connectors import Writer  # noqa: E402
from timely.connectors.client import consumer_config, create_topics, scan  # noqa: E402
from timely.connectors.epochs import JSON, PartitionEpochs  # noqa: E402
from timely.launch import LocalCluster  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATAFLOW = os.path.join(ROOT, "examples", "pipeline", "dataflow.py")
PARTITIONS = 4
PAGES = 23


def clicks(epoch: int) -> dict[int, list[dict]]:
    """Epoch ``epoch``'s clicks by partition: pages and users repeat across epochs, so
    running totals depend on every epoch before."""
    out: dict[int, list[dict]] = {p: [] for p in range(PARTITIONS)}
    for i in range(40 + epoch * 3):
        page = (i * 7 + epoch) % PAGES
        out[i % PARTITIONS].append({"user": (i * 5 + epoch * 3) % 31, "page": f"p{page}",
                                    "category": f"c{page % 4}", "ts": epoch * 1000 + i})
    return out


def expected(epochs: int) -> dict[tuple[int, str], dict]:
    totals: dict[str, int] = collections.Counter()
    seen: dict[str, set] = collections.defaultdict(set)
    out = {}
    for e in range(epochs):
        per_page: dict[str, list] = {}
        for events in clicks(e).values():
            for ev in events:
                found = per_page.setdefault(ev["page"], [ev["category"], 0, set()])
                found[1] += 1
                found[2].add(ev["user"])
        for page, (category, n, users) in per_page.items():
            totals[page] += n
            seen[page] |= users
            out[(e, page)] = {"epoch": e, "page": page, "category": category, "clicks": n,
                              "users": len(users), "total_clicks": totals[page],
                              "total_users": len(seen[page])}
    return out


def read_results(brokers: str, topic: str) -> dict[tuple[int, str], dict]:
    """Every complete epoch's results; fails on a (epoch, page) read twice."""
    from confluent_kafka import Consumer
    consumer = Consumer(consumer_config(brokers, None, None))
    states = {p: PartitionEpochs(topic, p) for p in range(PARTITIONS)}
    got: dict = {}
    try:
        for messages in scan(consumer, {(topic, p): 0 for p in range(PARTITIONS)}, timeout=10):
            for m in messages:
                for epoch, records in states[m.partition()].record(m.offset(), m.headers(), m.value()):
                    for row in JSON.decode([r[1] for r in records], [r[2] for r in records], topic,
                                           m.partition(), [r[0] for r in records]):
                        key = (row["epoch"], row["page"])
                        assert key not in got, f"epoch {key[0]} page {key[1]} was written twice"
                        got[key] = row
    finally:
        consumer.close()
    return got


@pytest.fixture
def job(tansu):
    run = uuid.uuid4().hex[:8]
    names = {"clicks": f"clicks-{run}", "results": f"results-{run}", "group": f"g-{run}"}
    create_topics(tansu.bootstrap, {names["clicks"]: PARTITIONS, names["results"]: PARTITIONS})
    writer = Writer(tansu.bootstrap, names["clicks"])
    for e in range(10):
        writer.epoch(e, clicks(e))
    return names


def run_job(brokers: str, names: dict, processes: int, epochs: int, mode: list) -> list[str]:
    extra = ["--brokers", brokers, "--clicks", names["clicks"], "--results", names["results"],
             "--group", names["group"], "--epochs", str(epochs), "--bins", "16", "--timeout", "20",
             *mode]
    with LocalCluster([DATAFLOW], slots=processes, extra=extra) as cluster:
        cluster.start(processes)
        codes = cluster.wait(120)
        log = cluster.interleaved()
    assert codes == [0] * processes, "\n".join(log)
    return log


@pytest.mark.parametrize("processes", [(2, 2), (2, 3)], ids=["same", "grown"])
def test_a_stopped_job_restarts_exactly_where_it_stopped(tansu, job, mode, processes):
    first, second = processes
    run_job(tansu.bootstrap, job, first, 5, mode)
    assert read_results(tansu.bootstrap, job["results"]) == expected(5)
    log = run_job(tansu.bootstrap, job, second, 10, mode)
    assert any("restored at 5" in line for line in log), "\n".join(log)
    assert read_results(tansu.bootstrap, job["results"]) == expected(10)


# ---- crashes: the survivors go on ------------------------------------------------------
def complete_epochs(brokers: str, topic: str) -> int:
    """How many epochs of ``topic`` are complete in every partition (by the markers)."""
    from confluent_kafka import Consumer
    consumer = Consumer(consumer_config(brokers, None, None))
    states = {p: PartitionEpochs(topic, p) for p in range(PARTITIONS)}
    try:
        for messages in scan(consumer, {(topic, p): 0 for p in range(PARTITIONS)}, timeout=10):
            for m in messages:
                states[m.partition()].record(m.offset(), m.headers(), None)
    finally:
        consumer.close()
    done = [s.completed for s in states.values()]
    return 0 if None in done else min(done) + 1


def wait_for_epochs(brokers: str, topic: str, n: int, cluster, timeout: float = 60) -> None:
    import time
    deadline = time.monotonic() + timeout
    while complete_epochs(brokers, topic) < n:
        assert time.monotonic() < deadline, "\n".join(cluster.interleaved())
        assert all(p.popen.poll() is None for p in cluster.processes), "\n".join(cluster.interleaved())
        time.sleep(0.1)


def wait_for_any_line(processes, pattern: str, timeout: float) -> bool:
    """Whether some process printed a line matching ``pattern`` within ``timeout``."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(re.search(pattern, line) for p in processes for _, line in p.lines):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def paced(tansu):
    """Topics for a job whose clicks arrive while it runs: the first 3 epochs now, the
    rest written by the test."""
    run = uuid.uuid4().hex[:8]
    names = {"clicks": f"clicks-{run}", "results": f"results-{run}", "group": f"g-{run}"}
    create_topics(tansu.bootstrap, {names["clicks"]: PARTITIONS, names["results"]: PARTITIONS})
    names["writer"] = Writer(tansu.bootstrap, names["clicks"])
    for e in range(3):
        names["writer"].epoch(e, clicks(e))
    return names


@pytest.mark.parametrize("victim", [1, 0], ids=["member", "coordinator"])
def test_survivors_of_a_sigkill_roll_back_and_finish_exactly(tansu, paced, mode, victim):
    """Three processes; once epoch 1's results are out, one is SIGKILLed (the lowest, the
    coordinator of the rollback, or another); the two others roll back to their last
    checkpoint, take its bins and partitions, and finish every epoch: each result exact,
    running totals included, and no epoch written twice."""
    import signal
    extra = ["--brokers", tansu.bootstrap, "--clicks", paced["clicks"], "--results", paced["results"],
             "--group", paced["group"], "--epochs", "10", "--bins", "16", "--timeout", "20", *mode]
    with LocalCluster([DATAFLOW], slots=3, extra=extra) as cluster:
        cluster.start(3)
        wait_for_epochs(tansu.bootstrap, paced["results"], 2, cluster)
        cluster.kill(cluster.processes[victim], signal.SIGKILL)
        for e in range(3, 10):
            paced["writer"].epoch(e, clicks(e))
        codes = [p.wait(120) for p in cluster.processes]
        log = cluster.interleaved()
    assert codes[victim] == -signal.SIGKILL
    assert [c for i, c in enumerate(codes) if i != victim] == [0, 0], "\n".join(log)
    assert any("rollback 1" in line for line in log), "\n".join(log)
    assert read_results(tansu.bootstrap, paced["results"]) == expected(10)


def test_a_replacement_started_with_the_same_arguments_joins_and_gets_bins_back(tansu, paced, mode):
    """Process 1 of 3 is SIGKILLed; the survivors roll back and go on; a replacement
    started with process 1's own arguments finds the cluster running, joins it as a
    joiner does, the rebalancer moves bins to it, and every result stays exact."""
    import signal
    from clusters import wait_for_line
    extra = ["--brokers", tansu.bootstrap, "--clicks", paced["clicks"], "--results", paced["results"],
             "--group", paced["group"], "--epochs", "10", "--bins", "16", "--timeout", "20",
             "--migration", "all-at-once", *mode]
    with LocalCluster([DATAFLOW], slots=3, extra=extra) as cluster:
        cluster.start(3)
        wait_for_epochs(tansu.bootstrap, paced["results"], 2, cluster)
        cluster.kill(cluster.processes[1], signal.SIGKILL)
        cluster.processes[1].wait(10)
        for e in range(3, 6):
            paced["writer"].epoch(e, clicks(e))
        wait_for_line(cluster.processes[0], r"rebuilt dataflows", timeout=60)
        replacement = cluster.restart(1, 3)
        wait_for_line(replacement, r"finished joining", timeout=60)
        shipped = False
        for e in range(6, 10):                       # bins move once the epochs they move at come
            paced["writer"].epoch(e, clicks(e))
            if not shipped:
                shipped = wait_for_any_line(cluster.processes, r"ships \d+ bins", timeout=5)
        codes = [p.wait(120) for p in cluster.processes]
        log = cluster.interleaved()
    assert codes == [0, 0, 0], "\n".join(log)
    assert shipped, "\n".join(log)
    assert any("joins, bootstrapped by worker" in line for line in log), "\n".join(log)
    assert any(re.search(r"worker 1: read \d+ events .* holds [1-9]\d* bins", line) for line in log), "\n".join(log)
    assert read_results(tansu.bootstrap, paced["results"]) == expected(10)
