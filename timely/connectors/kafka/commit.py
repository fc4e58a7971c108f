"""The Kafka commit: a source's consumer offsets are committed once the dataflow's results
for their epochs are out.

``stream.kafka_commit(source, ...)`` commits a source's offsets to its consumer group
once ``stream``'s frontier has passed the epochs they end; put it after the sink, and a
restarted dataflow resumes at the first epoch whose results are not yet in Kafka (it
first reads the marker just before the committed offset, so a replay of that epoch is
dropped). With ``end_epoch``, nothing from ``end_epoch`` on is committed.

Costs: one synchronous commit per source, of the partitions whose offset moved, each
time ``stream``'s frontier passes an epoch, and a last one once it is empty.
"""
from __future__ import annotations

from typing import Any

from ...dataflow.operators import OperatorInfo
from .source import _sources

__all__ = ["kafka_commit"]


def kafka_commit(stream: Any, *sources: Any, name: str = "KafkaCommit") -> None:
    """Commit the consumer offsets of ``sources`` (streams from ``kafka_source``) once
    ``stream``'s frontier has passed the epochs they end, and all of them once it is
    empty. Put it after the sink: a restart then resumes at the first epoch whose
    results were not yet acknowledged."""
    scope = stream.scope
    registry = _sources(scope.worker)
    states = []
    for source in sources:
        found = registry.get((source.scope.path, source.source.node))
        if found is None:
            raise ValueError(f"kafka_commit: {source!r} is not a stream made by kafka_source")
        states.append(found)
    worker = scope.worker
    builder = scope.operator(name)
    port = builder.new_input(stream)
    builder.new_output()
    activate = OperatorInfo(builder).activator(worker)
    worker.rescale_listeners.append(activate)

    def constructor(caps):
        # Held until the input frontier is empty, so the last commit happens before the
        # dataflow is complete (nothing reads this output: it holds back no one else).
        held = {"cap": caps[0], "upto": None}

        def logic():
            port.drain()
            if held["cap"] is None:
                return
            if worker.leaving and not any(s.parts for s in states):
                # its partitions went to other workers with their commit points: a
                # process leaving the cluster has nothing more to commit
                held["cap"].drop()
                held["cap"] = None
                return
            frontier = port.frontier.frontier()
            if not len(frontier):
                for s in states:
                    s.commit(None)
                    s.close()
                held["cap"].drop()
                held["cap"] = None
                return
            upto = min(frontier) - 1
            if held["upto"] is None or upto > held["upto"]:
                held["upto"] = upto
                for s in states:
                    s.commit(upto)
        return logic
    builder.build(constructor)
