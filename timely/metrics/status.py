"""A process's status, as the status page and the Prometheus collector read it.

``process_status(source)`` is ``/status.json``: the dataflows' graph (operators and
channels, as ``timely.visualize.describe_dataflow`` draws them) with every local
worker's figures (``timely.metrics.instruments.worker_numbers``), the stateful
operators' bins and keys, the Kafka sources' lag, migrations, checkpoints, and the
dataflows that have stopped moving (``stalls``, timely.stall). The graph
comes from the first worker that built each dataflow: every worker builds the same.

``cluster_status(source, timeout)`` is ``/cluster.json``, served by any process but
asked of process 0 by the page: this process's status and every other member's, read
over HTTP from its metrics port (the same port offset as ours), side by side; a process
that does not answer is shown down, with why.

Costs: ``process_status`` O(operators x workers + bins + partitions); ``cluster_status``
one HTTP request per process, in parallel, each bounded by ``timeout``.
"""
from __future__ import annotations

import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from broker import health as broker_health

from .instruments import worker_numbers


class Source:
    """What the metrics of one process read: its index, its workers, its cluster."""

    def __init__(self, process: int, workers: list, hub: Any, config: Any) -> None:
        self.process = process
        self.workers = workers
        self.hub = hub
        self.config = config
        self.seen: set[int] = {process}

    def members(self) -> list[int]:
        """The workers of the cluster now (as the first local worker routes)."""
        return list(self.workers[0].routing_workers) if self.workers else []

    def processes(self) -> tuple[list[int], list[int]]:
        """``(in the cluster now, itself included; seen before but gone)``."""
        connections = getattr(self.hub, "connections", None)
        now = set(connections or ()) | {self.process}
        self.seen |= now
        return sorted(now), sorted(self.seen - now)

    def url_of(self, process: int) -> str:
        host, _ = self.config.address_of(process) if self.config.cluster else ("127.0.0.1", 0)
        return f"http://{host}:{self.config.metrics_port + process}"


def process_status(source: Source) -> dict:
    """``/status.json`` (see the module)."""
    from ..visualize import describe_dataflow
    dataflows: dict[int, dict] = {}
    stateful, lag, buffered, in_flight, checkpoint = [], [], [], [], None
    sink_errors = rollbacks = withdrawn = 0
    recovery: Optional[float] = None
    progress = {"mode": source.config.progress_mode, "batches_sent": 0, "batches_received": 0}
    for worker in source.workers:
        numbers = worker_numbers(worker)
        for index, figures in numbers["dataflows"].items():
            found = dataflows.get(index)
            if found is None:
                inst = worker.instruments[index]
                found = dataflows[index] = {"index": index, "name": inst.name,
                                            **describe_dataflow(inst.subgraph), "workers": {}}
            found["workers"][str(worker.index)] = figures
        stateful.extend(numbers["stateful"])
        lag.extend(numbers["lag"])
        sink_errors += numbers["sink_errors"]
        withdrawn += numbers["withdrawn"]
        if numbers["buffered"] is not None:
            buffered.append(numbers["buffered"])
        if numbers["in_flight"] is not None:
            in_flight.append(numbers["in_flight"])
        checkpoint = numbers["checkpoint"] or checkpoint
        rollbacks = max(rollbacks, numbers["rollbacks"])
        recovery = numbers["recovery_seconds"] if numbers["recovery_seconds"] is not None else recovery
        for key in ("batches_sent", "batches_received"):
            progress[key] += numbers["progress"][key]
    if checkpoint is not None:
        checkpoint = {**checkpoint, "rollbacks": rollbacks, "recovery_seconds": recovery}
    kafka = getattr(source.hub, "kafka", None)
    if kafka is not None:           # Kafka progress: where this process's logs are written and read
        progress["log_written"] = {str(w): n for w, n in dict(kafka.log._lseq).items()}
        progress["log_read"] = {str(w): n for w, n in dict(kafka.subscriber.positions).items()}
    return {"process": source.process, "workers": [w.index for w in source.workers],
            "members": source.members(), "time": time.time(),
            "dataflows": [dataflows[i] for i in sorted(dataflows)],
            "stateful": stateful,
            "migrations": {"in_flight": sum(s["migrations_pending"] for s in stateful),
                           "bins_moved": sum(s["bins_received"] for s in stateful)},
            "kafka": {"lag": lag, "sink_errors": sink_errors, "withdrawn": withdrawn, "buffered": buffered,
                      # each broker address's reachability (broker.health)
                      "brokers": broker_health.states()},
            "exchange": {"in_flight": in_flight},
            "progress": progress, "rollbacks": rollbacks, "recovery_seconds": recovery,
            "checkpoint": checkpoint,
            # dataflows whose frontier has not moved for --stall-warn seconds (timely.stall)
            "stalls": [r for w in source.workers if w.stall is not None for r in w.stall.report()]}


def cluster_status(source: Source, timeout: float = 2.0) -> dict:
    """``/cluster.json`` (see the module)."""
    def one(process: int) -> dict:
        url = source.url_of(process)
        if process == source.process:
            return {"process": process, "url": url, "up": True, "error": None, "status": process_status(source)}
        try:
            with urllib.request.urlopen(f"{url}/status.json", timeout=timeout) as reply:
                return {"process": process, "url": url, "up": True, "error": None,
                        "status": json.loads(reply.read())}
        except (OSError, ValueError) as e:
            return {"process": process, "url": url, "up": False, "error": str(e), "status": None}
    processes, gone = source.processes()
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(processes)))) as pool:
        found = list(pool.map(one, processes))
    found += [{"process": p, "url": source.url_of(p), "up": False, "status": None,
               "error": "not in the cluster any more (it left, or died)"} for p in gone]
    return {"generated": time.time(), "processes": sorted(found, key=lambda p: p["process"])}
