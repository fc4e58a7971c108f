"""Every worker alike: joiner capabilities, and processes that leave a running cluster.

Real processes on 127.0.0.1, both progress modes (tests/jobs/scale_job.py: word counts
in Megaphone state, fed by one worker, and by a joiner with ``--joiner-feeds``).
Protects what a user of an elastic cluster relies on: a joined worker feeds input and
is notified like any other, at times no earlier than where the cluster stood when it
joined; a process sent SIGTERM moves its bins out, drains, says goodbye and exits 0
while the others carry on with exactly the counts of a run without the leave; a leave,
then a join again, still counts exactly; a process that cannot leave (its keyed state is
pinned) says why and carries on; a process killed with SIGKILL stops a survivor whose
dataflow cannot roll back, with its name (fail-stop; tests/test_recovery.py has the
dataflows that roll back).
"""
from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from collections import Counter

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "tests", "jobs"))

import scale_job  # noqa: E402
from clusters import kafka_scale_results, wait_for_line, wait_until  # noqa: E402
from timely.launch import LocalCluster  # noqa: E402

JOB = os.path.join(ROOT, "tests", "jobs", "scale_job.py")
KAFKA_JOB = os.path.join(ROOT, "tests", "jobs", "kafka_scale_job.py")


def cluster(tmp_path, slots, workers=1, epochs=30, delay=0.1, extra=()):
    args = ["--epochs", str(epochs), "--epoch-delay", str(delay), "--timeout", "10", "--check-progress",
            "--output", str(tmp_path / "out-{process}.json"), *extra]
    return LocalCluster(JOB, slots=slots, workers=workers, extra=args)


def outputs(tmp_path):
    found = []
    for name in sorted(os.listdir(tmp_path)):
        if name.startswith("out-"):
            with open(tmp_path / name) as f:
                found.extend(json.load(f))
    return found


def check_counts(results, epochs, log):
    """Every (word, running total) exactly once, and the final totals are what was fed."""
    expected = Counter()
    for epoch in range(epochs):
        expected.update(scale_job.feeder_words(epoch))
    for r in results:
        if r["joined"]:
            for epoch in r["fed"]:
                expected.update(scale_job.joiner_words(r["worker"], epoch))
    seen = Counter()
    final: dict = {}
    for r in results:
        for _, pairs in r["counted"]:
            for word, total in pairs:
                seen[(word, total)] += 1
                final[word] = max(final.get(word, 0), total)
    assert final == dict(expected), log
    duplicated = [k for k, n in seen.items() if n > 1]
    assert not duplicated, f"counted twice: {duplicated[:5]}\n{log}"
    assert sum(seen.values()) == sum(expected.values()), log


def test_joiner_feeds_input_and_is_notified(tmp_path, mode):
    epochs = 30
    with cluster(tmp_path, 3, epochs=epochs,
                 extra=["--joiner-feeds", "--notify", "--await-joins", "1", "--join-by", "10", *mode]) as c:
        c.start(2)
        wait_for_line(c.processes[0], r"^worker 0 fed epoch 3$", timeout=30)
        c.join(original=2, bootstrap=0)
        codes = c.wait(90)
        log = "\n".join(c.interleaved())
        assert codes == [0, 0, 0], log
    results = outputs(tmp_path)
    joiner = next(r for r in results if r["joined"])
    # the join landed while epochs were arriving: after epoch 3 was fed, and no later
    # than epoch 10, which the feeder holds open until the join is done (--join-by)
    assert joiner["granted"] is not None and 3 < joiner["granted"] <= 11, log
    assert joiner["fed"] == list(range(joiner["granted"], epochs)), log
    check_counts(results, epochs, log)
    # notified at every epoch from its grant on, like the original workers at every epoch
    notes = {r["worker"]: [t for w, t in r["notes"] if w == r["worker"]] for r in results}
    assert notes[0] == list(range(epochs)) and notes[1] == list(range(epochs)), log
    # each output has its own grant: the notifying operator's is the time the bootstrap
    # worker's input implies there, at most the joiner's own input grant (one step after
    # the bootstrap worker's input: a grant is strictly above what the grantor holds)
    mine = notes[joiner["worker"]]
    assert mine and 0 < mine[0] <= joiner["granted"] and mine == list(range(mine[0], epochs)), log


def test_sigterm_moves_bins_out_and_the_others_count_exactly(tmp_path, mode):
    epochs = 40
    with cluster(tmp_path, 3, workers=2, epochs=epochs, extra=["--await-leaves", "1", *mode]) as c:
        c.start(3)
        wait_for_line(c.processes[2], r"running, in a cluster", timeout=30)
        c.kill(c.processes[2], signal.SIGTERM)
        codes = c.wait(90)
        log = "\n".join(c.interleaved())
        assert codes == [0, 0, 0], log
    leaver = c.processes[2].output()
    assert "leaves the cluster" in leaver and "has drained" in leaver, log
    assert "ships" in leaver, f"the leaving process moved no bins:\n{log}"
    assert "has left the cluster" in c.processes[0].output(), log
    check_counts(outputs(tmp_path), epochs, log)


def test_join_leave_join_counts_exactly(tmp_path, mode):
    epochs = 20
    with cluster(tmp_path, 4, epochs=epochs,
                 extra=["--joiner-feeds", "--joiner-epochs", "5", "--await-joins", "2", "--await-leaves", "1",
                        *mode]) as c:
        c.start(2)
        wait_for_line(c.processes[0], r"^worker 0 fed epoch 1$", timeout=30)
        first = c.join(original=2, bootstrap=0)
        wait_for_line(first, r"finished joining", timeout=30)
        wait_for_line(first, r"^worker 2 fed epoch \d+$", timeout=30)   # it took part before it leaves
        c.kill(first, signal.SIGTERM)
        assert first.wait(40) == 0, "\n".join(c.interleaved())
        c.join(original=2, bootstrap=0)
        codes = c.wait(90)
        log = "\n".join(c.interleaved())
        assert codes == [0, 0, 0, 0], log
    results = outputs(tmp_path)
    assert sum(1 for r in results if r["joined"] and r["fed"]) == 2, log
    check_counts(results, epochs, log)


def test_leave_during_iterative_wcc(tmp_path, mode):
    """A joiner leaves while WCC iterates (worker 0 holds epoch 4 open until the joiner
    has joined and left, so both land while epochs arrive). Labels stay exact."""
    import test_cluster
    epochs = 8
    args = ["--vertices", "60", "--edges", "30", "--epochs", str(epochs), "--seed", "3",
            "--timeout", "10", "--epoch-delay", "0.1", "--hold-at", "4", "--await-joins", "1",
            "--await-leaves", "1", "--output", str(tmp_path / "labels-{process}.json"), *mode]
    with LocalCluster(test_cluster.WCC, slots=3, workers=2, extra=args) as c:
        c.start(2)
        wait_for_line(c.processes[0], r"^worker 0 fed epoch 1$", timeout=30)
        joiner = c.join(original=2, bootstrap=1)
        wait_for_line(joiner, r"finished joining", timeout=30)
        c.kill(joiner, signal.SIGTERM)
        codes = c.wait(90)
        log = "\n".join(c.interleaved())
        assert codes == [0, 0, 0], log
    assert "has drained" in joiner.output(), log
    got: dict = {}
    for name in os.listdir(tmp_path):
        with open(tmp_path / name) as f:
            for epoch, labels in json.load(f).items():
                got.setdefault(int(epoch), {}).update({v: label for v, label in labels})
    assert got == test_cluster.expected_wcc(epochs), log


def test_kafka_partitions_follow_a_join_and_a_leave(tmp_path, mode, tansu):
    """Two processes read a 4-partition topic while it is written epoch by epoch; a third
    joins and gets partitions, then an original one leaves (SIGTERM) and hands its
    partitions on: every event is read exactly once, by the worker holding its partition
    at the time, the per-user counts are exact, and the group's offsets end past every
    partition's last marker (a restart would read nothing again). The joiner starts
    while the others are still starting up (it is admitted once their workers exist)."""
    from test_kafka_connectors import Writer, committed
    from timely.connectors.client import create_topics
    partitions, epochs = 4, 40
    topic, group = f"scale-{uuid.uuid4().hex[:10]}", f"g-{uuid.uuid4().hex[:10]}"
    create_topics(tansu.bootstrap, {topic: partitions})
    written = {(e, p, i): {"user": (e + p + i) % 7, "e": e, "p": p, "i": i}
               for e in range(epochs) for p in range(partitions) for i in range(3 + (e + p) % 3)}
    writer = Writer(tansu.bootstrap, topic)
    done: list[int] = []

    def write():
        for e in range(epochs):
            writer.epoch(e, {p: [v for k, v in written.items() if k[0] == e and k[1] == p]
                             for p in range(partitions)})
            done.append(e)
            time.sleep(0.25)            # the input's pace: epochs arrive while the cluster changes
    thread = threading.Thread(target=write, daemon=True)
    args = ["--brokers", tansu.bootstrap, "--topic", topic, "--group", group,
            "--end-epoch", str(epochs), "--timeout", "10",
            "--output", str(tmp_path / "out-{process}.json"), *mode]
    with LocalCluster(KAFKA_JOB, slots=3, workers=1, extra=args) as c:
        c.start(2)
        thread.start()
        joiner = c.join(original=2, bootstrap=0)
        wait_for_line(joiner, r"finished joining", timeout=30)
        wait_for_line(c.processes[0], r"hands .* to worker 2", timeout=30)
        handed = len(done)
        # the joiner reads a few epochs of its partitions before process 1 leaves
        assert wait_until(lambda: len(done) >= handed + 4), "the writer stopped"
        c.kill(c.processes[1], signal.SIGTERM)
        assert len(done) < epochs, "the leave landed after the last epoch was written"
        codes = c.wait(120)
        thread.join(60)
        log = "\n".join(c.interleaved())
        assert codes == [0, 0, 0], log
    assert "has drained" in c.processes[1].output(), log
    by_worker = kafka_scale_results(tmp_path, written, log)
    assert by_worker[2]["taken"] > 0 and by_worker[2]["read"], log
    assert by_worker[1]["handed_off"] > 0, log
    ends = committed(tansu.bootstrap, group, topic, partitions)
    assert ends == {p: writer.markers[(p, epochs - 1)] + 1 for p in range(partitions)}, log


def test_leave_of_the_process_holding_the_most_bins(tmp_path, mode):
    """With ``--rebalance off`` a joiner gets no bins, so each original process holds
    half of them; process 1 leaves, and every one of its 16 bins moves out (a leave
    moves bins even with rebalancing off) with the counts exact. The feeder goes on
    (empty epochs) until the join and the leave are done, so the input never ends first."""
    epochs = 10
    with cluster(tmp_path, 3, epochs=epochs, extra=["--bins", "32", "--rebalance", "off", "--await-joins", "1",
                                                    "--await-leaves", "1", *mode]) as c:
        c.start(2)
        joiner = c.join(original=2, bootstrap=0)
        wait_for_line(joiner, r"finished joining", timeout=30)
        c.kill(c.processes[1], signal.SIGTERM)
        codes = c.wait(90)
        log = "\n".join(c.interleaved())
        assert codes == [0, 0, 0], log
    leaver = c.processes[1].output()
    shipped = sum(int(line.split(" ships ")[1].split(" bins")[0])
                  for line in leaver.splitlines() if " ships " in line)
    assert shipped == 16, log
    check_counts(outputs(tmp_path), epochs, log)


def test_a_program_asking_its_own_process_to_leave_leaves_and_the_others_count_exactly(tmp_path):
    """worker.leave(): process 1's workers ask, once epoch 3 is complete; its bins move
    out, it drains and exits 0, and process 0 carries on (the feeder goes on until the
    leave is done) with exactly the counts of a run without the leave."""
    epochs = 12
    with cluster(tmp_path, 2, workers=2, epochs=epochs, extra=["--await-leaves", "1", "--ask-leave", "1@3"]) as c:
        c.start(2)
        codes = c.wait(90)
        log = "\n".join(c.interleaved())
        assert codes == [0, 0], log
    leaver = c.processes[1].output()
    assert re.search(r"process 1: leave requested \(worker [23] asked\)", leaver), log
    assert "has drained" in leaver and "ships" in leaver, log
    assert "has left the cluster" in c.processes[0].output(), log
    check_counts(outputs(tmp_path), epochs, log)


@pytest.mark.parametrize("asks, extra, why", [
    (["1@3"], ["--no-rescaling"], r"rescaling is switched off \(--no-rescaling\)"),
    (["1@3", "0@end"], ["--await-leaves", "1"], r"it is the last process of the cluster"),
], ids=["rescaling-off", "last-process"])
def test_a_leave_a_program_asks_that_cannot_be_done_is_refused_and_it_carries_on(tmp_path, asks, extra, why):
    """worker.leave() refused: the process says why and carries on, and the counts stay
    exact (tests/test_recovery.py and test_sigterm_that_cannot_leave_is_not_ignored have
    the other reasons: Kafka sink partitions, pinned routing; tests/test_leave.py has
    process 0 leaving, which hosts the rebalancer and hands it over)."""
    epochs = 8
    args = [arg for ask in asks for arg in ("--ask-leave", ask)]
    with cluster(tmp_path, 2, epochs=epochs, extra=[*args, *extra]) as c:
        c.start(2)
        codes = c.wait(90)
        log = "\n".join(c.interleaved())
        assert codes == [0, 0], log
    refuser = int(asks[-1].split("@")[0])
    assert re.search(rf"process {refuser} cannot leave the cluster: {why}; it carries on",
                     c.processes[refuser].output()), log
    assert "has drained" not in c.processes[refuser].output(), log
    check_counts(outputs(tmp_path), epochs, log)


def test_sigkill_stops_a_dataflow_that_cannot_roll_back_naming_the_dead(tmp_path, mode):
    """This job keeps no checkpoints (and feeds its input from the program, which an
    input handle cannot replay), so it cannot roll back: the death of a process stops
    the survivor, which names the dead process and why it cannot go on (fail-stop)."""
    with cluster(tmp_path, 2, epochs=200, extra=[*mode]) as c:
        c.start(2)
        wait_for_line(c.processes[0], r"running, in a cluster", timeout=30)
        c.kill(c.processes[1])
        code = c.processes[0].wait(30)
        log = "\n".join(c.interleaved())
    assert code != 0, log
    port = c.ports[1]
    assert re.search(rf"process 1 \(127\.0\.0\.1:{port}\) (disconnected|send failed).*cannot roll back: dataflow "
                     rf"'Dataflow0' keeps no checkpoints", c.processes[0].output()), log


def test_sigterm_that_cannot_leave_is_not_ignored(tmp_path, mode):
    """An original WCC process, whose vertices are pinned to it, cannot leave: on SIGTERM
    it stops at once with exit status 143, saying why, instead of carrying on while its
    orchestrator waits; the other (its dataflow cannot roll back: input handles) stops
    too, naming it."""
    import test_cluster
    args = ["--vertices", "60", "--edges", "30", "--epochs", "40", "--seed", "3", "--timeout", "10",
            "--epoch-delay", "0.3", "--output", str(tmp_path / "labels-{process}.json"), *mode]
    with LocalCluster(test_cluster.WCC, slots=2, workers=2, extra=args) as c:
        c.start(2)
        wait_for_line(c.processes[1], r"running, in a cluster", timeout=30)
        c.kill(c.processes[1], signal.SIGTERM)
        codes = c.wait(30)
        log = "\n".join(c.interleaved())
    assert codes[1] == 143, log
    assert re.search(r"process 1 cannot leave the cluster: .*pinned.* it stops \(SIGTERM\)", c.processes[1].output()), log
    assert codes[0] != 0 and re.search(r"process 1 \(127\.0\.0\.1:\d+\) (disconnected|send failed)", c.processes[0].output()), log
