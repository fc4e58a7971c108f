"""Worker: one thread of a timely computation, building and stepping dataflows.

Every worker builds the same dataflows in the same order (so channels and operators
get the same identifiers everywhere) and then steps: it turns channel events into
operator activations and schedules the dataflows that have something to do. A step
costs O(events + the work of the operators it schedules); a worker with nothing to
do parks until a message arrives.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Optional

from broker import health as broker_health

from .checkpoint.context import DataflowCheckpoint
from .config import Config
from .dataflow.activations import Activations
from .dataflow.operators.input import close_left_open
from .dataflow.scope import Scope
from .progress.broadcast import Progcaster
from .progress.subgraph import subgraphs
from .rescaling import leave
from .rescaling.bootstrap import run_client, run_kafka_client, serve_control, serve_joins
from .rescaling.grants import retract
from .rescaling.leave import LeaveRefused
from .rescaling import recovery
from .rescaling.rollback import workers_of
from .stall import StallDetector


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
        #: the workers when the dataflows were built (a crash leaves holes): bins, source
        #: partitions and sink partitions are spread over them, in this order
        self.initial_workers: list[int] = list(range(allocator.peers))
        #: the workers Exchange routes to (``route(key, len)``): a joining process is
        #: included once it has finished joining (nothing is routed to a worker that may
        #: vanish), a leaving one is dropped as soon as its leave is applied
        self.routing_workers: list[int] = list(range(allocator.peers))
        #: the workers ``broadcast`` reaches: a leaving process still gets the stateful
        #: operators' commands until its bins are gone (timely.rescaling.leave)
        self.broadcast_workers: list[int] = list(range(allocator.peers))
        #: an Exchange(pinned=True) was built: keyed state pinned to the original workers
        self.pinned_routing = False
        #: this worker's process is leaving the cluster / has left it (timely.rescaling.leave)
        self.leaving = False
        self.quiesced = False               # leaving: no bin left here, broadcasts may stop
        self.left = False
        self.stop_needed: set = set()       # remote workers that must say they stopped routing here
        self.stopped_by: set = set()
        self._hub = allocator.hub if config.cluster else None
        #: who is in the cluster and the join/leave protocol (timely.rescaling.membership)
        self._membership = self._hub.membership if self._hub is not None else None
        self._leave_logged = 0.0
        #: a joining worker: it bootstraps its progress state, and its capabilities wait
        #: for its bootstrap worker's grant
        self.is_joiner: bool = config.join is not None
        #: a joiner's capabilities not yet adopted (timely.rescaling.grants)
        self.pending_capabilities: list = []
        if self._membership is not None:    # a joiner, or a cluster started without some
            found = self._membership.starting_workers(self.is_joiner, config.processes * config.workers,
                                                      allocator.peers)
            if found is not None:
                self.initial_workers, route = found
                self.initial_peers = len(self.initial_workers)
                self.routing_workers, self.broadcast_workers = list(route), list(route)
        self.activations = Activations()
        self.progcasters: dict[int, Any] = {}
        self._scope_of_channel: dict[int, Any] = {}
        self._rescales = getattr(allocator, "rescales", None)
        self._servers: dict[int, Any] = {}
        #: joining process -> (capabilities granted to each of its workers, how many workers)
        self._granted: dict[int, tuple] = {}
        self._to_serve: list = []           # joins this worker bootstraps, served at step end
        self._control = allocator.control_puller() if hasattr(allocator, "control_puller") else None
        self.bootstrap_seconds: Optional[float] = None
        self.bootstrap_pauses: list[float] = []
        self.log = logging.getLogger("timely.worker")
        self._abort = abort
        self._identifiers = 0
        if self._hub is not None:           # channels of the cluster's current round
            self._identifiers = self._hub.membership.current_round()[0] << recovery.ROUND_SHIFT
        self._channel_paths: dict[int, tuple] = {}
        self._dataflows: dict[int, Any] = {}
        self._dataflow_count = 0
        self.steps = 0
        self._check_progress = config.check_progress
        if config.check_progress:      # the checks (timely.verify) load only when asked for
            from .verify import accounting
            self._accounting = accounting
        self._state_log_every = config.state_log_every
        #: with check_progress: every worker of this process (set by execute)
        self.process_workers: Optional[list] = None
        #: the BinStates of every stateful (Megaphone) operator this worker built
        self.stateful_states: list = []
        #: the checkpointing of the dataflow being built (timely.checkpoint.context), and
        #: of every dataflow built, by index
        self.checkpoint_context: Optional[DataflowCheckpoint] = None
        self.checkpoint_contexts: dict[int, DataflowCheckpoint] = {}
        #: how each dataflow was built (index -> build, name, minimum), to build it again
        #: after a crash (timely.rescaling.recovery)
        self._builders: dict[int, tuple] = {}
        #: a member died: the dataflows are dropped until the survivors agree where to
        #: start again, then rebuilt (``rebuild_indices``)
        self.recovering = False
        self.rebuild_indices: list[int] = []
        #: with metrics on, what each dataflow measures (timely.metrics.instruments)
        self.instruments: dict[int, Any] = {}
        #: rollbacks after a crash this worker took part in, and the last one's seconds
        #: from dropping its dataflows to running them again
        self.rollbacks = 0
        self.recovery_seconds: Optional[float] = None
        self.suspended_at = 0.0
        #: this process's checkpoint stores, shared by its workers (timely.checkpoint.registry)
        self.checkpoints = allocator.hub.checkpoints
        #: called after each rescale event is applied (the rebalancers' activators)
        self.rescale_listeners: list[Callable[[], None]] = []
        self.step_lock: Optional[Any] = None
        #: says what holds a dataflow that stopped moving (timely.stall); None: off
        self.stall = StallDetector(self, config.stall_warn) if config.stall_warn else None

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

    def new_progcaster(self, path: tuple) -> Progcaster:
        """The progress channel of the scope at ``path``; arrivals activate the scope."""
        channel = self.new_identifier()
        self._channel_paths[channel] = path
        # the progress state a bootstrap server sends (Kafka mode uses snapshots instead)
        accumulate = self.config.rescaling and self.config.cluster and self.config.progress_mode == "p2p"
        progcaster = Progcaster(self.allocator, channel, accumulate=accumulate)
        progcaster.nested = len(path) > 1
        progcaster.trace = getattr(self.allocator.hub, "trace", None)
        self.progcasters[channel] = progcaster
        return progcaster

    def scope_of_channel(self, channel: int) -> Any:
        """The scope whose progress channel ``channel`` is (None: no such channel)."""
        return self._scope_of_channel.get(channel)

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

    def _build_dataflow(self, build: Callable[[Scope], Any], name: Optional[str], minimum: Any,
                        index: Optional[int] = None) -> Any:
        if index is None:
            index = self._dataflow_count
            self._dataflow_count += 1
        self._builders[index] = (build, name, minimum)
        scope = Scope(self, name or f"Dataflow{index}", (index,), minimum)
        ctx = self.checkpoint_context = DataflowCheckpoint(self, scope)
        try:
            result = build(scope)
            ctx.finish()     # decide, restore, add the commit if it has none
        finally:
            self.checkpoint_context = None
        self.checkpoint_contexts[index] = ctx
        subgraph = scope.subgraph.build(self)
        subgraph.get_internal_summary()
        subgraph.set_external_summary()
        self._dataflows[index] = subgraph
        for nested in subgraphs(subgraph):
            self._scope_of_channel[nested.progcaster.channel] = nested
        if self.config.metrics_port:
            from .metrics.instruments import instrument
            instrument(self, index, subgraph, minimum)
        return result

    def rebuild_dataflow(self, index: int) -> None:
        """Build dataflow ``index`` again, as it was first built (after a crash: its
        checkpoint context restores it; see timely.rescaling.recovery)."""
        build, name, minimum = self._builders[index]
        if self.step_lock is not None:
            with self.step_lock:
                self._build_dataflow(build, name, minimum, index)
        else:
            self._build_dataflow(build, name, minimum, index)

    def become_member(self, workers: list[int], identifier_base: int) -> None:
        """After a rollback: ``workers`` are the cluster, every one alike (a joiner that
        had finished joining is a member; a leave under way is called off), and new
        channels are numbered from ``identifier_base``."""
        self.initial_workers = list(workers)
        self.initial_peers = len(workers)
        self.routing_workers = list(workers)
        self.broadcast_workers = list(workers)
        self.is_joiner = False
        self.pending_capabilities = []
        self.leaving = self.quiesced = self.left = False
        self.stop_needed = set()
        self.stopped_by = set()
        self._identifiers = identifier_base

    def forget_grants(self) -> None:
        """Joins this worker was serving are void (a crash drops unfinished joiners)."""
        self._granted.clear()
        self._to_serve = []

    @property
    def channel_paths(self) -> dict[int, tuple]:
        """channel -> the path of the operator (or scope) its arrivals activate."""
        return self._channel_paths

    @property
    def bootstrap_servers(self) -> dict:
        """joining process -> the BootstrapServer this worker runs for it."""
        return self._servers

    @property
    def membership(self) -> Any:
        return self._membership

    def dataflows(self) -> list[int]:
        """Indices of the dataflows not yet complete."""
        return sorted(self._dataflows)

    def dataflow_subgraph(self, index: int) -> Any:
        return self._dataflows.get(index)

    def forget_dataflow(self, index: int) -> None:
        """Drop a dataflow and its progress channels (it completed everywhere)."""
        subgraph = self._dataflows.pop(index, None)
        if subgraph is not None:
            for nested in subgraphs(subgraph):
                self.progcasters.pop(nested.progcaster.channel, None)
                self._scope_of_channel.pop(nested.progcaster.channel, None)

    # ---- rescaling ----------------------------------------------------------------------
    def bootstrap(self) -> bool:
        """On a joining worker, run the bootstrap protocol and return True; a no-op that
        returns False on the workers of the original cluster. Call it after building
        every dataflow."""
        if not self.is_joiner:
            return False
        run = run_kafka_client if self.config.progress_mode == "kafka" else run_client
        self.bootstrap_seconds = run(self)
        self._membership.joined_locally(self)
        return True

    def _apply_rescale(self, message: Any) -> None:
        allocator = self.allocator
        if message.kind == "join":
            added = allocator.add_process(message.process)
            self.peers = allocator.peers
            for channel, progcaster in self.progcasters.items():
                progcaster.send_marker(added.get(channel, ()))
            if message.bootstrap == self.index:
                self._to_serve.append(message)     # at the end of this step (_serve_joins)
        elif message.kind == "joined":
            self.routing_workers = sorted(set(self.routing_workers) | set(range(message.first, message.last + 1)))
            self.broadcast_workers = sorted(set(self.broadcast_workers) | set(range(message.first, message.last + 1)))
            self._granted.pop(message.process, None)
        elif message.kind == "lost":
            allocator.remove_process(message.process)
            lost = self._granted.pop(message.process, None)
            if lost is not None:
                retract(self, *lost)
        elif message.kind == "leave":
            gone = range(message.first, message.last + 1)
            self.routing_workers = [w for w in self.routing_workers if w not in gone]
            hub = self._hub
            if message.process == hub.process:
                self.leaving = True
                self.stop_needed = set(workers_of([p for p in list(hub.connections) if p != hub.process],
                                                  hub.workers_per_process))
                self._membership.leave_applied_locally()
        elif message.kind == "quiesce":
            gone = range(message.first, message.last + 1)
            self.broadcast_workers = [w for w in self.broadcast_workers if w not in gone]
            if message.process != self._hub.process:
                # after everything this worker sent there, on the same FIFO connection
                allocator.control_send(message.process, message.first, message.last,
                                       ("stopped", self.index))
        elif message.kind == "crash":
            recovery.suspend(self, message)
        elif message.kind == "rollback":
            recovery.rebuild(self, message)
        elif message.kind == "left":
            allocator.remove_process(message.process)
            server = self._servers.pop(message.process, None)
            if server is not None:
                server.close()
        self.log.info("worker %d applied %r: peers %d, routing to %d", self.index, message,
                      self.peers, len(self.routing_workers))
        for listener in self.rescale_listeners:
            listener()

    @property
    def routing_peers(self) -> int:
        """How many workers Exchange routes to."""
        return len(self.routing_workers)

    def credit_exhausted(self, index: int) -> bool:
        """Whether a channel of dataflow ``index`` has used its credit toward a worker of
        another process (``timely.communication.credit``): its sources hold back until
        the receivers acknowledge what they consumed."""
        credit = getattr(self.allocator, "credit", None)
        if credit is None or not credit.over:
            return False
        paths = self._channel_paths

        def in_dataflow(channel: int) -> Optional[bool]:
            path = paths.get(channel)
            return None if path is None else path[0] == index
        return credit.exhausted(in_dataflow)

    def data_channels(self) -> list[int]:
        """The channels that carry records (not progress) to this worker."""
        return [ch for ch in self._channel_paths if ch not in self.progcasters]

    def leave(self) -> None:
        """Ask for this worker's process to leave the cluster, as SIGTERM does (see
        timely.rescaling.leave): it happens once no join or leave is under way; the
        program sees ``worker.leaving`` turn True, should close its inputs, and
        ``run``/``step_while`` return once the process has drained."""
        if self._membership is None:
            raise LeaveRefused("only a process of a cluster can leave it")
        self._membership.request_leave(f"worker {self.index} asked")

    def progress_state_size(self) -> dict[str, int]:
        """Instruments: accumulated progress-state entries and recorded batches."""
        return {"state_entries": sum(p.state_size() for p in self.progcasters.values()),
                "recorded_batches": sum(p.recorded() for p in self.progcasters.values())}

    # ---- stepping -----------------------------------------------------------------------
    def step(self) -> bool:
        """Do one round of work; True while some dataflow is incomplete. What it sent
        to other processes is written before it returns (``flush_sends``)."""
        try:
            return self._step()
        finally:
            self.allocator.flush_sends()

    def _step(self) -> bool:
        self.steps += 1
        if self._rescales is not None:
            for message in self._rescales():
                self._apply_rescale(message)
        activations = self.activations
        activations.advance()
        paths = self._channel_paths
        events = self.allocator.events()
        if events:
            for channel in set(events):
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
                    if self._check_progress:
                        self._accounting.check_completed(self, subgraph)
        if self._to_serve:
            messages, self._to_serve = self._to_serve, []
            self._granted.update(serve_joins(self, messages))
        if self._control is not None and (self._servers or len(self._control)):
            serve_control(self, self._control.drain())
        if self._membership is not None and (self._membership.leave_requested or self.leaving):
            leave.step(self)
            if self.left:
                return False
        if self._check_progress and self.process_workers is not None:
            self._accounting.check_quiescent(self.process_workers)
        stall = self.stall
        if stall is not None and time.monotonic() >= stall.due:
            stall.check()
        if broker_health.down:
            unreachable = broker_health.failure()      # down for longer than --broker-timeout
            if unreachable is not None:
                raise unreachable
        every = self._state_log_every
        if every and self.steps % every == 0:
            self.log.info("worker %d step %d: progress state %s", self.index, self.steps,
                          self.progress_state_size())
        return bool(dataflows) or self.recovering

    def step_or_park(self, timeout: Optional[float] = 0.01) -> bool:
        """Wait (up to ``timeout``) for messages if there is nothing to do, then ``step``.

        Parking first, as timely does, means a caller that steps until a condition holds
        stops as soon as the step that satisfied it returns."""
        if self._abort is not None and self._abort.is_set():
            # execute raises the cause: the failing worker's error, or the transport's
            raise WorkerAborted(f"worker {self.index}: stopping, the computation failed")
        activations = self.activations
        if activations.is_idle() and (self._dataflows or self.recovering):
            delayed = activations.empty_for()     # an operator asked to run again later
            if delayed is not None:
                timeout = delayed if timeout is None else min(timeout, delayed)
            self.allocator.await_events(timeout)
        if self.step_lock is not None:
            with self.step_lock:
                return self.step()
        return self.step()

    def step_while(self, condition: Callable[[], bool]) -> None:
        """Step until ``condition()`` is false."""
        while condition() and not self.left:
            self.step_or_park()

    def execute(self, build: Callable[["Worker"], Any]) -> Any:
        """The program on this worker: ``build(self)``, then close the inputs it left open
        (nothing can feed them now), then ``run``; returns what ``build`` returned."""
        result = build(self)
        close_left_open(self)
        self.run()
        return result

    def run(self) -> None:
        """Step until every dataflow is complete."""
        try:
            while self.step_or_park():
                pass
        finally:
            if self._membership is not None:
                self._membership.worker_finished(self.index)
