"""Spark on a cluster: ``make run``'s pipeline on a Spark standalone cluster (a master and
a worker of pyspark's own ``spark-class`` on 127.0.0.1, ``StandaloneCluster``), and the
errors of a session that cannot run on its master.

Protects:
- ``SPARK_MASTER=spark://...`` (``--spark-master``'s default) runs the pipeline on the
  cluster, EXACT: the session is on the master, an executor registered, the master
  lists the finished application with the worker's core, and the executor (another
  JVM, started by the worker with none of the driver's environment) ran the tasks,
  ``timely-kafka``'s included, importing the driver's ``timely``: ``session`` checks
  that, and fails when an executor imports another copy (the venv's editable install
  is the main checkout, not this tree);
- a master URL Spark does not know, a master that is not running, a master whose
  workers cannot host the executor asked for, and a second master in one process are
  named in an error, within a bound, instead of a job that waits for ever.

The cluster (1 worker, 1 core, 1 GiB) is started once for the module and stopped by PID.
"""
from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from broker.tansu import free_port
from timely.connectors.spark import (
    MasterUnreachable,
    SparkClusterError,
    StandaloneCluster,
    master_kind,
    on_this_host,
    session,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "examples", "pipeline", "run.py")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A master and one worker (1 core, 1 GiB: one executor of Spark's default size) on
    127.0.0.1, their logs and scratch space in a temporary folder."""
    with StandaloneCluster(workers=1, cores=1, memory="1g",
                           directory=str(tmp_path_factory.mktemp("standalone"))) as cluster:
        yield cluster
        pids = [p.pid for p in cluster.processes]
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")], "daemons left running"   # stopped, reaped


def _driver_env(**extra: str) -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if p]), **extra}


def _run(args: list[str], env: dict, timeout: float) -> tuple[int, str]:
    """Run this Python with ``args``: (exit code, output). Past ``timeout`` seconds it is
    interrupted (SIGINT: its ``finally`` blocks stop what it started by PID, the pipeline's
    processes and Spark), then killed, and the test fails with its output."""
    proc = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        pytest.fail(f"{args[0]} did not finish within {timeout:.0f} s:\n{out}")
    return proc.returncode, out


def test_the_pipeline_runs_exact_on_a_standalone_cluster(standalone, tansu):
    status = standalone.status()
    assert status["aliveworkers"] == 1 and status["cores"] == 1, status
    started = time.monotonic()
    code, out = _run([RUN, "--events", "20000", "--epochs", "4", "--join-after", "-1", "--kill-after", "-1",
                      "--leave-after", "-1", "--brokers", tansu.bootstrap, "--metrics-port", "0", "--spark-nice", "0"],
                     _driver_env(SPARK_MASTER=standalone.master_url), 240)
    took = time.monotonic() - started
    assert code == 0, out
    assert re.search(rf"spark: session on {re.escape(standalone.master_url)} up in [\d.]+ s, 1 executor\(s\) "
                     r"registered", out), out
    assert re.search(r"spark check: 4 epochs, [\d,]+ result rows: EXACT", out), out
    # the master ran the application on its worker's core, and it has finished
    apps = standalone.apps("pytimely-pipeline")
    assert [(a["state"], a["cores"]) for a in apps] == [("FINISHED", 1)], apps
    # ... in an executor started by the worker: it logged every task it ran (the
    # import check, the cleaning, 4 epochs written by timely-kafka, the check's reads)
    logs = glob.glob(os.path.join(standalone.directory, "work", apps[0]["id"], "*", "stderr"))
    assert len(logs) == 1, logs
    with open(logs[0]) as f:
        tasks = re.findall(r"Executor: Finished task", f.read())
    assert len(tasks) >= 10, f"{len(tasks)} tasks ran on the executor"
    print(f"pipeline on {standalone.master_url}: {took:.1f} s, {len(tasks)} tasks on its executor")


def test_an_executor_the_workers_cannot_host_is_named_within_the_bound(standalone):
    """The worker has 1 GiB: an executor of 2 GiB never starts, and jobs would wait for
    ever; the session says so after its timeout, stopped, and the process exits."""
    code = ("from timely.connectors.spark import session\n"
            f"session({standalone.master_url!r}, 'too-big', conf={{'spark.executor.memory': '2g'}}, timeout=3)\n")
    started = time.monotonic()
    status, out = _run(["-c", code], _driver_env(), 120)
    assert status == 1, out
    assert (f"SparkClusterError: no executor of {standalone.master_url} registered within 3 s: the master has no "
            "alive worker with the free cores and memory this session asks for (spark.executor.memory=2g") in out
    assert [a["state"] for a in standalone.apps("too-big")] == ["FINISHED"]
    print(f"refused in {time.monotonic() - started:.1f} s, Spark's start included")


@pytest.mark.parametrize("master, message", [
    ("spak://127.0.0.1:7077", "is not one Spark knows: local, local[N], local[*], spark://HOST:PORT"),
    ("spark://127.0.0.1", "'127.0.0.1' is not HOST:PORT"),
    ("spark://127.0.0.1:7077,nohost", "'nohost' is not HOST:PORT"),
    ("local[0]", "is not one Spark knows"),
])
def test_a_master_url_spark_does_not_know_is_refused_by_name(master, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        session(master)


def test_master_kinds_and_where_they_run():
    assert [master_kind(m) for m in ("local", "local[*]", "local[4]", "local[2,3]", "spark://h:7077",
                                     "spark://a:1,b:2", "yarn", "k8s://https://h:6443")] == \
        ["local", "local", "local", "local", "standalone", "standalone", "other", "other"]
    assert on_this_host("local[2]") and on_this_host("spark://127.0.0.1:7077")
    assert on_this_host("spark://localhost:1,127.0.0.2:2") and on_this_host("spark://[::1]:7077")
    assert not on_this_host("spark://127.0.0.1:1,spark-master:7077") and not on_this_host("yarn")
    with pytest.raises(ValueError, match="not as cores=4"):
        session("local[2]", cores=4)


def test_a_master_that_is_not_running_is_named_at_once():
    port = free_port()
    started = time.monotonic()
    with pytest.raises(MasterUnreachable, match=rf"the Spark master spark://127.0.0.1:{port} is unreachable "
                                                 rf"\(127.0.0.1:{port}: Connection refused\)"):
        session(f"spark://127.0.0.1:{port}")
    assert time.monotonic() - started < 2


def test_make_runs_script_refuses_a_bad_master_before_it_starts_anything(capsys):
    sys.path.insert(0, os.path.join(ROOT, "examples", "pipeline"))
    import run as pipeline
    with pytest.raises(SystemExit) as e:
        pipeline.main(["--spark-master", "spark//127.0.0.1:7077"])
    assert e.value.code == 2
    assert "--spark-master: Spark master 'spark//127.0.0.1:7077' is not one Spark knows" in capsys.readouterr().err


def test_a_session_on_another_master_than_the_running_one_is_refused(spark):
    """Spark keeps one session per process: asking for another master gets the
    running one's name, not the running session under a warning."""
    with pytest.raises(SparkClusterError, match=r"already runs a SparkSession on local\[2\], and Spark allows "
                                                r"one per process: stop it before starting one on local\[1\]"):
        session("local[1]")
