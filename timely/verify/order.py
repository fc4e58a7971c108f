"""Random dataflow graphs and the could-result-in order on their pointstamps.

The exchange protocol of seed 002 §4 works for any partial order on pointstamps; the
combined protocol (§6) uses *could-result-in*: ``(l, t) <= (l', t')`` when some path
summary ``s`` from ``l`` to ``l'`` has ``t (+) s <= t'``. ``PointstampOrder`` builds it
from the independent oracle's path summaries (``timely.verify.oracle``), over a finite
*universe* of pointstamps (every location x every time up to ``tmax`` per coordinate):
the harness only ever creates pointstamps inside it, so every set of pointstamps the
properties quantify over ("every p with glob vacant up to p") can be a bitset (a Python
int, bit i = the i-th pointstamp of the universe) and each property check is a few
big-int operations.

``random_graph`` draws a scope like the hypothesis strategy of
``tests/test_reachability.py``, from a ``random.Random``: node 0 is the boundary, a few
operators with 1-2 inputs and outputs, random partial / multi-summary internal
connections, random channels, at least one feedback ring, and every cycle made to
strictly advance timestamps (the Builder rejects the others).

Costs: ``random_graph`` O(ports^2); ``PointstampOrder(...)`` O(L * T^2) for L locations
and T times to precompute the "times >= r" masks; ``up(p)`` O(reachable locations x
summaries) the first time, then a dict lookup; ``le``/``lt`` O(summaries).

>>> import random
>>> g = random_graph(random.Random(7), "pair")
>>> order = PointstampOrder(Oracle(g), tmax=3)
>>> p = (g.locations()[0], (0, 0))
>>> order.le(p, p), order.lt(p, p), order.up(p) & order.bit(p) != 0
(True, False, True)
"""
from __future__ import annotations

import itertools
import random
from typing import Any, Iterable, Optional

from ..progress import Location
from .oracle import Graph, Oracle, apply, identity, le, zero_cycle

Pointstamp = tuple  # (Location, time)

ONE_SUMMARY = {"int": [0, 0, 0, 1, 2],
               "pair": [(0, 0), (0, 0), (0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (2, 0)]}
ADVANCING = {"int": [1, 2], "pair": [(0, 1), (1, 0), (1, 1)]}


def _summaries(rng: random.Random, kind: str) -> list:
    roll = rng.random()
    if roll < 0.25:
        return []                                           # not connected
    if roll < 0.75:
        return [rng.choice(ONE_SUMMARY[kind])]
    if kind == "pair" and roll < 0.85:
        return [(1, 0), (0, 1)]                             # an incomparable pair
    return [rng.choice(ONE_SUMMARY[kind]) for _ in range(rng.randint(1, 3))]


def random_graph(rng: random.Random, kind: str, max_ops: int = 4) -> Graph:
    """A random scope with int (``kind="int"``) or pair timestamps: see the module doc."""
    n_ops = rng.randint(1, max_ops)
    scope_outputs, scope_inputs = rng.randint(0, 1), rng.randint(0, 1)
    shapes = [(scope_outputs, scope_inputs)]
    summaries: list = [[[[] for _ in range(scope_inputs)] for _ in range(scope_outputs)]]
    for _ in range(n_ops):
        ins, outs = rng.randint(1, 2), rng.randint(1, 2)
        shapes.append((ins, outs))
        summaries.append([[_summaries(rng, kind) for _ in range(outs)] for _ in range(ins)])
    graph = Graph(kind, shapes, summaries)
    all_sources = [(n, p) for n, (_, outs) in enumerate(shapes) for p in range(outs)]
    for node, (ins, _) in enumerate(shapes):
        for port in range(ins):
            if all_sources:
                for _ in range(rng.choice((0, 1, 1, 1, 2))):
                    graph.edges.append((rng.choice(all_sources), (node, port)))
    # a feedback ring through 1..3 operators
    ring_ops = list(range(1, len(shapes)))
    ring = rng.sample(ring_ops, rng.randint(1, min(3, len(ring_ops))))
    ports = [(rng.randrange(shapes[n][0]), rng.randrange(shapes[n][1])) for n in ring]
    for k, n in enumerate(ring):
        i, o = ports[k]
        if not summaries[n][i][o]:
            summaries[n][i][o] = [rng.choice(ONE_SUMMARY[kind]) for _ in range(rng.randint(1, 2))]
        nxt, (ni, _) = ring[(k + 1) % len(ring)], ports[(k + 1) % len(ring)]
        graph.edges.append(((n, o), (nxt, ni)))
    # every cycle must strictly advance: drop identity summaries on zero cycles
    while (cycle := zero_cycle(graph)) is not None:
        internal = [(a, b) for a, b in zip(cycle, cycle[1:]) if not a.is_source]
        a, b = rng.choice(internal)
        row = graph.summaries[a.node][a.port]
        kept = [s for s in row[b.port] if s != identity(kind)]
        row[b.port] = kept or [rng.choice(ADVANCING[kind])]
    return graph


class PointstampOrder:
    """Could-result-in on ``(Location, time)`` pointstamps, with universe bitsets."""

    def __init__(self, oracle: Oracle, tmax: int) -> None:
        self.oracle = oracle
        self.kind = oracle.graph.kind
        self.tmax = tmax
        self.locations: list[Location] = list(oracle.locations)
        if self.kind == "int":
            self.times: list = list(range(tmax + 1))
        else:
            self.times = list(itertools.product(range(tmax + 1), repeat=2))
        self.minimum = identity(self.kind)
        self.universe: list[Pointstamp] = [(l, t) for l in self.locations for t in self.times]
        self.index: dict = {p: i for i, p in enumerate(self.universe)}
        self.all_bits = (1 << len(self.universe)) - 1
        ps = oracle.ps
        #: per location, the locations it can reach and the minimal summaries to each
        self.reach: dict = {a: [(b, sorted(ps[a][b], key=_sort_key)) for b in self.locations if ps[a][b]]
                            for a in self.locations}
        #: where pointstamps may be: not node 0, the scope's boundary, whose statements
        #: belong to the parent scope (the runtime routes them there, and Progcaster
        #: leaves them out of its accumulated state)
        self.places: list[Location] = [l for l in self.locations if l.node != 0]
        self._above: dict = {a: [(b, s) for b, s in self.reach[a] if b.node != 0] for a in self.locations}
        # "times >= r at l" for every l and every r inside the universe
        self._ge: dict = {}
        for l in self.locations:
            for r in self.times:
                mask = 0
                for t in self.times:
                    if le(r, t):
                        mask |= 1 << self.index[(l, t)]
                self._ge[(l, r)] = mask
        self._up: dict = {}
        self._req: dict = {}

    # ---- the order ---------------------------------------------------------------------
    def le(self, p: Pointstamp, q: Pointstamp) -> bool:
        """``p`` could-result-in ``q``."""
        t, u = p[1], q[1]
        for s in self.oracle.ps[p[0]][q[0]]:
            r = apply(s, t)
            if r is not None and le(r, u):
                return True
        return False

    def lt(self, p: Pointstamp, q: Pointstamp) -> bool:
        return p != q and self.le(p, q)

    def in_universe(self, p: Pointstamp) -> bool:
        return p in self.index

    def bit(self, p: Pointstamp) -> int:
        return 1 << self.index[p]

    def bits(self, ps: Iterable[Pointstamp]) -> int:
        out = 0
        index = self.index
        for p in ps:
            out |= 1 << index[p]
        return out

    def up(self, p: Pointstamp) -> int:
        """Bitset of the universe's pointstamps ``q`` with ``p <= q``."""
        found = self._up.get(p)
        if found is None:
            found = 0
            loc, t = p
            ge = self._ge
            for b, summaries in self.reach[loc]:
                for s in summaries:
                    r = apply(s, t)
                    if r is not None:
                        found |= ge.get((b, r), 0)
            self._up[p] = found
        return found

    def up_of(self, ps: Iterable[Pointstamp]) -> int:
        """Bitset of everything ``>=`` some element of ``ps``."""
        out = 0
        up = self.up
        for p in ps:
            out |= up(p)
        return out

    def requirements(self, p: Pointstamp) -> list:
        """``[(l', t (+) s)]`` for every location l' and minimal summary s from p's
        location: what every initialized worker's implications must cover (§6 Safe)."""
        found = self._req.get(p)
        if found is None:
            loc, t = p
            found = []
            for b, summaries in self.reach[loc]:
                for s in summaries:
                    r = apply(s, t)
                    if r is not None:
                        found.append((b, r))
            self._req[p] = found
        return found

    def decode(self, bits: int) -> list:
        """The pointstamps of a bitset (for messages)."""
        out = []
        i = 0
        while bits:
            if bits & 1:
                out.append(self.universe[i])
            bits >>= 1
            i += 1
        return out

    # ---- drawing pointstamps -----------------------------------------------------------
    def bump(self, rng: random.Random, t: Any) -> Any:
        """``t`` advanced by one in one coordinate."""
        if self.kind == "int":
            return t + 1
        k = rng.randrange(2)
        return (t[0] + 1, t[1]) if k == 0 else (t[0], t[1] + 1)

    def draw_above(self, rng: random.Random, p: Pointstamp, strict: bool,
                   tries: int = 4) -> Optional[Pointstamp]:
        """A random pointstamp of the universe ``>= p`` (``> p`` when ``strict``)."""
        loc, t = p
        options = self._above[loc]
        if not options:
            return None
        for _ in range(tries):
            b, summaries = rng.choice(options)
            r = apply(rng.choice(summaries), t)
            if rng.random() < 0.35:
                r = self.bump(rng, r)
            q = (b, r)
            if strict and q == p:
                q = (b, self.bump(rng, r))
            if q in self.index:
                return q
        return None

    def draw_low(self, rng: random.Random) -> Pointstamp:
        """A random pointstamp (not at node 0) in the lower half of the time range."""
        loc = rng.choice(self.places)
        half = max(1, self.tmax // 2)
        if self.kind == "int":
            return (loc, rng.randint(0, half))
        return (loc, (rng.randint(0, half), rng.randint(0, half)))


def fmt(p: Pointstamp) -> str:
    """A pointstamp as ``(S3.0, 4)``: Source or Target, operator.port, time.

    >>> fmt((Location.source(3, 0), 4)), fmt((Location.target(1, 1), (0, 2)))
    ('(S3.0, 4)', '(T1.1, (0, 2))')
    """
    loc, t = p
    return f"({'S' if loc[2] else 'T'}{loc[0]}.{loc[1]}, {t})"


def fmt_updates(updates: Iterable) -> str:
    """``[(pointstamp, delta)]`` (or a Counter) compactly: ``{(S3.0, 4): +1}``."""
    items = updates.items() if hasattr(updates, "items") else updates
    return "{" + ", ".join(f"{fmt(p)}: {d:+d}" for p, d in items) + "}"


def _sort_key(s: Any) -> Any:
    return (s,) if isinstance(s, int) else s
