"""The operator library: sources, record transforms, routing, loops, observation, and
the generic ``unary`` / ``binary`` builders with frontiers and notifications.

Every operator moves batches: a transform costs one call of the user's function per
record plus O(1) per batch; routing operators cost what their contract costs (see
timely.dataflow.channels). Received batches are shared, read-only lists: build a new
list rather than mutating one you received.

>>> import timely
>>> def build(worker):
...     out = worker.dataflow(lambda s: s.to_stream(range(5)).map(lambda x: x * x).capture())
...     worker.step_while(lambda: not out.done())
...     return out.records()
>>> timely.execute(1, build)
[[0, 1, 4, 9, 16]]
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from ..progress import Antichain, MutableAntichain
from ..progress.location import Source, Target
from ..progress.timestamp import results_in
from .capability import Capability
from .channels import Direct, Exchange, Pipeline, Tee
from .operator import FrontierNotificator, OutputPort
from .scope import Scope
from .stream import Stream


class OperatorInfo:
    """Where an operator is: its index in its scope, its path, this worker, peers."""

    __slots__ = ("name", "index", "path", "worker_index", "peers")

    def __init__(self, builder: Any) -> None:
        self.name = builder.name
        self.index = builder.index
        self.path = builder.path
        self.worker_index = builder.scope.worker.index
        self.peers = builder.scope.worker.peers

    def activator(self, worker: Any) -> Callable[[], None]:
        path = self.path
        return lambda: worker.activations.activate(path)


def _drop_all(caps: list) -> None:
    for cap in caps:
        cap.drop()


def _pipeline_op(stream: Stream, name: str, transform: Callable[[Any, list, OutputPort], None],
                 pact: Any = None) -> Stream:
    builder = stream.scope.operator(name)
    builder.set_notify(False)
    port = builder.new_input(stream, pact or Pipeline())
    out, result = builder.new_output()

    def constructor(caps):
        _drop_all(caps)
        batches = port.batches

        def logic():
            for time, records in batches():
                transform(time, records, out)
        return logic
    builder.build(constructor)
    return result


# ---- sources ------------------------------------------------------------------------------
class InputHandle:
    """Feeds records into a dataflow from the worker's own code.

    ``send`` buffers records at the current time; ``advance_to`` promises no more
    records before a later time; ``close`` promises none at all. Every worker has its
    own handle, and the dataflow completes only when every worker closed its input.
    """

    def __init__(self, scope: Any) -> None:
        builder = scope.operator("Input")
        builder.set_notify(False)
        self._out, self.stream = builder.new_output()
        self._activate = OperatorInfo(builder).activator(scope.worker)
        self._cap: Optional[Capability] = None
        self._buffer: list = []
        self.closed = False

        def constructor(caps):
            self._cap = caps[0]
            return None
        builder.build(constructor)

    def time(self) -> Any:
        """The time records are sent at now (on a joining worker, after
        ``worker.bootstrap()``: the time its bootstrap worker granted, or later)."""
        if self._cap is None:
            raise ValueError("the input is closed")
        return self._cap.time

    def _holds(self) -> None:
        cap = self._cap
        if cap.is_pending:
            raise ValueError("this worker is joining a running cluster: call worker.bootstrap() "
                             "before sending input")
        if not cap.valid:
            raise ValueError("this worker joined a running cluster and was granted no capability "
                             "for this input: its bootstrap worker held none that reaches it")

    epoch = time

    def send(self, record: Any) -> None:
        if self.closed:
            raise ValueError("cannot send: the input is closed")
        self._holds()
        self._buffer.append(record)
        if len(self._buffer) >= 4096:
            self.flush()

    def send_batch(self, records: Iterable[Any]) -> None:
        if self.closed:
            raise ValueError("cannot send: the input is closed")
        self._holds()
        self.flush()
        records = list(records)
        if records:
            self._out.give_batch(self._cap, records)
            self._activate()

    def flush(self) -> None:
        if self._buffer:
            records, self._buffer = self._buffer, []
            self._out.give_batch(self._cap, records)
            self._activate()

    def advance_to(self, time: Any) -> None:
        """Send later records at ``time`` (which must not be earlier than ``time()``)."""
        if self.closed:
            raise ValueError("cannot advance: the input is closed")
        if not self._cap.valid:        # a joined worker granted nothing: no capability to move
            return
        self.flush()
        if time != self._cap.time:
            self._cap.downgrade(time)
            self._activate()

    def close(self) -> None:
        """No more records, at any time (idempotent)."""
        if not self.closed:
            self.flush()
            self.closed = True
            if self._cap.valid:
                self._cap.drop()
                self._activate()
            self._cap = None


def new_input(scope: Any) -> tuple[InputHandle, Stream]:
    handle = InputHandle(scope)
    return handle, handle.stream


def to_stream(scope: Any, records: Iterable[Any]) -> Stream:
    builder = scope.operator("ToStream")
    builder.set_notify(False)
    out, stream = builder.new_output()

    def constructor(caps):
        state = {"cap": caps[0], "records": iter(records)}

        def logic():
            cap = state["cap"]
            if cap is None:
                return
            chunk = []
            for record in state["records"]:
                chunk.append(record)
                if len(chunk) >= 4096:
                    out.give_batch(cap, chunk)
                    chunk = []
            if chunk:
                out.give_batch(cap, chunk)
            cap.drop()
            state["cap"] = None
        return logic
    builder.build(constructor)
    return stream


# ---- transforms ---------------------------------------------------------------------------
def map(stream: Stream, fn: Callable[[Any], Any]) -> Stream:
    return _pipeline_op(stream, "Map", lambda t, rs, out: out.give_unchecked(t, [fn(r) for r in rs]))


def flat_map(stream: Stream, fn: Callable[[Any], Iterable[Any]]) -> Stream:
    def transform(time, records, out):
        result: list = []
        extend = result.extend
        for r in records:
            extend(fn(r))
        if result:
            out.give_unchecked(time, result)
    return _pipeline_op(stream, "FlatMap", transform)


def filter(stream: Stream, predicate: Callable[[Any], bool]) -> Stream:
    def transform(time, records, out):
        kept = [r for r in records if predicate(r)]
        if kept:
            out.give_unchecked(time, kept)
    return _pipeline_op(stream, "Filter", transform)


def map_batch(stream: Stream, fn: Callable[[list], list]) -> Stream:
    return _pipeline_op(stream, "MapBatch", lambda t, rs, out: out.give_unchecked(t, fn(rs)))


def inspect(stream: Stream, fn: Callable[[Any], Any]) -> Stream:
    def transform(time, records, out):
        for r in records:
            fn(r)
        out.give_unchecked(time, records)
    return _pipeline_op(stream, "Inspect", transform)


def inspect_batch(stream: Stream, fn: Callable[[Any, list], Any]) -> Stream:
    def transform(time, records, out):
        fn(time, records)
        out.give_unchecked(time, records)
    return _pipeline_op(stream, "InspectBatch", transform)


# ---- routing ------------------------------------------------------------------------------
def exchange(stream: Stream, key: Callable[[Any], Any]) -> Stream:
    return _pipeline_op(stream, "Exchange", lambda t, rs, out: out.give_unchecked(t, rs), Exchange(key))


def broadcast(stream: Stream) -> Stream:
    """Every record to every worker (of the current cluster).

    As in timely, each copy is a record of its own: replicated with its destination,
    exchanged to it, and unwrapped, so every copy is counted where it is produced and
    where it is consumed."""
    worker = stream.scope.worker

    def replicate(time, records, out):
        copies = []
        for target in worker.broadcast_workers:
            copies.extend((target, r) for r in records)
        out.give_unchecked(time, copies)
    tagged = _pipeline_op(stream, "BroadcastReplicate", replicate)
    return _pipeline_op(tagged, "Broadcast", lambda t, rs, out: out.give_unchecked(t, [r for _, r in rs]),
                        Direct(_destination))


def _destination(tagged: tuple) -> int:
    return tagged[0]


def concat(stream: Stream, *others: Stream) -> Stream:
    builder = stream.scope.operator("Concat")
    builder.set_notify(False)
    ports = [builder.new_input(s, Pipeline()) for s in (stream,) + others]
    out, result = builder.new_output()

    def constructor(caps):
        _drop_all(caps)

        def logic():
            for port in ports:
                for time, records in port.batches():
                    out.give_unchecked(time, records)
        return logic
    builder.build(constructor)
    return result


def partition(stream: Stream, parts: int, route: Callable[[Any], tuple[int, Any]]) -> list[Stream]:
    """``route(record) -> (part, value)`` sends ``value`` to output ``part``."""
    if parts < 1:
        raise ValueError(f"partition needs at least one part, got {parts}")
    builder = stream.scope.operator("Partition")
    builder.set_notify(False)
    port = builder.new_input(stream, Pipeline())
    outs = [builder.new_output() for _ in range(parts)]

    def constructor(caps):
        _drop_all(caps)

        def logic():
            for time, records in port.batches():
                buckets: list[list] = [[] for _ in range(parts)]
                for r in records:
                    part, value = route(r)
                    if not 0 <= part < parts:
                        raise ValueError(f"partition route returned part {part}, not in 0..{parts - 1}")
                    buckets[part].append(value)
                for (out, _), bucket in zip(outs, buckets):
                    if bucket:
                        out.give_unchecked(time, bucket)
        return logic
    builder.build(constructor)
    return [s for _, s in outs]


# ---- scopes and loops ---------------------------------------------------------------------
class _Ingress:
    """Pushes batches from the parent scope into a nested one, converting the time."""

    __slots__ = ("_tee", "_to_inner", "_activate")

    def __init__(self, tee: Tee, to_inner: Callable, activate: Callable) -> None:
        self._tee = tee
        self._to_inner = to_inner
        self._activate = activate

    def give(self, time: Any, records: list) -> None:
        self._tee.give(self._to_inner(time), records)
        self._activate()


class _Egress:
    __slots__ = ("_tee", "_to_outer")

    def __init__(self, tee: Tee, to_outer: Callable) -> None:
        self._tee = tee
        self._to_outer = to_outer

    def give(self, time: Any, records: list) -> None:
        self._tee.give(self._to_outer(time), records)


def enter(stream: Stream, inner: Any) -> Stream:
    if inner.parent is not stream.scope:
        raise ValueError(f"cannot enter scope {inner.name!r} from {stream.scope.name!r}: "
                         f"it is not a child of the stream's scope")
    port, counter = inner.subgraph.new_input()
    tee = Tee(counter)   # records entering are counted at child 0's output, then harvested
    worker = inner.worker
    path = inner.path
    stream.tee.pushers.append(_Ingress(tee, inner.to_inner, lambda: worker.activations.activate(path)))
    stream.scope.connect(stream.source, Target(inner.index, port))
    return Stream(inner, Source(0, port), tee)


def leave(stream: Stream) -> Stream:
    inner = stream.scope
    outer = inner.parent
    if outer is None:
        raise ValueError("cannot leave the root scope of a dataflow")
    port = inner.subgraph.new_output()
    inner.connect(stream.source, Target(0, port))
    tee = Tee(None)      # the scope reports these as produced, through its tracker
    stream.tee.pushers.append(_Egress(tee, inner.to_outer))
    return Stream(outer, Source(inner.index, port), tee)


class LoopHandle:
    """The far end of a feedback edge, waiting for ``connect_loop``."""

    def __init__(self, builder: Any, out: OutputPort, summary: Any) -> None:
        self._builder = builder
        self._out = out
        self._summary = summary
        self.connected = False

    def connect(self, stream: Stream) -> None:
        if self.connected:
            raise ValueError("this loop is already connected")
        self.connected = True
        summary, out = self._summary, self._out
        port = self._builder.new_input(stream, Pipeline(), connection=[[summary]])

        def constructor(caps):
            _drop_all(caps)

            def logic():
                for time, records in port.batches():
                    later = results_in(summary, time)
                    if later is not None:       # past the largest time: cannot loop again
                        out.give_unchecked(later, records)
            return logic
        self._builder.build(constructor)


def feedback(scope: Any, summary: Any) -> tuple[LoopHandle, Stream]:
    builder = scope.operator("Feedback")
    builder.set_notify(False)
    out, stream = builder.new_output()
    return LoopHandle(builder, out, summary), stream


# ---- observing ----------------------------------------------------------------------------
class ProbeHandle:
    """What may still arrive at a probed point of the dataflow (this worker's view)."""

    def __init__(self) -> None:
        self._frontiers: list[MutableAntichain] = []

    def _attach(self, frontier: MutableAntichain) -> None:
        self._frontiers.append(frontier)

    def less_than(self, time: Any) -> bool:
        """Records at some time strictly before ``time`` may still arrive."""
        return any(f.less_than(time) for f in self._frontiers)

    def less_equal(self, time: Any) -> bool:
        """Records at some time at or before ``time`` may still arrive."""
        return any(f.less_equal(time) for f in self._frontiers)

    def done(self) -> bool:
        """Nothing more will arrive."""
        return all(f.is_empty() for f in self._frontiers)

    def frontier(self) -> list[Any]:
        """The least times that may still arrive, over every probed stream."""
        least = Antichain(t for f in self._frontiers for t in f.frontier())
        return sorted(least)

    def with_frontier(self, fn: Callable[[list], Any]) -> Any:
        return fn(self.frontier())


def probe_with(stream: Stream, handle: ProbeHandle) -> Stream:
    builder = stream.scope.operator("Probe")
    port = builder.new_input(stream, Pipeline())
    out, result = builder.new_output()
    handle._attach(port.frontier)

    def constructor(caps):
        _drop_all(caps)

        def logic():
            for time, records in port.batches():
                out.give_unchecked(time, records)
        return logic
    builder.build(constructor)
    return result


def probe(stream: Stream) -> ProbeHandle:
    handle = ProbeHandle()
    probe_with(stream, handle)
    return handle


class Captured:
    """Batches that reached a capture point on this worker, and its input frontier."""

    def __init__(self, frontier: MutableAntichain) -> None:
        self.batches: list[tuple[Any, list]] = []
        self._frontier = frontier

    def done(self) -> bool:
        return self._frontier.is_empty()

    def frontier(self) -> list[Any]:
        return self._frontier.frontier()

    def records(self) -> list[Any]:
        return [r for _, rs in self.batches for r in rs]

    def by_time(self) -> dict[Any, list]:
        out: dict[Any, list] = {}
        for t, rs in self.batches:
            out.setdefault(t, []).extend(rs)
        return out

    def complete_times(self) -> dict[Any, list]:
        """``by_time``, restricted to times the frontier has passed."""
        return {t: rs for t, rs in self.by_time().items() if not self._frontier.less_equal(t)}


def capture(stream: Stream) -> Captured:
    builder = stream.scope.operator("Capture")
    port = builder.new_input(stream, Pipeline())
    captured = Captured(port.frontier)
    append = captured.batches.append

    def constructor(caps):
        def logic():
            for batch in port.batches():
                append(batch)
        return logic
    builder.build(constructor)
    return captured


# ---- generic builders ---------------------------------------------------------------------
def unary(stream: Stream, pact: Any, name: str, constructor: Callable, notify: bool = True) -> Stream:
    """``constructor(capability, info)`` returns ``logic(input, output)``; ``input``
    yields ``(InputCapability, records)`` and has ``input.frontier``."""
    builder = stream.scope.operator(name)
    builder.set_notify(notify)
    port = builder.new_input(stream, pact or Pipeline())
    out, result = builder.new_output()
    info = OperatorInfo(builder)

    def build(caps):
        logic = constructor(caps[0], info)
        return lambda: logic(port, out)
    builder.build(build)
    return result


def binary(stream: Stream, other: Stream, pact1: Any, pact2: Any, name: str,
           constructor: Callable, notify: bool = True) -> Stream:
    """``constructor(capability, info)`` returns ``logic(input1, input2, output)``."""
    builder = stream.scope.operator(name)
    builder.set_notify(notify)
    p1 = builder.new_input(stream, pact1 or Pipeline())
    p2 = builder.new_input(other, pact2 or Pipeline())
    out, result = builder.new_output()
    info = OperatorInfo(builder)

    def build(caps):
        logic = constructor(caps[0], info)
        return lambda: logic(p1, p2, out)
    builder.build(build)
    return result


class Notificator:
    """A FrontierNotificator bound to an operator's input frontiers.

    ``notify_at(cap)`` asks to be told when the inputs have passed ``cap.time``;
    iterating yields each such capability once (least times first).
    """

    def __init__(self, frontiers: list[MutableAntichain], inner: FrontierNotificator) -> None:
        self._frontiers = frontiers
        self._inner = inner

    def notify_at(self, cap: Capability) -> None:
        self._inner.notify_at(cap)

    def pending(self) -> list[Any]:
        return self._inner.pending()

    def __iter__(self):
        frontiers = self._frontiers
        while True:
            cap = self._inner.next(frontiers)
            if cap is None:
                return
            yield cap


def _notify_logic(caps: list, init: Iterable[Any]) -> FrontierNotificator:
    notificator = FrontierNotificator()
    for t in init:
        notificator.notify_at(caps[0].delayed(t))
    _drop_all(caps)
    return notificator


def unary_notify(stream: Stream, pact: Any, name: str, init: Iterable[Any], logic: Callable) -> Stream:
    """``logic(input, output, notificator)``, notified at each time in ``init`` and at
    the capabilities it asks for."""
    builder = stream.scope.operator(name)
    port = builder.new_input(stream, pact or Pipeline())
    out, result = builder.new_output()

    def build(caps):
        notificator = Notificator([port.frontier], _notify_logic(caps, init))
        return lambda: logic(port, out, notificator)
    builder.build(build)
    return result


def binary_notify(stream: Stream, other: Stream, pact1: Any, pact2: Any, name: str,
                  init: Iterable[Any], logic: Callable) -> Stream:
    builder = stream.scope.operator(name)
    p1 = builder.new_input(stream, pact1 or Pipeline())
    p2 = builder.new_input(other, pact2 or Pipeline())
    out, result = builder.new_output()

    def build(caps):
        notificator = Notificator([p1.frontier, p2.frontier], _notify_logic(caps, init))
        return lambda: logic(p1, p2, out, notificator)
    builder.build(build)
    return result


Stream.extend(map=map, flat_map=flat_map, filter=filter, map_batch=map_batch, inspect=inspect,
              inspect_batch=inspect_batch, exchange=exchange, broadcast=broadcast, concat=concat,
              partition=partition, enter=enter, leave=leave, probe=probe, probe_with=probe_with,
              capture=capture, unary=unary, unary_notify=unary_notify, binary=binary,
              binary_notify=binary_notify)
Scope.extend(new_input=new_input, to_stream=to_stream, feedback=feedback)

__all__ = ["Captured", "InputHandle", "LoopHandle", "Notificator", "OperatorInfo", "ProbeHandle",
           "binary", "binary_notify", "broadcast", "capture", "concat", "enter", "exchange",
           "feedback", "filter", "flat_map", "inspect", "inspect_batch", "leave", "map", "map_batch",
           "new_input", "partition", "probe", "probe_with", "to_stream", "unary", "unary_notify"]
