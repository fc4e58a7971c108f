"""The commit operator: a checkpoint becomes complete, then the sources' offsets commit.

One per dataflow and worker, fed by the dataflow's results (``kafka_commit``'s stream,
if any) and by every stateful operator's acknowledgement stream, whose frontier passes
a time only once every worker's checkpoint for it is durable. When the frontier passes
a checkpoint boundary B (a multiple of the interval, or the sources' ``end_epoch`` at
the end), every worker's state as of B is durable and the results of the epochs before
B are written: it writes a ``Commit`` at B naming where its source partitions read on
(the offset just past each partition's marker of the last epoch before B), and once
that record is durable calls ``after(B - 1)`` (``kafka_commit`` commits the consumer
group's offsets of the epochs up to there, with B in their metadata). So offsets,
state and results never disagree: a restart restores B and reads on from B.

With checkpoints off it does what ``kafka_commit`` always did: ``after(t)`` as the
frontier passes t, and ``after(None)`` once it is empty. ``done()`` runs once the
inputs are exhausted and everything is committed.

Costs: per activation O(inputs); per boundary one small record per worker and one
``after``.

A failpoint for tests of a crash inside the commit window: with
``TIMELY_FAILPOINT=commit-stall:P`` in its environment, process P acknowledges its
state as usual but never writes a commit (so it never commits its source offsets
either), as a process does that dies between the two.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional

from .binlog import DURABLE_POLL, END
from .records import Commit


def positions_at(sources: list, label: int) -> dict:
    """Where each partition this worker reads holds the epochs from ``label`` on: just
    past its marker of the last epoch before ``label``, or where it started reading."""
    out = {}
    for state in sources:
        for tp, part in state.parts.items():
            found = part.commit_offset(label - 1)
            if found is None:
                found = part.resume if part.resume is not None else state.starts.get(tp)
            if found is not None:
                out[tp] = found
    return out


def _sources_shape(sources: list) -> dict:
    shape: dict = {}
    for state in sources:
        for t, _ in state.every:
            shape[t] = shape.get(t, 0) + 1
    return shape


def _stalled(worker: Any) -> bool:
    """Whether the ``commit-stall`` failpoint names this worker's process."""
    kind, _, process = os.environ.get("TIMELY_FAILPOINT", "").partition(":")
    hub = getattr(worker.allocator, "hub", None)
    return kind == "commit-stall" and process.isdigit() and int(process) == getattr(hub, "process", 0)


def commit_record(ctx: Any, label: int, worker: int) -> Commit:
    """This worker's ``Commit`` at ``label`` for the dataflow of checkpoint context ``ctx``."""
    return Commit(ctx.inc, label, worker, positions_at(ctx.sources, label), _sources_shape(ctx.sources),
                  ctx.ops())


def checkpoint_commit(scope: Any, inputs: list, ctx: Any, after: Optional[Callable[[Optional[int]], None]] = None,
                      name: str = "CheckpointCommit", holds: Optional[Callable[[], bool]] = None,
                      done: Optional[Callable[[], None]] = None) -> None:
    """Add the commit operator (see the module docstring). ``inputs``: streams whose
    frontier the commit also waits for (the sink's); ``holds()``: False once this
    worker has nothing left to commit (a leaving process's partitions went elsewhere)."""
    worker = scope.worker
    builder = scope.operator(name)
    ports = [builder.new_input(s) for s in list(inputs) + ctx.acks()]
    builder.new_output()
    activate = worker.activations.activate
    path = builder.path
    worker.rescale_listeners.append(lambda: activate(path))
    ctx.add_commit(builder.name)
    stalled = _stalled(worker)

    def constructor(caps):
        # Held until every input is exhausted, so the last commit happens before the
        # dataflow is complete (nothing reads this output: it holds back no one else).
        held = {"cap": caps[0], "upto": None, "last": None, "waiting": [], "final": False}

        def frontier() -> Optional[int]:
            least = [t for p in ports for t in p.frontier.frontier()]
            return min(least) if least else None

        def plain() -> None:
            f = frontier()
            if f is None:
                if after is not None:
                    after(None)
                release()
                return
            if after is not None and (held["upto"] is None or f - 1 > held["upto"]):
                held["upto"] = f - 1
                after(f - 1)

        def release(finished: bool = True) -> None:
            if held["cap"] is not None:
                held["cap"].drop()
                held["cap"] = None
                if finished and done is not None:
                    done()

        def commit(label: int) -> None:
            held["last"] = label
            if stalled:
                return
            record = commit_record(ctx, label, worker.index)
            held["waiting"].append((label, ctx.writer.write(record)))

        def checkpointed() -> None:
            start = ctx.restored.label if ctx.restored is not None else scope.minimum
            f = frontier()
            if f is None and not held["final"]:
                held["final"] = True
                label = ctx.final_label()
                if label is None:
                    label = held["last"]
                if label is not None and label > start and label != held["last"]:
                    commit(label)
            elif f is not None:
                label = (f // ctx.interval) * ctx.interval
                if label > start and (held["last"] is None or label > held["last"]):
                    commit(label)
            waiting = held["waiting"]
            while waiting and ctx.writer.durable(waiting[0][1]):
                label, _ = waiting.pop(0)
                if after is not None:
                    after(label - 1)
                ctx.committed(label)
            if waiting:                 # look again until the commit is durable
                worker.activations.activate_after(path, DURABLE_POLL)
            elif held["final"]:
                release()

        def logic():
            for p in ports:
                p.drain()
            if held["cap"] is None:
                return
            if holds is not None and not holds():
                release(finished=False)
                return
            if ctx.enabled:
                checkpointed()
            else:
                plain()
        return logic
    builder.build(constructor)


__all__ = ["checkpoint_commit", "commit_record", "positions_at", "END"]
