"""Any process can leave: the roles pinned to a worker move with the cluster.

Real processes on 127.0.0.1, both progress modes, reading a topic that is written epoch
by epoch while they run (tests/jobs/kafka_scale_job.py: a Kafka source, per-user counts
in Megaphone state, commits). Protects what an orchestrator relies on when it scales a
job in: SIGTERM to process 0, whose worker 0 drives the stateful operators' rebalancer,
makes it hand the rebalancer over (a record one epoch later, to the least worker still
routed to), move its bins and partitions out, drain and exit 0, while the others read
every event once and count exactly. The leave lands while epochs are still arriving:
the test writes the next epoch once the previous one is committed, until the leaver
has exited.
"""
from __future__ import annotations

import os
import signal
import sys
import time
import uuid

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from clusters import kafka_scale_results, wait_for_line  # noqa: E402
from test_kafka_connectors import Writer, committed  # noqa: E402
from timely.connectors.client import create_topics  # noqa: E402
from timely.launch import LocalCluster  # noqa: E402

KAFKA_JOB = os.path.join(ROOT, "tests", "jobs", "kafka_scale_job.py")
PARTITIONS, EPOCHS = 4, 30


def written_events(epochs: int) -> dict:
    return {(e, p, i): {"user": (e + p + i) % 7, "e": e, "p": p, "i": i}
            for e in range(epochs) for p in range(PARTITIONS) for i in range(2 + (e + p) % 3)}


def epoch_of(written: dict, e: int) -> dict:
    return {p: [v for k, v in written.items() if k[0] == e and k[1] == p] for p in range(PARTITIONS)}


@pytest.mark.parametrize("leaver", [0, 1], ids=["process-0", "process-1"])
def test_any_process_leaves_on_sigterm_and_the_counts_stay_exact(tmp_path, mode, tansu, leaver):
    topic, group = f"leave-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:10]}"
    create_topics(tansu.bootstrap, {topic: PARTITIONS})
    written = written_events(EPOCHS)
    writer = Writer(tansu.bootstrap, topic)
    args = ["--brokers", tansu.bootstrap, "--topic", topic, "--group", group,
            "--end-epoch", str(EPOCHS), "--timeout", "20", "--migration", "fluid",
            "--output", str(tmp_path / "out-{process}.json"), *mode]
    with LocalCluster(KAFKA_JOB, slots=3, workers=1, extra=args) as c:
        c.start(3)
        for e in range(2):
            writer.epoch(e, epoch_of(written, e))
        wait_for_line(c.processes[leaver], r"checkpoints of", timeout=60)
        c.kill(c.processes[leaver], signal.SIGTERM)
        gone = c.processes[leaver]
        e = 2
        # the leave needs the frontier to move (its bins move one per epoch): write the
        # next epoch once the previous one is committed, until the leaver has exited
        while e < EPOCHS and gone.popen.poll() is None:
            writer.epoch(e, epoch_of(written, e))
            done = {p: writer.markers[(p, e)] + 1 for p in range(PARTITIONS)}
            deadline = time.monotonic() + 60
            while gone.popen.poll() is None and committed(tansu.bootstrap, group, topic, PARTITIONS) != done:
                assert time.monotonic() < deadline, "\n".join(c.interleaved())
                time.sleep(0.05)
            e += 1
        left_at = e
        for e in range(left_at, EPOCHS):
            writer.epoch(e, epoch_of(written, e))
        codes = c.wait(120)
        log = "\n".join(c.interleaved())
    assert left_at < EPOCHS, f"the leave did not finish while epochs arrived:\n{log}"
    assert codes == [0, 0, 0], log
    assert "has drained" in gone.output() and "ships" in gone.output(), log
    if leaver == 0:
        # the rebalancer went to the least worker still routed to, which moved bins out
        assert "rebalancer: worker 0 leaves; worker 1 drives" in gone.output(), log
        assert "worker 1 drives from" in c.processes[1].output(), log
        assert "bins move out" in c.processes[1].output(), log
    kafka_scale_results(tmp_path, written, log)
    ends = committed(tansu.bootstrap, group, topic, PARTITIONS)
    assert ends == {p: writer.markers[(p, EPOCHS - 1)] + 1 for p in range(PARTITIONS)}, log
