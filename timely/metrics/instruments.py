"""What a worker measures of its dataflows while metrics are on, and how it reads them.

``instrument(worker, index, subgraph)`` runs when a dataflow is built (or built again
after a rollback): every operator adds up the time its logic is scheduled
(``OperatorCore.timed``), and the input frontiers of the root scope's operators drive
an ``EpochClock``. Records and batches in and out are counted by every operator's ports
always (an add per batch), so switching metrics on changes nothing on a per-record path.

``worker_numbers(worker)`` reads one worker's figures for the status page and the
Prometheus collector (``timely.metrics.status``): per dataflow, per operator (records
and batches in and out, seconds scheduled, input frontiers) and the epochs; the bins
and keys of its stateful operators; its Kafka sources' lag and read-ahead; the bytes it
has in flight to other processes (exchange credit); its checkpoints. It runs on
the metrics server's thread while the worker steps: it reads counters and copies
containers, and a container that changes under it is read again.

Costs: ``instrument`` O(operators); ``worker_numbers`` O(operators + bins + partitions).
"""
from __future__ import annotations

from typing import Any, Optional

from ..dataflow.completion import reachable, successors
from ..progress.subgraph import subgraphs
from .epochs import EpochClock


class DataflowInstruments:
    """One built dataflow as the metrics see it: its scopes and operators by id."""

    def __init__(self, index: int, subgraph: Any, minimum: Any) -> None:
        self.index = index
        self.name = subgraph.name
        self.subgraph = subgraph
        self.operators: dict[str, Any] = {}          # id -> OperatorCore
        roots: dict[int, Any] = {}                  # the root scope's operators by child index
        for scope in subgraphs(subgraph):
            for child in scope.children[1:]:
                core = child.operator
                if core is None or not hasattr(core, "timed"):
                    continue
                self.operators[".".join(map(str, core.path))] = core
                core.timed = True
                if scope is subgraph:
                    roots[child.index] = core
        first, last = edges(subgraph)
        every = [port for core in roots.values() for port in core._in]
        self.clock = EpochClock([roots[i]._in[p] for i, p in first if i in roots] or every,
                                [port for i in last if i in roots for port in roots[i]._in] or every, minimum)
        for core in roots.values():
            core.clock = self.clock


def edges(subgraph: Any) -> tuple[list[tuple[int, int]], list[int]]:
    """Where a root scope's epochs enter and leave: ``(the input ports (child, port) fed
    by its sources, the children whose outputs go nowhere)``. A source is an operator
    that nothing outside its own loop feeds (a Kafka source with its hand-off feedback,
    an input), so its output frontier passing an epoch says the epoch was read.

    >>> from types import SimpleNamespace as N
    >>> T = lambda node, port: N(node=node, port=port)
    >>> g = N(children=[N(index=0, edges=[]), N(index=1, edges=[[T(2, 0), T(3, 0)]]),
    ...                 N(index=2, edges=[[T(1, 0)]]), N(index=3, edges=[[T(4, 0)]]), N(index=4, edges=[])])
    >>> edges(g)
    ([(3, 0)], [4])
    """
    children = subgraph.children[1:]
    succ = successors(subgraph)
    reached = {i: reachable(succ, i) for i in succ}
    # a source: every operator that reaches it is one it reaches (its own loop)
    sources = {i for i in succ if all(i not in reached[j] or j in reached[i] or j == i for j in succ)}
    loop = {i: {j for j in reached[i] if i in reached[j]} | {i} for i in sources}
    first = sorted({(t.node, t.port) for c in children if c.index in sources for targets in c.edges
                    for t in targets if t.node and t.node not in loop[c.index]})
    last = [c.index for c in children if not any(c.edges)]
    return first, last


def instrument(worker: Any, index: int, subgraph: Any, minimum: Any) -> None:
    """Measure dataflow ``index`` from now on (see the module)."""
    worker.instruments[index] = DataflowInstruments(index, subgraph, minimum)


def _lowest(port: Any) -> Optional[Any]:
    f = list(port.frontier.frontier())
    if not f:
        return None
    t = min(f)
    return t if isinstance(t, (int, float)) else list(t) if isinstance(t, tuple) else str(t)


def _retry(read: Any) -> Any:
    """``read()``, again if a container the worker was changing broke it."""
    for _ in range(5):
        try:
            return read()
        except (RuntimeError, ValueError, KeyError, IndexError):
            continue
    return read()


def operator_numbers(core: Any) -> dict:
    return {"records_in": sum(p.count for p in core._in), "records_out": sum(p.count for p in core._out),
            "batches_in": sum(p.messages for p in core._in), "batches_out": sum(p.messages for p in core._out),
            "scheduled_seconds": core.seconds, "schedules": core.schedules,
            "frontier": [_retry(lambda: _lowest(p)) for p in core._in]}


def worker_numbers(worker: Any) -> dict:
    """One worker's figures (see the module)."""
    dataflows = {}
    for index, inst in list(worker.instruments.items()):
        clock = inst.clock
        dataflows[index] = {
            "operators": {id_: operator_numbers(core) for id_, core in list(inst.operators.items())},
            "epochs_completed": clock.completed, "frontier": clock.frontier,
            "latency": [list(x) for x in _retry(lambda: list(clock.recent))],
            "latency_buckets": list(clock.counts), "latency_sum": clock.total}
    stateful = []
    for states in list(worker.stateful_states):
        stateful.append({"dataflow": states.dataflow, "operator": states.name, "worker": worker.index,
                         "bins": len(states.bins), "keys": _retry(states.keys),
                         "bin_count": _retry(lambda: len(states.table())),
                         "bins_received": sum(r[1] for r in list(states.received)),
                         "migrations_pending": max(0, _retry(lambda: len(states.routers[0].configs)) - 1)
                         if states.routers else 0})
    lag = []
    sources = list(getattr(worker, "kafka_sources", {}).values())
    for state in sources:
        lag.extend(_source_lag(state, worker.index))
    sink_errors = sum(len(s._errors) for ctx in list(worker.checkpoint_contexts.values()) for s in ctx.sinks)
    withdrawn = sum(s.withdrawals for s in sources)
    flows = [s.flow for s in sources if s.flow is not None]
    buffered = {"worker": worker.index, "bytes": sum(f.buffered for f in flows),
                "limit": sum(f.limit for f in flows), "held": sum(f.held for f in flows)} if flows else None
    checkpoint = None
    for ctx in list(worker.checkpoint_contexts.values()):
        if ctx.enabled:
            checkpoint = {"incarnation": ctx.inc, "last_label": ctx.last_label,
                          "restored": None if ctx.restored is None else ctx.restored.label}
    progress = {"batches_sent": sum(p.batches_sent for p in list(worker.progcasters.values())),
                "batches_received": sum(p.batches_received for p in list(worker.progcasters.values()))}
    credit = getattr(worker.allocator, "credit", None)
    in_flight = None if credit is None else {"worker": worker.index, "bytes": _retry(credit.in_flight),
                                             "limit": credit.limit}
    return {"dataflows": dataflows, "stateful": stateful, "lag": lag, "sink_errors": sink_errors,
            "withdrawn": withdrawn, "buffered": buffered, "in_flight": in_flight,
            "checkpoint": checkpoint, "progress": progress, "rollbacks": worker.rollbacks,
            "recovery_seconds": worker.recovery_seconds}


def _source_lag(state: Any, worker: int) -> list[dict]:
    """Per partition this worker reads: its end offset (the high watermark its consumer
    last fetched, which the source reads on its own thread) minus the position read up
    to."""
    out = []
    ends = dict(state.ends or {})
    for (topic, partition), part in list(state.parts.items()):
        end = ends.get((topic, partition))
        position = part.position if part.position is not None else state.starts.get((topic, partition))
        if end is None or position is None or position < 0:
            continue
        out.append({"topic": topic, "partition": partition, "worker": worker, "position": position,
                    "end": end, "lag": max(0, end - position)})
    return out
