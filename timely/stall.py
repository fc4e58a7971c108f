"""The stall detector: when a dataflow's frontier stops moving, say what holds it.

A dataflow that waits for ever is the worst failure a user can meet: no error, no exit,
nothing to restart. So every worker watches its dataflows' progress state (the
pointstamps of every scope, as its trackers count them). When it has not changed for
``Config.stall_warn`` seconds (``--stall-warn S``, default 30; 0 turns it off) while the
dataflow is incomplete, the worker logs one line per stalled dataflow, and again every
``stall_warn`` seconds while the stall lasts, naming what holds the frontier:

- ``held here``: capabilities this worker's own operators hold (operator, output, time),
  with what the operator waits for where it says (an input left open: ``waits``);
- ``held elsewhere``: capabilities only other workers hold (their own lines say which);
- ``in flight``: messages sent and not yet received at an operator's input.

``Worker.stall.report()`` gives the same to ``/status.json`` and the status page.
A program that waits on purpose (a source with no new data) gets the line too: it says
what it waits for, which is the point.

Costs: one clock read per step; a check every ``stall_warn / 4`` seconds, O(ports of
every scope) of the dataflows.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

from .progress.location import Location
from .progress.subgraph import subgraphs

log = logging.getLogger("timely.stall")
#: holders named per line and per report: the least times first
SHOWN = 8


class StallDetector:
    """One worker's watch over its dataflows (see the module)."""

    def __init__(self, worker: Any, seconds: float) -> None:
        self.worker = worker
        self.seconds = seconds
        self.period = max(0.02, seconds / 4)
        self.due = time.monotonic() + self.period
        #: dataflow index -> (its progress state when last seen to change, since when)
        self._seen: dict[int, tuple[Any, float]] = {}
        self._logged: dict[int, float] = {}
        #: dataflow index -> the stall's report, while it lasts
        self.stalls: dict[int, dict] = {}
        #: operator path -> what the operator waits for (``waits``)
        self._waits: dict[tuple, Callable[[], Optional[str]]] = {}

    def waits(self, path: tuple, describe: Callable[[], Optional[str]]) -> None:
        """Let the operator at ``path`` say what it waits for while it holds a capability
        (``describe()`` returns a short phrase, or None for nothing in particular)."""
        self._waits[path] = describe

    def check(self) -> None:
        """Compare every dataflow with the last check; log the ones stalled too long."""
        now = time.monotonic()
        self.due = now + self.period
        worker = self.worker
        if worker.recovering:
            self._seen.clear()
            self.stalls.clear()
            return
        alive = set(worker.dataflows())
        for index in list(self._seen):
            if index not in alive:
                del self._seen[index]
                if self.stalls.pop(index, None) is not None:
                    log.info("worker %d: a stalled dataflow moves again: it completed", worker.index)
                self._logged.pop(index, None)
        for index in alive:
            subgraph = worker.dataflow_subgraph(index)
            state = _pointstamps(subgraph)
            seen = self._seen.get(index)
            if seen is None or seen[0] != state:
                self._seen[index] = (state, now)
                if self.stalls.pop(index, None) is not None:
                    log.info("worker %d: dataflow %r moves again", worker.index, subgraph.name)
                    self._logged.pop(index, None)
                continue
            stalled_for = now - seen[1]
            if stalled_for < self.seconds or not state:
                continue
            report = self._describe(subgraph, state, stalled_for)
            self.stalls[index] = report
            if now - self._logged.get(index, -1e18) >= self.seconds:
                self._logged[index] = now
                log.warning("worker %d: dataflow %r has made no progress for %.1f s; %s",
                            worker.index, subgraph.name, stalled_for, report["summary"])

    def report(self) -> list[dict]:
        """The stalls now, for the status page: one dict per stalled dataflow."""
        return [self.stalls[i] for i in sorted(self.stalls)]

    def _describe(self, subgraph: Any, state: tuple, stalled_for: float) -> dict:
        held_here: dict = {}
        for scope in subgraphs(subgraph):
            for (loc, t), c in scope.held:
                if c > 0:
                    key = (scope.path, loc.node, loc.port, True, t)
                    held_here[key] = held_here.get(key, 0) + c
        here, elsewhere, flight = [], [], []
        names = {scope.path: scope for scope in subgraphs(subgraph)}
        for path, node, port, is_source, t, count in state:
            scope = names[path]
            op = scope.children[node]
            where = {"scope": scope.name, "operator": getattr(op, "name", "operator"),
                     "node": node, "port": port, "time": _plain(t)}
            if not is_source:
                flight.append({**where, "messages": count})
                continue
            mine = held_here.get((path, node, port, True, t), 0)
            if mine:
                describe = self._waits.get(path + (node,))
                waits = describe() if describe is not None else None
                here.append({**where, "count": mine, **({"waits": waits} if waits else {})})
            if count > mine:
                elsewhere.append({**where, "count": count - mine})
        report = {"dataflow": subgraph.name, "worker": self.worker.index,
                  "seconds": round(stalled_for, 1), "held_here": here[:SHOWN],
                  "held_elsewhere": elsewhere[:SHOWN], "in_flight": flight[:SHOWN]}
        report["summary"] = summary(report)
        return report


def _pointstamps(subgraph: Any) -> tuple:
    """Every positive pointstamp of ``subgraph`` and its nested scopes, least times first:
    ``(scope path, node, port, is_source, time, count)``."""
    found = []
    for scope in subgraphs(subgraph):
        tracker = scope.tracker
        for child in scope.children[1:]:
            for port in range(child.outputs):
                for t, c in tracker.pointstamps(Location(child.index, port, True)).counts():
                    if c > 0:
                        found.append((scope.path, child.index, port, True, t, c))
            for port in range(child.inputs):
                for t, c in tracker.pointstamps(Location(child.index, port, False)).counts():
                    if c > 0:
                        found.append((scope.path, child.index, port, False, t, c))
    try:
        found.sort(key=lambda e: (_order(e[4]), e[0], e[1], e[2]))
    except TypeError:               # timestamps of a user's own type: in scope order
        pass
    return tuple(found)


def _order(t: Any) -> tuple:
    return t if type(t) is tuple else (t,)


def _plain(t: Any) -> Any:
    return list(t) if type(t) is tuple else t


def summary(report: dict) -> str:
    """One line of a stall's report: what holds the frontier.

    >>> summary({"held_here": [{"operator": "Input", "node": 1, "port": 0, "time": 3, "count": 1,
    ...                         "waits": "an input left open"}],
    ...          "held_elsewhere": [], "in_flight": [{"operator": "Map", "node": 2, "port": 0,
    ...                                               "time": 3, "messages": 2}]})
    'held here: Input (node 1, output 0) at 3 (an input left open); in flight: 2 message(s) to Map (node 2, input 0) at 3'
    """
    parts = []
    here = [f"{h['operator']} (node {h['node']}, output {h['port']}) at {h['time']}"
            + (f" x{h['count']}" if h["count"] > 1 else "")
            + (f" ({h['waits']})" if h.get("waits") else "") for h in report["held_here"]]
    if here:
        parts.append("held here: " + ", ".join(here))
    there = [f"{h['operator']} (node {h['node']}, output {h['port']}) at {h['time']}"
             + (f" x{h['count']}" if h["count"] > 1 else "") for h in report["held_elsewhere"]]
    if there:
        parts.append("held by other workers (their lines say which): " + ", ".join(there))
    flight = [f"{h['messages']} message(s) to {h['operator']} (node {h['node']}, input {h['port']}) "
              f"at {h['time']}" for h in report["in_flight"]]
    if flight:
        parts.append("in flight: " + ", ".join(flight))
    return "; ".join(parts) or "nothing holds it (a scope waits for its own progress)"
