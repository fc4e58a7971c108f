"""The Kafka source: a dataflow reads topics under the epoch contract, and their partitions
follow the workers.

``scope.kafka_source(brokers, topics, ...)`` spreads the topics' partitions over the
workers (partition i of the sorted list goes to the i-th worker, round robin). The
partitions follow the workers: when a process joins or leaves, the worker reading a
partition hands it to its new owner as a record (over a feedback edge that adds one
to its time, just before the partition's next unfinished epoch), carrying the offset
just past the last marker it read and the commit points not yet committed; the
receiver takes its capability from that record and reads on from there, and records
of the unfinished epoch are read again there and dropped here: none is lost or given
twice. A partition holding the source back moves at its next marker. A leaving
process gives all of its partitions away before it can drain. Each record's
timestamp is its epoch. A record is given to the
dataflow when its epoch's marker is read (see ``timely.connectors.epochs``), and the
source's capability is the least, over its partitions, of the next unfinished epoch:
the frontier passes an epoch exactly when every partition's marker for it was read.
With ``early=True`` a record is given as soon as it is read and decoded, and the
marker withdraws those it does not count (``timely.dataflow.withdrawal``), as does a
hand-off for the records of the unfinished epoch it gave: an epoch's records cross the
exchange while the epoch is still being written, and its marker only moves the
frontier (the latency of ``make run``'s epochs, measured in ``benchmarks/pipeline.py``).
Topics without markers: ``epochs="ingestion"`` stamps records with the time they were
read (epochs are milliseconds since 1970, a new one every ``epoch_records`` records or
``epoch_ms`` ms, so they keep increasing across restarts).

A source reads at most ``read_ahead`` bytes (``--source-read-ahead``) past what its
dataflow has finished: the inputs of the operators downstream of it whose outputs go
nowhere (``timely.dataflow.completion``), as ``timely.connectors.kafka.read_ahead``
says. It reads nothing either while a channel of its dataflow has used its exchange
credit toward a worker of another process (``timely.communication.credit``). Held, it
runs again as soon as the dataflow's ends move, and otherwise after 1, 2, 4 ... up to
16 ms.

Costs: see the parts: ``source_state`` (a worker's consumer and its partitions'
epochs: polling, decoding, committing), ``steps`` (the source's step per activation,
by markers, handing records on early, or by ingestion time), ``read_ahead`` (the
bound) and ``handoff`` (a partition moving to its new owner). The builder here is run
once per dataflow.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence, Union

from ...dataflow.capability import Capabilities
from ...dataflow.channels import Direct
from ...dataflow.completion import Completion, scope_subgraph
from ...dataflow.operators import OperatorInfo
from ..client import Brokers
from ..epochs import Format, format_of
from .handoff import _hand_off
from .source_state import KafkaSourceState
from .steps import _ingestion_step, _marker_step

__all__ = ["kafka_source", "KafkaSourceState"]

#: an idle source polls again after 1 ms, then 2, 4, ... up to its ``idle_poll`` (s)
_FIRST_IDLE_WAIT = 0.001
#: a source held for want of credit looks again after 1 ms, then 2, 4, ... up to this (s)
_HELD_WAIT = 0.016


def _sources(worker: Any) -> dict:
    found = getattr(worker, "kafka_sources", None)
    if found is None:
        found = worker.kafka_sources = {}
    return found


def _waits(state: KafkaSourceState, worker: Any, dataflow: int) -> str:
    """What a source holding the frontier waits for (timely.stall): credit, or the
    partitions whose next epoch has not had its marker, and where they read."""
    if worker.credit_exhausted(dataflow):
        credit = worker.allocator.credit
        over = max(credit.over, key=lambda w: w.in_flight)
        return (f"credit: {over.in_flight} bytes sent to worker {over.target} are not acknowledged "
                f"(--exchange-credit {credit.limit})")
    flow = state.flow
    if flow is not None and flow.holding:
        return (f"read-ahead: it read {flow.buffered} bytes from epoch {flow.frontier} on, which the "
                f"dataflow has not finished (--source-read-ahead {flow.limit})")
    behind = sorted((part.bound() if part.bound() is not None else -1, tp) for tp, part in state.parts.items())
    if not behind:
        return "no partition to read"
    least = behind[0][0]
    names = [f"{t}[{p}]" for e, (t, p) in behind if e == least]
    if least < 0:
        return f"nothing read yet from {', '.join(names)}"
    return f"the marker of epoch {least} on {', '.join(names)}"


def kafka_source(scope: Any, brokers: Brokers, topics: Union[str, Iterable[str]], *,
                 group_id: Optional[str] = None, starting_offsets: Any = "earliest",
                 add_config: Optional[dict] = None, batch_size: int = 10_000,
                 value_format: Union[str, Format] = "json", end_epoch: Optional[int] = None,
                 epochs: str = "markers", epoch_records: Optional[int] = None,
                 epoch_ms: Optional[float] = None, dead_letter_topic: Optional[str] = None,
                 idle_poll: float = 0.002, fields: Optional[Sequence[str]] = None,
                 early: bool = False, read_ahead: Optional[int] = None, name: str = "KafkaSource") -> Any:
    """A stream of the topics' events, each at its epoch (see the module docstring).

    ``group_id``: the consumer group that offsets are committed to (by ``kafka_commit``)
    and resumed from; ``end_epoch``: finish once every partition completed every epoch
    before it (None: run until the dataflow is dropped); ``dead_letter_topic``: where
    values that do not decode go, instead of failing the dataflow; ``idle_poll``: the
    longest (s) a source that found nothing waits before polling again (it waits 1 ms,
    then twice as long each time up to this, and the worker parks meanwhile, woken at
    once by its other inputs): what a record that arrives while the stream is quiet
    may wait, against the CPU a quiet worker spends; ``fields``: give each event as the
    tuple of these fields, in this order (events are objects; one without a field is
    undecodable, and goes where a value that does not decode goes), taken as the record
    is read: cheaper than a ``map`` after the source (JSON values decode straight into
    the tuples, the events' other fields skipped: ``projection``), and an epoch's events
    wait for their marker as tuples, not whole objects; ``early``: hand each record on
    as it is read instead of at its epoch's marker, and withdraw those the marker does
    not count (``timely.dataflow.withdrawal``): the records cross the exchange while
    the epoch is still being written, and its marker only moves the frontier. Only
    ``stateful_unary`` / ``stateful_binary`` may read such a stream. ``read_ahead``:
    the bytes of record values each worker's source may have read past what the
    dataflow has finished (``timely.connectors.kafka.read_ahead``; None: the
    configuration's ``--source-read-ahead``, 0: no bound).
    """
    topics = [topics] if isinstance(topics, str) else list(topics)
    if not topics:
        raise ValueError("kafka_source: give at least one topic")
    if epochs not in ("markers", "ingestion"):
        raise ValueError(f"kafka_source: epochs must be 'markers' or 'ingestion', got {epochs!r}")
    if epochs == "ingestion" and not (epoch_records or epoch_ms):
        raise ValueError("kafka_source: epochs='ingestion' needs epoch_records or epoch_ms")
    if epochs == "markers" and (epoch_records or epoch_ms):
        raise ValueError("kafka_source: epoch_records / epoch_ms apply only to epochs='ingestion'")
    if early and epochs != "markers":
        raise ValueError("kafka_source: early=True hands records on before their epoch's marker; "
                         "with epochs='ingestion' there are no markers, and records go on as read")
    if not isinstance(idle_poll, (int, float)) or not idle_poll > 0:
        raise ValueError(f"kafka_source: idle_poll must be a positive number of seconds, got {idle_poll!r}")
    if fields is not None:
        if isinstance(fields, (str, bytes)) or not all(isinstance(f, str) for f in fields) or not len(fields):
            raise ValueError(f"kafka_source: fields must be a non-empty sequence of field names, such as "
                             f"('page', 'user'), got {fields!r}")
        if len(set(fields)) != len(fields):
            raise ValueError(f"kafka_source: fields names a field twice: {fields!r}")
    if type(scope.minimum) is not int:
        raise TypeError(f"kafka_source: epochs are ints, but scope {scope.name!r} has timestamps "
                        f"like {scope.minimum!r}")
    if read_ahead is not None and (type(read_ahead) is not int or read_ahead < 0):
        raise ValueError(f"kafka_source: read_ahead must be a number of bytes (0: no bound), got {read_ahead!r}")
    fmt = format_of(value_format)
    worker = scope.worker
    if read_ahead is None:
        read_ahead = worker.config.source_read_ahead
    builder = scope.operator(name)
    builder.set_notify(False)
    # Partitions follow the workers: the worker reading one hands it (as a record at its
    # capability's time) to its new owner when a process joins or leaves; the receiver
    # holds a capability from the record it received, so the frontier stays exact.
    handle, handed = scope.feedback(1)
    hand_in = builder.new_input(handed, Direct(lambda h: h[0]))
    out, stream = builder.new_output()
    stream.withdraws = bool(early)
    hand_out, handoffs = builder.new_output()
    handoffs.connect_loop(handle)
    node = builder.index
    info = OperatorInfo(builder)
    activate = info.activator(worker)
    path = info.path
    workers = [] if worker.is_joiner else worker.initial_workers
    state = KafkaSourceState(brokers, topics, group_id, starting_offsets, add_config, fmt,
                             worker.index, workers, dead_letter_topic, end_epoch,
                             resume_at_marker=epochs == "markers", fields=fields,
                             read_ahead=read_ahead or None)
    if worker.config.metrics_port:
        state.ends = {}
    _sources(worker)[(scope.path, stream.source.node)] = state
    worker.checkpoint_context.add_source(state)
    if worker.stall is not None:
        worker.stall.waits(path, lambda: _waits(state, worker, scope.path[0]))

    completion: list = []

    def frontier() -> Optional[int]:
        # what the dataflow has finished downstream of this source (its graph is built
        # once the program's build function returned, before the first schedule)
        if not completion:      # an end's frontier moving brings a held source back at once
            completion.append(Completion(scope_subgraph(worker, scope.path), node, activate))
            if not completion[0].ports:     # nothing downstream ends: nothing to wait for
                state.flow = None
        return completion[0].frontier()

    def constructor(caps):
        held = Capabilities(caps)
        holder = {"cap": held, "idle": False, "held": False, "routing": None, "moving": False, "wait": 0.0,
                  "credit": lambda: worker.credit_exhausted(scope.path[0])}
        if not state.parts:
            held.drop()
            holder["cap"] = None

        def hand_off() -> None:
            # between reading and moving the capability on: a partition that was just
            # completed can still go at the epoch before its next one
            if holder["moving"]:
                holder["moving"] = _hand_off(state, hand_out, out, holder["cap"], worker.routing_workers,
                                             epochs == "markers")
            if not state.parts:                 # every partition was handed on
                holder["cap"].drop()
                holder["cap"] = None

        if epochs == "markers":
            step = _marker_step(state, out, holder, batch_size, end_epoch, hand_off, early, frontier)
        else:
            step = _ingestion_step(state, out, holder, batch_size, end_epoch, epoch_records, epoch_ms,
                                   hand_off, frontier)

        def logic():
            taken = False
            for cap, records in hand_in:
                for handoff in records:
                    state.take(handoff)
                taken = True
                if holder["cap"] is None or cap.time < holder["cap"].time:
                    if holder["cap"] is not None:
                        holder["cap"].drop()
                    holder["cap"] = Capabilities([cap.retain_for_output(0), cap.retain_for_output(1)])
            if holder["cap"] is None:
                return
            if taken or worker.routing_workers is not holder["routing"]:
                # a partition sent by a worker that had not yet seen the latest join or
                # leave goes on to its owner at once
                holder["routing"] = worker.routing_workers
                holder["moving"] = True
            step()
            if holder["cap"] is None:
                if state.flow is not None:          # read to its end here: nothing more to hold
                    state.flow.complete(None)
                return
            if holder["held"]:
                # no credit: the dataflow finishing an epoch activates the source again (an
                # acknowledgement of exchange credit does not: look again 1, 2, 4 ... ms later)
                holder["wait"] = min(_HELD_WAIT, max(_FIRST_IDLE_WAIT, 2 * holder["wait"]))
                worker.activations.activate_after(path, holder["wait"])
            elif holder["idle"]:            # nothing came: poll again later, the worker parks
                holder["wait"] = min(idle_poll, max(_FIRST_IDLE_WAIT, 2 * holder["wait"]))
                worker.activations.activate_after(path, holder["wait"])
            else:
                holder["wait"] = 0.0
                activate()
        activate()
        return logic
    builder.build(constructor)
    return stream
