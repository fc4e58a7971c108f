"""A driver's side of ``timely-kafka``: a local SparkSession with the data source
registered, and DataFrames laid out for its writer.

Costs: starting a session takes about 4 s; ``partition_for_kafka`` costs a shuffle (and a
sort within each partition).
"""
from __future__ import annotations

import os
import sys
from typing import Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from .datasource import TimelyKafkaDataSource


def partition_for_kafka(df: DataFrame, partitions: int, key_col: Optional[str] = None) -> DataFrame:
    """``df`` laid out for the writer: ``partitions`` Spark partitions, Spark partition i
    holding exactly the rows of Kafka partition i (column ``partition``), by the hash of
    ``key_col`` (Spark's ``hash``, as ``pmod(hash(key), partitions)``) or round-robin,
    and, in a batch DataFrame with an ``epoch`` column, sorted by epoch. Costs a shuffle
    (and a sort within each partition)."""
    df = df.repartition(partitions, F.col(key_col)) if key_col else df.repartition(partitions)
    df = df.withColumn("partition", F.spark_partition_id())
    if "epoch" in df.columns and not df.isStreaming:
        df = df.sortWithinPartitions("epoch")
    return df


def register(spark: SparkSession) -> None:
    """Make ``format("timely-kafka")`` available in ``spark``."""
    spark.dataSource.register(TimelyKafkaDataSource)


def local_session(app_name: str = "pytimely", cores: int = 2) -> SparkSession:
    """A local SparkSession set up as FACTS.md measured it (loopback only, this Python
    for the workers, no UI, small shuffles, a light JVM), with ``timely-kafka``
    registered. Starting one takes about 4 s."""
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
                 .getOrCreate())
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark
