"""No silent hang: inputs left open are closed, and a stuck dataflow says what holds it.

Protects:
- a ``build`` that returns while its inputs are still open completes (as timely closes a
  dropped ``InputHandle``), with every record sent, and says it closed them;
- a dataflow whose frontier stops moving is logged, within a few ``--stall-warn`` periods,
  with the operator, output and time of the capability that holds it, on the worker that
  holds it ("held here", with what an open input waits for) and on the others ("held by
  other workers"); ``/status.json`` carries the same, the status page shows it in a
  banner;
- a process whose peers are missing waits for them, saying whom every ``--timeout``
  seconds, and gives up only after ``--connect-timeout`` (no crash loop); one restarted
  after its job completed (the group's commits say so) exits 0 at once.
Waits are on the condition (the log line, the page's banner), bounded by ``bounded``.
"""
from __future__ import annotations

import json
import logging
import os
import re
import threading
import urllib.request
import uuid

import pytest

from bounded import execute_bounded
from test_recovery import DATAFLOW, ROOT, clicks, expected, paced, read_results  # noqa: F401,F811

import timely
from timely.launch import LocalCluster, Process, free_port_range

STALL = 0.3         # seconds: --stall-warn in these tests


class Lines(logging.Handler):
    """Collects the messages of one logger; ``when(pattern, fn)`` runs ``fn(record)`` on the
    first message that contains ``pattern`` (in the logging thread: a worker's own)."""

    def __init__(self, name: str) -> None:
        super().__init__(logging.INFO)
        self.logger = logging.getLogger(name)
        self.messages: list[str] = []
        self.hooks: list = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.messages.append(message)
        for pattern, fn in list(self.hooks):
            if pattern in message:
                self.hooks.remove((pattern, fn))
                fn(record)

    def __enter__(self) -> "Lines":
        self.logger.addHandler(self)
        self.level_before = self.logger.level
        self.logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_before)


@pytest.mark.parametrize("workers", (1, 3))
def test_inputs_left_open_when_build_returns_are_closed(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            return handle, stream.exchange(lambda x: x).capture()
        handle, captured = worker.dataflow(dataflow)
        handle.send(worker.index)
        handle.advance_to(2)
        handle.send(10 + worker.index)
        return handle, captured              # returns with the input open: nobody closes it

    with Lines("timely.worker") as lines:
        results = execute_bounded(workers, build)
    got = sorted((t, r) for _, c in results for t, rs in c.batches for r in rs)
    assert got == sorted([(0, w) for w in range(workers)] + [(2, 10 + w) for w in range(workers)])
    assert all(handle.closed and handle.closed_at == 2 and c.done() for handle, c in results)
    closed = [m for m in lines.messages if "still open" in m]
    assert len(closed) == workers and all("at times [2]" in m for m in closed), lines.messages


def holding(stream, release: threading.Event):
    """An operator "Hold" that keeps a capability for each time it receives records at,
    until ``release`` is set (then it drops them and passes its records on)."""
    def constructor(cap, info):
        cap.drop()
        held, records = {}, []
        worker = stream.scope.worker

        def logic(input, output):
            for c, data in input:
                held.setdefault(c.time, c.retain())
                records.extend((c.time, d) for d in data)
            if held and not release.is_set():
                worker.activations.activate_after(info.path, 0.02)   # look again soon
                return
            for t, c in sorted(held.items()):
                output.give_batch(c, [d for tt, d in records if tt == t])
                c.drop()
            held.clear()
            records.clear()
        return logic
    return stream.unary(None, "Hold", constructor)


def test_a_stuck_dataflow_says_what_holds_it():
    release = threading.Event()
    reports: dict = {}
    port = free_port_range(1)

    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            return handle, holding(stream, release).capture()
        handle, captured = worker.dataflow(dataflow)
        if worker.index == 0:                 # only worker 0's Hold gets a record: it holds
            handle.send("x")
        handle.advance_to(5)
        handle.close()
        return captured

    def stalled(record):                      # in the worker that logged it
        worker = record.args[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json", timeout=10) as reply:
            reports[worker] = json.loads(reply.read())["stalls"]
        if len(reports) == 2:
            release.set()

    config = timely.Config(workers=2, worker_mode="threads", stall_warn=STALL, metrics_port=port)
    with Lines("timely.stall") as lines:
        lines.hooks.append(("worker 0: dataflow", stalled))
        lines.hooks.append(("worker 1: dataflow", stalled))
        results = execute_bounded(config, build)
    assert [r for c in results for _, rs in c.batches for r in rs] == ["x"]
    warnings = [m for m in lines.messages if "made no progress" in m]
    mine = next(m for m in warnings if m.startswith("worker 0:"))
    theirs = next(m for m in warnings if m.startswith("worker 1:"))
    assert "held here: Hold (node" in mine and ", output 0) at 0" in mine, mine
    assert "held by other workers" in theirs and "Hold (node" in theirs and "held here" not in theirs, theirs
    # /status.json said the same, on either worker's report
    for stalls in reports.values():
        held = [h for s in stalls for h in s["held_here"] + s["held_elsewhere"]]
        assert any(h["operator"] == "Hold" and h["time"] == 0 for h in held), stalls


def test_an_open_input_is_named_as_what_the_dataflow_waits_for():
    release = threading.Event()

    def build(worker):
        handle, probe = worker.dataflow(lambda scope: (lambda h, s: (h, s.probe()))(*scope.new_input()))
        handle.send(1)
        # the program forgets to advance its input and waits on the probe itself: stuck
        # until the stall line tells it what holds the frontier
        worker.step_while(lambda: probe.less_than(1) and not release.is_set())
        handle.close()
        return True

    with Lines("timely.stall") as lines:
        lines.hooks.append(("made no progress", lambda record: release.set()))
        assert execute_bounded(timely.Config(workers=1, stall_warn=STALL), build) == [True]
    line = next(m for m in lines.messages if "made no progress" in m)
    assert "held here: Input (node 1, output 0) at 0 (an input the program has not closed" in line, line


# ---- no crash loop --------------------------------------------------------------------------
HELLO = os.path.join(ROOT, "examples", "hello.py")


def test_a_process_whose_peers_are_missing_waits_and_says_whom():
    """Process 1 started alone waits (the time-out once made it exit: a crash loop under
    a supervisor) and says every --timeout seconds whom it waits for; once process 0
    comes, the job runs to the end."""
    with LocalCluster([HELLO, "--rounds", "4"], slots=2, extra=["--timeout", "1"]) as cluster:
        late = Process(1, cluster._argv(2, 1, ()), cluster.env, cluster.start_time, "p1")
        cluster.processes.append(late)
        pattern = rf"waiting for process \[0\] at 127\.0\.0\.1:{cluster.ports[0]} to answer"
        assert late.wait_for(pattern + r" \([2-9] s so far", 60), late.output()
        assert late.popen.poll() is None, late.output()     # still waiting, past its --timeout
        cluster.processes.insert(0, Process(0, cluster._argv(2, 0, ()), cluster.env,
                                            cluster.start_time, "p0"))
        codes = cluster.wait(60)
        log = "\n".join(cluster.interleaved())
    assert codes == [0, 0], log
    assert sorted(re.findall(r"seen (\d+)", log)) == ["0", "1", "2", "3"], log


def test_connect_timeout_bounds_the_wait_with_an_error_naming_the_missing():
    with LocalCluster([HELLO, "--rounds", "2"], slots=2, extra=["--connect-timeout", "1"]) as cluster:
        alone = Process(0, cluster._argv(2, 0, ()), cluster.env, cluster.start_time, "p0")
        cluster.processes.append(alone)
        code = alone.wait(60)
    assert code != 0
    assert re.search(r"process 0: gave up waiting for process \[1\] at 127\.0\.0\.1:\d+ to connect "
                     r"after 1 s \(--connect-timeout\)", alone.output()), alone.output()


def test_a_process_restarted_after_its_job_completed_exits_at_once(tansu, paced, mode):
    """The pipeline's job runs to its end on 2 processes; a supervisor then restarts
    process 0 with the same arguments: its peers are gone, and instead of waiting for
    them it reads the group's commits, says the job is complete and exits 0."""
    for e in range(3, 4):
        paced["writer"].epoch(e, clicks(e))
    extra = ["--brokers", tansu.bootstrap, "--clicks", paced["clicks"], "--results", paced["results"],
             "--group", paced["group"], "--epochs", "4", "--bins", "16", "--timeout", "20", *mode]
    with LocalCluster([DATAFLOW], slots=2, extra=extra) as cluster:
        cluster.start(2)
        assert cluster.wait(120) == [0, 0], "\n".join(cluster.interleaved())
        again = cluster.restart(0, 2)
        code = again.wait(60)
        log = "\n".join(cluster.interleaved())
    assert code == 0, log
    assert re.search(rf"process 0: the job is already complete \(consumer group '{paced['group']}' .* has "
                     rf"committed every epoch before 4 of '{paced['clicks']}'\): nothing to do", again.output()), log
    assert "waiting for" not in again.output(), log
    assert read_results(tansu.bootstrap, paced["results"]) == expected(4)


def test_a_kafka_source_waiting_for_a_marker_says_which(tansu):
    """A source whose next epoch has no marker yet holds the frontier: the stall line
    names the epoch and the partitions it waits on; once the marker is written the
    dataflow completes."""
    from test_kafka_connectors import Writer
    from timely.connectors.client import create_topics
    topic = f"stall-{uuid.uuid4().hex[:8]}"
    create_topics(tansu.bootstrap, {topic: 2})
    writer = Writer(tansu.bootstrap, topic)
    writer.epoch(0, {0: [{"i": 0}], 1: [{"i": 1}]})
    writer.records(1, {0: [{"i": 2}], 1: [{"i": 3}]})
    writer.marker(1, 0)                          # partition 1 still owes epoch 1's marker

    def finish(record):
        writer.marker(1, 1)
        writer.epoch(2, {0: [], 1: []})

    def build(worker):
        probe = worker.dataflow(lambda scope: scope.kafka_source(tansu.bootstrap, topic, end_epoch=3).probe())
        worker.run()
        return probe.done()

    with Lines("timely.stall") as lines:
        lines.hooks.append(("made no progress", finish))
        assert execute_bounded(timely.Config(workers=1, stall_warn=STALL), build) == [True]
    line = next(m for m in lines.messages if "made no progress" in m)
    assert f"KafkaSource (node 1, output 0) at 1 (the marker of epoch 1 on {topic}[1])" in line, line
