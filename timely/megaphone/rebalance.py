"""The rebalancer: the cluster's own control stream for stateful operators.

When a stateful operator is built without a control stream, every worker adds a
Rebalancer operator whose output is that stream. One of them drives: it holds a
capability one epoch ahead of the data's frontier (the others drop theirs): F routes
records at t as soon as they arrive (the control frontier is past t), and a command
issued now, at t + 1, precedes every record routed at t + 1.

The driving worker is at first the first worker (worker 0, or the least that survives a
crash). When its process leaves, it hands the role over, as a record at its
capability's time that loops back one epoch later to the least worker still routed to
that it has bootstrapped (``successor``: not one that joined since, which has no routing
state to bootstrap others, or itself, from):
the record carries what the driver has issued and planned, and its receiver holds a
capability from it, so the control stream's frontier never passes a time at which no
worker could still issue a command. The receiver drives on from there (it moves the
leaving process's bins out), and any process, worker 0's included, can leave.

When a process starts to leave, the driver says so on the control stream first
(``Release``: no later command names its workers), so that the leaver's F knows every
configuration that could still send it a bin before it declares itself stateless.

The driving worker watches the cluster: once a process has joined (its workers are part of
``worker.routing_peers``) it issues ``Bootstrap(0, w)`` for each new worker ``w``, waits
for that step to complete (the stateful operator's output frontier, fed back, has
passed its time), then moves bins until every worker owns an equal share (within one
bin), by a strategy:

- ``all-at-once``: one ``Map`` with the final table (one step, all state moves at once);
- ``fluid``: one ``Move`` per step, each after the previous completed;
- ``batched``: per step, several moves, no worker in two moves of one step.

``Config.rebalance == "off"`` keeps the Bootstrap (a joiner cannot route without it)
but moves nothing. Planning costs O(bins); a step O(moves in it).

>>> plan_moves((0, 1, 0, 1, 0, 1, 0, 1), 3)
[(6, 2), (7, 2)]
>>> migration_steps([(6, 2), (7, 2), (0, 3)], "batched")
[[(6, 2), (0, 3)], [(7, 2)]]
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

from ..dataflow.capability import Capabilities
from ..dataflow.channels import Direct
from ..dataflow.stream import Stream
from .control import Bootstrap, Map, Move, Release

log = logging.getLogger("timely.megaphone")
STRATEGIES = ("all-at-once", "fluid", "batched")
#: the path summary from the data to the commands: one epoch later
NEXT_EPOCH = 1


def plan_moves(table: Sequence[int], workers: Any) -> list[tuple[int, int]]:
    """Moves ``(bin, worker)`` that leave each of ``workers`` (a count: workers
    0..n-1, or the workers themselves) with ``len(table) // n`` or one more bins,
    moving as few bins as possible (the workers that hold most keep the extra ones);
    bins of workers not among them (a process leaving) all move. Deterministic.

    >>> plan_moves((0, 1, 2, 0, 1, 2), [0, 2])
    [(1, 2), (4, 0)]
    """
    n = len(table)
    workers = list(range(workers)) if isinstance(workers, int) else sorted(workers)
    owned: dict[int, list[int]] = {w: [] for w in workers}
    orphans: list[int] = []
    for b, w in enumerate(table):
        (owned[w] if w in owned else orphans).append(b)
    base, extra = divmod(n, len(workers))
    by_load = sorted(workers, key=lambda w: (-len(owned[w]), w))
    quota = {w: base + (1 if i < extra else 0) for i, w in enumerate(by_load)}
    surplus = list(orphans)
    for w in workers:
        if len(owned[w]) > quota[w]:
            surplus.extend(owned[w][quota[w]:])
    surplus.sort()
    moves = []
    for w in workers:
        for _ in range(quota[w] - len(owned[w])):
            moves.append((surplus.pop(), w))
    return sorted(moves)


def migration_steps(moves: list[tuple[int, int]], strategy: str,
                    table: Sequence[int] = ()) -> list[list[tuple[int, int]]]:
    """Group moves into steps by ``strategy`` (for ``batched``, ``table`` gives each
    bin's current owner; without it only the receiving workers are kept apart)."""
    if strategy == "all-at-once":
        return [list(moves)] if moves else []
    if strategy == "fluid":
        return [[m] for m in moves]
    if strategy != "batched":
        raise ValueError(f"migration strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    steps: list[list[tuple[int, int]]] = []
    remaining = list(moves)
    owner = list(table)              # each bin's owner when the step being formed runs
    while remaining:
        busy: set = set()
        seen: set = set()            # bins with a move in this step or deferred from it:
        step, later = [], []         # a bin's later moves wait, so they keep their order
        for b, w in remaining:
            involved = {w, owner[b]} if owner else {w}
            if b in seen or busy & involved:
                later.append((b, w))
            else:
                busy |= involved
                step.append((b, w))
            seen.add(b)
        for b, w in step:
            if owner:
                owner[b] = w
        steps.append(step)
        remaining = later
    return steps


def successor(routing: Sequence[int], known: Sequence[int]) -> int:
    """The worker a leaving driver hands its role to: the least worker still routed to
    that the driver already knew (it started with it, or bootstrapped it). A worker that
    joined since has no routing state yet: as the driver, it would issue the Bootstrap of
    itself from itself, and wait for it for ever.

    >>> successor([1, 2], [0, 2])      # worker 1 just joined, worker 0 leaves
    2
    >>> successor([1, 2], [0])         # none known is left: the least routed to
    1
    """
    found = [w for w in routing if w in known]
    return min(found) if found else min(routing)


class _Driver:
    """The driving worker's side: what has been issued and what is left to issue. It
    travels whole (``state``/``restore``) when the driving worker's process leaves."""

    def __init__(self, table: tuple, workers: list) -> None:
        self.table = list(table)
        self.workers = list(workers)            # the workers routed to, as last seen
        self.steps: list[list[tuple[int, int]]] = []
        self.last_time: Any = None       # time of the last step issued
        self.issued_steps = 0
        self.released: set[int] = set()  # leaving workers it promised never to name again

    def state(self) -> list:
        return [self.table, self.workers, self.steps, self.last_time, self.issued_steps,
                sorted(self.released)]

    @classmethod
    def restore(cls, state: list) -> "_Driver":
        table, workers, steps, last_time, issued, released = state
        driver = cls(tuple(table), workers)
        driver.steps = [[tuple(m) for m in step] for step in steps]
        driver.last_time, driver.issued_steps = last_time, issued
        driver.released = set(released)
        return driver


def rebalancer(streams: list[Stream], feedback: Stream, bins: int, name: str) -> Stream:
    """The cluster's control stream for the stateful operator ``name`` (see module)."""
    from .bins import RoutingTable
    scope = streams[0].scope
    worker = scope.worker
    config = worker.config
    strategy = getattr(config, "migration", "batched")
    enabled = getattr(config, "rebalance", "auto") != "off"
    builder = scope.operator(f"{name} Rebalancer")
    # Commands are issued at least one epoch after the data's frontier (see logic), and
    # the connection says so: with an identity summary, records at t still in flight to
    # any worker's rebalancer would hold the control stream at t, and F could not route
    # t until every worker's progress for t had crossed the cluster (a round trip more
    # per epoch). The scope's timestamps are ints (``_check_total_order``).
    # (it reads the data's frontier only, so records withdrawn later do not matter to it)
    data_ins = [builder.new_input(s, connection=[[NEXT_EPOCH], [NEXT_EPOCH]], withdrawals=True)
                for s in streams]
    feedback_in = builder.new_input(feedback, connection=[[], []])
    # the driver's role, handed over by a record one epoch later (module docstring)
    loop, handed = scope.feedback(NEXT_EPOCH)
    hand_in = builder.new_input(handed, Direct(lambda h: h[0]))
    out, commands = builder.new_output()
    hand_out, handovers = builder.new_output()
    handovers.connect_loop(loop)
    activate = worker.activations.activate
    path = builder.path
    worker.rescale_listeners.append(lambda: activate(path))
    first = worker.index == worker.initial_workers[0] and not worker.is_joiner
    box = {"driver": _Driver(RoutingTable.round_robin(bins, worker.initial_workers).table,
                             worker.initial_workers) if first else None}

    def completed() -> bool:
        driver = box["driver"]
        return driver.last_time is None or not feedback_in.frontier.less_equal(driver.last_time)

    def issue(cap: Any) -> None:
        driver = box["driver"]
        t = cap.time
        live = worker.routing_workers
        leaving = [w for w in worker.broadcast_workers if w not in live and w not in driver.released]
        if leaving:
            # No command from now on names them (a plan that did is replaced below
            # before any step of it goes out): their F may count on it (timely.rescaling.leave)
            out.give_batch(cap, [Release(w) for w in leaving])
            driver.released.update(leaving)
            log.info("%s rebalancer: workers %s leave; released at %s", name, leaving, t)
        if live != driver.workers and completed():
            new = [w for w in live if w not in driver.workers]
            gone = [w for w in driver.workers if w not in live]
            driver.workers = list(live)
            if new:
                out.give_batch(cap, [Bootstrap(worker.index, w) for w in new])
                driver.last_time = t
                log.info("%s rebalancer: workers %s joined; Bootstrap from worker %d at %s",
                         name, new, worker.index, t)
            if gone:
                log.info("%s rebalancer: workers %s leave; their bins move out", name, gone)
            # a leave moves bins out even with rebalancing off: nothing may stay behind
            moves = plan_moves(driver.table, driver.workers) if enabled or gone else []
            driver.steps = migration_steps(moves, strategy, driver.table)
            if moves:
                log.info("%s rebalancer: %d bins to move (%s, %d steps)", name, len(moves),
                         strategy, len(driver.steps))
            if new:
                return
        if driver.steps and completed() and (driver.last_time is None or t > driver.last_time):
            step = driver.steps.pop(0)
            for b, w in step:
                driver.table[b] = w
            if strategy == "all-at-once":
                batch = [Map(driver.table)]
            else:
                batch = [Move(b, w) for b, w in step]
            out.give_batch(cap, batch)
            driver.last_time = t
            driver.issued_steps += 1
            log.info("%s rebalancer: step %d at %s moves %d bins%s", name, driver.issued_steps, t,
                     len(step), "" if driver.steps else "; balanced")

    def constructor(caps):
        # Frontiers are global: the driver's capability alone holds the control stream
        # back; the others give theirs up (no progress traffic per epoch from them).
        held = {"cap": Capabilities(caps)}
        if box["driver"] is None:
            held["cap"].drop()
            held["cap"] = None

        def hand_over(cap: Any) -> None:
            target = successor(worker.routing_workers, box["driver"].workers)
            hand_out.give_batch(cap, [(target, box["driver"].state())])
            log.info("%s rebalancer: worker %d leaves; worker %d drives from %s on", name,
                     worker.index, target, cap.time + NEXT_EPOCH)
            box["driver"] = None
            cap.drop()
            held["cap"] = None

        def logic():
            for port in data_ins:
                for _ in port.batches():
                    pass
            for _ in feedback_in.batches():
                pass
            for got, handed_over in hand_in:
                for _, state in handed_over:
                    box["driver"] = _Driver.restore(state)
                    held["cap"] = Capabilities([got.retain_for_output(0), got.retain_for_output(1)])
                    log.info("%s rebalancer: worker %d drives from %s on", name, worker.index, got.time)
            cap = held["cap"]
            if cap is None:
                return
            # One epoch ahead of the data: F may route records at t as they arrive
            # (the control frontier is past t), and commands issued at t + 1 still
            # precede every record routed at t + 1.
            least = [t for port in data_ins for t in port.frontier.frontier()]
            if not least:
                cap.drop()
                held["cap"] = None
                return
            if min(least) + 1 > cap.time:
                cap.downgrade(min(least) + 1)
            if worker.leaving:
                hand_over(cap)
            else:
                issue(cap)
        return logic
    builder.build(constructor)
    return commands
