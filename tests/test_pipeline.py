"""The Spark pipeline end to end (examples/pipeline), small: Spark cleans clicks and
writes them to the real broker epoch by epoch, a 2-process pytimely cluster (a third
process joins mid-run and receives per-page state; then process 1 is SIGKILLed, the
others roll back to their last checkpoint, and a replacement joins; then process 0 is
sent SIGTERM and leaves) aggregates them
into Kafka, and Spark's own computation from the same events must equal the results
read back with ``timely-kafka``, per epoch, running totals included, in both progress
modes: what ``make run`` shows.

Protects: the whole path a user runs with ``make run``: the Spark writer's markers, the
dataflow source's epochs, Megaphone state across a join, the sink's markers, the Spark
reader's complete epochs, and the check itself (a wrong result must be caught)."""
from __future__ import annotations

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "pipeline"))

import run as pipeline  # noqa: E402
import spark_jobs  # noqa: E402


def held_bins(log: list[str]) -> dict[int, int]:
    found = {}
    for line in log:
        m = re.search(r"worker (\d+): read \d+ events from \d+ partitions; holds (\d+) bins", line)
        if m:
            found[int(m.group(1))] = int(m.group(2))
    return found


@pytest.mark.parametrize("progress_mode", ["p2p", "kafka"])
def test_pipeline_is_exact_across_a_join_and_a_crash(spark, tansu, progress_mode, tmp_path):
    progress = ([] if progress_mode == "p2p" else
                ["--progress-mode", "kafka", "--kafka-bootstrap", tansu.bootstrap,
                 "--kafka-prefix", f"tp{progress_mode}{os.getpid()}"])
    lines = []
    report = pipeline.run_pipeline(spark, tansu.bootstrap, events=30_000, epochs=8, partitions=4,
                                   join_after=1, kill_after=3, leave_after=4, leaver=0, progress=progress,
                                   pace=0.6, say=lines.append)
    assert report.codes == [0, 0, 0], "\n".join(report.cluster_log)
    # process 0 (the rebalancers' driver, a sink writer) was sent SIGTERM: it left, exit 0
    assert report.leave_code == 0 and report.left_at > report.sigterm_at, "\n".join(lines)
    assert any("process 0 leaves the cluster" in line for line in report.cluster_log), "\n".join(lines)
    assert any(line.startswith("leave: process 0 SIGTERM -> exit") for line in lines), "\n".join(lines)
    assert report.dropped["no user"] > 0 and report.dropped["bad time"] > 0 and report.dropped["unknown page"] > 0
    assert report.raw == report.clean + sum(report.dropped.values())
    assert [r["epoch"] for r in report.check] == list(range(8))
    assert report.differences == 0, "\n".join(lines)
    assert sum(r["clicks"] for r in report.check) == report.clean
    bins = held_bins(report.cluster_log)           # the replacement is process 1 again
    assert sorted(bins) == [0, 1, 2] and sum(bins.values()) == 64, bins
    assert any("rollback 1" in line for line in report.cluster_log), "\n".join(report.cluster_log)
    assert report.recovery_s is not None and report.recovery_s > 0, "\n".join(lines)
    assert sorted(report.latencies_ms) == list(range(8))
    # from the epoch's last marker in Kafka: no epoch's results can be complete before it
    assert all(ms > 0 for ms in report.latencies_ms.values()), report.latencies_ms
    # the end-to-end time runs from the first write to the last epoch's results readable
    assert report.seconds["dataflow"] == pytest.approx(max(report.completed_at.values()) - report.started_at)
    assert report.seconds["dataflow"] > 0 and report.seconds["processes exited"] > 0


def test_the_check_catches_a_wrong_result(spark, tansu):
    """The check is not vacuous: one changed count, one missing and one duplicated row
    are each reported in their epoch."""
    from pyspark.sql import functions as F
    clean, _ = spark_jobs.clean(spark_jobs.raw_clicks(spark, 5_000, 3), spark_jobs.catalog(spark, 50))
    want = spark_jobs.expected(clean)
    got = want.withColumn("marker_epoch", F.col("epoch"))
    first = want.orderBy("epoch", "page").first()
    wrong = got.withColumn("clicks", F.when((F.col("epoch") == 0) & (F.col("page") == first["page"]),
                                            F.col("clicks") + 1).otherwise(F.col("clicks")))
    missing_page = want.where("epoch = 1").orderBy("page").first()["page"]
    wrong = wrong.where(~((F.col("epoch") == 1) & (F.col("page") == missing_page)))
    wrong = wrong.unionByName(got.where("epoch = 2").limit(1))
    by_epoch = {r["epoch"]: r for r in spark_jobs.compare(want, wrong)}
    assert (by_epoch[0]["different"], by_epoch[0]["missing"], by_epoch[0]["duplicated"]) == (1, 0, 0)
    assert (by_epoch[1]["different"], by_epoch[1]["missing"], by_epoch[1]["duplicated"]) == (0, 1, 0)
    assert (by_epoch[2]["different"], by_epoch[2]["missing"], by_epoch[2]["duplicated"]) == (0, 0, 1)
    assert spark_jobs.compare(want, got) and all(
        r["missing"] == r["extra"] == r["different"] == r["duplicated"] == 0 for r in spark_jobs.compare(want, got))
    clean.unpersist()


def test_a_negative_pace_is_refused_by_name(capsys):
    """``make run``'s script refuses a pace below zero before it starts anything."""
    with pytest.raises(SystemExit) as e:
        pipeline.main(["--pace", "-1"])
    assert e.value.code == 2
    assert "--pace must be >= 0 seconds, got -1.0" in capsys.readouterr().err


def test_a_niceness_outside_0_to_19_is_refused_by_name(capsys):
    """``--spark-nice`` takes what ``lower_priority`` can set, and says so before it starts anything."""
    with pytest.raises(SystemExit) as e:
        pipeline.main(["--spark-nice", "20"])
    assert e.value.code == 2
    assert "--spark-nice must be between 0 and 19, got 20" in capsys.readouterr().err


@pytest.mark.parametrize("tasks", ["0", "5"])
def test_writer_tasks_outside_1_to_the_partitions_are_refused_by_name(capsys, tasks):
    """Each Kafka partition needs one writer task: ``--writer-tasks`` takes 1 to
    ``--partitions``, and says so before it starts anything."""
    with pytest.raises(SystemExit) as e:
        pipeline.main(["--writer-tasks", tasks, "--partitions", "4"])
    assert e.value.code == 2
    assert f"--writer-tasks must be between 1 and --partitions (4), got {tasks}" in capsys.readouterr().err


def test_the_crash_waits_until_the_joiner_is_a_member(tmp_path):
    """``make run`` SIGKILLs a process of a running cluster: a joiner that a peer's death
    catches mid-join stops by design, so the crash waits for the joiner to say it finished
    joining, and gives up (False) when the joiner has exited instead."""
    from timely.launch import LocalCluster
    trigger = tmp_path / "joined"
    program = tmp_path / "member.py"
    # a stand-in process: says it finished joining once the trigger file exists, then
    # waits to be stopped; exits at once if started with --exit
    program.write_text(
        "import os, sys, time\n"
        f"trigger = {str(trigger)!r}\n"
        "if '--exit' in sys.argv:\n"
        "    sys.exit(3)\n"
        "if '-j' in sys.argv:\n"
        "    while not os.path.exists(trigger):\n"
        "        time.sleep(0.01)\n"
        "    print('timely.cluster: process 1 finished joining', flush=True)\n"
        "time.sleep(600)\n")
    with LocalCluster(str(program), slots=3) as cluster:
        cluster.start(1)
        cluster.join(original=1)
        assert pipeline.joined(cluster, 1, 0.3) is False        # still joining
        trigger.write_text("")
        assert pipeline.joined(cluster, 1, 60) is True
        cluster.join(1, 0, "--exit")
        cluster.processes[2].popen.wait(30)
        assert pipeline.joined(cluster, 1, 60) is False         # a joiner that exited
