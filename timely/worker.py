"""Worker: one thread of a timely computation, building and stepping dataflows.

Every worker builds the same dataflows in the same order (so channels and operators
get the same identifiers everywhere) and then steps: it turns channel events into
operator activations and schedules the dataflows that have something to do. A step
costs O(events + the work of the operators it schedules); a worker with nothing to
do parks until a message arrives.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from . import verify_accounting
from .config import Config
from .dataflow.activations import Activations
from .dataflow.channels import stable_hash
from .dataflow.scope import Scope


class WorkerAborted(RuntimeError):
    """Another worker of this computation failed; this one stops too (fail-stop)."""


class Worker:
    def __init__(self, config: Config, allocator: Any, abort: Optional[threading.Event] = None) -> None:
        self.config = config
        self.allocator = allocator
        self.index: int = allocator.index
        self.peers: int = allocator.peers
        #: workers when the dataflows were built: each output starts with this many capabilities
        self.initial_peers: int = allocator.peers
        self.activations = Activations()
        # Python's str hash is salted per process: across processes, route by a stable one.
        self.route_hash: Callable[[Any], int] = hash if config.processes == 1 else stable_hash
        self._abort = abort
        self._identifiers = 0
        self._channel_paths: dict[int, tuple] = {}
        self._dataflows: dict[int, Any] = {}
        self._dataflow_count = 0
        self.steps = 0
        #: with check_progress: every worker of this process (set by execute)
        self.process_workers: Optional[list] = None
        self.step_lock: Optional[Any] = None

    # ---- identifiers and channels ----------------------------------------------------------
    def new_identifier(self) -> int:
        self._identifiers += 1
        return self._identifiers - 1

    def allocate(self, channel: int, path: tuple) -> tuple[list, Any]:
        """Pushers to every worker and this worker's puller; arrivals activate ``path``."""
        self._channel_paths[channel] = path
        return self.allocator.allocate(channel)

    def allocate_pipeline(self, channel: int, path: tuple) -> tuple[Any, Any]:
        self._channel_paths[channel] = path
        return self.allocator.allocate_local(channel)

    def allocate_progress_channel(self, path: tuple) -> int:
        channel = self.new_identifier()
        self._channel_paths[channel] = path
        return channel

    # ---- dataflows ----------------------------------------------------------------------
    def dataflow(self, build: Callable[[Scope], Any], name: Optional[str] = None,
                 minimum: Any = 0) -> Any:
        """Build a dataflow: ``build(scope)`` adds its operators; returns what it returns.

        ``minimum`` is the least timestamp of the dataflow's root scope (an int epoch by
        default; a tuple for multi-dimensional times)."""
        if self.step_lock is not None:
            with self.step_lock:    # the accounting checks read every worker's dataflows
                return self._build_dataflow(build, name, minimum)
        return self._build_dataflow(build, name, minimum)

    def _build_dataflow(self, build: Callable[[Scope], Any], name: Optional[str], minimum: Any) -> Any:
        index = self._dataflow_count
        self._dataflow_count += 1
        scope = Scope(self, name or f"Dataflow{index}", (index,), minimum)
        result = build(scope)
        subgraph = scope.subgraph.build(self)
        subgraph.get_internal_summary()
        subgraph.set_external_summary()
        self._dataflows[index] = subgraph
        return result

    def dataflows(self) -> list[int]:
        """Indices of the dataflows not yet complete."""
        return sorted(self._dataflows)

    def dataflow_subgraph(self, index: int) -> Any:
        return self._dataflows.get(index)

    # ---- stepping -----------------------------------------------------------------------
    def step(self) -> bool:
        """Do one round of work; True while some dataflow is incomplete."""
        self.steps += 1
        activations = self.activations
        paths = self._channel_paths
        for channel in self.allocator.events():
            path = paths.get(channel)
            if path is not None:
                activations.activate(path)
        dataflows = self._dataflows
        active = activations.take(())
        if active:
            active.sort()
            for index in active:
                subgraph = dataflows.get(index)
                if subgraph is not None and not subgraph.schedule():
                    del dataflows[index]
                    if self.config.check_progress:
                        verify_accounting.check_completed(self, subgraph)
        if self.config.check_progress and self.process_workers is not None:
            verify_accounting.check_quiescent(self.process_workers)
        return bool(dataflows)

    def step_or_park(self, timeout: Optional[float] = 0.01) -> bool:
        """``step``, then wait (up to ``timeout``) for messages if there is nothing to do."""
        if self._abort is not None and self._abort.is_set():
            raise WorkerAborted(f"worker {self.index}: another worker failed")
        if self.step_lock is not None:
            with self.step_lock:
                alive = self.step()
        else:
            alive = self.step()
        if alive and self.activations.is_idle():
            self.allocator.await_events(timeout)
        return alive

    def step_while(self, condition: Callable[[], bool]) -> None:
        """Step until ``condition()`` is false."""
        while condition():
            self.step_or_park()

    def run(self) -> None:
        """Step until every dataflow is complete."""
        while self.step_or_park():
            pass
