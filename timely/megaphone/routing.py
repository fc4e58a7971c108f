"""The F operator: routes records by the configuration in force at their time, and
ships the bins that a new configuration moves away from this worker.

One F runs on every worker in front of a stateful (S) operator. Its state is a list of
configurations ``[(time, table), ...]`` sorted by time: the first is *active* (installed),
the rest *pending* (compiled, not yet installed). Per scheduling it:

1. (a joined worker) installs the routing state a bootstrap server sent it over the
   feedback exchange; until then it routes nothing and compiles nothing;
2. reads control commands; all commands at time t are compiled into a configuration
   once the control frontier has passed t (no more can arrive), against the latest
   configuration before t. A ``Bootstrap`` whose server is this worker sends the
   routing state (every configuration up to t) to the new worker, at t;
3. installs the next pending configuration at time c once the S operator's output
   frontier (fed back to F) has no time before c: S has absorbed everything before c,
   so the bins moving away hold their final state, which F sends, with the bins'
   pending notifications, to their new owners at time c;
4. routes records at time t once the control frontier has passed t, by the latest
   configuration at or before t; earlier they wait, holding a capability at t.

Records leave F as one message per target worker, ``(worker, runs, records)``: the
records bin after bin, and the ``(bin, count)`` runs that say which are whose, packed
in bytes (``timely.megaphone.bins.group_by_target``). A batch costs one key hash per
record and a few C operations per bin touched, with the compiled twin (no object per
bin); installing a configuration costs O(bins) plus the size of the state shipped.
"""
from __future__ import annotations

import logging
import time as clock
from typing import Any, Callable, Optional

from ..dataflow.channels import Direct, Pipeline
from ..dataflow.stream import Stream
from ..dataflow.withdrawal import is_withdrawal
from ..progress.timestamp import identity_summary
from .bins import RoutingTable, group_by_target
from .control import ControlError, UnknownWorker, bootstraps, compile_configuration, releases

#: the fourth field of a message from F to S whose records are withdrawn
WITHDRAWN = True

log = logging.getLogger("timely.megaphone")


def first(record: tuple) -> int:
    """The target worker of a message between F and S: its first field."""
    return record[0]


class RouterState:
    """What one F knows: its configurations, what waits, and what it holds.

    >>> r = RouterState(RoutingTable.round_robin(4, 2).table, bootstrapped=True)
    >>> r.add_configuration(5, (1, 1, 0, 0)); r.table_at(4), r.table_at(5)
    ((0, 1, 0, 1), (1, 1, 0, 0))
    """

    __slots__ = ("configs", "bootstrapped", "raw", "stash", "stash_caps", "control_caps",
                 "config_caps", "boot_caps", "unknown_since", "released")

    def __init__(self, table: tuple, bootstrapped: bool, minimum: Any = 0) -> None:
        self.configs: list[tuple[Any, tuple]] = [(minimum, tuple(table))]
        self.bootstrapped = bootstrapped
        self.raw: dict[Any, list] = {}          # time -> commands not yet compiled
        self.stash: dict[Any, list] = {}        # time -> batches waiting for the control frontier
        self.stash_caps: dict[Any, Any] = {}    # time -> capability (data output)
        self.control_caps: dict[Any, Any] = {}  # time -> capability (state output), raw commands
        self.config_caps: dict[Any, Any] = {}   # time -> capability (state output), pending configs
        self.boot_caps: dict[Any, Any] = {}     # time -> capability (bootstrap output)
        self.unknown_since: Optional[float] = None
        #: leaving workers no later command names (``Release``), once compiled
        self.released: set[int] = set()

    def add_configuration(self, time: Any, table: tuple) -> None:
        self.configs.append((time, table))

    def table_at(self, time: Any) -> tuple:
        """The table in force at ``time``: the latest configuration at or before it."""
        configs = self.configs
        for i in range(len(configs) - 1, 0, -1):
            if configs[i][0] <= time:
                return configs[i][1]
        return configs[0][1]


def build_router(stream: Stream, control: Stream, feedback: Stream, key: Optional[Callable],
                 k: int, states: Any, ships_state: bool, name: str,
                 withdrawals: bool = False) -> tuple[Stream, Stream]:
    """Add an F operator; returns ``(data, state)`` streams for the S operator.

    ``control``: the commands, already broadcast to every worker; ``feedback``: S's
    output frontier, looped back; ``states``: the worker's BinStates, shared with S
    (F takes the bins it ships out of it); ``ships_state``: False for the second F of
    a binary operator (the first ships the bins, which hold both inputs' state);
    ``withdrawals``: S subtracts withdrawn records, so F routes a ``Withdrawal`` batch as
    any other and marks its messages ``(worker, runs, records, WITHDRAWN)``."""
    scope = stream.scope
    worker = scope.worker
    ident = identity_summary(scope.minimum)
    builder = scope.operator(f"{name} F")
    data_in = builder.new_input(stream, Pipeline(), connection=[[ident], [], []], withdrawals=withdrawals)
    control_in = builder.new_input(control, Pipeline(), connection=[[], [ident], [ident]])
    feedback_in = builder.new_input(feedback, Pipeline(), connection=[[], [], []])
    data_out, data_stream = builder.new_output()
    state_out, state_stream = builder.new_output()
    boot_out, boot_stream = builder.new_output()
    boot_in = builder.new_input(boot_stream, Direct(first), connection=[[], [ident], []])

    me = worker.index
    nbins = 1 << k
    router = RouterState(RoutingTable.round_robin(nbins, worker.initial_workers).table,
                         bootstrapped=not worker.is_joiner, minimum=scope.minimum)
    control_frontier = control_in.frontier
    feedback_frontier = feedback_in.frontier
    give_data = data_out.give_unchecked

    def route(time: Any, records: list, cap: Any) -> None:
        if is_withdrawal(records):
            messages = [m + (WITHDRAWN,) for m in group_by_target(list(records), key, k, router.table_at(time))]
        else:
            messages = group_by_target(records, key, k, router.table_at(time))
        if cap is None:
            give_data(time, messages)
        else:
            data_out.give_batch(cap, messages)

    def receive_routing_state() -> None:
        for icap, messages in boot_in:
            for _target, t_boot, configs in messages:
                if router.bootstrapped:
                    raise ControlError(f"{name}: worker {me} received routing state twice "
                                       f"(Bootstrap at {t_boot}); only a joined worker gets it, once")
                router.configs = [(t, tuple(table)) for t, table in configs]
                router.bootstrapped = True
                for t in [t for t in router.raw if t <= t_boot]:
                    # already part of the configurations received; a Release among them
                    # still counts (the configurations name every bin that could come)
                    router.released.update(releases(router.raw.pop(t)))
                for t in router.raw:
                    router.control_caps[t] = icap.delayed_for_output(t, 1)
                log.info("%s: worker %d received the routing state (%d configurations up to %s)",
                         name, me, len(router.configs), t_boot)

    def read_control() -> None:
        for icap, commands in control_in:
            t = icap.time
            router.raw.setdefault(t, []).extend(commands)
            if router.bootstrapped and t not in router.control_caps:
                router.control_caps[t] = icap.retain_for_output(1)
            if t not in router.boot_caps and any(b.server == me for b in bootstraps(commands)):
                router.boot_caps[t] = icap.retain_for_output(2)

    def compile_ready() -> None:
        for t in sorted(router.raw):
            if control_frontier.less_equal(t):
                return
            commands = router.raw[t]
            last = router.configs[-1][1]
            try:
                table = compile_configuration(last, commands, worker.peers)
            except UnknownWorker as e:
                # A worker this one has not heard of yet may be a joiner whose join
                # notice is still on its way here: wait for it, up to the timeout.
                now = clock.monotonic()
                router.unknown_since = router.unknown_since or now
                if now - router.unknown_since > worker.config.timeout:
                    raise ControlError(f"{name} at time {t}: {e}") from None
                worker.activations.activate(builder.path)
                return
            except ControlError as e:
                raise ControlError(f"{name} at time {t}: {e}") from None
            router.unknown_since = None
            del router.raw[t]
            cap = router.control_caps.pop(t, None)
            if table != last:
                router.add_configuration(t, table)
                router.config_caps[t] = cap
            elif cap is not None:
                cap.drop()
            router.released.update(releases(commands))
            for b in bootstraps(commands):
                if b.server == me:
                    state = [(ct, list(tab)) for ct, tab in router.configs]
                    boot_out.give_batch(router.boot_caps[t], [(b.new_worker, t, state)])
                    log.info("%s: worker %d sends the routing state to worker %d at %s",
                             name, me, b.new_worker, t)
            boot_cap = router.boot_caps.pop(t, None)
            if boot_cap is not None:
                boot_cap.drop()

    def install_ready() -> None:
        configs = router.configs
        while len(configs) > 1 and not feedback_frontier.less_than(configs[1][0]):
            c, new = configs[1]
            old = configs[0][1]
            cap = router.config_caps.pop(c, None)
            if ships_state:
                moving = [b for b in range(nbins) if old[b] == me and new[b] != me]
                if moving:
                    binlog = states.log
                    if binlog is not None:
                        binlog.cross(c)     # S has absorbed everything before c, nothing after
                        for b in moving:
                            binlog.leave(b)
                    shipped = [(new[b], b) + states.take(b).to_wire() for b in moving]
                    state_out.give_batch(cap, shipped)
                    keys = sum(len(s[2]) for s in shipped)
                    states.shipped.append((c, len(moving), keys))
                    log.info("%s: worker %d ships %d bins (%d keys) at %s", name, me, len(moving), keys, c)
            if cap is not None:
                cap.drop()
            configs.pop(0)

    def released_unbootstrapped() -> None:
        """A joined worker whose routing state never came (it leaves before its Bootstrap):
        a Release of it, with no Bootstrap of it before, means no bin can come here."""
        booted = False
        for t in sorted(router.raw):
            if control_frontier.less_equal(t):
                return
            commands = router.raw[t]
            booted = booted or any(b.new_worker == me for b in bootstraps(commands))
            if not booted:
                router.released.update(releases(commands))

    def read_data() -> None:
        ready = router.bootstrapped
        for icap, records in data_in:
            t = icap.time
            if ready and not control_frontier.less_equal(t):
                route(t, records, None)
            else:
                router.stash.setdefault(t, []).append(records)
                if t not in router.stash_caps:
                    router.stash_caps[t] = icap.retain_for_output(0)

    def release_stash() -> None:
        for t in sorted(router.stash):
            if control_frontier.less_equal(t):
                return
            cap = router.stash_caps.pop(t)
            for records in router.stash.pop(t):
                route(t, records, cap)
            cap.drop()

    def constructor(caps):
        for cap in caps:
            cap.drop()

        def logic():
            receive_routing_state()
            read_control()
            if router.bootstrapped:
                compile_ready()
                install_ready()
                if router.stash:
                    release_stash()
            elif router.raw:
                released_unbootstrapped()
            read_data()
            for _ in feedback_in.batches():
                pass
        return logic
    builder.build(constructor)
    states.routers.append(router)
    return data_stream, state_stream
