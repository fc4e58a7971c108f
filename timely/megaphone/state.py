"""The S operator: per-bin state, records applied in time order; and the user API
(``state_machine``, ``stateful_unary``, ``stateful_binary``) that puts F in front of it.

Each worker holds the bins its routing table gives it (``BinStates``,
``timely.megaphone.bin_states``), shared with the
F operators of the same worker, which take a bin out when they ship it. S receives
F's messages (records bin after bin, with the runs that name their bins; those marked
withdrawn take records of their time back, ``timely.dataflow.withdrawal``) and the bins
shipped to it; records at time t are applied once
every input frontier has passed t (so any bin arriving at t is in place first), bin by
bin, in time order. A bin carries its state (a dict, key -> value) and its pending
notifications (records its logic scheduled for later times), which travel with it.

Costs: receiving a message from F O(1) (a withdrawal: O(records of its time in the
bins it touches) once, when the time is applied), and checking that its bins are here
(``split_held``) O(bins in it), in C; applying one record is one call of the user's
function (``state_machine``: the loop around it, over runs of bins and records, in C
with the compiled twin of ``fold_bins`` / ``apply_fold``: ``timely.megaphone.apply``);
a notification O(1) to schedule. With ``combine``, ``stateful_unary`` also calls it once
per bin of each message as the message arrives (and once per bin again at a time with
withdrawals).

>>> import timely
>>> def count(key, value, state):
...     total = (state or 0) + value
...     return total, [(key, total)]
>>> def build(worker):
...     def dataflow(scope):
...         source, stream = scope.new_input()
...         return source, stream.state_machine(count).capture()
...     source, captured = worker.dataflow(dataflow)
...     for epoch, words in enumerate([["a", "b", "a"], ["a"]]):
...         source.send_batch([(w, 1) for w in words])
...         source.advance_to(epoch + 1)
...     source.close()
...     worker.run()
...     return sorted(captured.by_time().items())
>>> timely.execute(1, build)
[[(0, [('a', 1), ('a', 2), ('b', 1)]), (1, [('a', 3)])]]
"""
from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from ..checkpoint.binlog import DURABLE_POLL, END
from ..dataflow.channels import Direct, Pipeline
from ..dataflow.stream import Stream
from ..progress.timestamp import identity_summary
from .apply import (bin_slices, _combine_into, _combine_message, _missing_bin, fold_bins, split_held,
                    subtract_entries)
from .bin_states import Bin, BinStates, StatefulError
from .bins import DEFAULT_BINS, RoutingTable, bin_shift
from .routing import build_router, first

# S's hot path lived here: its names stay importable from this module
from .apply import apply_fold, py_apply_fold, py_fold_bins, py_split_held  # noqa: F401

log = logging.getLogger("timely.megaphone")


class Notificator:
    """Schedules records for a later time on the bin being processed; they travel with
    the bin if it moves, and come back to the logic at that time."""

    __slots__ = ("_schedule", "time")

    def __init__(self, schedule: Callable[[Any, Any, int], None], time: Any) -> None:
        self._schedule = schedule
        self.time = time

    def notify_at(self, time: Any, record: Any = None, input: int = 0) -> None:
        """Deliver ``record`` to the logic of this bin at ``time`` (after the current
        time), among the records of input ``input``."""
        if not time > self.time:
            raise ValueError(f"notify_at({time!r}) while processing time {self.time!r}: "
                             f"notifications must be for a later time")
        self._schedule(time, record, input)



def _check_total_order(scope: Any, what: str) -> None:
    if type(scope.minimum) is not int:
        raise TypeError(f"{what} needs totally ordered timestamps (int epochs), but scope "
                        f"{scope.name!r} has timestamps like {scope.minimum!r} (partially "
                        f"ordered); use it in a scope with int timestamps")


def _control_stream(streams: list[Stream], control: Optional[Stream], feedback: Stream, bins: int,
                    name: str) -> Stream:
    if control is None:
        from .rebalance import rebalancer
        control = rebalancer(streams, feedback, bins, name)
    elif control.scope is not streams[0].scope:
        raise ValueError(f"{name}: the control stream is in scope {control.scope.name!r}, the "
                         f"data in {streams[0].scope.name!r}")
    return control.broadcast()


def _stateful(streams: list[Stream], keys: list[Optional[Callable]], control: Optional[Stream],
              name: str, bins: int, make_apply: Callable, eager: bool = False,
              tracked: bool = True, combine: Optional[Callable] = None,
              advanced: Optional[Callable[[Any], None]] = None, checkpointed: bool = True) -> Stream:
    """F per input, one S, the feedback from S to the Fs; ``make_apply(states, give,
    schedule)`` returns ``apply(time, cap, entries, bins_due, combined)`` (``entries``: a
    list of ``(input, runs, records)``; ``combined``: see ``combine``). ``eager``: apply
    records at the frontier's time as they arrive (no notifications: ``state_machine``)
    instead of once the time is complete. ``combine(acc, records) -> acc``: each bin's
    records at a time are also folded into an accumulator as they arrive (acc None at
    first), handed to ``apply`` as ``combined`` ({bin: acc}); None when the time had
    withdrawals, whose records ``apply`` combines again from what is left.
    ``tracked``: the logic mutates the bins' dicts itself, so checkpoints learn the keys
    it changed from them (``TrackedDict``); otherwise ``apply`` names them (``touch``).
    ``advanced(least)``: after each run, the least time the inputs may still bring
    (None once exhausted): every time before it is applied here. ``checkpointed``:
    False keeps the bins out of checkpoints (state the world outside holds anyway).

    S checkpoints its bins (``timely.checkpoint.BinLog``, when the dataflow's
    checkpoints are on) each time it crosses a boundary, and holds a second output's
    capability where they are durable: the dataflow's commit operator waits on it."""
    scope = streams[0].scope
    _check_total_order(scope, name)
    for s in streams[1:]:
        if s.scope is not scope:
            raise ValueError(f"{name}: inputs in different scopes")
    k = bin_shift(bins)
    worker = scope.worker
    table = RoutingTable.round_robin(bins, worker.initial_workers)
    states = BinStates(name, worker.index, [] if worker.is_joiner else table.bins_of(worker.index))
    states.dataflow = scope.path[0]
    states.rebalanced = control is None     # the cluster's rebalancer releases leavers
    handle, feedback = scope.feedback(identity_summary(scope.minimum))
    control_b = _control_stream(streams, control, feedback, bins, name)
    routed = [build_router(s, control_b, feedback, key, k, states, i == 0, name, withdrawals=not eager)
              for i, (s, key) in enumerate(zip(streams, keys))]

    builder = scope.operator(name)
    data_ins = [builder.new_input(data, Direct(first)) for data, _ in routed]
    state_in = builder.new_input(routed[0][1], Direct(first))
    out, result = builder.new_output()
    _ack_out, acks = builder.new_output()      # held where this worker's checkpoints are durable
    frontiers = [p.frontier for p in data_ins] + [state_in.frontier]
    stash: dict[Any, list] = {}
    withdrawn: dict[Any, list] = {}     # time -> F's messages withdrawing records (same shape)
    combined: dict[Any, dict] = {}      # time -> {bin: accumulator}, with ``combine``
    # Combined records are kept only to be combined again after a withdrawal.
    keep = combine is None or any(s.withdraws for s in streams)
    caps: dict[Any, Any] = {}
    notify_index: dict[Any, set] = {}
    activate_after = worker.activations.activate_after
    path = builder.path
    shipped_seen = [0]      # len(states.shipped) when S last looked

    def release_moved() -> None:
        """Drop the capabilities held only for notifications of bins F has shipped away
        (their new owners hold their own, from the bins' message): a worker that moved
        its bins out, a leaver above all, holds nothing for times it has no work at."""
        held_bins = states.bins
        for t in [t for t, bins_at in notify_index.items() if not any(b in held_bins for b in bins_at)]:
            if t in stash or t in withdrawn or t in combined:
                continue
            del notify_index[t]
            cap = caps.pop(t, None)
            if cap is not None:
                cap.drop()

    def schedule(b: int, cap: Any) -> Callable[[Any, Any, int], None]:
        def at(time: Any, record: Any, input: int) -> None:
            states.bins[b].pending.setdefault(time, []).append((input, record))
            notify_index.setdefault(time, set()).add(b)
            if time not in caps:
                caps[time] = cap.delayed(time)
            if states.log is not None:
                states.log.touch_bin(b)
        return at

    apply = make_apply(states, out, schedule)

    def least() -> Any:
        """The least time any input may still bring (None: the inputs are exhausted)."""
        times = [t for f in frontiers for t in f.frontier()]
        return min(times) if times else None

    def apply_eagerly(log: Any) -> None:
        """Records at the frontier's time t are applied as they arrive, bin by bin,
        once their bin is here (a bin arriving at t comes on the state input): no
        record at an earlier time can still come, so time order per key holds."""
        while stash:
            t = min(stash)
            if any(f.less_than(t) for f in frontiers):
                return
            passed = not any(f.less_equal(t) for f in frontiers)
            entries = stash.pop(t)
            if not passed:
                entries, waiting = split_held(entries, states)
                if waiting:
                    stash[t] = waiting
            if log is not None:
                log.cross(t)
                log.applied(t)
            apply(t, caps[t], entries, (), None)
            if t in stash:
                return
            caps.pop(t).drop()
            if not passed:
                return

    def constructor(initial):
        held = {"data": initial[0], "ack": initial[1]}

        def acknowledge(log: Any) -> None:
            """Hold the acknowledgement capability where this worker's checkpoints are
            durable; poll while some are not yet."""
            ack = held["ack"]
            if ack is None:
                return
            if log is None:
                ack.drop()
                held["ack"] = None
                return
            durable = log.durable()
            if durable == END or (worker.leaving and not states.bins and not caps and not log.waiting):
                # (leaving, with every bin shipped and every write durable: the bins'
                # later checkpoints are their new owners' to acknowledge)
                ack.drop()
                held["ack"] = None
            elif durable is not None and durable > ack.time:
                ack.downgrade(durable)
            if log.waiting:
                activate_after(path, DURABLE_POLL)

        def logic():
            log = states.log
            data = held["data"]
            if data is not None:
                # the first run, after any restore: restored bins' notifications need
                # capabilities at their times
                for b, pending in states.restored.items():
                    for t in pending:
                        notify_index.setdefault(t, set()).add(b)
                        if t not in caps:
                            caps[t] = data.delayed(t)
                states.restored.clear()
                data.drop()
                held["data"] = None
            for icap, shipped in state_in:
                nkeys = 0
                for _target, b, items, pending in shipped:
                    bin = Bin.from_wire(items, pending)
                    if log is not None:
                        bin.state = log.adopt(bin.state)
                        log.arrive(b, icap.time)
                    states.put(b, bin)
                    nkeys += dict.__len__(bin.state)
                    for t in bin.pending:
                        notify_index.setdefault(t, set()).add(b)
                        if t not in caps:
                            caps[t] = icap.delayed_for_output(t, 0)
                states.received.append((icap.time, len(shipped), nkeys))
            if len(states.shipped) != shipped_seen[0]:
                shipped_seen[0] = len(states.shipped)
                release_moved()
            for i, port in enumerate(data_ins):
                for icap, messages in port:
                    t = icap.time
                    entries = stash.get(t)
                    if entries is None:
                        entries = stash[t] = []
                    for m in messages:
                        if len(m) == 3:         # (F marks a withdrawal with a fourth field)
                            if keep:
                                entries.append((i, m[1], m[2]))
                            if combine is not None:
                                # while the records are still in the caches
                                per_bin = combined.get(t)
                                if per_bin is None:
                                    per_bin = combined[t] = {}
                                _combine_message(per_bin, m[1], m[2], combine, name, t)
                        else:
                            withdrawn.setdefault(t, []).append((i, m[1], m[2]))
                    if t not in caps:
                        caps[t] = icap.retain_for_output(0)
            if eager:
                apply_eagerly(log)
            else:
                while caps:
                    t = min(caps)
                    if any(f.less_equal(t) for f in frontiers):
                        break
                    cap = caps[t]
                    if log is not None:
                        log.cross(t)
                        log.applied(t)
                    entries = stash.pop(t, ())
                    per_bin = combined.pop(t, None)
                    if t in withdrawn:
                        entries = subtract_entries(entries, withdrawn.pop(t))
                        per_bin = None      # combined again from what is left
                    apply(t, cap, entries, notify_index.pop(t, ()), per_bin)
                    del caps[t]
                    cap.drop()
            if advanced is not None:
                advanced(least())
            if log is not None:
                log.cross(least())
            acknowledge(log)
        return logic
    builder.build(constructor)
    worker.stateful_states.append(states)
    if checkpointed:
        worker.checkpoint_context.add_state(f"{name}@{'.'.join(map(str, path))}", states, bins, acks,
                                            tracked, scope.minimum)
    _frontier_of(result, name).connect_loop(handle)
    return result


def _frontier_of(stream: Stream, name: str) -> Stream:
    """``stream``'s frontier without its records: what S feeds back to F and the
    rebalancer, which read only the frontier. S's records looped back would each be a
    message on the feedback edge, a progress update to every worker and one more step
    per epoch before it is consumed; this operator comes after S, so it drains them in
    the step S emits them and their +1 and -1 cancel before anything is sent."""
    builder = stream.scope.operator(f"{name} Frontier")
    port = builder.new_input(stream, Pipeline())
    _out, frontier = builder.new_output()

    def constructor(caps):
        for cap in caps:
            cap.drop()

        def logic():
            for _ in port.batches():
                pass
        return logic
    builder.build(constructor)
    return frontier


def state_machine(stream: Stream, fold: Callable[[Any, Any, Any], tuple], control: Optional[Stream] = None,
                  name: str = "StateMachine", bins: int = DEFAULT_BINS) -> Stream:
    """Apply ``fold(key, value, state) -> (new_state, outputs)`` to each ``(key, value)``
    record in time order; ``state`` is None for a new key, a returned None deletes it.
    The outputs are emitted at the record's time. ``control``: a stream of Map / Move /
    Bootstrap commands, or None for the cluster's rebalancer."""
    def make_apply(states, out, schedule):
        def apply(t, cap, entries, _bins_due, _combined):
            emitted: list = []
            fold_bins(fold, states, entries, emitted.extend, name, t)
            if emitted:
                out.give_batch(cap, emitted)
        return apply
    return _stateful([stream], [None], control, name, bins, make_apply, eager=True, tracked=False)


def _keyed_logic_apply(logic: Callable, name: str, inputs: int,
                       combine: Optional[Callable] = None) -> Callable:
    """``apply`` for logic called once per (time, bin) with the bin's records per input,
    or (``combine``, one input) with the bin's accumulator of them."""
    def make_apply(states, out, schedule):
        bins_ = states.bins

        def due_records(t, bins_due):
            """``(bin, [(input, record)])`` its notificator scheduled for ``t``, taken out."""
            for b in bins_due:
                bin = bins_.get(b)
                due = bin.pending.pop(t, None) if bin is not None else None
                if due:
                    yield b, due

        def grouped(t, entries, bins_due):
            per_bin: dict[int, list] = {}
            for i, runs, records in entries:
                for b, these in bin_slices(runs, records):
                    lists = per_bin.get(b)
                    if lists is None:
                        lists = per_bin[b] = [[] for _ in range(inputs)]
                    lists[i].extend(these)
            for b, due in due_records(t, bins_due):
                lists = per_bin.get(b)
                if lists is None:
                    lists = per_bin[b] = [[] for _ in range(inputs)]
                for i, record in due:
                    lists[i].append(record)
            return per_bin

        def accumulated(t, entries, bins_due, per_bin):
            if per_bin is None:
                per_bin = {}
                for _i, runs, records in entries:
                    _combine_message(per_bin, runs, records, combine, name, t)
            for b, due in due_records(t, bins_due):
                _combine_into(per_bin, b, [record for _i, record in due], combine, name, t)
            return {b: (acc,) for b, acc in per_bin.items()}

        def apply(t, cap, entries, bins_due, combined):
            per_bin = (grouped(t, entries, bins_due) if combine is None
                       else accumulated(t, entries, bins_due, combined))
            emitted: list = []
            log = states.log
            for b in sorted(per_bin):
                bin = bins_.get(b)
                if bin is None:
                    raise _missing_bin(states, b)
                if log is not None:
                    log.touch_bin(b)    # its keys: what the TrackedDict saw the logic touch
                try:
                    logic(t, *per_bin[b], bin.state, Notificator(schedule(b, cap), t), emitted)
                except StatefulError:
                    raise
                except Exception as e:
                    raise StatefulError(f"{name}: logic failed on bin {b} at time {t!r}: "
                                        f"{type(e).__name__}: {e}") from e
                if log is not None:
                    log.settle(b)       # packed while its values are in the caches
            if emitted:
                out.give_batch(cap, emitted)
        return apply
    return make_apply


def stateful_unary(stream: Stream, control: Optional[Stream], key: Callable[[Any], Any], name: str,
                   logic: Callable, bins: int = DEFAULT_BINS, combine: Optional[Callable] = None) -> Stream:
    """``logic(time, records, state, notificator, output)`` once per (time, bin) with
    work, in time order: ``records`` are the bin's records at ``time`` (then those its
    notificator scheduled for ``time``), ``state`` the bin's dict (mutate it), and
    ``output`` a list whose items are emitted at ``time``.

    ``combine(acc, records) -> acc`` folds a bin's records at a time into an accumulator
    as they arrive, ``acc`` None for the first ones (timely's ``aggregate``: the fold
    runs while the records are fresh in the caches and the time is still open, so less
    is left for when it completes); ``logic`` then gets the accumulator in place of
    ``records``. Records withdrawn at a time (``timely.dataflow.withdrawal``) make S
    combine what is left of that time's records again, once, when it applies the time.
    Records a notificator scheduled are combined when their time is applied.

    >>> import timely
    >>> def tally(acc, words):
    ...     acc = acc if acc is not None else {}
    ...     for w in words:
    ...         acc[w] = acc.get(w, 0) + 1
    ...     return acc
    >>> def totals(time, counts, state, notificator, output):
    ...     for w, n in counts.items():
    ...         state[w] = state.get(w, 0) + n
    ...         output.append((w, state[w]))
    >>> def build(worker):
    ...     def dataflow(scope):
    ...         source, words = scope.new_input()
    ...         out = words.stateful_unary(None, lambda w: w, "Totals", totals, combine=tally)
    ...         return source, out.capture()
    ...     source, captured = worker.dataflow(dataflow)
    ...     for epoch, batch in enumerate([["a", "b", "a"], ["a"]]):
    ...         source.send_batch(batch)
    ...         source.advance_to(epoch + 1)
    ...     source.close()
    ...     worker.run()
    ...     return sorted((t, sorted(rs)) for t, rs in captured.by_time().items())
    >>> timely.execute(1, build)
    [[(0, [('a', 2), ('b', 1)]), (1, [('a', 3)])]]
    """
    return _stateful([stream], [key], control, name, bins, _keyed_logic_apply(logic, name, 1, combine),
                     combine=combine)


def stateful_epochs(stream: Stream, key: Callable[[Any], Any], name: str, make_apply: Callable,
                    bins: int, advanced: Optional[Callable[[Any], None]] = None,
                    checkpointed: bool = True, control: Optional[Stream] = None) -> Stream:
    """S with the caller's own ``apply``: ``make_apply(states, output, schedule)`` returns
    ``apply(time, cap, entries, bins_due, combined)``, called once per complete time with
    every record this worker's bins got at it (``entries``: ``(input, runs, records)``,
    split per bin by ``bin_slices``), for work per time that spans bins (the Kafka sink
    writes its partitions' epochs and markers with one flush). ``advanced(least)``: see
    ``_stateful``. ``apply`` names the keys it changes (``states.log.touch``), unless
    ``checkpointed`` is False: the bins' state is then not checkpointed. ``control``:
    Megaphone commands (None: the cluster's rebalancer)."""
    return _stateful([stream], [key], control, name, bins, make_apply, tracked=False, advanced=advanced,
                     checkpointed=checkpointed)


def stateful_binary(stream: Stream, other: Stream, control: Optional[Stream], key1: Callable[[Any], Any],
                    key2: Callable[[Any], Any], name: str, logic: Callable,
                    bins: int = DEFAULT_BINS) -> Stream:
    """``logic(time, records1, records2, state, notificator, output)``: both inputs
    routed by one routing table, so a key's records of either input meet one state."""
    return _stateful([stream, other], [key1, key2], control, name, bins,
                     _keyed_logic_apply(logic, name, 2))

