"""Subgraph: a scope that schedules its children and tracks progress among them.

A scope presents itself to its parent as one operator (it implements ``Operate``), and
inside holds children numbered from 1; child 0 stands for the world outside (its
outputs are the scope's inputs, its inputs the scope's outputs). One ``schedule()``
follows seed 001:

1. ``accept_frontier``: the parent's frontier changes at the scope's inputs become
   pointstamps at child 0's outputs (brought into the inner timestamp);
2. ``harvest_inputs``: records that entered the scope are counted at the targets they
   reached, and as child 0 capabilities consumed;
3. receive the progress batches every worker broadcast (``Progcaster``);
4. ``propagate_pointstamps``: commit them to the Tracker (child 0's statements are
   reported upwards as consumed / produced instead), propagate, hand frontier changes
   to children, and report changes of the scope-output frontiers as the scope's
   internal capabilities (filtered to frontier changes);
5. schedule the children that were activated or whose frontiers moved, in index order,
   extracting each one's consumeds / internals / produceds;
6. broadcast this worker's progress batch; re-activate if anything is left unapplied.

Operators are ``local``: their statements describe this worker only and are
broadcast. A nested scope is not local: it already reports what all workers said, so
its statements go straight into this worker's final pointstamps.

Costs: a schedule is O(updates + frontier movement + children scheduled); nothing is
proportional to the number of pointstamps held.
"""
from __future__ import annotations

import heapq
from typing import Any, Callable, Iterator, Optional

from . import ChangeBatch, MutableAntichain
from .location import Location, Source, Target
from .operate import SharedProgress
from .reachability import Builder


class PerOperatorState:
    """A child as its scope sees it: shape, edges, shared progress, completion."""

    __slots__ = ("name", "index", "operator", "local", "notify", "inputs", "outputs",
                 "edges", "shared_progress", "internal_summary")

    def __init__(self, operator: Any, index: int) -> None:
        self.name = getattr(operator, "name", "operator")
        self.index = index
        self.operator = operator
        self.local = getattr(operator, "local", True)
        self.notify = getattr(operator, "notify", True)
        self.inputs = operator.inputs
        self.outputs = operator.outputs
        summary, shared = operator.get_internal_summary()
        if len(summary) != self.inputs or any(len(row) != self.outputs for row in summary):
            raise ValueError(f"operator {self.name!r}: summary shape does not match "
                             f"{self.inputs} inputs x {self.outputs} outputs")
        self.internal_summary = summary
        self.shared_progress = shared
        self.edges: list[list[Target]] = [[] for _ in range(self.outputs)]

    @classmethod
    def empty(cls, inputs: int, outputs: int) -> "PerOperatorState":
        state = cls.__new__(cls)
        state.name, state.index, state.operator = "External", 0, None
        state.local, state.notify = False, True
        state.inputs, state.outputs = inputs, outputs
        state.edges = [[] for _ in range(outputs)]
        state.shared_progress = SharedProgress(inputs, outputs)
        state.internal_summary = []
        return state

    def schedule(self) -> bool:
        if self.operator is None:
            return False
        return self.operator.schedule()

    def shut_down(self) -> None:
        if self.operator is not None:
            shut = getattr(self.operator, "shut_down", None)
            if shut is not None:
                shut()
            self.operator = None

    def extract_progress(self, pointstamps: ChangeBatch, temp_active: list,
                         ledger: Optional[ChangeBatch] = None,
                         held: Optional[ChangeBatch] = None) -> None:
        """Move the child's consumeds, internals and produceds into ``pointstamps``
        (the message counts also into ``ledger``, the capabilities into ``held``, when
        given)."""
        shared = self.shared_progress
        index = self.index
        update = pointstamps.update
        record = ledger.update if ledger is not None else None
        for port, consumed in enumerate(shared.consumeds):
            if consumed.unstable_len():
                target = Location(index, port, False)
                for time, delta in consumed.drain():
                    update((target, time), -delta)
                    if record is not None:
                        record((target, time), -delta)
        for port, internal in enumerate(shared.internals):
            if internal.unstable_len():
                source = Location(index, port, True)
                for time, delta in internal.drain():
                    update((source, time), delta)
                    if held is not None:
                        held.update((source, time), delta)
        for port, produced in enumerate(shared.produceds):
            if produced.unstable_len():
                targets = self.edges[port]
                for time, delta in produced.drain():
                    for target in targets:
                        update((Location(target[0], target[1], False), time), delta)
                        if record is not None:
                            record((Location(target[0], target[1], False), time), delta)
                        heapq.heappush(temp_active, target[0])


class SubgraphBuilder:
    """Collects a scope's children and edges while the user builds it."""

    def __init__(self, name: str, path: tuple, minimum: Any) -> None:
        self.name = name
        self.path = path
        self.minimum = minimum
        self.children: list[Optional[PerOperatorState]] = [None]
        self.child_count = 1
        self.edge_stash: list[tuple[Source, Target]] = []
        #: the pact each input was connected with (none for an edge across the scope's
        #: boundary): kept only to describe the dataflow (timely.visualize)
        self.pacts: dict[Target, Any] = {}
        self.input_messages: list[ChangeBatch] = []   # per scope input, counts entering
        self.outputs = 0

    def allocate_child_id(self) -> int:
        self.child_count += 1
        return self.child_count - 1

    def add_child(self, operator: Any, index: int) -> None:
        self.children.append(PerOperatorState(operator, index))

    def connect(self, source: Source, target: Target, pact: Any = None) -> None:
        self.edge_stash.append((source, target))
        if pact is not None:
            self.pacts[target] = pact

    def new_input(self) -> tuple[int, ChangeBatch]:
        counter = ChangeBatch()
        self.input_messages.append(counter)
        return len(self.input_messages) - 1, counter

    def new_output(self) -> int:
        self.outputs += 1
        return self.outputs - 1

    def build(self, worker: Any, *, to_outer: Callable[[Any], Any] = lambda t: t,
              to_inner: Callable[[Any], Any] = lambda t: t,
              summary_to_outer: Callable[[Any], Any] = lambda s: s) -> "Subgraph":
        children = sorted((c for c in self.children[1:]), key=lambda c: c.index)
        if [c.index for c in children] != list(range(1, len(children) + 1)):
            raise RuntimeError(f"scope {self.name!r}: children are numbered "
                               f"{[c.index for c in children]}; was a child allocated but never added?")
        inputs, outputs = len(self.input_messages), self.outputs
        zero = PerOperatorState.empty(outputs, inputs)
        children.insert(0, zero)
        builder = Builder(minimum=self.minimum)
        builder.add_node(0, outputs, inputs, [[[] for _ in range(inputs)] for _ in range(outputs)])
        for child in children[1:]:
            builder.add_node(child.index, child.inputs, child.outputs, child.internal_summary)
        for source, target in self.edge_stash:
            children[source.node].edges[source.port].append(target)
            builder.add_edge(source, target)
        tracker = builder.build()
        progcaster = worker.new_progcaster(self.path)
        subgraph = Subgraph(self, worker, children, tracker, progcaster, to_outer, to_inner,
                            summary_to_outer)
        subgraph.graph = builder
        if not worker.is_joiner:
            # this worker's share of its operators' initial capabilities (one per output)
            for child in children[1:]:
                if child.local:
                    for port in range(child.outputs):
                        subgraph.held.update((Location(child.index, port, True), self.minimum), 1)
        return subgraph


class Subgraph:
    """A built scope: see the module docstring."""

    local = False
    notify = True

    def __init__(self, b: SubgraphBuilder, worker: Any, children: list, tracker: Any,
                 progcaster: Any, to_outer, to_inner, summary_to_outer) -> None:
        self.name = b.name
        self.path = b.path
        self.worker = worker
        self.activations = worker.activations
        self.inputs = len(b.input_messages)
        self.outputs = b.outputs
        self.children = children
        self.incomplete = [True] * len(children)
        self.incomplete[0] = False
        self.incomplete_count = len(children) - 1
        self.input_messages = b.input_messages
        self.pacts = b.pacts
        self.output_capabilities = [MutableAntichain() for _ in range(self.outputs)]
        self.local_pointstamp = ChangeBatch()
        self.final_pointstamp = ChangeBatch()
        #: the capabilities this worker's own operators hold (what it may grant a joiner)
        self.held = ChangeBatch()
        #: the scope's graph (a reachability Builder), to trace the held capabilities
        self.graph: Any = None
        self.tracker = tracker
        self.progcaster = progcaster
        self.shared_progress = SharedProgress(self.inputs, self.outputs)
        self.temp_active: list[int] = []
        self.to_outer = to_outer
        self.to_inner = to_inner
        self.summary_to_outer = summary_to_outer
        self.activations.activate(self.path)

    # ---- Operate ----------------------------------------------------------------------
    def get_internal_summary(self) -> tuple[list, SharedProgress]:
        summary = [[[] for _ in range(self.outputs)] for _ in range(self.inputs)]
        for i, row in enumerate(self.tracker.scope_summary()):
            for o, chain in enumerate(row):
                outer = summary[i][o]
                for s in chain:
                    so = self.summary_to_outer(s)
                    if so not in outer:
                        outer.append(so)
        for child in self.children:
            child.extract_progress(self.final_pointstamp, self.temp_active)
        self.propagate_pointstamps()
        return summary, self.shared_progress

    def set_external_summary(self) -> None:
        self.accept_frontier()
        self.propagate_pointstamps()
        for child in self.children:
            op = child.operator
            if op is not None:
                op.set_external_summary()

    def schedule(self) -> bool:
        self.accept_frontier()
        self.harvest_inputs()
        self.progcaster.recv(self.final_pointstamp)
        self.propagate_pointstamps()
        temp_active = self.temp_active
        for index in self.activations.take(self.path):
            heapq.heappush(temp_active, index)
        previous = 0
        pop = heapq.heappop
        while temp_active:
            index = pop(temp_active)
            if index > previous:
                self.activate_child(index)
                previous = index
        self.progcaster.send(self.local_pointstamp)
        if not self.final_pointstamp.is_empty():
            self.activations.activate(self.path)
        return self.incomplete_count > 0 or self.tracker.tracking_anything()

    # ---- steps ------------------------------------------------------------------------
    def activate_child(self, index: int) -> bool:
        child = self.children[index]
        incomplete = child.schedule()
        if incomplete != self.incomplete[index]:
            self.incomplete_count += 1 if incomplete else -1
            self.incomplete[index] = incomplete
        if not incomplete and child.operator is not None and self._may_shut_down(child):
            child.shut_down()
        if child.local:
            child.extract_progress(self.local_pointstamp, self.temp_active, None, self.held)
        else:
            # A nested scope speaks for every worker, so its statements are not broadcast;
            # the message counts it reports go into our progress state, where they cancel
            # the productions other workers broadcast (its capabilities, which a joiner's
            # own nested scope re-derives, do not).
            child.extract_progress(self.final_pointstamp, self.temp_active, self.progcaster.accumulated)
        return incomplete

    def _may_shut_down(self, child: PerOperatorState) -> bool:
        """Neither capabilities held nor anything that could still arrive."""
        tracker = self.tracker
        index = child.index
        for port in range(child.outputs):
            if not tracker.pointstamps(Location(index, port, True)).is_empty():
                return False
        for port in range(child.inputs):
            if not tracker.implications(Location(index, port, False)).is_empty():
                return False
        return True

    def accept_frontier(self) -> None:
        to_inner = self.to_inner
        for port, changes in enumerate(self.shared_progress.frontiers):
            if changes.unstable_len():
                source = Source(0, port)
                for time, delta in changes.drain():
                    self.tracker.update_source(source, to_inner(time), delta)

    def harvest_inputs(self) -> None:
        edges = self.children[0].edges
        local = self.local_pointstamp
        for port, counter in enumerate(self.input_messages):
            if counter.unstable_len():
                source = Location(0, port, True)
                for time, delta in counter.drain():
                    for target in edges[port]:
                        local.update((Location(target[0], target[1], False), time), delta)
                    local.update((source, time), -delta)

    def propagate_pointstamps(self) -> None:
        tracker = self.tracker
        to_outer = self.to_outer
        shared = self.shared_progress
        final = self.final_pointstamp
        if final.unstable_len():
            for (location, time), delta in final.drain():
                if location[0] == 0:
                    if location[2]:   # a scope input: its capabilities were consumed messages
                        shared.consumeds[location[1]].update(to_outer(time), -delta)
                    else:             # a scope output: messages produced to the parent
                        shared.produceds[location[1]].update(to_outer(time), delta)
                else:
                    tracker.update(location, time, delta)
        tracker.propagate_all()
        pushed = tracker.pushed_changes()
        if not pushed.is_empty():
            children = self.children
            temp_active = self.temp_active
            for (location, time), diff in pushed.drain():
                if not location[2]:
                    child = children[location[0]]
                    if child.notify:
                        heapq.heappush(temp_active, location[0])
                    child.shared_progress.frontiers[location[1]].update(time, diff)
        for output, changes in enumerate(tracker.output_changes):
            if not changes.is_empty():
                internal = shared.internals[output]
                filtered = self.output_capabilities[output].update_iter(
                    [(to_outer(t), d) for t, d in changes.drain()])
                for t, d in filtered:
                    internal.update(t, d)


def subgraphs(subgraph: "Subgraph") -> Iterator["Subgraph"]:
    """A scope and every scope nested in it, outermost first."""
    yield subgraph
    for child in subgraph.children:
        op = child.operator
        if op is not None and hasattr(op, "tracker"):
            yield from subgraphs(op)
