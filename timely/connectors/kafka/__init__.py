"""Kafka source and sink operators: dataflows read and write topics under the epoch contract.

Named after bytewax's and Spark's Kafka connectors: ``brokers``, ``topics``,
``starting_offsets``, ``add_config`` (passed to the client), ``batch_size``.

- ``source``: ``scope.kafka_source(brokers, topics, ...)``, each record at its epoch,
  the partitions following the workers (``source_state``: a worker's share of it;
  ``steps``: its step per activation; ``handoff``: a partition moving to its owner);
- ``projection``: its events as the tuples of the fields it is asked for (``fields=``),
  JSON decoded straight into them;
- ``commit``: ``stream.kafka_commit(source, ...)`` commits a source's offsets once
  ``stream``'s frontier has passed the epochs they end;
- ``completion``: ``job_complete(...)``, whether a group's commits say the job is done
  (for ``timely.execute(..., complete=)``);
- ``sink``: ``stream.kafka_sink(brokers, topic, ...)`` writes each epoch's records, then
  its markers;
- ``demo``: demo clicks for examples/page_totals.py, written by the sink's writer
  (``python -m timely.connectors.kafka demo-clicks``).

Importing this package offers those methods on ``Scope`` and ``Stream``; confluent-kafka
is imported only when a source or sink is built. Costs: see each module.
"""
from __future__ import annotations

from ...dataflow.scope import Scope
from ...dataflow.stream import Stream
from .commit import kafka_commit
from .completion import committed_epoch, job_complete
from .sink import KafkaSinkState, kafka_sink
from .source import kafka_source
from .source_state import KafkaSourceState

__all__ = ["committed_epoch", "job_complete", "kafka_commit", "kafka_sink", "kafka_source", "KafkaSinkState", "KafkaSourceState"]

Scope.extend(kafka_source=kafka_source)
Stream.extend(kafka_sink=kafka_sink, kafka_commit=kafka_commit)
