"""A driver's side of ``timely-kafka``: a SparkSession on any master (``local[N]`` or a
standalone cluster's ``spark://HOST:PORT``) with the data source registered, DataFrames
laid out for its writer, and the session's CPU priority.

``session(master)`` sets Spark up as FACTS.md measured it (loopback for a local master
or one on this host, no UI, small shuffles, light JVMs) and makes sure the Python
workers, the driver's and a cluster's executors' alike, run this Python and import the
``timely`` this driver imported. On a cluster it waits, within a bound, until an
executor has registered and has imported ``timely``, so that a master that is down, has
no free worker, or runs executors that cannot import the data source is named in an
error at once rather than in a job that hangs or fails deep inside Spark.

Costs: starting a session takes about 4 s; on a cluster add the executor's start (2-3 s
on one machine) and one one-task job (about 1 s: the executor's first Python worker,
which the first real job would start anyway). ``partition_for_kafka`` costs a shuffle
(and a sort within each partition); ``lower_priority`` reads ``/proc`` once
(O(processes of the machine + threads of the session)).
"""
from __future__ import annotations

import os
import re
import site
import socket
import sys
import time
from typing import Mapping, Optional

from pyspark import SparkContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .datasource import TimelyKafkaDataSource


def partition_for_kafka(df: DataFrame, partitions: int, key_col: Optional[str] = None,
                        tasks: Optional[int] = None) -> DataFrame:
    """``df`` laid out for the writer: column ``partition`` (the Kafka partition) by the
    hash of ``key_col`` (Spark's ``hash``, as ``pmod(hash(key), partitions)``) or
    round-robin, and ``tasks`` Spark partitions (default ``partitions``: Spark partition
    i holds exactly Kafka partition i), each holding whole Kafka partitions, so that
    every Kafka partition has one writer task; in a batch DataFrame with an ``epoch``
    column, each Spark partition is sorted by epoch.

    Fewer tasks than Kafka partitions pay off when a write is small: each task of a
    Python data source costs Spark tens of milliseconds of CPU (a Python worker takes
    the task, unpickles the writer, opens Arrow streams), which an epoch of 100k rows
    written as one job per epoch pays once per task. Costs a shuffle (and a sort within
    each partition); with ``tasks`` below ``partitions``, a second one, by range of
    ``partition``."""
    tasks = partitions if tasks is None else tasks
    if not 1 <= tasks <= partitions:
        raise ValueError(f"partition_for_kafka: tasks must be 1..{partitions} (each Kafka partition "
                         f"written by one task), got {tasks}")
    df = df.repartition(partitions, F.col(key_col)) if key_col else df.repartition(partitions)
    df = df.withColumn("partition", F.spark_partition_id())
    if tasks < partitions:
        # a range never splits one value: each Kafka partition stays in one Spark partition
        df = df.repartitionByRange(tasks, "partition")
    if "epoch" in df.columns and not df.isStreaming:
        df = df.sortWithinPartitions("epoch", "partition")
    return df


def register(spark: SparkSession) -> None:
    """Make ``format("timely-kafka")`` available in ``spark``."""
    spark.dataSource.register(TimelyKafkaDataSource)


#: the cores of a local session when none are given (FACTS.md's measurements)
LOCAL_CORES = 2
#: a light JVM for the driver and executors: one GC thread, C1 only (FACTS.md)
_JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
_LOCAL = re.compile(r"local(\[(\*|[1-9][0-9]*)(,[1-9][0-9]*)?\])?")
_HOST_PORT = re.compile(r"(\[[0-9a-fA-F:.]+\]|[^\s,/:\[\]]+):([0-9]{1,5})")   # an IPv6 host in brackets
_LOOPBACK = ("localhost", "[::1]")


class SparkClusterError(RuntimeError):
    """A Spark master cannot run this session's work; the message names the master and why."""


class MasterUnreachable(SparkClusterError):
    """Nothing answers at a standalone master's address."""


def _standalone_hosts(master: str) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each master of ``spark://HOST:PORT[,HOST:PORT]``."""
    hosts = []
    for part in master[len("spark://"):].split(","):
        m = _HOST_PORT.fullmatch(part.strip())
        if m is None or not 0 < int(m.group(2)) < 65536:
            raise ValueError(f"Spark master {master!r}: {part!r} is not HOST:PORT (a standalone master's "
                             "URL is spark://HOST:PORT, as its log prints it: 'Starting Spark master at ...')")
        hosts.append((m.group(1), int(m.group(2))))
    return hosts


def master_kind(master: str) -> str:
    """``local`` (``local``, ``local[N]``, ``local[*]``), ``standalone``
    (``spark://HOST:PORT[,HOST:PORT]``) or ``other`` (``yarn``, ``k8s://...``: handed to
    Spark as they are); ``ValueError`` naming the forms Spark knows for anything else."""
    if _LOCAL.fullmatch(master):
        return "local"
    if master.startswith("spark://"):
        _standalone_hosts(master)
        return "standalone"
    if master == "yarn" or master.startswith("k8s://"):
        return "other"
    raise ValueError(f"Spark master {master!r} is not one Spark knows: local, local[N], local[*], "
                     "spark://HOST:PORT[,HOST:PORT], yarn or k8s://URL")


def on_this_host(master: str) -> bool:
    """``master`` runs its executors on this machine: a local master, or a standalone
    one whose every address is a loopback one (then the driver binds to loopback too)."""
    kind = master_kind(master)
    return kind == "local" or (kind == "standalone" and
                               all(h in _LOOPBACK or h.startswith("127.") for h, _ in _standalone_hosts(master)))


def _reach(master: str, timeout: float) -> None:
    """Raise ``MasterUnreachable`` unless one master of ``master`` accepts a TCP
    connection within ``timeout`` seconds. Spark itself would start the session and
    then try to register for 3 x 20 s, while every job waits for resources."""
    errors = []
    for host, port in _standalone_hosts(master):
        try:
            with socket.create_connection((host.strip("[]"), port), timeout=timeout):
                return
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
    raise MasterUnreachable(f"the Spark master {master} is unreachable ({'; '.join(errors)}): is it running, "
                            "and is the URL the one its log prints ('Starting Spark master at spark://...')?")


def _timely_root() -> Optional[str]:
    """The folder that holds the ``timely`` package this process imported, when it is
    not a site-packages folder (an installed package is found there without help)."""
    import timely
    root = os.path.dirname(os.path.dirname(os.path.abspath(timely.__file__)))
    sites = [os.path.abspath(p) for p in site.getsitepackages() + [site.getusersitepackages()]]
    return None if root in sites else root


def _worker_path() -> list[str]:
    """What a Python worker needs first on its path: ``worker_path`` (whose
    ``sitecustomize`` has it import pyspark's cached bytecode, see there) and the folder
    of this process's ``timely``, then this process's own ``PYTHONPATH``."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker_path")
    root = _timely_root()
    before = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return [here] + ([root] if root and root not in before else []) + before


def executor_count(spark: SparkSession) -> int:
    """The executors registered with ``spark``'s driver now (a local session's one
    executor is the driver itself: 0)."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    return max(len(infos) - 1, 0)


def session(master: Optional[str] = None, app_name: str = "pytimely", cores: Optional[int] = None,
            conf: Optional[Mapping[str, str]] = None, timeout: float = 60.0) -> SparkSession:
    """A SparkSession on ``master`` (default ``local[cores]``, ``cores`` default
    ``LOCAL_CORES``), set up as FACTS.md measured it (this Python for the workers, no UI,
    small shuffles, a light JVM, Arrow batches to Python bounded by rows only), with
    ``timely-kafka`` registered. ``master`` follows Spark: ``local[N]`` or a standalone
    cluster's ``spark://HOST:PORT`` (YARN and Kubernetes URLs are handed to Spark as they
    are); ``cores`` caps what a cluster session takes (``spark.cores.max``); ``conf``: any
    other Spark settings, applied last.

    The driver binds to loopback for a local master or one on this host; otherwise
    where Spark binds it (``SPARK_LOCAL_IP``), since the executors connect back to it.
    Executors must run the same Python at the same path and import this ``timely``:
    ``spark.executorEnv.PYTHONPATH`` puts the folder this driver imported it from first
    on their path, so a checkout shared by the nodes (or the same install on each) is
    what they run, and ``spark.submit.pyFiles`` is not used: a zip cannot carry the
    compiled extensions (Python loads none from a zip) and would not bring the
    executors pyarrow or confluent-kafka, which the same Python has anyway.

    On a cluster, raises ``MasterUnreachable`` when no master accepts a connection
    within 10 s, and ``SparkClusterError`` (the session stopped) when no executor
    registers within ``timeout`` seconds (no worker with the cores and memory asked,
    or workers that cannot reach this driver) or when an executor's Python cannot
    import this ``timely``. Spark allows one session per process: one on another master
    is an error. Starting a session takes about 4 s, on a cluster a few more."""
    if master is None:
        master = f"local[{LOCAL_CORES if cores is None else cores}]"
    elif cores is not None and _LOCAL.fullmatch(master):
        raise ValueError(f"session: give a local master's cores in its URL (local[N]), not as cores={cores}")
    if cores is not None and cores < 1:
        raise ValueError(f"session: cores must be at least 1, got {cores}")
    kind = master_kind(master)
    if kind == "standalone":
        _reach(master, 10.0)
    active = SparkContext._active_spark_context
    if active is not None and active.master != master:
        raise SparkClusterError(f"this process already runs a SparkSession on {active.master}, and Spark "
                                f"allows one per process: stop it before starting one on {master}")
    if on_this_host(master):
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.extraJavaOptions": _JVM_OPTIONS,
        # Below Int.MaxValue, the JVM measures the Arrow batch it is filling after
        # every row it adds (64 MB by default): a third of the task's CPU when
        # timely-kafka writes 100k clicks. The row limit (10,000) bounds batches.
        "spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1),
    }
    path = _worker_path()
    if kind != "local":
        # Executors start their Python workers with this on the path (a local session's
        # inherit the JVM's environment, below).
        settings["spark.executorEnv.PYTHONPATH"] = os.pathsep.join(path)
        settings["spark.executor.extraJavaOptions"] = _JVM_OPTIONS
        if cores is not None:
            settings["spark.cores.max"] = str(cores)
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    # The JVM starts with the path first on its Python workers' path; this process's
    # children do not.
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(path)
    try:
        spark = builder.getOrCreate()
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    if kind != "local":
        try:
            _wait_for_executor(spark, master, timeout)
            _check_executor_imports(spark, master)
        except BaseException:
            spark.stop()
            raise
    return spark


def local_session(app_name: str = "pytimely", cores: int = LOCAL_CORES) -> SparkSession:
    """``session()`` on ``local[cores]``. Starting one takes about 4 s."""
    return session(None, app_name, cores)


def _wait_for_executor(spark: SparkSession, master: str, timeout: float) -> None:
    """Wait until an executor has registered; ``SparkClusterError`` after ``timeout``
    seconds, or at once when Spark has given the application up."""
    sc = spark.sparkContext
    deadline = time.monotonic() + timeout
    while executor_count(spark) == 0:
        if sc._jsc.sc().isStopped():
            raise SparkClusterError(f"Spark stopped the session on {master} before an executor registered "
                                    "(its log above says why: the master may have refused the application)")
        if time.monotonic() > deadline:
            conf = sc.getConf()
            raise SparkClusterError(
                f"no executor of {master} registered within {timeout:.0f} s: the master has no alive worker "
                f"with the free cores and memory this session asks for (spark.executor.memory="
                f"{conf.get('spark.executor.memory', '1g')}, spark.executor.cores="
                f"{conf.get('spark.executor.cores', 'all of a worker')}), or its workers cannot start an "
                f"executor that reaches this driver at {conf.get('spark.driver.host', '?')}; "
                "the master's web UI lists its workers")
        time.sleep(0.1)


def _check_executor_imports(spark: SparkSession, master: str) -> None:
    """Run one task on an executor that imports ``timely.connectors.spark`` (what
    ``timely-kafka``'s tasks import); ``SparkClusterError`` naming what the executor's
    Python found when it cannot, or when its ``timely`` is not this driver's."""
    import timely
    here = os.path.realpath(os.path.dirname(timely.__file__))

    def where(_):               # defined here, so that it travels by value, not by module
        import os
        import sys
        try:
            import timely
            import timely.connectors.spark  # noqa: F401
            yield sys.executable, os.path.realpath(os.path.dirname(timely.__file__)), None, sys.path
        except Exception as exc:  # noqa: BLE001 - reported on the driver
            yield sys.executable, None, f"{type(exc).__name__}: {exc}", sys.path

    try:
        (python, found, error, path), = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()
    except Exception as exc:  # noqa: BLE001 - a Py4J error: its first lines say why
        lines = [line for line in str(exc).splitlines() if line.strip()]
        raise SparkClusterError(f"an executor of {master} could not run Python ({sys.executable}, the "
                                f"driver's, which executors run): {' | '.join(lines[:3])}") from exc
    if error is not None or found != here:
        what = f"failed: {error}" if error is not None else f"found it in {found}"
        raise SparkClusterError(
            f"an executor of {master} must import this driver's timely ({here}), but its Python "
            f"({python}) {what}; its path: {os.pathsep.join(path)}. Run the same Python and the same "
            "pytimely on every node (a checkout at the same path, or the same install)")


def _children(pid: int) -> list[int]:
    """Every process descended from ``pid`` (from ``/proc``), ``pid`` first."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue                    # gone since listed
            parents.setdefault(ppid, []).append(int(entry))
    out, stack = [], [pid]
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(parents.get(p, ()))
    return out


def lower_priority(spark: SparkSession, nice: int = 10) -> int:
    """Run the session's JVM, and every process it started (its Python workers), at
    niceness ``nice``: every thread of them, since Linux keeps a niceness per thread,
    and threads and processes they start later inherit it. On a machine that the
    dataflow shares with a local Spark, the dataflow then gets the CPU as soon as it has
    work, and Spark, a batch writer, takes the rest: the dataflow's latency is not spent
    queued behind Spark's work, and Spark's throughput falls where both want the CPU at
    once (the README gives ``make run``'s figures). Raising a niceness needs no
    privilege. Returns the number of threads changed (0 off Linux, or for a session
    whose JVM this process did not start)."""
    if not 0 <= nice <= 19:
        raise ValueError(f"nice must be between 0 and 19, got {nice}")
    proc = getattr(getattr(spark.sparkContext, "_gateway", None), "proc", None)
    if proc is None or not os.path.isdir("/proc"):
        return 0
    changed = 0
    for pid in _children(proc.pid):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                if os.getpriority(os.PRIO_PROCESS, int(tid)) < nice:
                    os.setpriority(os.PRIO_PROCESS, int(tid), nice)
                    changed += 1
            except OSError:
                pass                        # the thread ended since listed
    return changed
