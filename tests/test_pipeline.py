"""The Spark pipeline end to end (examples/pipeline), small: Spark cleans clicks and
writes them to the real broker epoch by epoch, a 2-process pytimely cluster (a third
process joins mid-run and receives per-page state; then process 1 is SIGKILLed, the
others roll back to their last checkpoint, and a replacement joins; then process 0 is
sent SIGTERM and leaves) aggregates them
into Kafka, and Spark's own computation from the same events must equal the results
read back with ``timely-kafka``, per epoch, running totals included, and the dataflow's
event-time windows must equal Spark's ``window()`` over the same clicks, each in the
epoch that closes it, in both progress modes: what ``make run`` shows.

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
    # the event-time windows (60 s every 30 s) equal Spark's window(), each in the epoch closing it
    assert report.windows["expected"] == report.windows["received"] > 0, report.windows
    assert report.windows["clicks"] == 2 * report.clean and report.windows["windows"] == 17, report.windows
    assert any(line.startswith("spark window check: ") and line.endswith(")") and "EXACT" in line
               for line in lines), "\n".join(lines)
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


def test_the_window_check_catches_wrong_windows(spark):
    """The window check is not vacuous: a changed count, a missing window, a duplicated
    one and one written in an epoch before the one closing it are each counted."""
    from pyspark.sql import functions as F
    clean, _ = spark_jobs.clean(spark_jobs.raw_clicks(spark, 5_000, 3), spark_jobs.catalog(spark, 50))
    want = spark_jobs.expected_windows(clean, 60, 30)
    closes = (F.ceil((F.col("end") - F.lit(spark_jobs.START)) / F.lit(60)) - 1).cast("long")
    got = want.withColumn("marker_epoch", closes)
    rows = want.orderBy("page", "start").limit(4).collect()
    hit = lambda r: (F.col("page") == r["page"]) & (F.col("start") == r["start"])  # noqa: E731
    wrong = (got.withColumn("clicks", F.when(hit(rows[0]), F.col("clicks") + 1).otherwise(F.col("clicks")))
             .where(~hit(rows[1]))
             .withColumn("marker_epoch", F.when(hit(rows[2]), F.col("marker_epoch") - 1).otherwise(F.col("marker_epoch")))
             .unionByName(got.where(hit(rows[3]))))
    found = spark_jobs.compare_windows(want, wrong, 60, spark_jobs.START)
    assert {k: found[k] for k in ("different", "missing", "extra", "duplicated", "wrong_epoch")} == \
        {"different": 1, "missing": 1, "extra": 0, "duplicated": 1, "wrong_epoch": 1}, found
    assert found["received"] == found["expected"] > 0                # (one missing, one twice)
    assert pipeline.window_differences(found) == 4
    exact = spark_jobs.compare_windows(want, got, 60, spark_jobs.START)
    assert pipeline.window_differences(exact) == 0 and exact["clicks"] == 2 * clean.count(), exact
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


@pytest.mark.parametrize("text", ["60", "30:60", "60:0", "a:b"])
def test_bad_windows_are_refused_by_name(capsys, text):
    """``--windows`` takes LENGTH:EVERY seconds (0 < EVERY <= LENGTH) or off."""
    with pytest.raises(SystemExit) as e:
        pipeline.main(["--windows", text])
    assert e.value.code == 2
    assert f"--windows takes LENGTH:EVERY seconds with 0 < EVERY <= LENGTH, or off; got {text!r}" in capsys.readouterr().err


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
