"""The Spark side of the pipeline: a Spark 4 Python Data Source ``timely-kafka`` that reads
and writes Kafka topics under the epoch contract (``timely.connectors.epochs``).

There is no spark-sql-kafka here (no Maven access), so this data source speaks Spark's
Kafka option names over confluent-kafka::

    spark = session()                   # local[2]; session("spark://HOST:7077") on a cluster
    df = (spark.read.format("timely-kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "clicks").load())
    (partition_for_kafka(events, 4, "user").write.format("timely-kafka")
     .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("topic", "clicks")
     .mode("append").save())

- ``options``: Spark's Kafka option names, read into a read's and a write's configuration;
- ``reader``: batch and streaming reads, only of epochs complete in every partition;
- ``writer``: batch and streaming writes, each epoch followed by its markers;
- ``datasource``: ``TimelyKafkaDataSource``, which Spark calls to build them;
- ``session``: ``session`` (any master: ``local[N]``, ``spark://HOST:PORT``) and
  ``local_session``, ``register``, ``partition_for_kafka``, ``lower_priority``;
- ``standalone``: ``StandaloneCluster``, a master and workers on this machine
  (``python -m timely.connectors.spark standalone``).

Costs: see each module.
"""
from __future__ import annotations

from .datasource import TimelyKafkaDataSource
from .options import EARLIEST, LATEST, NAME, TopicPart
from .reader import READ_SCHEMA
from .session import (
    MasterUnreachable,
    SparkClusterError,
    executor_count,
    local_session,
    lower_priority,
    master_kind,
    on_this_host,
    partition_for_kafka,
    register,
    session,
)
from .standalone import StandaloneCluster

__all__ = ["EARLIEST", "LATEST", "NAME", "READ_SCHEMA", "MasterUnreachable", "SparkClusterError",
           "StandaloneCluster", "TimelyKafkaDataSource", "TopicPart", "executor_count", "local_session",
           "lower_priority", "master_kind", "on_this_host", "partition_for_kafka", "register", "session"]
