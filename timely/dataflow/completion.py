"""Completion: the least time a scope may still have to finish downstream of an operator.

Flow control needs to know when the records an operator gave have been dealt with: an
operator that reads from outside (a Kafka source) may read ahead only so far past what
the dataflow has finished. That is a frontier the progress tracker already holds: the
times that could still arrive at the inputs of the operators downstream of it whose
outputs go nowhere (sinks, commits, probes). ``Completion(subgraph, node)`` finds those
ends once (a walk of the scope's edges), and ``frontier()`` reads the tracker's
implications there: the least time any of them may still see (None once they are all
closed, or if nothing downstream ends). Given ``moved``, it is called whenever an end's
input frontier moves, so that a source waiting for credit runs again at once.

``successors`` and ``reachable`` are the walk, shared with the metrics' ``EpochClock``
(``timely.metrics.instruments.edges``).

Costs: building is O(operators + edges); ``frontier()`` is O(ends x their frontier
sizes), a few reads per call, never per record.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..progress.location import Location
from ..progress.subgraph import subgraphs


def successors(subgraph: Any) -> dict[int, set[int]]:
    """Each child of ``subgraph`` (by index, child 0 aside) -> the children its outputs feed."""
    return {c.index: {t.node for targets in c.edges for t in targets if t.node}
            for c in subgraph.children[1:]}


def reachable(succ: dict[int, set[int]], start: int) -> set[int]:
    """The children reachable from ``start`` along ``succ`` (``start`` only if a loop
    comes back to it).

    >>> sorted(reachable({1: {2}, 2: {3, 1}, 3: set()}, 1))
    [1, 2, 3]
    """
    seen: set[int] = set()
    stack = [start]
    while stack:
        for n in succ.get(stack.pop(), ()):
            if n not in seen:
                seen.add(n)
                stack.append(n)
    return seen


def scope_subgraph(worker: Any, path: tuple) -> Optional[Any]:
    """The built subgraph of the scope at ``path`` (None while its dataflow is not built)."""
    root = worker.dataflow_subgraph(path[0])
    if root is None:
        return None
    for scope in subgraphs(root):
        if scope.path == path:
            return scope
    return None


class Completion:
    """The completion frontier downstream of child ``node`` of a built ``subgraph``;
    ``moved()``, if given, is called when an end's input frontier moves (as the end is
    scheduled, which frontier changes do for operators that ask to be notified)."""

    def __init__(self, subgraph: Any, node: int, moved: Optional[Callable[[], None]] = None) -> None:
        succ = successors(subgraph)
        ends = [i for i in sorted(reachable(succ, node)) if i != node and not succ.get(i)]
        children = subgraph.children
        tracker = subgraph.tracker
        #: the ends, as (child index, name)
        self.ends = [(i, children[i].name) for i in ends]
        #: the implications at every input of the ends (live views of the tracker)
        self.ports = [tracker.implications(Location(i, port, False))
                      for i in ends for port in range(children[i].inputs)]
        if moved is not None:
            for i in ends:
                core = children[i].operator
                if hasattr(core, "watchers"):
                    core.watchers = (*core.watchers, moved)

    def frontier(self) -> Optional[Any]:
        """The least time the ends may still see; None when nothing downstream ends, or
        every end is closed."""
        least = None
        for port in self.ports:
            for t in port.frontier():
                if least is None or t < least:
                    least = t
        return least
