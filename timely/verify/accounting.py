"""Progress accounting checks, switched on by ``Config.check_progress``
(``--check-progress`` or ``TIMELY_CHECK_PROGRESS=1``).

Counts in a worker's trackers may be transiently negative: a decrement can arrive
before the increment it cancels (seed 004). What must hold is checked where it must:

- at quiescence (every worker of the process between steps, none with pending
  activations or undelivered messages) every tracker's accumulated pointstamp counts
  are non-negative, and every worker holds exactly the same counts;
- when a dataflow completes on a worker, its trackers (the nested ones too) hold no
  count at all.

In this mode ``execute`` runs one worker step at a time (a process-wide lock), so the
state read between steps is consistent. Cost: O(pointstamps held) per quiescent step.
"""
from __future__ import annotations

from typing import Any

from ..progress.location import Location
from ..progress.subgraph import subgraphs


class ProgressAccountingError(AssertionError):
    """Progress accounting broke one of its invariants."""


def tracker_counts(tracker: Any) -> dict:
    """Every non-zero accumulated pointstamp count: {(location, time): count}."""
    counts = {}
    for node, (inputs, outputs) in enumerate(tracker.shape):
        for port in range(inputs):
            loc = Location(node, port, False)
            for t, c in tracker.pointstamps(loc).counts():
                counts[(loc, t)] = c
        for port in range(outputs):
            loc = Location(node, port, True)
            for t, c in tracker.pointstamps(loc).counts():
                counts[(loc, t)] = c
    return counts


def check_completed(worker: Any, subgraph: Any) -> None:
    for scope in subgraphs(subgraph):
        left = tracker_counts(scope.tracker)
        if left:
            raise ProgressAccountingError(
                f"worker {worker.index}: dataflow scope {scope.name!r} completed with counts "
                f"left over: {sorted(left.items())[:10]}")


def check_quiescent(workers: list) -> None:
    """Call between steps with every worker of the process; checks only at quiescence."""
    for w in workers:
        if not w.activations.is_idle() or w.allocator.has_events():
            return
    views = []
    for w in workers:
        view = {}
        for index in w.dataflows():
            for scope in subgraphs(w.dataflow_subgraph(index)):
                counts = tracker_counts(scope.tracker)
                negative = {k: c for k, c in counts.items() if c < 0}
                if negative:
                    raise ProgressAccountingError(
                        f"worker {w.index}: scope {scope.name!r} has negative counts once every "
                        f"batch was delivered: {sorted(negative.items())[:10]}")
                view[scope.path] = counts
        views.append(view)
    for w, view in zip(workers[1:], views[1:]):
        if view != views[0]:
            raise ProgressAccountingError(
                f"at quiescence worker {w.index} and worker {workers[0].index} disagree on the "
                f"accumulated pointstamps")
