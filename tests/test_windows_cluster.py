"""Event-time windows on a real cluster: exact across a join, a SIGKILL with rollback, a
SIGTERM leave and a stop-and-restart from checkpoint, in both progress modes.

Runs ``examples/pipeline/dataflow.py --windows`` (per page, sliding windows of 1000 s
every 500 s over the clicks' ``ts``, epochs of 1000 s) on real processes and a real
broker (Tansu), and puts one job through everything a cluster does to keyed state:
a third process joins (bins with their open windows move to it), process 1 is
SIGKILLed (the others roll back to their last checkpoint; a replacement joins),
process 0 is sent SIGTERM and leaves (its bins move out), then every process is
stopped by SIGTERM and the same command restarts the job from its checkpoint. Every
window, read back from Kafka by a reader that trusts the epoch-end markers, must be
what a plain Python computation over the clicks gives, written once, in the epoch
whose completion closes it. (The per-epoch results of the same dataflow are checked
by ``test_recovery``.)
"""
from __future__ import annotations

import math
import os
import re
import signal
import sys
import time
import uuid
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from clusters import wait_for_line  # noqa: E402
from test_kafka_connectors import Writer  # noqa: E402
from test_recovery import (DATAFLOW, PARTITIONS, clicks, complete_epochs, differences, read_rows,  # noqa: E402
                           run_job, wait_for_any_line, wait_for_epochs)
from timely.connectors.client import create_topics  # noqa: E402
from timely.launch import LocalCluster  # noqa: E402

EPOCHS = 14
LENGTH, EVERY, EPOCH_SECONDS = 1500, 500, 1000      # windows span two or three epochs


def spread_clicks(epoch: int) -> dict[int, list[dict]]:
    """``test_recovery.clicks(epoch)`` with their ``ts`` spread over the epoch's 1000
    seconds, so that windows open in one epoch and close in a later one (state is open
    at every epoch boundary: what moves, rolls back and restarts)."""
    out = clicks(epoch)
    for events in out.values():
        for ev in events:
            ev["ts"] = epoch * EPOCH_SECONDS + (ev["ts"] % 1000) * 37 % EPOCH_SECONDS
    return out


def expected_windows(epochs: int) -> dict[tuple, dict]:
    """Per (page, start, end): the window's row, and the epoch that closes it."""
    found: dict = defaultdict(lambda: [0, set()])
    for e in range(epochs):
        for events in spread_clicks(e).values():
            for ev in events:
                first = ev["ts"] // EVERY * EVERY
                for start in range(first - LENGTH + EVERY, first + 1, EVERY):
                    found[(ev["page"], start, start + LENGTH)][0] += 1
                    found[(ev["page"], start, start + LENGTH)][1].add(ev["user"])
    return {key: {"epoch": math.ceil(key[2] / EPOCH_SECONDS) - 1, "page": key[0], "start": key[1],
                  "end": key[2], "clicks": n, "users": len(users)}
            for key, (n, users) in found.items()}


def read_windows(brokers: str, topic: str) -> dict[tuple, dict]:
    """Every complete epoch's window rows, with the epoch they came in; fails on a
    window written twice."""
    got: dict = {}
    for epoch, row in read_rows(brokers, topic):
        key = (row["page"], row["start"], row["end"])
        assert key not in got, f"window {key} was written twice"
        got[key] = {"epoch": epoch, **row}
    return got


def test_windows_are_exact_across_a_join_a_sigkill_a_leave_and_a_restart(tansu, mode):
    run = uuid.uuid4().hex[:8]
    names = {"clicks": f"clicks-{run}", "results": f"results-{run}", "windows": f"windows-{run}",
             "group": f"g-{run}"}
    create_topics(tansu.bootstrap, {names[t]: PARTITIONS for t in ("clicks", "results", "windows")})
    writer = Writer(tansu.bootstrap, names["clicks"])
    written = 0

    def write(upto: int) -> None:
        nonlocal written
        while written < upto:
            writer.epoch(written, spread_clicks(written))
            written += 1
    write(3)
    window_args = ["--windows", names["windows"], "--window-seconds", str(LENGTH), "--slide-seconds", str(EVERY),
                   "--epoch-seconds", str(EPOCH_SECONDS)]
    extra = ["--brokers", tansu.bootstrap, "--clicks", names["clicks"], "--results", names["results"],
             "--group", names["group"], "--epochs", str(EPOCHS), "--bins", "16", "--timeout", "20",
             "--migration", "all-at-once", *window_args, *mode]
    with LocalCluster([DATAFLOW], slots=3, extra=extra) as cluster:
        cluster.start(2)
        wait_for_epochs(tansu.bootstrap, names["results"], 2, cluster)
        # a third process joins: bins, open windows in them, move to it
        joiner = cluster.join(original=2)
        wait_for_line(joiner, r"finished joining", timeout=60)
        shipped = False                 # (bins move at an epoch: the frontier must reach it)
        while not shipped and written < 8:
            write(written + 1)
            shipped = wait_for_any_line(cluster.processes, r"ships \d+ bins", timeout=2)
        # process 1 dies: the others roll back to their last checkpoint; a replacement joins
        cluster.kill(cluster.processes[1], signal.SIGKILL)
        cluster.processes[1].wait(10)
        write(written + 1)
        wait_for_line(cluster.processes[0], r"rebuilt dataflows", timeout=60)
        replacement = cluster.restart(1, 2)
        assert replacement.wait_for(r"finished joining", 60), "\n".join(cluster.interleaved())
        # process 0 leaves on SIGTERM while epochs go on arriving
        leaver = cluster.processes[0]
        cluster.kill(leaver, signal.SIGTERM)
        while written < EPOCHS - 2 and leaver.popen.poll() is None:
            write(written + 1)
            deadline = time.monotonic() + 60
            while leaver.popen.poll() is None and complete_epochs(tansu.bootstrap, names["results"]) < written:
                assert time.monotonic() < deadline, "\n".join(cluster.interleaved())
                time.sleep(0.05)
        assert leaver.wait(60) == 0, "\n".join(cluster.interleaved())
        # every process is stopped by SIGTERM: the job stops, to be restarted
        wait_for_epochs(tansu.bootstrap, names["results"], written, cluster)
        for p in cluster.processes[1:]:
            cluster.kill(p, signal.SIGTERM)
        stopped = [p.wait(30) for p in cluster.processes[1:]]
        log = cluster.interleaved()
    assert shipped, "\n".join(log)
    assert any("rollback 1" in line for line in log), "\n".join(log)
    assert "has drained" in leaver.output(), "\n".join(log)
    assert stopped == [143, 143], "\n".join(log)
    write(EPOCHS)
    restarted = run_job(tansu.bootstrap, {**names}, 2, EPOCHS, ["--migration", "all-at-once", *window_args, *mode])
    assert any(" restored at " in line for line in restarted), "\n".join(restarted)
    got = read_windows(tansu.bootstrap, names["windows"])
    want = expected_windows(EPOCHS)
    assert got == want, differences(got, want) + "\n" + "\n".join(log + restarted)
    assert len({row["epoch"] for row in got.values()}) == EPOCHS + 1          # one closes after the end
    # the keyed state the windows left open really moved, rolled back and was restored
    assert any(re.search(r"PageWindows: worker \d+ ships \d+ bins \([1-9]\d* keys\)", line) for line in log), \
        "\n".join(log)
    assert any(re.search(r"restored at \d+ .*\([1-9]\d* keys", line) for line in restarted), "\n".join(restarted)
