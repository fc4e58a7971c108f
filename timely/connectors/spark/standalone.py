"""A Spark standalone cluster on this machine, from the pyspark package: a master and
workers started with pyspark's own ``spark-class``, to try ``session("spark://...")`` and
``make run SPARK_MASTER=...`` without a cluster at hand, and for the tests::

    with StandaloneCluster(workers=1, cores=2, memory="2g") as cluster:
        spark = session(cluster.master_url)

    python -m timely.connectors.spark standalone --cores 2 --memory 2g    # until Ctrl-C

Everything binds to 127.0.0.1. The daemons' output, the workers' application folders
(each executor's stdout and stderr) and Spark's scratch space go to one folder, a fresh
temporary one by default. The daemons do not inherit this process's ``PYTHONPATH`` or
``PYSPARK_PYTHON``: as on a real cluster, what an executor's Python needs comes from the
session (``session`` in this package). Each daemon runs in a process group of its own
and is stopped by PID with SIGTERM (its group: a worker's executors with it), SIGKILL
after a grace period.

Costs: the master is up in about 2 s and each worker registers about 2 s after it
starts (FACTS.md); a daemon JVM holds about 200 MiB (256 MiB heap at most), an executor
what ``spark.executor.memory`` gives it. ``status`` is one HTTP request to the master.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from typing import Optional

from timely.launch import free_ports

#: the daemons' JVM: a small heap, one GC thread, C1 only (their work is bookkeeping)
_DAEMON_MEMORY = "256m"
_DAEMON_JAVA_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"


def spark_home() -> str:
    """The pyspark package's folder, which is a Spark distribution (``bin/spark-class``, jars)."""
    import pyspark
    home = os.path.dirname(os.path.abspath(pyspark.__file__))
    if not os.access(os.path.join(home, "bin", "spark-class"), os.X_OK):
        raise RuntimeError(f"{home}/bin/spark-class is missing or not executable: pyspark's package "
                           "must be the full one (pip install pyspark), not pyspark-client")
    return home


class StandaloneCluster:
    """A master and ``workers`` workers of ``cores`` cores and ``memory`` each, on
    127.0.0.1; ``directory`` holds their logs and scratch space (default: a temporary
    folder, removed by ``stop``); ``nice``: the niceness the daemons, and so the
    executors they start, run at; ``timeout``: seconds to wait for the master and for
    the workers to register."""

    def __init__(self, workers: int = 1, cores: int = 1, memory: str = "1g",
                 directory: Optional[str] = None, nice: int = 0, timeout: float = 60.0) -> None:
        if workers < 1 or cores < 1:
            raise ValueError(f"StandaloneCluster: workers and cores must be at least 1, got {workers} and {cores}")
        if not re.fullmatch(r"[1-9][0-9]*[mMgG]", memory):
            raise ValueError(f"StandaloneCluster: memory must be like 1g or 512m, got {memory!r}")
        if not 0 <= nice <= 19:
            raise ValueError(f"StandaloneCluster: nice must be between 0 and 19, got {nice}")
        self.workers, self.cores, self.memory, self.nice, self.timeout = workers, cores, memory, nice, timeout
        self._own_directory = directory is None
        self.directory = directory
        self.master_url = ""            # spark://127.0.0.1:PORT, once started
        self.web_url = ""               # the master's web UI (its JSON at /json/)
        self.processes: list[subprocess.Popen] = []
        self.logs: list[str] = []

    # ---- starting -----------------------------------------------------------------------
    def start(self) -> "StandaloneCluster":
        """Start the master, then the workers, and wait until every worker is alive at the
        master; ``RuntimeError`` with the log of the daemon at fault if one exits or the
        wait passes ``timeout``. The ports are picked free; the master's URL and web UI
        are read from its log (Spark moves to the next port if one was taken meanwhile)."""
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="spark-standalone-")
        for sub in ("work", "local", "log"):
            os.makedirs(os.path.join(self.directory, sub), exist_ok=True)
        try:
            port, web_port = free_ports(2)
            self._spawn("master", "org.apache.spark.deploy.master.Master",
                        ["--host", "127.0.0.1", "--port", str(port), "--webui-port", str(web_port)])
            deadline = time.monotonic() + self.timeout
            self.master_url = self._await(0, r"Starting Spark master at (spark://\S+)", deadline)
            web = self._await(0, r"Bound MasterWebUI to \S+, and started at http://[^:/]+:(\d+)", deadline)
            self.web_url = f"http://127.0.0.1:{web}"
            for i in range(self.workers):
                self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker",
                            [self.master_url, "--host", "127.0.0.1", "--cores", str(self.cores),
                             "--memory", self.memory, "--webui-port", "0"])
            self._await_workers(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def _env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
        env.update(SPARK_HOME=spark_home(), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=os.path.join(self.directory, "log"),
                   SPARK_WORKER_DIR=os.path.join(self.directory, "work"),
                   SPARK_LOCAL_DIRS=os.path.join(self.directory, "local"),
                   SPARK_DAEMON_MEMORY=_DAEMON_MEMORY, SPARK_DAEMON_JAVA_OPTS=_DAEMON_JAVA_OPTIONS,
                   # no REST submission server: it binds port 6066 whatever the master's port
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        return env

    def _spawn(self, name: str, main_class: str, args: list[str]) -> None:
        log = os.path.join(self.directory, "log", f"{name}.out")
        argv = [os.path.join(spark_home(), "bin", "spark-class"), main_class, *args]
        if self.nice:
            argv = ["nice", "-n", str(self.nice), *argv]
        with open(log, "wb") as out:
            # spark-class execs the JVM: the PID is the daemon's, and its group its own
            self.processes.append(subprocess.Popen(argv, env=self._env(), stdin=subprocess.DEVNULL,
                                                   stdout=out, stderr=subprocess.STDOUT,
                                                   start_new_session=True))
        self.logs.append(log)

    def _failed(self, index: int, why: str) -> RuntimeError:
        with open(self.logs[index], errors="replace") as f:
            tail = f.read().splitlines()[-30:]
        return RuntimeError(f"Spark standalone {os.path.basename(self.logs[index])[:-4]} {why}; "
                            f"its log ({self.logs[index]}) ends:\n" + "\n".join(tail))

    def _await(self, index: int, pattern: str, deadline: float) -> str:
        """The first group of ``pattern`` in daemon ``index``'s log, once it appears."""
        while True:
            with open(self.logs[index], errors="replace") as f:
                found = re.search(pattern, f.read())
            if found:
                return found.group(1)
            if self.processes[index].poll() is not None:
                raise self._failed(index, f"exited with code {self.processes[index].returncode}")
            if time.monotonic() > deadline:
                raise self._failed(index, f"did not log {pattern!r} within {self.timeout:.0f} s")
            time.sleep(0.05)

    def _await_workers(self, deadline: float) -> None:
        while True:
            for i, proc in enumerate(self.processes):
                if proc.poll() is not None:
                    raise self._failed(i, f"exited with code {proc.returncode}")
            try:
                if self.status().get("aliveworkers", 0) >= self.workers:
                    return
            except OSError:
                pass                        # the web UI is starting
            if time.monotonic() > deadline:
                raise self._failed(len(self.processes) - 1,
                                   f"was not registered with {self.master_url} within {self.timeout:.0f} s")
            time.sleep(0.1)

    # ---- while it runs ------------------------------------------------------------------
    def status(self) -> dict:
        """The master's JSON status: ``aliveworkers``, ``workers``, ``activeapps``,
        ``completedapps`` (each app with its ``name``, ``cores``, ``state``), ..."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            return json.load(response)

    def apps(self, name: str) -> list[dict]:
        """The master's active and completed applications named ``name``."""
        status = self.status()
        return [a for a in status.get("activeapps", []) + status.get("completedapps", []) if a.get("name") == name]

    # ---- stopping -----------------------------------------------------------------------
    def stop(self, grace: float = 15.0) -> None:
        """Stop the workers (and their executors), then the master: SIGTERM to each
        daemon's process group, SIGKILL to what is left after ``grace`` seconds. A
        temporary ``directory`` is removed."""
        for proc in reversed(self.processes):
            _stop_group(proc, grace)
        self.processes = []
        if self._own_directory and self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def __enter__(self) -> "StandaloneCluster":
        return self.start() if not self.processes else self

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _stop_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group that ``proc`` leads, SIGKILL it after ``grace`` seconds
    if any of it is left; reap ``proc``."""
    pgid = proc.pid                         # started with start_new_session: it leads its group
    if _group_alive(pgid):
        os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            proc.poll()                     # reap the leader, or the group never empties
            if not _group_alive(pgid):
                break
            time.sleep(0.05)
        else:
            if _group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass
