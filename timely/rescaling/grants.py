"""Capabilities for joining workers (seed 003 §3.2.1 and its footnote 2).

A worker that joins a running cluster must not get a capability for a time that is
already closed, and no other worker may consider a time closed while a joiner could
still use it. Both hold if the joiner's capabilities are *granted by its bootstrap
worker out of what that worker holds itself*, and announced by it first:

- ``grants(scope)``: for every output of the bootstrap worker's own operators in the
  scope, the least time its own capabilities (``Subgraph.held``) imply there strictly
  (traced through the scope's graph; at an output it holds itself, one step later). A
  capability strictly after one the announcer holds is what seed 002 requires of a
  capability handed to another worker.
- ``announce(worker, joining)``: the bootstrap worker sends, in each scope, one
  progress batch with ``+joining`` at each granted (output, time), one capability per
  joining worker, before it tells the joiner anything. The batch is sent between steps,
  when everything the worker's operators did has been sent, so it precedes (FIFO, from
  this sender) every drop of the capabilities that justify it: no view can close a
  granted time before the grant is counted.
- ``adopt(worker, granted)``: the joiner, after installing its progress state, adopts
  its pending capabilities at the granted times (``Capability.adopt``); whatever its
  operators did with them meanwhile (dropped, delayed, downgraded) is counted in the
  same step, so it is one atomic batch like any other.

An output the bootstrap worker holds nothing for gets no capability (its operator can
still act on the capabilities that come with received records); inside a nested
scope, only the bootstrap worker's own capabilities in that scope count.

Costs: ``grants`` reduces the held capabilities to the least times at each location
(O(held) for int times), then per output builds a pure-Python Tracker of the scope and
propagates those: O(outputs x (graph + locations)) per scope, once per join.

>>> from timely.progress import Builder, ChangeBatch, Location, Source, Target
>>> b = Builder(minimum=0)
>>> b.add_node(0, 0, 0, [])
>>> b.add_node(1, 0, 1, [])                      # an input
>>> b.add_node(2, 1, 1, [[[0]]])                 # a map
>>> b.add_edge(Source(1, 0), Target(2, 0))
>>> held = ChangeBatch([((Location(1, 0, True), 7), 1)])
>>> sorted(implied_times(b, held, [Location(1, 0, True), Location(2, 0, True)]).items())
[(Location(node=1, port=0, is_source=True), 8), (Location(node=2, port=0, is_source=True), 7)]
"""
from __future__ import annotations

import logging
from typing import Any, Iterable

from ..progress import ChangeBatch
from ..progress.antichain import Antichain
from ..progress.location import Location
from ..progress.reachability import Tracker
from ..progress.subgraph import subgraphs

log = logging.getLogger("timely.rescaling")


def _least(times: list) -> Any:
    # several incomparable times (partial order): any one is justified; pick one
    # deterministically so that a test can predict it
    return min(times, key=lambda t: (t if type(t) is tuple else (t,)))


def _successor(t: Any) -> Any:
    return t + 1 if type(t) is int else t[:-1] + (t[-1] + 1,)


def implied_times(graph: Any, held: ChangeBatch, locations: Iterable[Location]) -> dict:
    """For each of ``locations``, the least time *strictly* above the positive counts
    in ``held`` there (absent where they reach none). Strictly: a grant equal to a
    capability the announcer holds is not safe, since the joiner's drop of it may reach
    a worker before the announcement and cancel the announcer's own count (found by
    ``timely.verify``); so at a location the announcer itself holds, the grant comes
    from elsewhere upstream or is one step later."""
    # Only the least times held at each location can be least where they lead (path
    # summaries are monotone): a worker holding K capabilities at K epochs of one output
    # feeds the Tracker one time per location, not K (the joiner waits on this).
    minimal: dict = {}
    for (loc, t), c in held:
        if c > 0:
            chain = minimal.get(loc)
            if chain is None:
                chain = minimal[loc] = Antichain()
            chain.insert(t)
    if not minimal:
        return {}
    positive = [(loc, t) for loc, chain in minimal.items() for t in chain]
    out = {}
    for loc in locations:
        tracker = graph.build(tracker_class=Tracker)
        candidates = []
        for l, t in positive:
            if l == loc:
                candidates.append(_successor(t))
            else:
                tracker.update(l, t, 1)
        tracker.propagate_all()
        candidates.extend(tracker.implications(loc).frontier())
        if candidates:
            out[loc] = _least(candidates)
    return out


def grants(scope: Any) -> list[tuple[tuple, int, Any]]:
    """``(operator path, output port, time)`` for every output of ``scope``'s own
    operators that the worker's held capabilities reach."""
    outputs = [Location(child.index, port, True) for child in scope.children[1:]
               if child.local for port in range(child.outputs)]
    times = implied_times(scope.graph, scope.held, outputs)
    return [(scope.path + (loc.node,), loc.port, t) for loc, t in sorted(times.items())]


def announce(worker: Any, joining: int) -> list[tuple[tuple, int, Any]]:
    """On the bootstrap worker: grant and announce one capability per joining worker
    (``joining`` of them) at every output its own capabilities reach; returns the
    grants for the joiner."""
    granted = []
    for index in worker.dataflows():
        for scope in subgraphs(worker.dataflow_subgraph(index)):
            mine = grants(scope)
            if mine:
                scope.progcaster.send(ChangeBatch(
                    [((Location(path[-1], port, True), t), joining) for path, port, t in mine]))
                granted.extend(mine)
    log.info("worker %d: granted %d capabilities to each of %d joining workers",
             worker.index, len(granted), joining)
    return granted


def retract(worker: Any, granted: list, joining: int) -> None:
    """On the bootstrap worker: a joiner was lost before it finished joining (so before
    it said anything, see ``Membership.joined_locally``): take back what was granted."""
    by_scope: dict = {}
    for path, port, t in granted:
        by_scope.setdefault(tuple(path[:-1]), []).append(((Location(path[-1], port, True), t), -joining))
    for index in worker.dataflows():
        for scope in subgraphs(worker.dataflow_subgraph(index)):
            updates = by_scope.get(scope.path)
            if updates:
                scope.progcaster.send(ChangeBatch(updates))
    log.info("worker %d: took back %d capabilities granted to a lost joiner", worker.index,
             len(granted))


def adopt(worker: Any, granted: Iterable[tuple]) -> int:
    """On a joining worker: count its pending capabilities at the granted times.
    Returns how many capabilities its operators hold afterwards."""
    at = {(tuple(path), port): t for path, port, t in granted}
    scopes = {}
    for index in worker.dataflows():
        for scope in subgraphs(worker.dataflow_subgraph(index)):
            scopes[scope.path] = scope
    pending = worker.pending_capabilities
    # roots (the capabilities operators were built with) first: the others are minted
    # from them
    pending.sort(key=lambda cap: not cap._pending[1])
    held = 0
    touched = set()
    for cap in pending:
        (path, port), root, _ = cap._pending
        time = at.get((path, port))
        scope = scopes.get(path[:-1])
        if scope is None:           # a dataflow complete before we joined
            time = None
        if root and time is not None:
            scope.held.update((Location(path[-1], port, True), time), 1)
        held += cap.adopt(time)
        touched.add(path)
    pending.clear()
    for path in touched:
        worker.activations.activate(path)
    return held
