"""Scale-in: a process leaves a running cluster while the others carry on.

Orchestrators scale down with SIGTERM; a program can ask with ``worker.leave()``. The
leave of process P goes in this order:

1. **Start.** P's membership (``timely.rescaling.membership``) waits while a process
   is joining (or another is leaving), then tells every process ``("leave", P)``; each
   posts it to its workers. A leave that cannot be done is refused with a message
   saying why (rescaling off, the last process, keyed routing pinned to the workers P
   hosts). P's Kafka source partitions go to the remaining workers (``timely.connectors.kafka``), so it stops
   holding a capability for them.
2. **Routing stops.** Each worker applying the leave drops P's workers from
   ``worker.routing_workers`` (``Exchange`` stops sending to them). Keyed state (Megaphone) is routed by the
   configuration in force at each time: the rebalancer (``timely.megaphone.rebalance``)
   moves P's bins to the remaining workers at a time T, after which no configuration
   names P, and F installs T only once S has absorbed everything before T — so when P
   holds no bin and no configuration names it, nothing can be routed to P any more.
3. **Quiesce.** Once no bin and no configuration names P (``stateless``; the
   stateful operators' commands reach P by ``broadcast`` until then), P says
   ``("quiesce", P)``: every worker drops P from ``worker.broadcast_workers`` and then
   sends P a ``("stopped", w)`` control frame, which follows, on the same FIFO
   connection, everything w ever sent P.
4. **Drain.** P's workers keep stepping: they process everything routed to them, and
   their operators release their capabilities as the frontier moves (a program
   feeding an input checks ``worker.leaving`` and closes it).
5. **Done** (``drained``): every remote worker said stopped, P's own operators hold no
   capability in any scope (``Subgraph.held``), and nothing is queued for P. Its progress
   contributions are then zero: every statement it made has been sent, and what it
   still counts is nothing. P's workers stop; the process says goodbye on every
   connection after its queues are flushed, and in Kafka mode closes its log. The
   others, on the goodbye, forget P's pushers (``"left"``) and stop tailing its log
   once they have read all of it.

A process that dies instead (SIGKILL) is still a failure: fail-stop, with its name.

Costs: the leave check runs once per step of a leaving worker, O(scopes + channels).
"""
from __future__ import annotations

import logging
import time
from typing import Any, Optional

from ..progress.subgraph import subgraphs

log = logging.getLogger("timely.rescaling")


class LeaveRefused(RuntimeError):
    """This process cannot leave the cluster (the message says why)."""


def refusal(worker: Any) -> Optional[str]:
    """Why the process of ``worker`` cannot leave, or None if it can."""
    hub = worker.allocator.hub
    config = worker.config
    mine = range(hub.first_index, hub.first_index + hub.workers)
    if not config.rescaling:
        return "rescaling is switched off (--no-rescaling)"
    if not any(p not in hub.membership.leaving for p in hub.connections):
        return "it is the last process of the cluster"
    if worker.pinned_routing and set(mine) & set(worker.initial_workers):
        return ("a dataflow routes keyed records pinned to the workers it was built on "
                "(Exchange(pinned=True)), and this process hosts some of them: their state "
                "cannot move; use the stateful operators (timely.megaphone) instead")
    return None


def step(worker: Any) -> None:
    """A worker's part in its process's leave, once per step while one is asked for or
    under way: start it (or refuse it, saying why), quiesce, and finish once drained."""
    membership = worker.membership
    if membership.leave_requested and not membership.leave_started and worker.allocator.local == 0:
        why = refusal(worker)
        if why is not None:
            membership.refuse_leave(why)
        else:
            membership.try_start_leave()
    if worker.leaving and not worker.quiesced and stateless(worker):
        worker.quiesced = True
        membership.quiesced_locally()
    if worker.leaving and not worker.left:
        if drained(worker):
            worker.left = True
            log.info("worker %d has drained: it leaves the cluster", worker.index)
        elif time.monotonic() - worker._leave_logged > 2.0:
            worker._leave_logged = time.monotonic()
            log.info("worker %d is leaving; waiting for %s", worker.index, describe_wait(worker))


def stateless(worker: Any) -> bool:
    """A leaving worker holds no bin and no configuration names its process, and the
    rebalancers have released it (no later command names it): it needs no more commands
    of the stateful operators (step 3 ends)."""
    hub = worker.allocator.hub
    if hub.membership.leave_applied < hub.workers:
        return False
    mine = set(range(hub.first_index, hub.first_index + hub.workers))
    for states in worker.stateful_states:
        if states.bins:
            return False
        for router in states.routers:
            # a rebalancer's command in flight could still send a bin here: only once
            # its Release is compiled are all such configurations known
            if states.rebalanced and not mine <= router.released:
                return False
            if any(w in mine for _, table in router.configs for w in table):
                return False
    return True


def drained(worker: Any) -> bool:
    """Whether this worker of a leaving process has finished (module docstring, step 4)."""
    hub = worker.allocator.hub
    if not hub.membership.quiesce_sent:
        return False
    if not worker.stopped_by >= worker.stop_needed:
        return False
    if not worker.activations.is_idle() or worker.allocator.has_events():
        return False
    for index in worker.dataflows():
        for scope in subgraphs(worker.dataflow_subgraph(index)):
            if not scope.held.is_empty():
                return False
    local = worker.allocator.local
    for channel in worker.data_channels():
        if hub.queues(channel)[local]:
            return False
    return True


def describe_wait(worker: Any) -> str:
    """What a leaving worker is still waiting for (for its periodic log line)."""
    hub = worker.allocator.hub
    parts = []
    missing = worker.stop_needed - worker.stopped_by
    if missing:
        parts.append(f"stopped from workers {sorted(missing)}")
    held = []
    for index in worker.dataflows():
        for scope in subgraphs(worker.dataflow_subgraph(index)):
            held.extend((scope.name, getattr(scope.children[loc.node], "name", loc.node), loc.node, t)
                        for (loc, t), c in scope.held if c)
    if held:
        parts.append(f"capabilities it holds {held[:5]}")
    bins = sum(len(s.bins) for s in worker.stateful_states)
    if bins:
        parts.append(f"{bins} bins to move out")
    mine = set(range(hub.first_index, hub.first_index + hub.workers))
    unreleased = sorted({s.name for s in worker.stateful_states if s.rebalanced
                         for r in s.routers if not mine <= r.released})
    if unreleased:
        parts.append(f"the release by the rebalancers of {unreleased}")
    if hub.membership.leave_applied < hub.workers:
        parts.append("its other workers")
    return ", ".join(parts) or "its queues to empty"
