"""The generic operator: ports, frontiers, capabilities, notifications.

``OperatorBuilder`` (timely's ``builder_rc``) declares inputs (each from a stream, with
a parallelization contract and, optionally, which outputs it can reach with what
summary) and outputs, then ``build(constructor)``: the constructor receives one
Capability per output, at the scope's minimum time, and returns the operator's logic,
a function of no arguments called each time the operator is scheduled. The logic reads
its ``InputPort``s (batches with their InputCapability, and the input ``frontier``)
and writes its ``OutputPort``s.

Progress accounting follows timely exactly: each output starts with ``peers``
capabilities at the minimum (one per worker); records taken from an input are counted
as consumed when pulled; records given to an output are counted as produced; and all
of it reaches the scope in the same step, so a batch is never split.

``FrontierNotificator`` holds capabilities until the input frontiers pass their times.
Costs: pulling or giving a batch O(1) (+ the channel's routing); notificator
``notify_at`` O(1), ``next`` O(pending x frontier size).
"""
from __future__ import annotations

from time import perf_counter
from typing import Any, Callable, Iterator, Optional, Sequence

from ..progress import ChangeBatch, MutableAntichain
from ..progress.location import Source, Target
from ..progress.operate import SharedProgress
from ..progress.timestamp import identity_summary, less_equal
from .capability import Capability, CapabilityError, InputCapability
from .channels import Pipeline, Tee
from .stream import Stream
from .withdrawal import check_input


class InputPort:
    """An operator input: received batches and the input's frontier."""

    __slots__ = ("_puller", "_consumed", "_internals", "frontier", "count", "messages")

    def __init__(self, puller: Any, consumed: ChangeBatch, internals: Sequence) -> None:
        self._puller = puller
        self._consumed = consumed
        self._internals = internals
        self.frontier = MutableAntichain()
        self.count = 0              # instruments (timely.metrics): records and batches pulled
        self.messages = 0

    def __iter__(self) -> Iterator[tuple[InputCapability, list]]:
        """Yield ``(capability, records)`` for every batch received, consuming them."""
        pull = self._puller.pull
        consumed = self._consumed
        internals = self._internals
        while True:
            message = pull()
            if message is None:
                return
            time, records = message
            consumed.update(time, len(records))
            self.count += len(records)
            self.messages += 1
            yield InputCapability(time, internals), records

    def batches(self) -> Iterator[tuple[Any, list]]:
        """Yield ``(time, records)`` for every batch received (no capability objects)."""
        pull = self._puller.pull
        consumed = self._consumed
        while True:
            message = pull()
            if message is None:
                return
            consumed.update(message[0], len(message[1]))
            self.count += len(message[1])
            self.messages += 1
            yield message

    def drain(self) -> list[tuple[Any, list]]:
        return list(self.batches())


class OutputPort:
    """An operator output: give batches at times you hold a capability for."""

    __slots__ = ("_tee", "_internal", "_buffer_time", "_buffer", "count", "messages")

    def __init__(self, tee: Tee, internal: ChangeBatch) -> None:
        self._tee = tee
        self._internal = internal
        self._buffer_time: Any = None
        self._buffer: list = []
        self.count = 0              # instruments (timely.metrics): records and batches given
        self.messages = 0

    def _time_of(self, cap: Any) -> Any:
        if getattr(cap, "is_pending", False):
            raise CapabilityError(f"{cap!r} belongs to a worker joining a running cluster: it can "
                                  f"send only after worker.bootstrap()")
        if not cap.covers(self._internal):
            raise CapabilityError(f"{cap!r} does not cover this output (dropped, or minted "
                                  f"for another output)")
        return cap.time

    def give_batch(self, cap: Any, records: list, time: Any = None) -> None:
        """Send ``records`` (a list the receivers may share; do not mutate it after) at
        ``time`` (default: the capability's time, which must be <= ``time``)."""
        t = self._time_of(cap)
        if time is not None:
            if not less_equal(t, time):
                raise CapabilityError(f"capability at {t!r} cannot send at {time!r}")
            t = time
        self.flush()
        self.count += len(records)
        self.messages += 1
        self._tee.give(t, records)

    def give(self, cap: Any, record: Any) -> None:
        """Send one record at the capability's time (buffered until flush)."""
        t = self._time_of(cap)
        if t != self._buffer_time:
            self.flush()
            self._buffer_time = t
        self._buffer.append(record)
        if len(self._buffer) >= 4096:
            self.flush()

    def flush(self) -> None:
        if self._buffer:
            records, self._buffer = self._buffer, []
            self.count += len(records)
            self.messages += 1
            self._tee.give(self._buffer_time, records)
        self._buffer_time = None

    def give_unchecked(self, time: Any, records: list) -> None:
        """For operators whose consumed input justifies the output in the same step."""
        self.count += len(records)
        self.messages += 1
        self._tee.give(time, records)


class FrontierNotificator:
    """Capabilities waiting for the input frontiers to pass their times."""

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending: list[Capability] = []

    def notify_at(self, cap: Capability) -> None:
        """Deliver ``cap`` once no input frontier is <= its time."""
        self._pending.append(cap)

    def pending(self) -> list[Any]:
        return [c.time for c in self._pending]

    def next(self, frontiers: Sequence[MutableAntichain]) -> Optional[Capability]:
        """One capability whose time all ``frontiers`` have passed (least first), or None.

        Requests for the same time are merged, as in timely: one notification per time.
        A capability no longer held (a joiner's request for a time before its grant,
        which it could not adopt) is forgotten."""
        ready = None
        if not all(cap.valid for cap in self._pending):
            self._pending = [cap for cap in self._pending if cap.valid]
        for cap in self._pending:
            t = cap.time
            if ready is not None and not t < ready.time:
                continue
            for f in frontiers:
                if f.less_equal(t):
                    break
            else:
                ready = cap
        if ready is None:
            return None
        time = ready.time
        keep = []
        for cap in self._pending:
            if cap is not ready and cap.time == time:
                cap.drop()
            elif cap is not ready:
                keep.append(cap)
        self._pending = keep
        return ready

    def drain(self, frontiers: Sequence[MutableAntichain]) -> list[Capability]:
        """Every ready capability, one per time, in time order."""
        ready: dict[Any, Capability] = {}
        keep = []
        for cap in self._pending:
            if not cap.valid:
                continue
            if any(f.less_equal(cap.time) for f in frontiers):
                keep.append(cap)
            elif cap.time in ready:
                cap.drop()
            else:
                ready[cap.time] = cap
        self._pending = keep
        return [ready[t] for t in sorted(ready)]


class OperatorCore:
    """A built operator as its scope sees it (implements Operate). With metrics on
    (``timely.metrics``), ``timed`` makes it add up the time its logic is scheduled, and
    ``clock`` hears of its input frontiers' moves, and so does each of ``watchers``
    (callables: a Kafka source waiting for the dataflow to finish what it read)."""

    local = True
    timed = False
    clock: Any = None
    watchers: tuple = ()

    def __init__(self, name: str, inputs: list[InputPort], outputs: list[OutputPort],
                 summary: list, shared: SharedProgress, peers: int, minimum: Any,
                 path: tuple, activations: Any, notify: bool, internals: list,
                 produceds: list) -> None:
        self.name = name
        self._internals = internals
        self._produceds = produceds
        self.inputs = len(inputs)
        self.outputs = len(outputs)
        self._in = inputs
        self._out = outputs
        self._summary = summary
        self.shared_progress = shared
        self._peers = peers
        self._minimum = minimum
        self.path = path
        self._activations = activations
        self.notify = notify
        self.logic: Optional[Callable[[], Any]] = None
        self.seconds = 0.0
        self.schedules = 0

    def get_internal_summary(self) -> tuple[list, SharedProgress]:
        self._activations.activate(self.path)
        for internal in self.shared_progress.internals:
            internal.update(self._minimum, self._peers)
        return self._summary, self.shared_progress

    def set_external_summary(self) -> None:
        # The scope has propagated the initial capabilities: show them in the input
        # frontiers now, so a probe is meaningful as soon as the dataflow is built.
        self._accept_frontiers()

    def _accept_frontiers(self) -> None:
        moved = False
        for port, changes in zip(self._in, self.shared_progress.frontiers):
            if changes.unstable_len():
                port.frontier.update_iter(changes.drain())
                moved = True
        if moved:
            if self.clock is not None:
                self.clock.moved()
            for watcher in self.watchers:
                watcher()

    def schedule(self) -> bool:
        if self.timed:
            started = perf_counter()
            self._schedule()
            self.seconds += perf_counter() - started
            self.schedules += 1
            return False
        return self._schedule()

    def _schedule(self) -> bool:
        self._accept_frontiers()
        logic = self.logic
        if logic is not None:
            logic()
        for out in self._out:
            out.flush()
        self.move_progress()
        return False

    def move_progress(self) -> None:
        """Hand what the logic (or an input handle) did to the scope. Only now, while
        the operator is scheduled: statements made while the dataflow is still being
        built must not be mistaken for the initial capabilities."""
        shared = self.shared_progress
        for mine, theirs in zip(self._internals, shared.internals):
            if mine.unstable_len():
                theirs.extend(mine.drain())
        for mine, theirs in zip(self._produceds, shared.produceds):
            if mine.unstable_len():
                theirs.extend(mine.drain())

    def shut_down(self) -> None:
        self.logic = None


class OperatorBuilder:
    """Declares an operator's ports, then builds it into its scope."""

    def __init__(self, scope: Any, name: str) -> None:
        self.scope = scope
        self.name = name
        self.index = scope.allocate_child_id()
        self.path = scope.path + (self.index,)
        self._inputs: list[InputPort] = []
        self._outputs: list[OutputPort] = []
        self._connections: list[Optional[list]] = []
        self._shared_inputs: list[tuple] = []
        self._internals: list[ChangeBatch] = []
        self._produceds: list[ChangeBatch] = []
        self._consumeds: list[ChangeBatch] = []
        self.notify = True

    def new_input(self, stream: Any, pact: Any = None, connection: Optional[list] = None,
                  withdrawals: bool = False) -> InputPort:
        """An input fed by ``stream`` through ``pact`` (default Pipeline).

        ``connection[output]`` lists the summaries from this input to each output
        (default: the identity to every output, even those declared later).
        ``withdrawals``: the operator subtracts ``Withdrawal`` batches from the records
        of their time (only such an operator may read a stream that withdraws).
        """
        if stream.scope is not self.scope:
            raise ValueError(f"operator {self.name!r} is in scope {self.scope.name!r} but its "
                             f"input stream is in scope {stream.scope.name!r}: use enter/leave")
        check_input(stream, self.name, withdrawals)
        port = len(self._inputs)
        consumed = ChangeBatch()
        puller = stream.connect_to(Target(self.index, port), pact or Pipeline(), self.path)
        handle = InputPort(puller, consumed, self._internals)
        self._inputs.append(handle)
        self._consumeds.append(consumed)
        self._connections.append(connection)
        return handle

    def new_output(self) -> tuple[OutputPort, Stream]:
        port = len(self._outputs)
        internal, produced = ChangeBatch(), ChangeBatch()
        tee = Tee(produced)
        handle = OutputPort(tee, internal)
        self._outputs.append(handle)
        self._internals.append(internal)
        self._produceds.append(produced)
        return handle, Stream(self.scope, Source(self.index, port), tee)

    def set_notify(self, notify: bool) -> None:
        """Whether frontier changes alone schedule the operator (default True)."""
        self.notify = notify

    def build(self, constructor: Callable[[list[Capability]], Optional[Callable[[], Any]]]) -> None:
        """Add the operator; ``constructor(capabilities)`` returns its logic."""
        scope = self.scope
        identity = identity_summary(scope.minimum)
        outputs = len(self._outputs)
        summary = []
        for connection in self._connections:
            if connection is None:
                summary.append([[identity] for _ in range(outputs)])
            else:
                if len(connection) != outputs:
                    raise ValueError(f"operator {self.name!r}: connection lists {len(connection)} "
                                     f"outputs, the operator has {outputs}")
                summary.append([list(c) for c in connection])
        shared = SharedProgress(len(self._inputs), outputs)
        shared.consumeds = self._consumeds     # only written while scheduled
        worker = scope.worker
        core = OperatorCore(self.name, self._inputs, self._outputs, summary, shared,
                            worker.initial_peers, scope.minimum, self.path, worker.activations,
                            self.notify, self._internals, self._produceds)
        scope.add_child(core, self.index)
        if worker.is_joiner:
            # The +peers everyone started with belong to the original workers: a joiner's
            # capabilities wait for its bootstrap worker's grant (Capability.pending).
            caps = [Capability.pending(scope.minimum, [internal], (self.path, port),
                                       worker.pending_capabilities)
                    for port, internal in enumerate(self._internals)]
        else:
            # One capability per output at the minimum: this worker's share of the +peers
            # that get_internal_summary declared, so the evidence of minting is discarded.
            caps = [Capability(scope.minimum, [internal]) for internal in self._internals]
            for internal in self._internals:
                internal.clear()
        core.logic = constructor(caps)
