"""A driver's side of ``timely-kafka``: a local SparkSession with the data source
registered, DataFrames laid out for its writer, and the session's CPU priority.

Costs: starting a session takes about 4 s; ``partition_for_kafka`` costs a shuffle (and a
sort within each partition); ``lower_priority`` reads ``/proc`` once (O(processes of the
machine + threads of the session)).
"""
from __future__ import annotations

import os
import sys
from typing import Optional

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


def local_session(app_name: str = "pytimely", cores: int = 2) -> SparkSession:
    """A local SparkSession set up as FACTS.md measured it (loopback only, this Python
    for the workers, no UI, small shuffles, a light JVM, Arrow batches to Python bounded
    by rows only), with ``timely-kafka`` registered. Starting one takes about 4 s."""
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # the JVM starts with worker_path first on the Python workers' path: its sitecustomize
    # has them import pyspark's cached bytecode (see there); this process's children do not
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker_path")
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([here] + ([before] if before else []))
    try:
        spark = (SparkSession.builder.master(f"local[{cores}]").appName(app_name)
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
                 # Below Int.MaxValue, the JVM measures the Arrow batch it is filling after
                 # every row it adds (64 MB by default): a third of the task's CPU when
                 # timely-kafka writes 100k clicks. The row limit (10,000) bounds batches.
                 .config("spark.sql.execution.arrow.maxBytesPerBatch", str(2**31 - 1))
                 .getOrCreate())
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


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
