"""Reachability: which timestamps can still reach each port of a scope.

``Builder`` collects a scope's graph: operators (``add_node``) with their internal path
summaries from each input to each output, and channels (``add_edge``) from an output
port (Source) to an input port (Target). ``build`` checks that every cycle strictly
advances timestamps, computes for every port the antichain of summaries to each scope
output (``summarize_outputs``), and returns a ``Tracker``. By timely's convention node
0 is the scope's boundary: its inputs are the scope's outputs and its outputs the
scope's inputs.

``Tracker`` keeps, per port, the accumulated ``pointstamps`` (counts of messages or
capabilities at that port) and their ``implications`` (what could arrive there, given
everything upstream). Callers record changes with ``update_source``/``update_target``
(O(1) each); ``propagate_all`` then

1. folds the changes into each port's pointstamps, and for every change to a
   pointstamp frontier updates ``output_changes`` (through that port's summaries to the
   scope outputs) and seeds the worklist;
2. drains the worklist in timestamp order, merging equal (time, location) entries,
   applying each to the location's implications and pushing the resulting frontier
   changes to the location's successors (through operator summaries from a Target,
   unchanged along channels from a Source), recording them in ``pushed_changes``.

Its cost is O(w log w) for the w worklist entries it creates, each costing one
MutableAntichain update at the location it reaches; work is proportional to frontier
movement, not to the number of pointstamps.

This is the pure-Python twin; ``timely.progress.Tracker`` is the compiled one when it
is built (the Builder is shared: building is not a hot path).

>>> b = Builder()
>>> b.add_node(0, 1, 1, [[[]]])          # scope boundary
>>> b.add_node(1, 1, 1, [[[0]]])         # an operator passing times unchanged
>>> b.add_edge(Source(0, 0), Target(1, 0)); b.add_edge(Source(1, 0), Target(0, 0))
>>> t = b.build()
>>> t.update_source(Source(1, 0), 5, 1); t.propagate_all()
>>> t.implications(Location.target(0, 0)).frontier(), t.output_changes[0].drain()
([5], [(5, 1)])
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import Any, Iterable, Optional, Sequence

from .antichain import Antichain, MutableAntichain
from .change_batch import ChangeBatch
from .location import Location, Source, Target
from .timestamp import (check_summary, followed_by, identity_summary, is_identity,
                        results_in)


class Builder:
    """Collects a scope's operators and channels; ``build()`` makes its Tracker."""

    def __init__(self, minimum: Any = None) -> None:
        """``minimum``: the scope's least timestamp (0, (0, 0), ...), when the graph's
        summaries do not already show the timestamp shape."""
        self.minimum = minimum
        self.nodes: list[list[list[Antichain]]] = []   # node -> input -> output -> summaries
        self.edges: list[list[list[Target]]] = []      # node -> output -> targets
        self.shape: list[tuple[int, int]] = []         # node -> (inputs, outputs)
        self._declared: list[bool] = []

    def _grow(self, index: int) -> None:
        while len(self.nodes) <= index:
            self.nodes.append([])
            self.edges.append([])
            self.shape.append((0, 0))
            self._declared.append(False)

    def add_node(self, index: int, inputs: int, outputs: int,
                 summary: Sequence[Sequence[Iterable[Any]]]) -> None:
        """Declare operator ``index`` with ``summary[input][output]``: the summaries of
        its internal paths (an empty collection where an input cannot reach an output)."""
        if index < 0:
            raise ValueError(f"operator index {index} is negative")
        self._grow(index)
        if self._declared[index]:
            raise ValueError(f"operator {index} was added twice")
        if len(summary) != inputs or any(len(row) != outputs for row in summary):
            raise ValueError(
                f"operator {index}: summary must be {inputs} inputs x {outputs} outputs, "
                f"got {[len(row) for row in summary]}")
        rows = []
        for row in summary:
            out = []
            for summaries in row:
                chain = Antichain()
                for s in summaries:
                    check_summary(s)
                    if self.minimum is None:
                        self.minimum = _minimum_for_summary(s)
                    chain.insert(s)
                out.append(chain)
            rows.append(out)
        self.nodes[index] = rows
        self.edges[index] = [[] for _ in range(outputs)]
        self.shape[index] = (inputs, outputs)
        self._declared[index] = True

    def add_edge(self, source: Source, target: Target) -> None:
        """Connect output ``source`` to input ``target``."""
        source, target = Source(*source), Target(*target)
        for what, loc, ports in (("source", source, 1), ("target", target, 0)):
            if not 0 <= loc.node < len(self.shape) or not self._declared[loc.node]:
                raise ValueError(f"edge {source} -> {target}: {what} operator {loc.node} was never added")
            if not 0 <= loc.port < self.shape[loc.node][ports]:
                raise ValueError(f"edge {source} -> {target}: operator {loc.node} has no "
                                 f"{'output' if ports else 'input'} port {loc.port}")
        self.edges[source.node][source.port].append(target)

    def non_advancing_cycle(self) -> Optional[list[Location]]:
        """A cycle along which timestamps need not advance, or None.

        Channels never advance timestamps; an internal path does not when one of its
        summaries is the identity. Any cycle made only of such steps is returned as the
        list of locations it visits.
        """
        succ: dict[Location, list[Location]] = {}
        for node, outputs in enumerate(self.edges):
            for port, targets in enumerate(outputs):
                succ[Location.source(node, port)] = [Location.target(*t) for t in targets]
        for node, inputs in enumerate(self.nodes):
            for i, outputs in enumerate(inputs):
                succ.setdefault(Location.target(node, i), []).extend(
                    Location.source(node, o) for o, chain in enumerate(outputs)
                    if any(is_identity(s) for s in chain))
        state: dict[Location, int] = {}   # 1: on the DFS stack, 2: finished
        for root in succ:
            if root in state:
                continue
            stack = [(root, iter(succ.get(root, ())))]
            path = [root]
            state[root] = 1
            while stack:
                loc, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    path.pop()
                    state[loc] = 2
                elif state.get(nxt) == 1:
                    return path[path.index(nxt):] + [nxt]
                elif nxt not in state:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, iter(succ.get(nxt, ()))))
        return None

    def build(self, tracker_class: Optional[type] = None) -> "Tracker":
        """Check the graph and return a Tracker for it (of ``tracker_class`` if given)."""
        cycle = self.non_advancing_cycle()
        if cycle is not None:
            named = " -> ".join(f"{'Source' if l.is_source else 'Target'}({l.node}, {l.port})"
                                for l in cycle)
            raise ValueError(f"dataflow graph has a cycle that does not advance timestamps: {named}")
        minimum = 0 if self.minimum is None else self.minimum
        cls = tracker_class
        if cls is None:
            # the compiled Tracker is specialised for int and int-tuple timestamps
            from . import Tracker as selected
            cls = selected if type(minimum) in (int, tuple) else Tracker
        return cls(self.nodes, self.edges, self.shape, summarize_outputs(self, minimum), minimum)


def _minimum_for_summary(summary: Any) -> Any:
    if type(summary) is int:
        return 0
    if type(summary) is tuple:
        return (0,) * len(summary)
    return None


def summarize_outputs(builder: Builder, minimum: Any) -> dict[Location, list[Antichain]]:
    """For every location, the antichain of summaries of its paths to each scope output.

    Walks backwards from the scope outputs (node 0's inputs), composing summaries and
    re-visiting a location only when it gains a new minimal summary.
    """
    identity = identity_summary(minimum)
    scope_outputs = builder.shape[0][0] if builder.shape else 0
    reverse: dict[Target, list[Source]] = {}
    for node, outputs in enumerate(builder.edges):
        for port, targets in enumerate(outputs):
            for target in targets:
                reverse.setdefault(target, []).append(Source(node, port))
    results: dict[Location, list[Antichain]] = {}

    def chains_at(where: Location) -> list[Antichain]:
        found = results.get(where)
        if found is None:
            found = results[where] = [Antichain() for _ in range(scope_outputs)]
        return found

    work: deque = deque((Location.target(0, o), o, identity) for o in range(scope_outputs))
    while work:
        loc, output, summary = work.popleft()
        if loc.is_source:
            for input_port, outputs in enumerate(builder.nodes[loc.node]):
                for op_summary in outputs[loc.port]:
                    combined = followed_by(op_summary, summary)
                    if combined is None:
                        continue
                    where = Location.target(loc.node, input_port)
                    if chains_at(where)[output].insert(combined):
                        work.append((where, output, combined))
        else:
            for source in reverse.get(Target(loc.node, loc.port), ()):
                where = Location.from_source(source)
                if chains_at(where)[output].insert(summary):
                    work.append((where, output, summary))
    return results


class PortInformation:
    """A port's accumulated pointstamps, their implications, and its output summaries."""

    __slots__ = ("pointstamps", "implications", "output_summaries")

    def __init__(self, output_summaries: list[Antichain]) -> None:
        self.pointstamps = MutableAntichain()
        self.implications = MutableAntichain()
        self.output_summaries = output_summaries


class Tracker:
    """Pointstamps and their implications at every port of one scope."""

    def __init__(self, nodes: list, edges: list, shape: list, output_summaries: dict,
                 minimum: Any = 0) -> None:
        self.minimum = minimum
        self.shape = list(shape)
        # node -> input -> list of (output port, summaries)
        self._nodes = [[[(o, list(chain)) for o, chain in enumerate(outs) if len(chain)]
                        for outs in ins] for ins in nodes]
        self._edges = [[[Location.target(*t) for t in targets] for targets in outs]
                       for outs in edges]
        scope_outputs = shape[0][0] if shape else 0
        self._summaries = output_summaries
        none = [Antichain() for _ in range(scope_outputs)]

        def applied(location: Location) -> list[Antichain]:
            # Pointstamps at node 0 stand for the scope's own inputs and outputs: the
            # parent accounts for them through the scope summary, so they are not
            # applied to output_changes here.
            return none if location.node == 0 else output_summaries.get(location, none)
        self._targets = [[PortInformation(applied(Location.target(n, p)))
                          for p in range(ins)] for n, (ins, _) in enumerate(shape)]
        self._sources = [[PortInformation(applied(Location.source(n, p)))
                          for p in range(outs)] for n, (_, outs) in enumerate(shape)]
        self.target_changes = ChangeBatch()
        self.source_changes = ChangeBatch()
        self.worklist: list = []
        self._pushed = ChangeBatch()
        self.output_changes = [ChangeBatch() for _ in range(scope_outputs)]
        self.total_counts = 0

    # ---- recording changes -------------------------------------------------------------
    def update_target(self, target: Target, time: Any, delta: int) -> None:
        """Record ``delta`` messages at input ``target`` with timestamp ``time``."""
        self.target_changes.update((target, time), delta)

    def update_source(self, source: Source, time: Any, delta: int) -> None:
        """Record ``delta`` capabilities at output ``source`` for timestamp ``time``."""
        self.source_changes.update((source, time), delta)

    def update(self, location: Location, time: Any, delta: int) -> None:
        """Record a pointstamp change at either kind of location."""
        if location[2]:
            self.source_changes.update(((location[0], location[1]), time), delta)
        else:
            self.target_changes.update(((location[0], location[1]), time), delta)

    # ---- propagation -------------------------------------------------------------------
    def propagate_all(self) -> None:
        """Fold recorded changes into pointstamps and propagate their implications."""
        worklist = self.worklist
        push = heapq.heappush
        for kind, changes, ports in ((False, self.target_changes, self._targets),
                                     (True, self.source_changes, self._sources)):
            for ((node, port), time), diff in changes.drain():
                info = ports[node][port]
                for t, d in info.pointstamps.update_iter(((time, diff),)):
                    self.total_counts += d
                    for output, chain in enumerate(info.output_summaries):
                        out = self.output_changes[output]
                        for s in chain:
                            r = results_in(s, t)
                            if r is not None:
                                out.update(r, d)
                    push(worklist, (t, Location(node, port, kind), d))

        pop = heapq.heappop
        pushed = self._pushed
        while worklist:
            time, loc, diff = pop(worklist)
            while worklist and worklist[0][0] == time and worklist[0][1] == loc:
                diff += pop(worklist)[2]
            if not diff:
                continue
            node, port, is_source = loc
            if is_source:
                changes = self._sources[node][port].implications.update_iter(((time, diff),))
                targets = self._edges[node][port]
                for t, d in changes:
                    for target in targets:
                        push(worklist, (t, target, d))
                    pushed.update((loc, t), d)
            else:
                changes = self._targets[node][port].implications.update_iter(((time, diff),))
                paths = self._nodes[node][port]
                for t, d in changes:
                    for output, summaries in paths:
                        source = Location(node, output, True)
                        for s in summaries:
                            r = results_in(s, t)
                            if r is not None:
                                push(worklist, (r, source, d))
                    pushed.update((loc, t), d)

    # ---- reading -----------------------------------------------------------------------
    def pushed_changes(self) -> ChangeBatch:
        """Changes to implication frontiers since last drained: ((Location, time), diff)."""
        return self._pushed

    def _port(self, location: Location) -> PortInformation:
        node, port, is_source = location
        return (self._sources if is_source else self._targets)[node][port]

    def pointstamps(self, location: Location) -> MutableAntichain:
        """The accumulated pointstamps at ``location`` (read only)."""
        return self._port(location).pointstamps

    def implications(self, location: Location) -> MutableAntichain:
        """What could still arrive at ``location`` (read only)."""
        return self._port(location).implications

    def output_summaries(self, location: Location) -> list[Antichain]:
        """Per scope output, the summaries of the paths from ``location`` to it."""
        return self._summaries.get(Location(*location),
                                   [Antichain() for _ in range(len(self.output_changes))])

    def scope_summary(self) -> list[list[Antichain]]:
        """``[scope input][scope output]``: summaries through the scope (from node 0's outputs)."""
        return [self.output_summaries(Location.source(0, i)) for i in range(self.shape[0][1])] \
            if self.shape else []

    def is_global(self, location: Location, time: Any) -> bool:
        """True when one pointstamp, (location, time) itself, is all that holds back
        ``time`` at ``location``: removing it would move the frontier."""
        imp = self._port(location).implications
        return not imp.less_than(time) and imp.count_for(time) <= 1

    def tracking_anything(self) -> bool:
        """Some pointstamp or unapplied change is still held."""
        return (not self.source_changes.is_empty() or not self.target_changes.is_empty()
                or self.total_counts > 0)

    def node_count(self) -> int:
        return len(self.shape)
