"""The Kafka commit: a source's consumer offsets are committed once the dataflow's results
for their epochs are out.

``stream.kafka_commit(source, ...)`` commits a source's offsets to its consumer group
once ``stream``'s frontier has passed the epochs they end; put it after the sink, and a
restarted dataflow resumes at the first epoch whose results are not yet in Kafka (it
first reads the marker just before the committed offset, so a replay of that epoch is
dropped). With ``end_epoch``, nothing from ``end_epoch`` on is committed.

With checkpoints on (the default for a dataflow with a ``kafka_source`` and a
``kafka_commit``), the offsets commit only at checkpoints, once every worker's state
for them is durable (see ``timely.checkpoint.commit``).

Costs: one synchronous commit per source, of the partitions whose offset moved, each
time ``stream``'s frontier passes an epoch (a checkpoint), and a last one once it is
empty. At checkpoints the worker does not wait for it: the next commit does.
"""
from __future__ import annotations

from typing import Any, Optional

from ...checkpoint.commit import checkpoint_commit
from .source import _sources

__all__ = ["kafka_commit"]


def kafka_commit(stream: Any, *sources: Any, name: str = "KafkaCommit") -> None:
    """Commit the consumer offsets of ``sources`` (streams from ``kafka_source``) once
    ``stream``'s frontier has passed the epochs they end, and all of them once it is
    empty. Put it after the sink: a restart then resumes at the first epoch whose
    results were not yet acknowledged. With checkpoints on, this is the dataflow's
    commit operator (``timely.checkpoint.commit``): offsets commit at checkpoints."""
    scope = stream.scope
    registry = _sources(scope.worker)
    states = []
    for source in sources:
        found = registry.get((source.scope.path, source.source.node))
        if found is None:
            raise ValueError(f"kafka_commit: {source!r} is not a stream made by kafka_source")
        states.append(found)
    worker = scope.worker

    ctx = worker.checkpoint_context

    def after(upto: Optional[int]) -> None:
        # at a checkpoint a restart reads on from the checkpoint's own positions: the
        # group's offsets need not be in before the worker goes on (close waits for them)
        for s in states:
            s.commit(upto, wait=not ctx.enabled)

    def done() -> None:
        for s in states:
            s.close()

    def holds() -> bool:
        # a leaving process's partitions went to other workers with their commit
        # points: it has nothing more to commit
        return not worker.leaving or any(s.parts for s in states)

    checkpoint_commit(scope, [stream], ctx, after, name, holds, done)
