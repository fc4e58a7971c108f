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


def read_rows(brokers: str, topic: str) -> list[tuple[int, dict]]:
    """``(epoch, row)`` for every row of every complete epoch of ``topic``, by the markers."""
    from confluent_kafka import Consumer
    consumer = Consumer(consumer_config(brokers, None, None))
    states = {p: PartitionEpochs(topic, p) for p in range(PARTITIONS)}
    rows: list = []
    try:
        for messages in scan(consumer, {(topic, p): 0 for p in range(PARTITIONS)}, timeout=10):
            for m in messages:
                for epoch, records in states[m.partition()].record(m.offset(), m.headers(), m.value()):
                    rows.extend((epoch, row) for row in JSON.decode([r[1] for r in records], [r[2] for r in records],
                                                                    topic, m.partition(), [r[0] for r in records]))
    finally:
        consumer.close()
    return rows


def read_results(brokers: str, topic: str) -> dict[tuple[int, str], dict]:
    """Every complete epoch's results; fails on a (epoch, page) read twice."""
    got: dict = {}
    for _epoch, row in read_rows(brokers, topic):
        key = (row["epoch"], row["page"])
        assert key not in got, f"epoch {key[0]} page {key[1]} was written twice"
        got[key] = row
    return got


def differences(got: dict, want: dict) -> str:
    """What a reader of the results would see wrong: missing, extra and differing rows,
    each field named (pytest's own diff hides the fields of nested dicts)."""
    lines = []
    for key in sorted(set(got) | set(want)):
        if key not in got:
            lines.append(f"missing {key}: {want[key]}")
        elif key not in want:
            lines.append(f"extra {key}: {got[key]}")
        elif got[key] != want[key]:
            fields = {f: (got[key].get(f), want[key].get(f)) for f in want[key] if got[key].get(f) != want[key][f]}
            lines.append(f"{key}: got/want {fields}")
    return "\n".join(lines[:40]) + (f"\n... {len(lines) - 40} more" if len(lines) > 40 else "")


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
    got = read_results(tansu.bootstrap, job["results"])
    assert got == expected(5), differences(got, expected(5))
    log = run_job(tansu.bootstrap, job, second, 10, mode)
    assert any("restored at 5" in line for line in log), "\n".join(log)
    got = read_results(tansu.bootstrap, job["results"])
    assert got == expected(10), differences(got, expected(10)) + "\n" + "\n".join(log)


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
        # a process that left (exit 0) is not a failure; one that died is
        assert all(p.popen.poll() in (None, 0) for p in cluster.processes), "\n".join(cluster.interleaved())
        time.sleep(0.1)


def finish(process, cluster, timeout: float) -> int:
    """``process``'s exit status; fails with every process's output if it does not exit."""
    import subprocess
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"{process.label} did not finish within {timeout:g} s:\n"
                             + "\n".join(cluster.interleaved())) from None


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
    running totals included, and no epoch written twice. The Kafka checkpoint store is
    compacted (every key written counts: --checkpoint-compact-keys 1) and still restores."""
    import signal
    extra = ["--brokers", tansu.bootstrap, "--clicks", paced["clicks"], "--results", paced["results"],
             "--group", paced["group"], "--epochs", "10", "--bins", "16", "--timeout", "20",
             "--checkpoint-compact-keys", "1", *mode]
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
    compacted = [int(m.group(1)) for line in log for m in [re.search(r"compacted checkpoints of .*: (\d+) records deleted", line)] if m]
    assert compacted and max(compacted) > 0, "\n".join(log)
    got = read_results(tansu.bootstrap, paced["results"])
    assert got == expected(10), differences(got, expected(10)) + "\n" + "\n".join(log)


def committed_offsets(brokers: str, group: str, topic: str) -> dict[int, int]:
    """The consumer group's committed offset of each partition of ``topic`` that has one."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer(consumer_config(brokers, group, None))
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    finally:
        consumer.close()
    return {c.partition: c.offset for c in found if c.offset >= 0}


def test_a_crash_before_any_checkpoint_completes_restores_the_start_of_the_life(tansu, paced, mode):
    """Process 1 acknowledges its state but never writes a commit (it dies inside the
    commit window, as a loaded machine makes likely: the failpoint holds it there), while
    the others commit their partitions' offsets. When it is SIGKILLed no checkpoint but
    the start of the job is complete: the survivors restore that start (where every
    source began), not the consumer group's offsets, and every total is exact."""
    import signal
    import time
    extra = ["--brokers", tansu.bootstrap, "--clicks", paced["clicks"], "--results", paced["results"],
             "--group", paced["group"], "--epochs", "10", "--bins", "16", "--timeout", "20", *mode]
    with LocalCluster([DATAFLOW], slots=3, extra=extra, env={"TIMELY_FAILPOINT": "commit-stall:1"}) as cluster:
        cluster.start(3)
        wait_for_epochs(tansu.bootstrap, paced["results"], 2, cluster)
        deadline = time.monotonic() + 60
        while not committed_offsets(tansu.bootstrap, paced["group"], paced["clicks"]):
            assert time.monotonic() < deadline, "\n".join(cluster.interleaved())
            time.sleep(0.1)
        cluster.kill(cluster.processes[1], signal.SIGKILL)
        for e in range(3, 10):
            paced["writer"].epoch(e, clicks(e))
        codes = [p.wait(120) for p in cluster.processes]
        log = cluster.interleaved()
    assert codes == [0, -signal.SIGKILL, 0], "\n".join(log)
    got = read_results(tansu.bootstrap, paced["results"])
    assert got == expected(10), differences(got, expected(10)) + "\n" + "\n".join(log)
    assert any("restored at 0 " in line for line in log), "\n".join(log)


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
    got = read_results(tansu.bootstrap, paced["results"])
    assert got == expected(10), differences(got, expected(10)) + "\n" + "\n".join(log)


@pytest.mark.parametrize("leaver", [0, 2])
def test_sigterm_leaves_the_pipeline_gracefully_and_the_others_go_on(tansu, paced, mode, leaver):
    """Any process of the pipeline's dataflow leaves on SIGTERM, process 0 (the
    rebalancers' driver) included: its kafka_sink partitions move to other writers at an
    epoch boundary with its bins, it exits 0 with no rollback, and every epoch's results
    are exact and written once. Epochs arrive one at a time until it has left, so the
    leave lands while the job runs."""
    import signal
    import time
    EPOCHS = 30     # enough for the leave to finish before the job does
    extra = ["--brokers", tansu.bootstrap, "--clicks", paced["clicks"], "--results", paced["results"],
             "--group", paced["group"], "--epochs", str(EPOCHS), "--bins", "16", "--timeout", "20", *mode]
    with LocalCluster([DATAFLOW], slots=3, extra=extra) as cluster:
        cluster.start(3)
        wait_for_epochs(tansu.bootstrap, paced["results"], 2, cluster)
        gone = cluster.processes[leaver]
        cluster.kill(gone, signal.SIGTERM)
        e = 3
        while e < EPOCHS and gone.popen.poll() is None:
            paced["writer"].epoch(e, clicks(e))
            e += 1
            deadline = time.monotonic() + 60
            while gone.popen.poll() is None and complete_epochs(tansu.bootstrap, paced["results"]) < e:
                assert time.monotonic() < deadline, "\n".join(cluster.interleaved())
                time.sleep(0.05)
        left_at = e
        for e in range(left_at, EPOCHS):
            paced["writer"].epoch(e, clicks(e))
        codes = [p.wait(120) for p in cluster.processes]
        log = cluster.interleaved()
    assert left_at < EPOCHS, "the leave did not finish while epochs arrived:\n" + "\n".join(log)
    assert codes == [0, 0, 0], "\n".join(log)
    assert "has drained" in gone.output() and not any("rollback" in line for line in log), "\n".join(log)
    got = read_results(tansu.bootstrap, paced["results"])
    assert got == expected(EPOCHS), differences(got, expected(EPOCHS)) + "\n" + "\n".join(log)


def test_after_a_process_left_the_others_restart_without_it(tansu, paced, mode):
    """Process 0 leaves on SIGTERM (exit 0: a supervisor does not start it again); then
    processes 1 and 2 are SIGKILLed together, and started again with their arguments.
    They must not wait for process 0 for ever (chaos seed 8 did): once none has come
    for --timeout seconds (10 at least), the two, a majority of the three, start
    without it from the last checkpoint, and every epoch's results are exact and
    written once."""
    import signal
    EPOCHS = 16
    extra = ["--brokers", tansu.bootstrap, "--clicks", paced["clicks"], "--results", paced["results"],
             "--group", paced["group"], "--epochs", str(EPOCHS), "--bins", "16", "--timeout", "3",
             "--migration", "all-at-once", *mode]
    with LocalCluster([DATAFLOW], slots=3, extra=extra) as cluster:
        cluster.start(3)
        wait_for_epochs(tansu.bootstrap, paced["results"], 2, cluster)
        gone = cluster.processes[0]
        cluster.kill(gone, signal.SIGTERM)
        e = 3
        while gone.popen.poll() is None and e < EPOCHS - 4:    # a leave moves bins at epochs
            paced["writer"].epoch(e, clicks(e))
            e += 1
            wait_for_epochs(tansu.bootstrap, paced["results"], e, cluster)
        assert finish(gone, cluster, 60) == 0, "\n".join(cluster.interleaved())
        for p in cluster.processes[1:]:
            cluster.kill(p, signal.SIGKILL)
        assert [p.wait(10) for p in cluster.processes[1:]] == [-signal.SIGKILL] * 2
        for e in range(e, EPOCHS):
            paced["writer"].epoch(e, clicks(e))
        restarted = [cluster.restart(i, 3) for i in (1, 2)]
        codes = [finish(p, cluster, 120) for p in restarted]
        log = cluster.interleaved()
    assert codes == [0, 0], "\n".join(log)
    assert any(re.search(r"processes \[1, 2\], a majority of the cluster, start without them", line)
               for line in log), "\n".join(log)
    got = read_results(tansu.bootstrap, paced["results"])
    assert got == expected(EPOCHS), differences(got, expected(EPOCHS)) + "\n" + "\n".join(log)


def test_sigterm_to_every_process_stops_the_job_and_a_restart_resumes(tansu, paced, mode):
    """The whole job stops when every process gets SIGTERM (as a scale-to-zero or a
    node drain does); the same command then resumes from the last checkpoint, exactly."""
    import signal
    extra = ["--brokers", tansu.bootstrap, "--clicks", paced["clicks"], "--results", paced["results"],
             "--group", paced["group"], "--epochs", "10", "--bins", "16", "--timeout", "20", *mode]
    with LocalCluster([DATAFLOW], slots=2, extra=extra) as cluster:
        cluster.start(2)
        wait_for_epochs(tansu.bootstrap, paced["results"], 2, cluster)
        for p in cluster.processes:
            cluster.kill(p, signal.SIGTERM)
        codes = [p.wait(20) for p in cluster.processes]
        log = cluster.interleaved()
    assert codes == [143, 143], "\n".join(log)
    for e in range(3, 10):
        paced["writer"].epoch(e, clicks(e))
    run_job(tansu.bootstrap, paced, 2, 10, mode)
    got = read_results(tansu.bootstrap, paced["results"])
    assert got == expected(10), differences(got, expected(10)) + "\n" + "\n".join(log)


def test_a_silent_process_is_declared_dead_by_the_heartbeat(tansu, paced):
    """A process that stops answering (SIGSTOP: a hung host, a long pause) without its
    connections breaking is declared dead once it has been silent for --timeout; the
    others roll back and finish exactly; the silent one, resumed, finds itself expelled
    and stops instead of writing on (it cannot tell the others went, so it must not go
    on alone)."""
    import signal
    extra = ["--brokers", tansu.bootstrap, "--clicks", paced["clicks"], "--results", paced["results"],
             "--group", paced["group"], "--epochs", "10", "--bins", "16", "--timeout", "3"]
    with LocalCluster([DATAFLOW], slots=3, extra=extra) as cluster:
        cluster.start(3)
        wait_for_epochs(tansu.bootstrap, paced["results"], 2, cluster)
        cluster.kill(cluster.processes[1], signal.SIGSTOP)
        for e in range(3, 10):
            paced["writer"].epoch(e, clicks(e))
        codes = [cluster.processes[i].wait(120) for i in (0, 2)]
        cluster.kill(cluster.processes[1], signal.SIGCONT)
        silent = cluster.processes[1].wait(30)
        log = cluster.interleaved()
    assert codes == [0, 0], "\n".join(log)
    assert any("silent for more than 3 s" in line for line in log), "\n".join(log)
    assert silent != 0, "\n".join(log)
    got = read_results(tansu.bootstrap, paced["results"])
    assert got == expected(10), differences(got, expected(10)) + "\n" + "\n".join(log)


RECOVERABLE = os.path.join(ROOT, "tests", "jobs", "recoverable_job.py")


def final_totals(epochs: int) -> dict[str, int]:
    return {page: row["total_clicks"] for (e, page), row in expected(epochs).items()
            if all(e2 <= e for (e2, p2) in expected(epochs) if p2 == page)}


def states(processes) -> dict[str, int]:
    """The running totals the processes printed at the end, added up (a page on one)."""
    import json
    out: dict[str, int] = {}
    for p in processes:
        for _, line in p.lines:
            if line.startswith("state "):
                for page, total in json.loads(line[6:]).items():
                    assert page not in out, f"page {page} held twice"
                    out[page] = total
    return out


def test_sigkill_of_a_process_while_it_leaves(tansu, paced, mode):
    """Process 2 is asked to leave (SIGTERM) and is SIGKILLed while it moves its bins out
    (``--migration fluid``: one bin per step); the two others roll back, take every
    bin from the checkpoint, and end with exactly the totals of every click."""
    import signal
    from clusters import wait_for_line
    extra = ["--brokers", tansu.bootstrap, "--clicks", paced["clicks"], "--group", paced["group"],
             "--epochs", "10", "--timeout", "20", "--migration", "fluid", *mode]
    with LocalCluster([RECOVERABLE], slots=3, extra=extra) as cluster:
        cluster.start(3)
        wait_for_line(cluster.processes[2], r"checkpoints of", timeout=60)
        cluster.kill(cluster.processes[2], signal.SIGTERM)
        # A migration step runs once the frontier passes its time, and only input moves the
        # frontier: write epochs one at a time until process 2 ships (its leave needs ~40
        # epochs to finish, so it is still leaving at the SIGKILL, whenever that comes).
        for e in range(3, 10):
            paced["writer"].epoch(e, clicks(e))
            if wait_for_any_line([cluster.processes[2]], r" ships \d+ bins", timeout=60 if e == 9 else 5):
                break
        else:
            raise AssertionError("process 2 never shipped a bin:\n" + "\n".join(cluster.interleaved()))
        cluster.kill(cluster.processes[2], signal.SIGKILL)
        for e in range(3, 10):
            if all(paced["writer"].markers.get((p, e)) is None for p in range(PARTITIONS)):
                paced["writer"].epoch(e, clicks(e))
        codes = [p.wait(120) for p in cluster.processes[:2]]
        log = cluster.interleaved()
    assert codes == [0, 0], "\n".join(log)
    assert any("rollback 1" in line for line in log), "\n".join(log)
    assert states(cluster.processes[:2]) == final_totals(10), "\n".join(log)


def test_sigkill_of_a_member_while_a_process_joins(tansu, paced, mode):
    """A process is joining when process 1 is SIGKILLed. If it had not finished joining,
    the survivors drop it (it stops, saying so, and is started again, joining the new
    life); if it had, it is one of the survivors. Either way the survivors roll back and
    every total is exact."""
    import signal
    from clusters import wait_for_line
    extra = ["--brokers", tansu.bootstrap, "--clicks", paced["clicks"], "--group", paced["group"],
             "--epochs", "10", "--timeout", "20", *mode]
    with LocalCluster([RECOVERABLE], slots=4, extra=extra) as cluster:
        cluster.start(3)
        wait_for_line(cluster.processes[0], r"checkpoints of", timeout=60)
        joiner = cluster.join(original=3, bootstrap=0)
        wait_for_line(cluster.processes[0], r"process 3 is joining", timeout=60)
        cluster.kill(cluster.processes[1], signal.SIGKILL)
        wait_for_line(cluster.processes[0], r"rebuilt dataflows", timeout=60)
        rollback = next(line for _, line in cluster.processes[0].lines if "rollback 1:" in line)
        if "processes [0, 2]" in rollback:               # dropped before it finished joining
            assert finish(joiner, cluster, 60) != 0
            again = cluster.restart(3, 3, "-j", "0", "--nn", "4")
            assert wait_for_any_line([again], r"finished joining", timeout=60), "\n".join(cluster.interleaved())
        else:
            assert "processes [0, 2, 3]" in rollback, rollback
        for e in range(3, 10):
            paced["writer"].epoch(e, clicks(e))
        codes = [finish(cluster.processes[i], cluster, 120) for i in (0, 2, 3)]
        log = cluster.interleaved()
    assert codes == [0, 0, 0], "\n".join(log)
    assert states([cluster.processes[i] for i in (0, 2, 3)]) == final_totals(10), "\n".join(log)


@pytest.mark.parametrize("seed", range(3))
def test_random_sigkills_at_random_moments_leave_every_result_exact(tansu, mode, seed):
    """Seeded chaos: clicks keep arriving at a random pace; at a random epoch a random
    process of 3 is SIGKILLed (mid-epoch, mid-checkpoint, mid-migration: wherever it
    is), and half the time a replacement is started with its arguments once the others
    rolled back. Every result, running totals included, is exact and written once."""
    import random
    import signal
    from clusters import wait_for_line
    rng = random.Random(seed)
    run = uuid.uuid4().hex[:8]
    names = {"clicks": f"clicks-{run}", "results": f"results-{run}", "group": f"g-{run}"}
    create_topics(tansu.bootstrap, {names["clicks"]: PARTITIONS, names["results"]: PARTITIONS})
    writer = Writer(tansu.bootstrap, names["clicks"])
    victim, kill_at, replace = rng.randrange(3), rng.randrange(2, 7), rng.random() < 0.5
    extra = ["--brokers", tansu.bootstrap, "--clicks", names["clicks"], "--results", names["results"],
             "--group", names["group"], "--epochs", "10", "--bins", "16", "--timeout", "20",
             "--migration", rng.choice(["batched", "all-at-once", "fluid"]), *mode]
    with LocalCluster([DATAFLOW], slots=3, extra=extra) as cluster:
        cluster.start(3)
        for p in cluster.processes:
            wait_for_line(p, r"checkpoints of", timeout=60)
        for e in range(10):
            writer.epoch(e, clicks(e))
            if e == kill_at:
                import time
                time.sleep(rng.uniform(0, 0.4))
                cluster.kill(cluster.processes[victim], signal.SIGKILL)
                cluster.processes[victim].wait(10)
                survivor = cluster.processes[(victim + 1) % 3]
                wait_for_line(survivor, r"rebuilt dataflows", timeout=60)
                if replace:
                    replacement = cluster.restart(victim, 3)
                    assert wait_for_any_line([replacement], r"finished joining", timeout=60), \
                        "\n".join(cluster.interleaved())
        alive = [p for i, p in enumerate(cluster.processes) if i != victim or replace]
        codes = [finish(p, cluster, 120) for p in alive]
        log = cluster.interleaved()
    assert codes == [0] * len(alive), "\n".join(log)
    got = read_results(tansu.bootstrap, names["results"])
    assert got == expected(10), differences(got, expected(10)) + "\n" + "\n".join(log)
