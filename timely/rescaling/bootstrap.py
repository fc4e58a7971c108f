"""The peer-to-peer bootstrap protocol (seed 003 §3.4.1).

A joining worker (the *client*) needs the progress state of every scope: what every
worker has said so far. The *server*, an existing worker chosen by ``--join B``:

1. when its worker applies the join, snapshots each Progcaster's state (accumulated
   updates + last sequence number applied per sender), sends it to the joining
   workers, and starts recording later batches per sender;
2. answers range requests ``(channel, sender, start, end)`` from its recordings; a range
   it has not received yet stays pending and is answered once its own worker has
   pulled those batches from the network in later steps (it never blocks);
3. stops recording when every joining worker said it is done.

The client, meanwhile, holds every progress batch that reaches it directly. Each
existing worker's first message on each new progress link is a marker carrying the
next sequence number it will send, so the client knows it will see every batch from
that number on. It requests the gaps between the state and the markers, installs the
state and the ranges, replays what it held (skipping batches the state covers), and
announces that it has joined. Messages are control frames over the cluster's TCP
connections; the bootstrap pause is the server's time to snapshot and send.

Fault injection for tests: ``TIMELY_FAULT_BOOTSTRAP_STALL=SECONDS`` makes a client
stall that long after it received the state, so a test can kill it mid-bootstrap.
"""
from __future__ import annotations

import logging
import os
import time
from typing import Any, Optional

from broker import fold

from ..communication.errors import ClusterError
from .grants import adopt, announce
from .rollback import workers_of

log = logging.getLogger("timely.rescaling")


class BootstrapError(RuntimeError):
    """The bootstrap protocol could not complete."""


class BootstrapServer:
    """The server side for one joining process, run inside a worker's steps."""

    def __init__(self, worker: Any, process: int, first: int, last: int,
                 granted: Optional[list] = None) -> None:
        self.worker = worker
        self.process = process
        self.first, self.last = first, last
        self.pending: list[tuple] = []
        self.waiting = set(range(first, last + 1))
        self.recorders: dict[int, dict] = {}
        started = time.perf_counter()
        state = []
        for channel, progcaster in sorted(worker.progcasters.items()):
            updates, last_seq = progcaster.state()
            state.append((channel, updates, last_seq))
            recorder: dict = {}
            progcaster.recorders.append(recorder)
            self.recorders[channel] = recorder
        worker.allocator.control_send(process, first, last,
                                      ("bs-state", worker.index, state, granted or []))
        self.pause = time.perf_counter() - started
        self.state_entries = sum(len(u) for _, u, _ in state)
        log.info("worker %d: bootstrap server for process %d: sent %d progress entries in %.2f ms",
                 worker.index, process, self.state_entries, self.pause * 1e3)

    def request(self, requester: int, channel: int, source: int, start: int, end: int) -> None:
        self.pending.append((requester, channel, source, start, end))

    def poll(self) -> None:
        """Answer every pending range request whose batches have all been received."""
        still = []
        for req in self.pending:
            requester, channel, source, start, end = req
            recorded = self.recorders.get(channel, {}).get(source, {})
            if all(seq in recorded for seq in range(start, end)):
                batches = [recorded[seq] for seq in range(start, end)]
                self.worker.allocator.control_send(self.process, requester, requester,
                                                   ("bs-range", channel, source, start, batches))
            else:
                still.append(req)
        self.pending = still

    def done(self, requester: int) -> bool:
        self.waiting.discard(requester)
        if not self.waiting:
            self.close()
            return True
        return False

    def close(self) -> None:
        for channel, recorder in self.recorders.items():
            progcaster = self.worker.progcasters.get(channel)
            if progcaster is not None and recorder in progcaster.recorders:
                progcaster.recorders.remove(recorder)
        self.recorders.clear()
        self.pending.clear()


def run_client(worker: Any) -> float:
    """Bootstrap a joining worker; returns the seconds it took."""
    started = time.perf_counter()
    allocator = worker.allocator
    hub = allocator.hub
    control = allocator.control_puller()
    progcasters = worker.progcasters
    for progcaster in progcasters.values():
        progcaster.hold = []
    # every member's workers (a process that came back after a crash may have members of
    # any index)
    existing = workers_of([p for p in sorted(hub.connections) if p != worker.config.process],
                          hub.workers_per_process)
    state = None
    granted: list = []
    ranges: dict[tuple, list] = {}
    requested: set = set()
    deadline = time.monotonic() + worker.config.timeout * 4

    def pull_progress() -> None:
        for progcaster in progcasters.values():
            for message in progcaster._puller.drain():
                source, seq, payload = message
                if seq == "bootstrap":
                    progcaster.markers[source] = payload
                else:
                    progcaster.hold.append(message)

    while True:
        if hub.abort.is_set():
            raise hub.error or BootstrapError("the cluster stopped during bootstrap")
        if time.monotonic() > deadline:
            raise BootstrapError(f"worker {worker.index}: bootstrap did not complete in time")
        allocator.events()
        pull_progress()
        for message in control.drain():
            kind = message[0]
            if kind == "bs-state":
                state = {channel: (updates, {int(k): v for k, v in last.items()})
                         for channel, updates, last in message[2]}
                granted = message[3]
                stall = float(os.environ.get("TIMELY_FAULT_BOOTSTRAP_STALL", "0") or 0)
                if stall:
                    log.warning("worker %d: bootstrap stalls %g s (TIMELY_FAULT_BOOTSTRAP_STALL)",
                                worker.index, stall)
                    time.sleep(stall)
            elif kind == "bs-range":
                _, channel, source, start, batches = message
                ranges[(channel, source, start)] = batches
        if state is not None:
            complete = True
            for channel, progcaster in progcasters.items():
                if channel not in state:
                    continue
                _, last_seq = state[channel]
                for source in existing:
                    if source not in progcaster.markers:
                        complete = False
                        continue
                    start = last_seq.get(source, -1) + 1
                    end = progcaster.markers[source]
                    if start < end:
                        key = (channel, source, start)
                        if key not in requested:
                            requested.add(key)
                            allocator.control_send(worker.config.join // hub.workers_per_process,
                                                   worker.config.join, worker.config.join,
                                                   ("bs-req", worker.index, channel, source, start, end))
                        if key not in ranges:
                            complete = False
            if complete:
                break
        allocator.await_events(0.01)

    for index in list(worker.dataflows()):
        subgraph = worker.dataflow_subgraph(index)
        for scope in _scopes(subgraph):
            if scope.progcaster.channel not in state:
                # finished everywhere before we joined: nothing of it is left to run here
                worker.forget_dataflow(index)
                break
    for channel, progcaster in progcasters.items():
        if channel not in state:
            progcaster.hold = None
            continue
        updates, last_seq = state[channel]
        scope = worker.scope_of_channel(channel)
        progcaster.install(updates, last_seq, scope.final_pointstamp)
        for (ch, source, start), batches in sorted(ranges.items()):
            if ch == channel:
                progcaster.apply([(source, start + i, b) for i, b in enumerate(batches)],
                                 scope.final_pointstamp)
        held, progcaster.hold = progcaster.hold, None
        progcaster.apply(held, scope.final_pointstamp)
        worker.activations.activate(scope.path)
    adopt(worker, granted)
    allocator.control_send(worker.config.join // hub.workers_per_process, worker.config.join,
                           worker.config.join, ("bs-done", worker.index))
    return time.perf_counter() - started


def _scopes(subgraph: Any):
    yield subgraph
    for child in subgraph.children:
        op = child.operator
        if op is not None and hasattr(op, "progcaster"):
            yield from _scopes(op)


def run_kafka_client(worker: Any) -> float:
    """Bootstrap a joining worker in Kafka progress mode: no server, just snapshots.

    The process's subscriber read each worker's latest snapshot when it subscribed and
    tails each log from the snapshot on; summing the snapshots per scope gives the
    progress state, and the tail (already queued) continues it."""
    started = time.perf_counter()
    stall = float(os.environ.get("TIMELY_FAULT_BOOTSTRAP_STALL", "0") or 0)
    if stall:
        log.warning("worker %d: bootstrap stalls %g s (TIMELY_FAULT_BOOTSTRAP_STALL)", worker.index, stall)
        time.sleep(stall)
    granted = _await_grants(worker)
    snapshots = worker.allocator.hub.kafka.snapshots
    states: dict[int, tuple[dict, dict]] = {}
    for source, snapshot in snapshots.items():
        if snapshot is None:
            continue
        _, _, _, channels = snapshot
        for channel, (last_seq, updates) in channels.items():
            acc, lasts = states.setdefault(int(channel), ({}, {}))
            fold([updates], acc)
            lasts[source] = last_seq
    for channel, progcaster in worker.progcasters.items():
        if channel in states:
            acc, lasts = states[channel]
            scope = worker.scope_of_channel(channel)
            progcaster.install(list(acc.items()), lasts, scope.final_pointstamp)
            worker.activations.activate(scope.path)
    adopt(worker, granted)
    return time.perf_counter() - started


def _await_grants(worker: Any) -> list:
    """Kafka mode: the bootstrap worker's grants (it announced them in its log first)."""
    allocator = worker.allocator
    hub = allocator.hub
    control = allocator.control_puller()
    deadline = time.monotonic() + worker.config.timeout * 4
    while True:
        for message in control.drain():
            if message[0] == "bs-grants":
                return message[2]
            log.warning("worker %d: unexpected control message while joining: %r",
                        worker.index, message[0])
        if hub.abort.is_set():
            raise hub.error or BootstrapError("the cluster stopped during bootstrap")
        if time.monotonic() > deadline:
            raise BootstrapError(f"worker {worker.index}: bootstrap worker {worker.config.join} "
                                 f"sent no capability grants in time")
        time.sleep(0.002)      # the worker's other events stay queued for its first step


# ---- the bootstrap worker's side, at the end of its step --------------------------------------
def serve_joins(worker: Any, messages: list) -> dict[int, tuple]:
    """On a bootstrap worker, at the end of the step that applied the joins ``messages``:
    grant and announce each joiner's capabilities, then give it the progress state (a
    ``BootstrapServer`` in peer-to-peer mode; the grants alone in Kafka mode, whose
    joiners read the logs). Returns ``{process: (granted, workers joining)}``.

    Not before the step's end: every progress batch that had arrived when the join was
    applied has been received and propagated by now (its channel activated its scope).
    A nested scope's records crossing its boundary are kept in the parent's state only
    once the nested scope has propagated them, so a state taken between its receive and
    its propagation would say "applied" of batches whose consumption it does not hold.
    Root scopes also take what arrived during the step: a process that left sent its
    last batches before its goodbye, and a joiner hears nothing more from it, so the
    state must hold them (timely.verify found that gap)."""
    for channel, progcaster in worker.progcasters.items():
        scope = worker.scope_of_channel(channel)
        if scope is not None and not progcaster.nested:
            progcaster.recv(scope.final_pointstamp)
            worker.activations.activate(scope.path)
    hub = worker.allocator.hub
    granted_to: dict[int, tuple] = {}
    for message in messages:
        if message.process not in hub.connections:
            continue        # dropped by a crash before it was served: it joins again later
        joining = message.last - message.first + 1
        granted = announce(worker, joining)
        granted_to[message.process] = (granted, joining)
        try:
            if worker.config.progress_mode == "p2p":
                server = BootstrapServer(worker, message.process, message.first, message.last, granted)
                worker.bootstrap_servers[message.process] = server
                worker.bootstrap_pauses.append(server.pause)
            else:
                worker.allocator.control_send(message.process, message.first, message.last,
                                              ("bs-grants", worker.index, granted))
        except ClusterError:
            if message.process in hub.connections:
                raise
            # dropped by a crash while it was being served: the rollback that follows
            # drops this dataflow and what was granted with it
    return granted_to


def serve_control(worker: Any, messages: list) -> None:
    """A worker's control messages of the bootstrap and leave protocols: a joiner's
    range requests and its end, another worker's "stopped routing here"; then every
    bootstrap server answers what it can."""
    servers = worker.bootstrap_servers
    wpp = worker.allocator.hub.workers_per_process
    for message in messages:
        kind = message[0]
        if kind == "bs-req":
            _, requester, channel, source, start, end = message
            server = servers.get(requester // wpp)
            if server is not None:
                server.request(requester, channel, source, start, end)
        elif kind == "stopped":
            worker.stopped_by.add(message[1])
        elif kind == "bs-done":
            process = message[1] // wpp
            server = servers.get(process)
            if server is not None and server.done(message[1]):
                del servers[process]
    for server in servers.values():
        server.poll()
