"""The independent ``implied_frontier`` oracle: seed 002's definitions, written out.

Shared by ``tests/test_reachability.py`` (which compares the Tracker with it on random
graphs) and the protocol harness (``timely.verify``, which checks that every worker's
Tracker converges to it). It is deliberately written independently of the Builder's
``summarize_outputs`` and of the Tracker: its own timestamp order and summary algebra
(ints and pairs of ints), path summaries by a Bellman-Ford fixpoint over antichains,
and ``implied_frontier`` straight from seed 002 §5:

    implied_frontier P l = frontier(sum over l' of pos(P l') (+) path_summary l' l)

Costs: building an ``Oracle`` is O(L * E * S) per location for L locations, E steps
and S summaries per antichain (a few ms for the graphs used here); ``path_summary``
is a dict lookup; ``implied_frontier`` is O(entries * summaries + c^2) for c
candidates.

>>> g = Graph("int", [(0, 0), (1, 1)], [[], [[[1]]]], [((1, 0), (1, 0))])
>>> o = Oracle(g)
>>> sorted(o.path_summary(Location.target(1, 0), Location.target(1, 0)))
[0]
>>> sorted(o.path_summary(Location.source(1, 0), Location.source(1, 0)))
[0]
>>> sorted(o.path_summary(Location.target(1, 0), Location.source(1, 0)))
[1]
>>> o.implied_frontier({Location.source(1, 0): {3: 1}}, Location.source(1, 0))
{3}
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ..progress import Builder, Location, Source, Target

TIME_MAX = 2**63 - 1

__all__ = ["TIME_MAX", "le", "lt", "apply", "compose", "identity", "minimal", "insert_minimal",
           "Graph", "Oracle", "pointstamp_frontier", "simple_path_summaries", "zero_cycle"]


def le(a: Any, b: Any) -> bool:
    """The product partial order on int / int-tuple timestamps (and summaries)."""
    if isinstance(a, int):
        return a <= b
    return len(a) == len(b) and all(x <= y for x, y in zip(a, b))


def lt(a: Any, b: Any) -> bool:
    return a != b and le(a, b)


def apply(summary: Any, time: Any) -> Optional[Any]:
    """``time`` after travelling a path summarised by ``summary`` (None: it cannot)."""
    if isinstance(summary, int):
        r = time + summary
        return r if r <= TIME_MAX else None
    r = tuple(t + s for t, s in zip(time, summary))
    return r if all(x <= TIME_MAX for x in r) else None


def compose(first: Any, then: Any) -> Optional[Any]:
    if isinstance(first, int):
        r = first + then
        return r if r <= TIME_MAX else None
    r = tuple(a + b for a, b in zip(first, then))
    return r if all(x <= TIME_MAX for x in r) else None


def identity(kind: str) -> Any:
    """The identity summary for ``kind`` "int" or "pair"."""
    return 0 if kind == "int" else (0, 0)


def minimal(elements) -> set:
    elements = set(elements)
    return {x for x in elements if not any(lt(y, x) for y in elements)}


def insert_minimal(chain: set, x: Any) -> bool:
    """Add ``x`` to the antichain ``chain`` unless something held is <= it."""
    if any(le(y, x) for y in chain):
        return False
    for y in [y for y in chain if le(x, y)]:
        chain.discard(y)
    chain.add(x)
    return True


@dataclass
class Graph:
    """A scope: node 0 is its boundary (inputs = scope outputs, outputs = scope inputs,
    no internal connections, as in timely); ``summaries[node][input][output]`` lists an
    operator's internal summaries ([] = no connection)."""

    kind: str
    shapes: list
    summaries: list
    edges: list = field(default_factory=list)

    def sources(self) -> list:
        return [Location.source(n, p) for n, (_, outs) in enumerate(self.shapes) for p in range(outs)]

    def targets(self) -> list:
        return [Location.target(n, p) for n, (ins, _) in enumerate(self.shapes) for p in range(ins)]

    def locations(self) -> list:
        return self.sources() + self.targets()

    def steps(self) -> list:
        """The location graph: (from, to, summaries as given)."""
        out = [(Location.source(*s), Location.target(*t), [identity(self.kind)]) for s, t in self.edges]
        for n, rows in enumerate(self.summaries):
            for i, row in enumerate(rows):
                for o, summaries in enumerate(row):
                    if summaries:
                        out.append((Location.target(n, i), Location.source(n, o), list(summaries)))
        return out

    def builder(self) -> Builder:
        b = Builder(minimum=identity(self.kind))
        for n, (ins, outs) in enumerate(self.shapes):
            b.add_node(n, ins, outs, [[list(s) for s in row] for row in self.summaries[n]])
        for s, t in self.edges:
            b.add_edge(Source(*s), Target(*t))
        return b

    def __repr__(self) -> str:  # readable falsifying examples
        return (f"Graph(kind={self.kind!r}, shapes={self.shapes!r},\n"
                f"      summaries={self.summaries!r},\n      edges={self.edges!r})")


class Oracle:
    """``path_summary`` and ``implied_frontier`` straight from seed 002's definitions."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.locations = graph.locations()
        self.succ: dict = {loc: [] for loc in self.locations}
        for a, b, summaries in graph.steps():
            self.succ[a].append((b, minimal(summaries)))
        self.ps = {a: self._closure(a) for a in self.locations}

    def _closure(self, start) -> dict:
        """Minimal summaries of all paths from ``start``: Bellman-Ford over antichains,
        starting from the empty path (identity) and extending paths one step at a time
        until no location gains a new minimal summary."""
        reach: dict = {loc: set() for loc in self.locations}
        reach[start].add(identity(self.graph.kind))
        changed = True
        while changed:
            changed = False
            for a in self.locations:
                for x in list(reach[a]):
                    for b, summaries in self.succ[a]:
                        for s in summaries:
                            y = compose(x, s)
                            if y is not None and insert_minimal(reach[b], y):
                                changed = True
        return reach

    def path_summary(self, a, b) -> set:
        return self.ps[a][b]

    def implied_frontier(self, P: dict, loc, where: Callable[[Any], bool] = lambda l: True) -> set:
        """frontier(sum over l' of pos(P l') (+) path_summary(l', loc)); ``where``
        restricts the l' that contribute."""
        candidates = set()
        for src, counts in P.items():
            if not where(src):
                continue
            summaries = self.ps[src][loc]
            for t, c in counts.items():
                if c > 0:
                    for s in summaries:
                        r = apply(s, t)
                        if r is not None:
                            candidates.add(r)
        return minimal(candidates)

    def implied_frontiers(self, P: dict) -> dict:
        return {loc: self.implied_frontier(P, loc) for loc in self.locations}

    def implication_counts(self, P: dict, F: dict) -> dict:
        """The exact implication multiset at each location once the worklist is empty
        (seed 002's invariant): the frontier of its own pointstamps plus, for every step
        l' -> l, the implied frontier at l' through that step's summaries."""
        out = {loc: Counter(pointstamp_frontier(P, loc)) for loc in self.locations}
        for a in self.locations:
            for b, summaries in self.succ[a]:
                for t in F[a]:
                    for s in summaries:
                        r = apply(s, t)
                        if r is not None:
                            out[b][r] += 1
        return out

    def output_multiset(self, P: dict, output: int) -> Counter:
        """What the accumulated ``output_changes[output]`` must be: every pointstamp
        frontier element outside node 0 pushed through every minimal summary to the
        scope output (node 0's own ports are the parent's business, as in timely)."""
        out: Counter = Counter()
        scope_output = Location.target(0, output)
        for loc in self.locations:
            if loc.node == 0:
                continue
            for t in pointstamp_frontier(P, loc):
                for s in self.ps[loc][scope_output]:
                    r = apply(s, t)
                    if r is not None:
                        out[r] += 1
        return +out


def pointstamp_frontier(P: dict, loc) -> set:
    return minimal(t for t, c in P.get(loc, {}).items() if c > 0)


def simple_path_summaries(graph: Graph, a, b) -> set:
    """Minimal summaries over the simple paths from a to b, by exhaustive search. With
    every cycle advancing, a path with a cycle is never below the path without it, so
    this equals path_summary: a check on the fixpoint oracle itself."""
    succ: dict = {loc: [] for loc in graph.locations()}
    for x, y, summaries in graph.steps():
        succ[x].append((y, minimal(summaries)))
    found: set = set()

    def walk(loc, summary, seen):
        if loc == b:
            found.add(summary)
        for nxt, summaries in succ[loc]:
            if nxt not in seen:
                for s in summaries:
                    y = compose(summary, s)
                    if y is not None:
                        walk(nxt, y, seen | {nxt})

    walk(a, identity(graph.kind), {a})
    return minimal(found)


def zero_cycle(graph: Graph) -> Optional[list]:
    """A cycle of steps that may leave timestamps unchanged (channels, and internal
    connections offering the identity summary), as a list of locations, or None."""
    ident = identity(graph.kind)
    succ: dict = {loc: [] for loc in graph.locations()}
    for a, b, summaries in graph.steps():
        if ident in summaries:
            succ[a].append(b)
    state: dict = {}

    def dfs(loc, path):
        state[loc] = 1
        path.append(loc)
        for nxt in succ[loc]:
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = dfs(nxt, path)
                if cycle:
                    return cycle
        path.pop()
        state[loc] = 2
        return None

    for loc in succ:
        if loc not in state:
            cycle = dfs(loc, [])
            if cycle:
                return cycle
    return None
