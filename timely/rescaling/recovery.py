"""Crash recovery on a worker: drop the dataflows, then rebuild them from their checkpoints.

When a member of the cluster dies without leaving (SIGKILL, a lost node, an OOM kill;
noticed by a reset connection or a silent one), the survivors do not stop (timely is
fail-stop; this is Naiad's rollback to a consistent frontier, with the simplest one:
the last complete checkpoint, everywhere):

1. ``suspend`` (``RescaleMessage("crash")``): the worker checks that every dataflow it
   runs can roll back (checkpoints on, and every input a Kafka source that can read
   again from a checkpoint's positions: an input handle cannot replay what the program
   already sent), else it stops its process with a ``ClusterError`` naming the dead
   process and why (fail-stop, and the restart of the whole job restores the
   checkpoint). It then drops its dataflows whole: their channels, progress,
   capabilities, notifications and in-flight records go with them. Sources close their
   consumers, sinks discard what they had not sent yet and wait for what was in flight
   (so nothing of the dropped life lands later), and checkpoint writes are flushed. It
   tells the membership it is ready (``Membership.suspended_locally``).
2. The coordinator (the lowest survivor) waits until every survivor is ready, then
   decides, for every checkpointed dataflow, a new incarnation from its last complete
   checkpoint, and tells everyone (``Membership._rollback``).
3. ``rebuild`` (``RescaleMessage("rollback")``): the worker builds every dataflow it had
   again, on the surviving workers (bins, source partitions and sink partitions spread
   over them), with channel identifiers of the new round (no message of the dropped
   life can reach the new one), and the checkpoint context restores every bin as of the
   restore point and reads the sources on from there. Epochs after it are computed
   again; the sinks skip those already complete (their markers), so a reader sees each
   epoch once.

A replacement process started with the dead one's arguments joins the new life as any
joiner does, and the rebalancer moves bins to it.

Costs: ``suspend`` O(dataflows), plus a bounded wait for what sinks had in flight;
``rebuild`` what building the dataflows costs, plus the restore (reading the store,
O(state)).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Optional

from ..communication.errors import ClusterError
from ..progress.subgraph import subgraphs

log = logging.getLogger("timely.recovery")

#: channel identifiers of round r start at r << ROUND_SHIFT
ROUND_SHIFT = 24


def refusal(worker: Any) -> Optional[str]:
    """Why ``worker`` cannot roll back its dataflows after a crash, or None."""
    for index in worker.dataflows():
        ctx = worker.checkpoint_contexts.get(index)
        name = worker.dataflow_subgraph(index).name
        if ctx is None or not ctx.enabled:
            return (f"dataflow {name!r} keeps no checkpoints (they are on by default for a dataflow "
                    f"with kafka_source and kafka_commit; --checkpoint kafka|dir:PATH turns them on)")
        if ctx.inputs:
            return (f"dataflow {name!r} reads input handles, which cannot replay what the program "
                    f"already sent: restart the job to restore its last checkpoint")
    if worker.is_joiner and worker.bootstrap_seconds is None:
        return "this process was still joining"
    return None


def suspend(worker: Any, message: Any) -> None:
    """Drop every dataflow after process ``message.process`` died (see the module)."""
    if not worker.recovering:
        why = refusal(worker)
        if why is not None:
            raise ClusterError(f"{message.payload}; this process cannot roll back: {why}")
        worker.rebuild_indices = sorted(worker.dataflows())
        for index in worker.rebuild_indices:
            ctx = worker.checkpoint_contexts.pop(index, None)
            if ctx is not None:
                ctx.teardown()
            drop_dataflow(worker, index)
        worker.recovering = True
        worker.suspended_at = time.monotonic()
        log.info("worker %d dropped dataflows %s: waiting for the survivors to agree where to "
                 "start again", worker.index, worker.rebuild_indices)
    worker.allocator.remove_process(message.process)
    worker.routing_workers = [w for w in worker.routing_workers if not message.first <= w <= message.last]
    worker.membership.suspended_locally()


def drop_dataflow(worker: Any, index: int) -> None:
    """Forget a dataflow and everything a worker holds for it."""
    subgraph = worker.dataflow_subgraph(index)
    if subgraph is not None:
        channels = {nested.progcaster.channel for nested in subgraphs(subgraph)}
        worker.forget_dataflow(index)
        for channel, path in list(worker.channel_paths.items()):
            if path[0] == index or channel in channels:
                del worker.channel_paths[channel]
    worker.activations.forget((index,))   # nothing of it is scheduled any more
    for key in [k for k in getattr(worker, "kafka_sources", {}) if k[0][0] == index]:
        del worker.kafka_sources[key]
    worker.stateful_states[:] = [s for s in worker.stateful_states if s.dataflow != index]
    worker.rescale_listeners.clear()
    for server in worker.bootstrap_servers.values():
        server.close()
    worker.bootstrap_servers.clear()
    worker.forget_grants()


def rebuild(worker: Any, message: Any) -> None:
    """Build the dropped dataflows again on the surviving workers (see the module)."""
    round_, workers = message.payload
    allocator = worker.allocator
    live = {w // allocator.hub.workers_per_process for w in workers}
    for process in allocator.processes():
        if process not in live:             # the dead, and joiners the crash dropped
            allocator.remove_process(process)
    worker.become_member(list(workers), round_ << ROUND_SHIFT)
    for index in worker.rebuild_indices:
        worker.rebuild_dataflow(index)
    log.info("worker %d rebuilt dataflows %s on workers %s (round %d)", worker.index,
             worker.rebuild_indices, list(workers), round_)
    worker.rebuild_indices = []
    worker.recovering = False
    worker.rollbacks += 1
    worker.recovery_seconds = time.monotonic() - worker.suspended_at
