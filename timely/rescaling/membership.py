"""Who is in the cluster, and the protocol by which processes join and leave it.

A process's ``ClusterHub`` (``timely.communication.cluster.hub``) owns one
``Membership``, ``hub.membership``. The hub keeps the sockets and the connections; the
membership keeps who is in the cluster, and decides what each change means and who
must hear of it. It knows the hub only as a ``MembershipHub``
(``timely.rescaling.hub_interface``), so it does not depend on the hub's module. It
answers for:

- **Joins** (seed 003 §3). A connection whose hello says it joins is admitted by
  ``admit`` once this process's workers exist (``workers_ready``) and no leave is under
  way; the joiner's Kafka logs are subscribed, its bootstrap process sends it the
  members (``"members"``, which the joiner's ``connect_all`` waits for, into
  ``members``), and the join reaches every local worker before anything the joiner
  says. A joiner whose workers all bootstrapped says ``"joined"`` (``joined_locally``);
  the others count it in ``finished_joining``.
- **Leaves** (``timely.rescaling.leave`` gives the order of a leave and what each step
  waits for). ``request_leave`` (SIGTERM, ``worker.leave()``), ``refuse_leave``,
  ``try_start_leave`` (``"leave"``: the process joins ``leaving``),
  ``leave_applied_locally``, ``quiesced_locally`` (``"quiesce"``) and
  ``leave_finished`` (``"log-ends"``, in Kafka mode); when a leaving process says
  goodbye, it has left (``connection_closed``: it moves to ``departed``).
- **Losses** (``connection_lost``): a connection that broke without goodbye. A joiner
  lost before it finished joining is dropped (``"lost"``): no data was routed to it,
  so the cluster carries on, and its bootstrap worker takes back the capabilities it
  granted (``timely.rescaling.grants.retract``). The loss of a member is fail-stop:
  every worker of this process stops with a ``ClusterError`` naming it, never a wrong
  frontier, never a hang past the timeout. Handling a member that crashed, rather
  than stopping, belongs here.

Every change reaches this process's workers as a ``RescaleMessage``
(``timely.rescaling.messages``) in their ``rescales`` queues, applied at the start of
their next step (``Worker._apply_rescale``). The state here is read and written by the
connections' receive threads, the acceptor's admission threads, the worker threads
and the SIGTERM handler; what must change together with the connections is guarded by
the hub's lock, which the membership shares. Its log lines are the cluster's
(logger ``timely.cluster``).

Costs: a membership control frame is handled in O(1) plus one posting to each local
worker, O(workers per process); announcing a leave, a quiescence or a finished join
sends one control frame per connection, O(processes). Admitting a joiner waits at
most ``Config.timeout`` for this process's workers, then as long again for a leave
under way to finish.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Any, Callable, Optional

from ..communication.codec import CONTROL
from ..communication.errors import ClusterError, Terminated
from .hub_interface import MemberConnection, MembershipHub
from .messages import RescaleMessage
from .rollback import Rollbacks, workers_of

log = logging.getLogger("timely.cluster")


class Membership(Rollbacks):
    """Who is in the cluster, for one process, and its side of the join/leave protocol."""

    def __init__(self, hub: MembershipHub, lock: Any) -> None:
        self.hub = hub
        self._lock = lock                   # the hub's: connections and membership change together
        #: per local worker, the RescaleMessages it has not applied yet
        self.rescales = [deque() for _ in range(hub.workers)]
        self.finished_joining = set()
        self.bootstrapped = 0
        self._joined = threading.Event()
        #: this process's workers exist: their allocators know the members without a
        #: joiner, so a join may now reach them as a RescaleMessage (with its back-fill)
        self.workers_ready = threading.Event()
        # scale-in (timely.rescaling.leave)
        self.leave_requested = False
        self.leave_started = False
        self.leave_refused: Optional[str] = None
        self.leave_signalled = False        # the leave was asked by SIGTERM
        self.terminated: Optional[str] = None  # ... and could not happen: the process stopped
        self.leave_applied = 0              # local workers that applied our own leave
        self.quiesced = 0
        self.quiesce_sent = False
        self.leaving: set[int] = set()      # processes leaving (ours included)
        self.departed: set[int] = set()
        self._waiting_logged = ""
        self.members: Optional[set] = None  # a joiner: the processes its bootstrap process named
        #: starting without a missing minority (``start_without``): the processes that start
        self.present: Optional[set] = None
        #: values the cluster agreed on (``agree``), e.g. where checkpoints restart from
        self.agreed: dict[str, Any] = {}
        self._agreement = threading.Condition(lock)
        # crashes (see "Crashes" in the module docstring)
        self.dead: set[int] = set()         # members that died without leaving
        #: the processes of the cluster's current life (start, joins, leaves, rollbacks):
        #: a rollback needs more than half of them alive (``quorum``)
        self.life: set[int] = set()
        self.round = 0                      # rollbacks so far (the coordinator's count)
        self.recovering = False
        self.applying_rollback = False      # decided, not yet posted to our workers
        self._suspended = 0                 # local workers that dropped their dataflows
        self._finished = 0                  # local workers whose dataflows are all complete
        self._finished_workers: set[int] = set()
        self._ready: dict[int, tuple] = {}  # coordinator: process -> the dead it knows of

    def started(self) -> None:
        """This process's workers exist: the cluster's life is the processes connected now
        (a joiner: the members it was told of, and itself); joins may reach the workers."""
        hub = self.hub
        with self._lock:
            self.life = set(hub.connections) | {hub.process} | set(self.members or ())
            if hub.joining:
                _, workers = self.current_round()
                if workers is not None:
                    self.life = {w // hub.workers_per_process for w in workers} | {hub.process}
            life = sorted(self.life)
        self.workers_ready.set()
        log.info("process %d: running, in a cluster of processes %s", hub.process, life)

    def _post(self, message: RescaleMessage) -> None:
        hub = self.hub
        for local, pending in enumerate(self.rescales):
            pending.append(message)
            hub.events[local].append(CONTROL)
            hub.wakes[local].set()

    # ---- joining ------------------------------------------------------------------------
    def admit(self, process: int, processes: int, bootstrap: int,
              rejoin: bool = False) -> Optional[Callable[[MemberConnection], None]]:
        """Process ``process`` (authenticated; it knows of ``processes`` processes) joins,
        bootstrapped by worker ``bootstrap``; ``rejoin``: it was started as a member (it
        died and comes back) and learns from the members frame that it joins. Returns
        what the hub must do with its connection before the connection's threads start,
        or None if the join is refused (the hub then closes the socket)."""
        hub = self.hub
        if not self.workers_ready.wait(hub.timeout):
            log.warning("process %d refused the join of process %d: its workers did not start "
                        "within %g s", hub.process, process, hub.timeout)
            return None
        # a join waits for a leave or a rollback under way to finish (the joiner's connect
        # waits too)
        deadline = time.monotonic() + hub.timeout
        while (self.leaving or self.rollback_under_way) and time.monotonic() < deadline and not hub.stopping:
            time.sleep(0.02)
        if self.rollback_under_way:
            log.warning("process %d refused the join of process %d: a rollback is under way",
                        hub.process, process)
            return None
        if self.leaving:
            log.warning("process %d refused the join of process %d: processes %s are leaving",
                        hub.process, process, sorted(self.leaving))
            return None
        log.info("process %d: process %d is joining (%d processes)", hub.process, process, processes)
        first = process * hub.workers_per_process
        if hub.kafka is not None:
            hub.kafka.subscribe(range(first, first + hub.workers_per_process))
        # The join must reach our workers before anything the joiner says (its
        # "joined" arrives on this connection): post it before the threads start.
        with self._lock:
            members = sorted(set(hub.connections) | {hub.process})

        def admit(conn: MemberConnection) -> None:
            if bootstrap in range(hub.first_index, hub.first_index + hub.workers):
                with self._lock:
                    agreed = dict(self.agreed)
                conn.send_frame(CONTROL, -1, 0, 0, 0, ("members", members, agreed, bootstrap))
            self._post(RescaleMessage("join", process, first, first + hub.workers_per_process - 1,
                                      bootstrap=bootstrap))
        return admit

    def joined_locally(self, worker: Any) -> None:
        """A joining worker finished bootstrapping; once all have, tell every process.

        Every local worker waits here until "joined" is on the wire to every process, so
        no progress batch of this process precedes it: a joiner lost before that point
        has said nothing, and its bootstrap worker can take back the capabilities it
        granted (``timely.rescaling.grants.retract``) without counting anything twice."""
        hub = self.hub
        with self._lock:
            self.bootstrapped += 1
            everyone = self.bootstrapped == hub.workers
            conns = list(hub.connections.values())
        if everyone:
            log.info("process %d finished joining", hub.process)
            for conn in conns:
                conn.send_frame(CONTROL, -1, 0, 0, 0, ("joined", hub.process))
            for conn in conns:
                conn.flush(hub.timeout)
            self._joined.set()
            return
        while not self._joined.wait(0.05):
            if hub.abort.is_set():
                return

    # ---- agreeing -------------------------------------------------------------------------
    def coordinator(self) -> int:
        """The process that decides for the cluster: the lowest member (a joiner never)."""
        hub = self.hub
        with self._lock:
            live = set(hub.connections) - {p for p, c in hub.connections.items() if c.joining}
        if hub.joining and not self._joined.is_set():
            return min(live) if live else hub.process
        return min(live | {hub.process})

    def agree(self, key: str, decide: Callable[[], Any]) -> Any:
        """One value for ``key`` in the whole cluster: the coordinator calls ``decide()``
        and tells every process (a joiner hears of past ones with the members); the
        others wait for it, up to the timeout."""
        hub = self.hub
        with self._agreement:
            if key in self.agreed:
                return self.agreed[key]
        coordinator = self.coordinator()
        if coordinator == hub.process:
            value = decide()
            with self._agreement:
                self.agreed[key] = value
                conns = list(hub.connections.values())
                for conn in conns:
                    conn.send_frame(CONTROL, -1, 0, 0, 0, ("agreed", key, value))
                self._agreement.notify_all()
            return value
        deadline = time.monotonic() + hub.timeout
        with self._agreement:
            while key not in self.agreed:
                if hub.error is not None:
                    raise hub.error
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ClusterError(f"process {hub.process}: process {coordinator} did not say "
                                       f"where {key!r} starts within {hub.timeout:g} s")
                self._agreement.wait(min(left, 0.1))
            return self.agreed[key]

    def starting_workers(self, joiner: bool, hostfile: int, peers: int) -> Optional[tuple[list, list]]:
        """The workers this process's workers start with, if not every worker of the
        hostfile (``hostfile`` of them): ``(the workers the dataflows are built over,
        the workers they route and broadcast to)``. A joiner builds over the workers of
        the cluster's last rollback (if any) and routes to the processes its bootstrap
        process named, and itself (never to one that left or died); a cluster that
        started without some builds over, and routes to, the workers there."""
        hub = self.hub
        _, workers = self.current_round()
        if joiner:
            initial = list(range(hostfile)) if workers is None else list(workers)
            if self.members is None:
                return initial, list(range(peers))
            return initial, workers_of(sorted(self.members | {hub.process}), hub.workers_per_process)
        if self.present is not None:
            return list(workers), list(workers)
        return None

    def start_without(self, here: list[int]) -> None:
        """(While starting.) The processes ``here`` start the cluster without the missing
        ones: its first life's workers are theirs (as after a rollback), and a connection
        from anyone else is dropped (it joins once the cluster runs)."""
        hub = self.hub
        with self._agreement:
            self.present = set(here)
            self.agreed["round"] = (self.round, workers_of(sorted(here), hub.workers_per_process))
            outsiders = [c for p, c in hub.connections.items() if p not in self.present]
            for conn in outsiders:
                hub.forget(conn)
            self._agreement.notify_all()
        for conn in outsiders:
            conn.close()

    # ---- the membership's control frames -----------------------------------------------------
    def control(self, conn: MemberConnection, payload: Any) -> bool:
        """Handle a control frame of the join/leave protocol; False if ``payload`` is not one
        (the hub then hands it to this process's workers)."""
        hub = self.hub
        kind = payload[0]
        if kind == "leave":
            process = payload[1]
            log.info("process %d: process %d is leaving", hub.process, process)
            with self._lock:
                self.leaving.add(process)
            first_w = process * hub.workers_per_process
            self._post(RescaleMessage("leave", process, first_w, first_w + hub.workers_per_process - 1))
        elif kind == "quiesce":
            first_w = payload[1] * hub.workers_per_process
            self._post(RescaleMessage("quiesce", payload[1], first_w, first_w + hub.workers_per_process - 1))
        elif kind == "welcome":
            pass                            # a greeting read before the threads started
        elif kind == "start-without":
            log.warning("process %d: process %d starts the cluster with processes %s, without "
                        "the missing (they join it when they come)", hub.process, conn.process, payload[1])
            self.start_without(payload[1])
        elif kind == "members":
            with self._agreement:
                self.agreed.update(payload[2])
                self.round = self.agreed.get("round", (0, None))[0]
                self.members = set(payload[1])
                self._agreement.notify_all()
        elif kind == "agreed":
            with self._agreement:
                self.agreed[payload[1]] = payload[2]
                self._agreement.notify_all()
        elif kind == "log-ends":
            if hub.kafka is not None:
                first = conn.process * hub.workers_per_process
                hub.kafka.departed(range(first, first + hub.workers_per_process),
                                   {int(w): n for w, n in payload[1].items()})
        elif kind == "recover-ready":
            self._ready_from(payload[1], payload[2], payload[3])
        elif kind == "rollback":
            self._apply_rollback(tuple(payload[1:]))
        elif kind == "joined":
            conn.joining = False
            process = payload[1]
            self.finished_joining.add(process)
            with self._lock:
                self.dead.discard(process)      # a replacement of a process that died
                self.life.add(process)
            first_w = process * hub.workers_per_process
            self._post(RescaleMessage("joined", process, first_w, first_w + hub.workers_per_process - 1))
        else:
            return False
        return True

    # ---- the end of a connection ---------------------------------------------------------
    def connection_lost(self, conn: MemberConnection, why: str) -> None:
        """``conn`` broke without goodbye (the hub is not stopping): a joiner is dropped, a
        member's death is a crash (``crashed``). A connection already replaced (by a
        process that came back after a crash) says nothing of the process now."""
        hub = self.hub
        host, port = hub.config.address_of(conn.process)
        with self._lock:
            current = hub.connections.get(conn.process) is conn
            hub.forget(conn)
        conn.close()
        if not current:
            return
        if conn.joining:
            log.warning("process %d: joining process %d (%s:%d) was lost before it finished "
                        "joining: %s; carrying on without it", hub.process, conn.process, host, port, why)
            first = conn.process * hub.workers_per_process
            self._post(RescaleMessage("lost", conn.process, first, first + hub.workers_per_process - 1))
            return
        self.crashed(conn.process, f"process {conn.process} ({host}:{port}) {why}")

    def connection_closed(self, conn: MemberConnection) -> None:
        """``conn``'s peer said goodbye: a leaving process has left (it waits for our goodbye)."""
        hub = self.hub
        with self._lock:
            hub.forget(conn)
            departing = conn.process in self.leaving and conn.process != hub.process
            if departing:
                self.leaving.discard(conn.process)
                self.departed.add(conn.process)
                self.life.discard(conn.process)
        if departing and not hub.stopping:
            log.info("process %d: process %d has left the cluster", hub.process, conn.process)
            conn.goodbye()          # it waits for our goodbye before it exits
            first = conn.process * hub.workers_per_process
            self._post(RescaleMessage("left", conn.process, first, first + hub.workers_per_process - 1))
        elif not departing:
            # A peer whose dataflows are complete waits for our goodbye too (up to the
            # timeout), and our shutdown no longer sees this forgotten connection.
            conn.goodbye()

    # ---- leaving (timely.rescaling.leave) -------------------------------------------------
    def request_leave(self, why: str, signal: bool = False) -> None:
        """Ask for this process to leave the cluster (SIGTERM: ``signal``, or a worker's
        call)."""
        if not self.leave_requested:
            log.info("process %d: leave requested (%s)", self.hub.process, why)
        self.leave_requested = True
        self.leave_signalled = self.leave_signalled or signal
        for wake in self.hub.wakes:
            wake.set()

    def refuse_leave(self, why: str) -> None:
        """The leave cannot happen. Asked by a worker, it says why and carries on; asked by
        SIGTERM, the process stops at once (a SIGTERM is never ignored: an orchestrator
        waits for the exit), without goodbye, so the others roll back as after a crash."""
        hub = self.hub
        if self.leave_signalled:
            log.error("process %d cannot leave the cluster: %s; it stops (SIGTERM): the others "
                      "roll back to their last checkpoint", hub.process, why)
            self.terminated = why
            hub.kill()
            hub.fail(Terminated(f"process {hub.process} stopped on SIGTERM: it cannot leave the "
                                f"cluster ({why})"))
            return
        log.error("process %d cannot leave the cluster: %s; it carries on", hub.process, why)
        self.leave_refused = why
        self.leave_requested = False

    def try_start_leave(self) -> bool:
        """Start our leave unless a join or another leave is under way (then it waits)."""
        hub = self.hub
        with self._lock:
            joining = sorted(p for p, c in hub.connections.items() if c.joining)
            if hub.joining and not self._joined.is_set():
                joining.append(hub.process)
            others = sorted(self.leaving - {hub.process})
            if joining or others:
                why = (f"process {joining[0]} is joining" if joining else f"process {others[0]} is leaving")
                if why != self._waiting_logged:
                    self._waiting_logged = why
                    log.info("process %d: the leave waits: %s", hub.process, why)
                return False
            self.leave_started = True
            self.leaving.add(hub.process)
            conns = list(hub.connections.values())
        log.info("process %d leaves the cluster", hub.process)
        for conn in conns:
            conn.send_frame(CONTROL, -1, 0, 0, 0, ("leave", hub.process))
        first = hub.first_index
        self._post(RescaleMessage("leave", hub.process, first, first + hub.workers - 1))
        return True

    def leave_applied_locally(self) -> None:
        with self._lock:
            self.leave_applied += 1

    def quiesced_locally(self) -> None:
        """A leaving worker needs no more broadcasts; once all have, tell everyone."""
        hub = self.hub
        with self._lock:
            self.quiesced += 1
            everyone = self.quiesced == hub.workers and not self.quiesce_sent
            if everyone:
                self.quiesce_sent = True
            conns = list(hub.connections.values())
        if everyone:
            log.info("process %d holds no keyed state any more: broadcasts to it stop", hub.process)
            for conn in conns:
                conn.send_frame(CONTROL, -1, 0, 0, 0, ("quiesce", hub.process))
            first = hub.first_index
            self._post(RescaleMessage("quiesce", hub.process, first, first + hub.workers - 1))

    def leave_finished(self) -> None:
        """Every local worker drained: in Kafka mode, tell the others where our logs end
        (every record acknowledged first); the goodbyes follow in ``hub.shutdown``."""
        hub = self.hub
        if hub.kafka is not None:
            ends = hub.kafka.final_positions()
            with self._lock:
                conns = list(hub.connections.values())
            for conn in conns:
                conn.send_frame(CONTROL, -1, 0, 0, 0, ("log-ends", ends))
        log.info("process %d has drained and leaves", hub.process)
