"""Rollbacks: the survivors of a crash agree where they start again (the membership's part).

``Membership`` (``timely.rescaling.membership``) inherits these: what happens between a
member's death and its survivors going on.

1. ``crashed``: a member died without leaving (a reset connection, or silent for the
   timeout). If fewer than a quorum of the cluster's life survive here (``quorum``:
   more than half, or half with the lowest), this process stops: it cannot tell a crash
   from a cut network, and the other side may go on. Otherwise every local worker is
   told (``RescaleMessage("crash")``) and drops its dataflows
   (``timely.rescaling.recovery``); joiners that had not finished joining are dropped.
2. ``suspended_locally`` / ``worker_finished``: once every local worker has dropped its
   dataflows (or finished them), the process tells the coordinator (the lowest live
   process) it is ready, naming the dead it knows of and the life it is in.
3. ``_ready_from`` / ``_rollback`` (on the coordinator): a survivor that names a death
   the coordinator has not seen makes it take that death as its own (it crashes too, so
   the survivor waiting for a rollback gets one); once every survivor is ready
   with the same knowledge, it decides, for every checkpointed dataflow, a new
   incarnation from the last complete checkpoint (``Registry.redecide``), and tells
   every survivor the round, the dead, the workers that go on and the decisions.
4. ``_apply_rollback`` (everyone): adopt it; expel whoever the coordinator left out;
   start the round's progress logs (Kafka mode); every local worker rebuilds its
   dataflows (``RescaleMessage("rollback")``).

A crash during a rollback starts another round; word from an earlier life is stale.
Costs: O(processes) messages per rollback, plus the coordinator's read of the stores.
"""
from __future__ import annotations

import logging
from typing import Iterable, Optional

from ..communication.codec import CONTROL
from ..communication.errors import ClusterError
from .hub_interface import MembershipHub
from .messages import RescaleMessage

log = logging.getLogger("timely.cluster")


def quorum(alive: set, life: set) -> bool:
    """Whether the processes ``alive`` may roll back and go on without the rest of
    ``life``: more than half of them, or half with the lowest (so two halves of a cut
    network never both go on).

    >>> quorum({0, 2}, {0, 1, 2}), quorum({1}, {0, 1}), quorum({0}, {0, 1}), quorum({1}, {0, 1, 2})
    (True, False, True, False)
    """
    return 2 * len(alive) > len(life) or (2 * len(alive) == len(life) and min(life) in alive)


def workers_of(processes: Iterable[int], per_process: int) -> list[int]:
    """The workers of ``processes``, in their order, ``per_process`` each.

    >>> workers_of([1, 2], 2)
    [2, 3, 4, 5]
    """
    return [w for p in processes for w in range(p * per_process, (p + 1) * per_process)]


class Rollbacks:
    """The rollback protocol, as part of ``Membership`` (whose state it uses: ``hub``,
    ``_lock``, ``_agreement``, ``agreed``, ``dead``, ``life``, ``round``, ``recovering``,
    ``_suspended``, ``_finished``, ``_finished_workers``, ``_ready``, ``applying_rollback``,
    ``workers_ready``, the leave's flags, and ``_post``)."""

    hub: MembershipHub

    @property
    def rollback_under_way(self) -> bool:
        """A crash is being recovered from, or its rollback is decided and not yet posted
        to our workers: a join admitted now would reach them before the rollback."""
        return self.recovering or self.applying_rollback

    def current_round(self) -> tuple[int, Optional[list]]:
        """The rollbacks so far and the workers they left (None: none yet)."""
        with self._lock:
            round_, workers = self.agreed.get("round", (0, None))
            return round_, None if workers is None else list(workers)

    # ---- crashes ------------------------------------------------------------------------
    def live(self) -> list[int]:
        """The processes of the cluster now, this one included, but joiners that have not
        finished joining and the dead."""
        hub = self.hub
        with self._lock:
            return sorted(({p for p, c in hub.connections.items() if not c.joining} | {hub.process})
                          - self.dead)

    def crashed(self, process: int, why: str) -> None:
        """Member ``process`` died without leaving (``why`` names it and how it was
        noticed). The survivors roll back to their last checkpoint and go on without it:
        every local worker drops its dataflows (a worker that cannot roll back stops the
        process with ``why``: fail-stop), then the coordinator agrees the restart with
        every survivor. A joiner that had not finished joining is dropped: it starts again."""
        hub = self.hub
        if not self.workers_ready.is_set():       # still starting: nothing to roll back
            hub.fail(ClusterError(why))
            return
        if hub.joining and self.bootstrapped < hub.workers:
            # A joiner mid-bootstrap (it has not said "joined" yet) cannot roll back: it
            # holds no checkpointed state, and its workers wait for grants, not for rescale
            # messages (CI saw one wait so past its test's minute). It stops, and is started
            # again to join the cluster's next life; the survivors drop it too.
            hub.fail(ClusterError(f"{why}; this process was still joining, so it stops: start it "
                                  f"again to join the cluster"))
            return
        with self._lock:
            if process in self.dead or hub.stopping:
                return
            self.dead.add(process)
            alive = self.life - self.dead
            if not quorum(alive, self.life):
                minority = (f"{why}; only processes {sorted(alive)} of {sorted(self.life)} are left "
                            f"here, too few to tell a crash from a partition of the network, so this "
                            f"process stops (the others may go on); restart it to join them again")
            else:
                minority = None
        if minority is not None:
            hub.fail(ClusterError(minority))
            return
        with self._lock:
            self.recovering = True
            self._suspended = 0
            joiners = [c for c in hub.connections.values() if c.joining]
            for conn in joiners:
                hub.forget(conn)
        log.error("process %d: %s; the survivors roll back to their last checkpoint and go on "
                  "without it", hub.process, why)
        for conn in joiners:
            log.warning("process %d: joining process %d is dropped by the crash: it must join again",
                        hub.process, conn.process)
            conn.close()
        first = process * hub.workers_per_process
        self._post(RescaleMessage("crash", process, first, first + hub.workers_per_process - 1, payload=why))

    def suspended_locally(self) -> None:
        """A local worker dropped its dataflows after a crash; once every one has, this
        process tells the coordinator it is ready to roll back."""
        hub = self.hub
        with self._lock:
            self._suspended += 1
            ready = self._suspended + self._finished >= hub.workers and self.recovering
            dead = sorted(self.dead)
        if ready:
            self._tell_ready(dead)

    def worker_finished(self, worker: int) -> None:
        """A local worker's dataflows are all complete: it takes no part in a rollback
        (said once per worker, however often its program calls ``run``)."""
        with self._lock:
            if worker in self._finished_workers:
                return
            self._finished_workers.add(worker)
            self._finished += 1
            ready = self.recovering and self._suspended + self._finished >= self.hub.workers
            dead = sorted(self.dead)
        if ready:
            self._tell_ready(dead)

    def _tell_ready(self, dead: list) -> None:
        hub = self.hub
        round_ = self.round
        coordinator = self.coordinator()
        if coordinator == hub.process:
            self._ready_from(hub.process, round_, dead)
        else:
            conn = hub.connections.get(coordinator)
            if conn is not None:
                conn.send_frame(CONTROL, -1, 0, 0, 0, ("recover-ready", hub.process, round_, dead))

    def _ready_from(self, process: int, round_: int, dead: list) -> None:
        """(On the coordinator.) ``process``, in the life after rollback ``round_``, dropped
        its dataflows knowing ``dead`` died; once every survivor is ready with the same
        knowledge, decide the rollback. Word from an earlier life is stale."""
        with self._lock:
            if round_ != self.round:
                return
            self._ready[process] = tuple(dead)       # kept if it comes before we noticed
            unknown = [p for p in dead if p not in self.dead and p != self.hub.process]
        for p in unknown:
            # A survivor saw a death we did not: a process that finished joining there
            # just as our rollback expelled it, or a link only it lost. It has dropped its
            # dataflows and waits for a rollback, so there must be one: take the death as
            # ours too (one view of who is left, for every survivor).
            self.crashed(p, f"process {p} died, as process {process} reports")
        with self._lock:
            if not self.recovering:
                return
            mine = tuple(sorted(self.dead))
            complete = all(self._ready.get(p) == mine for p in self.live())
        if complete:
            self._rollback(mine)

    def _rollback(self, dead: tuple) -> None:
        """(On the coordinator.) Where the survivors start again: for every checkpointed
        dataflow a new incarnation from its last complete checkpoint, the workers that
        remain, and a new round; every survivor hears it (``"rollback"``)."""
        hub = self.hub
        with self._lock:
            round_ = self.round + 1
            live = self.live()
        workers = workers_of(live, hub.workers_per_process)
        decisions = hub.checkpoints.redecide(workers)
        payload = (round_, list(dead), workers, decisions)
        log.info("process %d: rollback %d: processes %s go on, from %s", hub.process, round_, live,
                 {ns: d[1] for ns, d in decisions.items()})
        with self._lock:
            conns = list(hub.connections.values())
        for conn in conns:
            conn.send_frame(CONTROL, -1, 0, 0, 0, ("rollback",) + payload)
        self._apply_rollback(payload)

    def _apply_rollback(self, payload: tuple) -> None:
        """Every survivor: adopt the rollback; a leave under way is called off (it is
        asked again); then every local worker rebuilds its dataflows."""
        round_, dead, workers, decisions = payload
        hub = self.hub
        with self._agreement:
            self.round = round_
            self.dead |= set(dead)
            self.life = {w // hub.workers_per_process for w in workers}
            self.recovering = False
            # until the rollback is posted, a joiner is not admitted: its join would reach
            # our workers before the rollback, and their rebuild would drop it again
            self.applying_rollback = True
            # whoever the coordinator left out (a joiner it dropped, that finished joining
            # here) is expelled: every survivor goes on with the same processes
            outsiders = [c for p, c in hub.connections.items() if p not in self.life]
            for conn in outsiders:
                hub.forget(conn)
            self._ready = {}
            self.leaving.clear()
            if self.leave_started:
                self.leave_started = False
                self.leave_requested = True
                self.leave_applied = self.quiesced = 0
                self.quiesce_sent = False
            for key, value in hub.checkpoints.install(decisions).items():
                self.agreed[key] = value
            self.agreed["round"] = (round_, workers)
        for conn in outsiders:
            log.warning("process %d: process %d is not in the rollback's cluster: it is expelled "
                        "(it must join again)", hub.process, conn.process)
            conn.close()
        try:
            hub.restart_progress(round_, workers)
            self._post(RescaleMessage("rollback", -1, 0, 0, payload=(round_, workers)))
        finally:
            with self._lock:
                self.applying_rollback = False
