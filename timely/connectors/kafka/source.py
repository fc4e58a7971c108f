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

Costs: a hand-off is one small record and one (un)assign per partition moved; the
source does one ``consume`` per activation (up to ``batch_size`` records),
buffers an epoch per partition until its marker, and decodes (and projects to
``fields``) in one call per partition the records that still wait for their marker
after each ``consume``, or an epoch's records when its marker comes in the same
``consume``: the marker of a live stream only hands decoded events on, and a backlog is
decoded one epoch at a time. An epoch waiting for its marker takes its events' memory.
``early`` hands the decoded records on after each ``consume`` instead (one batch per
partition and epoch); a withdrawal costs decoding its records again.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Optional, Sequence, Union

from ...dataflow.channels import Direct
from ...dataflow.operators import OperatorInfo
from ...dataflow.withdrawal import Withdrawal
from ..client import (Brokers, ConnectorError, brokers_string, consumer_config, log, producer_config,
                      topic_partitions)
from ..epochs import JSON, DecodeError, Format, PartitionEpochs, Undecodable, format_of
from .projection import Rows, json_projection, projection

__all__ = ["kafka_source", "KafkaSourceState"]

#: an idle source polls again after 1 ms, then 2, 4, ... up to its ``idle_poll`` (s)
_FIRST_IDLE_WAIT = 0.001


def _sources(worker: Any) -> dict:
    found = getattr(worker, "kafka_sources", None)
    if found is None:
        found = worker.kafka_sources = {}
    return found


def _starting(starting_offsets: Any, topic: str, partition: int) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END
    if starting_offsets == "earliest":
        return OFFSET_BEGINNING
    if starting_offsets == "latest":
        return OFFSET_END
    if isinstance(starting_offsets, dict):
        by_topic = starting_offsets.get(topic, {})
        found = by_topic.get(partition, by_topic.get(str(partition)))
        return OFFSET_BEGINNING if found is None else int(found)
    raise ValueError(f"starting_offsets must be 'earliest', 'latest' or "
                     f"{{topic: {{partition: offset}}}}, got {starting_offsets!r}")


class KafkaSourceState:
    """One worker's share of a Kafka source: its consumer and its partitions' epochs."""

    def __init__(self, brokers: Brokers, topics: Sequence[str], group_id: Optional[str],
                 starting_offsets: Any, add_config: Optional[dict], value_format: Format,
                 worker_index: int, workers: Sequence[int], dead_letter_topic: Optional[str],
                 end_epoch: Optional[int] = None, resume_at_marker: bool = False,
                 fields: Optional[Sequence[Any]] = None) -> None:
        from confluent_kafka import Consumer, TopicPartition
        self.brokers = brokers
        #: the fields each event is projected to (a tuple in this order), or None: whole events
        self.fields = None if fields is None else tuple(fields)
        self._project = None if fields is None else projection(self.fields)
        #: JSON values decoded straight into the fields' tuples (None: decode, then project)
        self._decode_projected = (json_projection(self.fields, self._decode_then_project)
                                  if value_format is JSON and self.fields else None)
        #: epochs from here on are read but not given to the dataflow: never committed
        self.end_epoch = end_epoch
        self.group_id = group_id
        self.format = value_format
        self.consumer = Consumer(consumer_config(brokers, group_id, add_config))
        counts = topic_partitions(self.consumer, brokers, topics)
        #: every partition of the topics, in the order ``owners`` spreads them
        self.every = [(t, p) for t in sorted(counts) for p in range(counts[t])]
        mine = [tp for tp, w in self.owners(workers).items() if w == worker_index] if workers else []
        self.index = worker_index
        self.handed_off = 0          # partitions given to another worker / taken from one
        self.taken = 0
        self.parts: dict[tuple[str, int], PartitionEpochs] = {tp: PartitionEpochs(*tp) for tp in mine}
        starts = {}
        #: partitions resumed from a committed offset: (topic, partition) -> that offset
        self.resumed: dict[tuple[str, int], int] = {}
        if mine:
            committed = {}
            if group_id is not None:
                found = self.consumer.committed([TopicPartition(t, p) for t, p in mine], timeout=10)
                committed = {(c.topic, c.partition): c.offset for c in found if c.offset >= 0}
            for t, p in mine:
                starts[(t, p)] = committed.get((t, p), _starting(starting_offsets, t, p))
            self.starts = starts
            self._assign(committed if resume_at_marker else {})
        self.starts = starts
        self.resume_at_marker = resume_at_marker
        self.dead_letter_topic = dead_letter_topic
        self._dlq = None
        self.records = 0            # events given to the dataflow (less those withdrawn)
        self.withdrawals = 0        # events given early, then withdrawn
        self.dead_letters = 0
        #: with metrics on: each partition's end offset as last fetched (None: not tracked)
        self.ends: Optional[dict] = None
        self._ends_at = 0.0

    def _assign(self, resume: dict) -> None:
        """Read this worker's partitions from ``starts``; where ``resume`` has the offset
        (one just past a marker), read that marker first, so the epoch it completed is
        known and a replay of that epoch is dropped."""
        from confluent_kafka import TopicPartition
        self.resumed.clear()            # in place: the reading step holds these dicts
        self.resumed.update((tp, o) for tp, o in resume.items() if o > 0 and tp in self.parts)
        self.consumer.assign([TopicPartition(t, p, o - 1 if (t, p) in self.resumed else o)
                              for (t, p), o in self.starts.items()])

    def restart_at(self, positions: dict) -> None:
        """Read on from a checkpoint's ``positions`` ((topic, partition) -> the offset
        where its epochs from the restore point begin) instead of the group's offsets."""
        if not self.parts:
            return
        for tp in self.parts:
            self.parts[tp] = PartitionEpochs(*tp)
            self.starts[tp] = positions[tp]
        self._assign(dict(self.starts) if self.resume_at_marker else {})

    # ---- reading ---------------------------------------------------------------------------
    def poll(self, batch_size: int) -> list:
        """The messages the consumer holds now, without waiting (the source asks to run
        again later when there are none; errors other than end-of-partition raise)."""
        from confluent_kafka import KafkaError
        messages = self.consumer.consume(batch_size, 0)
        if self.ends is not None and time.monotonic() >= self._ends_at:
            self._read_ends()
        for m in messages:
            error = m.error()
            if error is not None and error.code() != KafkaError._PARTITION_EOF:
                raise ConnectorError(f"reading {m.topic()}[{m.partition()}] from "
                                     f"{brokers_string(self.brokers)}: {error.str()}")
        return messages

    def _read_ends(self) -> None:
        """The high watermarks the consumer last fetched, for the metrics' lag: read here,
        on the worker's thread, since a call on the consumer from another thread waits
        for the consumer's lock, which its polls hold."""
        from confluent_kafka import TopicPartition
        self._ends_at = time.monotonic() + 1.0
        for tp in list(self.parts):
            try:
                end = self.consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)[1]
            except Exception:           # noqa: BLE001 - nothing fetched yet: no figure
                continue
            if end is not None and end >= 0:
                self.ends[tp] = end

    def prepare(self, values: list) -> list:
        """Each value decoded (and projected to ``fields``), one item per value: its
        event, its list of events if packed, or an ``Undecodable``."""
        if self._decode_projected is not None:
            return self._decode_projected(values)
        return self._decode_then_project(values)

    def _decode_then_project(self, values: list) -> list:
        items = self.format.decode_each(values)
        if self._project is not None:
            items = self._project(items)
        return items

    def prepare_pending(self, part: PartitionEpochs) -> None:
        """Decode the records of ``part`` that wait for their marker: done after each
        poll, so when the marker comes the epoch is decoded and the marker only hands its
        events on. Records whose marker came in the same poll were decoded with their
        epoch instead, one epoch at a time: a backlog is never decoded all at once."""
        for records in part.pending.values():
            self._decode_tail(records)

    def _decode_tail(self, records: list) -> None:
        """Decode, in place, the records [(offset, value, rows)] not yet decoded (the
        value becomes ``(value, item)``, item from ``prepare``): they are the list's
        tail, since a list is decoded up to its end after each poll."""
        k = len(records)
        while k and type(records[k - 1][1]) is not tuple:
            k -= 1
        if k < len(records):
            for j, item in enumerate(self.prepare([r[1] for r in records[k:]]), k):
                offset, value, n = records[j]
                records[j] = (offset, (value, item), n)

    def events(self, topic: str, partition: int, records: list, dead_letters: bool = True) -> list:
        """The events of ``records`` [(offset, value or (value, item), rows)], those not
        yet decoded decoded now (in place); a bad one goes to the dead-letter topic if
        one is configured (and ``dead_letters``), and otherwise raises a
        ``DecodeError`` naming it."""
        self._decode_tail(records)
        items = [r[1][1] for r in records]
        rows = [r[2] for r in records]
        if self.fields is not None and rows.count(None):
            # one event per record, but its value was an array: there are no fields to take
            items = [Undecodable(f"value is an array of {len(i)} without header 'rows', not an object "
                                 f"with fields {list(self.fields)}") if n is None and type(i) is Rows else i
                     for i, n in zip(items, rows)]
        offsets = [r[0] for r in records]
        try:
            return Format.flatten(items, rows, topic, partition, offsets)
        except DecodeError:
            if self.dead_letter_topic is None or not dead_letters:
                raise
        events: list = []
        for (offset, (value, item), n) in records:
            try:
                events.extend(Format.flatten([item], [n], topic, partition, [offset]))
            except DecodeError as exc:
                self._dead_letter(topic, partition, offset, value, str(exc))
        return events

    def give(self, out: Any, cap: Any, events: list, epoch: Any = None) -> None:
        """Hand ``events`` to the dataflow at ``epoch`` (None: the capability's time), counted."""
        if events:
            self.records += len(events)
            out.give_batch(cap, events, epoch)

    def early_events(self, topic: str, partition: int, records: list) -> tuple[list, int]:
        """``(events, n)``: the events of ``records``' first ``n`` records, up to the
        first whose value does not decode (all of them when each does), to hand on
        before their marker; a bad value is left for its marker to judge."""
        try:
            return self.events(topic, partition, records, dead_letters=False), len(records)
        except DecodeError as e:
            n = next((i for i, r in enumerate(records) if r[0] == e.offset), 0)
            return (self.events(topic, partition, records[:n]) if n else []), n

    def hand_on_early(self, out: Any, cap: Any, tp: tuple[str, int], part: PartitionEpochs,
                      end_epoch: Optional[int]) -> None:
        """Give the dataflow the records of ``part`` that wait for their marker and were
        not given yet (``kafka_source(early=True)``), at their epochs; a value that does
        not decode holds the rest of its epoch back for the marker."""
        for epoch in sorted(part.pending):
            if end_epoch is not None and epoch >= end_epoch:
                break
            records = part.early(epoch)
            if not records:
                continue
            events, n = self.early_events(tp[0], tp[1], records)
            part.hand_on(epoch, n)
            if n < len(records):
                part.hold_back(epoch)
            self.give(out, cap, events, epoch)

    def withdraw(self, out: Any, cap: Any, tp: tuple[str, int], withdrawn: list) -> None:
        """Take back records given early, ``[(epoch, records)]``, and clear the list."""
        for epoch, records in withdrawn:
            events = self.events(tp[0], tp[1], records)
            if events:
                self.records -= len(events)
                self.withdrawals += len(events)
                out.give_batch(cap, Withdrawal(events), epoch)
                log.info("worker %d withdraws %d events of epoch %s from %s[%d], handed on before "
                         "their marker", self.index, len(events), epoch, tp[0], tp[1])
        withdrawn.clear()

    def _dead_letter(self, topic: str, partition: int, offset: int, value: Any, problem: str) -> None:
        from confluent_kafka import Producer
        if self._dlq is None:
            self._dlq = Producer(producer_config(self.brokers, None))
        self._dlq.produce(self.dead_letter_topic, value, headers=[
            ("error", problem.encode()), ("source.topic", topic.encode()),
            ("source.partition", str(partition).encode()), ("source.offset", str(offset).encode())])
        left = self._dlq.flush(30)
        if left:
            raise ConnectorError(f"dead-letter topic {self.dead_letter_topic!r}: the broker did not "
                                 f"acknowledge the record from {topic}[{partition}] offset {offset}")
        self.dead_letters += 1
        log.warning("dead-lettered %s[%d] offset %d: %s", topic, partition, offset, problem)

    # ---- partitions that follow the workers --------------------------------------------------
    def owners(self, workers: Sequence[int]) -> dict[tuple[str, int], int]:
        """Who reads each partition among ``workers`` (the workers routed to): partition i
        of ``every`` goes to ``workers[i % len(workers)]``."""
        return {tp: workers[i % len(workers)] for i, tp in enumerate(self.every)}

    def release(self, tp: tuple[str, int], target: int) -> list:
        """Stop reading ``tp`` and describe it for ``target``, who reads on from where
        the epochs this worker gave to the dataflow end: just past the marker of the last
        complete epoch (records read beyond it are dropped here and read again there),
        with the commit points not yet committed."""
        from confluent_kafka import TopicPartition
        part = self.parts.pop(tp)
        resumed = self.resumed.pop(tp, None)
        if resumed is not None:             # nothing read yet: the marker before it first
            offset = resumed - 1
        elif part.resume is not None:
            offset = part.resume
        elif part.pending:                  # no marker read yet: from its first record
            offset = min(r[0] for records in part.pending.values() for r in records)
        elif part.position is not None:     # ingestion epochs: nothing is held back
            offset = part.position
        else:
            offset = self.starts[tp]
        self.consumer.incremental_unassign([TopicPartition(*tp)])
        self.handed_off += 1
        log.info("worker %d hands %s[%d] to worker %d at offset %d (epochs after %s)",
                 self.index, tp[0], tp[1], target, offset, part.completed)
        return [target, tp[0], tp[1], offset, part.completed, part.commit_points, resumed]

    def take(self, handoff: list) -> None:
        """Read on a partition another worker ``release``d to this one."""
        from confluent_kafka import TopicPartition
        _, topic, partition, offset, completed, commit_points, resumed = handoff
        tp = (topic, partition)
        part = PartitionEpochs(topic, partition, completed)
        part.commit_points = [tuple(p) for p in commit_points]
        part.resume = offset if completed is not None else None
        self.parts[tp] = part
        self.starts[tp] = offset
        if resumed is not None:       # the committed offset's marker is still to be read
            self.resumed[tp] = resumed
        self.consumer.incremental_assign([TopicPartition(topic, partition, offset)])
        self.taken += 1

    # ---- committing ------------------------------------------------------------------------
    def commit(self, upto: Optional[int]) -> int:
        """Commit, per partition, the offset past the last marker of an epoch ``<= upto``
        (None: every complete epoch); returns how many partitions moved."""
        from confluent_kafka import KafkaException, TopicPartition
        if self.end_epoch is not None:
            upto = self.end_epoch - 1 if upto is None else min(upto, self.end_epoch - 1)
        offsets = []
        for (t, p), state in self.parts.items():
            found = state.commit_offset(upto)
            if found is not None:
                through = state.commit_points[-1][0] if upto is None else upto
                # the epochs the offset ends, beside it: "epoch=E", every epoch before E is done
                offsets.append(TopicPartition(t, p, found, metadata=f"epoch={through + 1}"))
                state.forget_commits(through)
        if offsets and self.group_id is not None:
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                raise ConnectorError(f"committing offsets of group {self.group_id!r} to "
                                     f"{brokers_string(self.brokers)}: {exc.args[0].str()}") from None
        return len(offsets)

    def close(self) -> None:
        self.consumer.close()


def kafka_source(scope: Any, brokers: Brokers, topics: Union[str, Iterable[str]], *,
                 group_id: Optional[str] = None, starting_offsets: Any = "earliest",
                 add_config: Optional[dict] = None, batch_size: int = 10_000,
                 value_format: Union[str, Format] = "json", end_epoch: Optional[int] = None,
                 epochs: str = "markers", epoch_records: Optional[int] = None,
                 epoch_ms: Optional[float] = None, dead_letter_topic: Optional[str] = None,
                 idle_poll: float = 0.002, fields: Optional[Sequence[str]] = None,
                 early: bool = False, name: str = "KafkaSource") -> Any:
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
    ``stateful_unary`` / ``stateful_binary`` may read such a stream.
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
    fmt = format_of(value_format)
    worker = scope.worker
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
    info = OperatorInfo(builder)
    activate = info.activator(worker)
    path = info.path
    workers = [] if worker.is_joiner else worker.initial_workers
    state = KafkaSourceState(brokers, topics, group_id, starting_offsets, add_config, fmt,
                             worker.index, workers, dead_letter_topic, end_epoch,
                             resume_at_marker=epochs == "markers", fields=fields)
    if worker.config.metrics_port:
        state.ends = {}
    _sources(worker)[(scope.path, stream.source.node)] = state
    worker.checkpoint_context.add_source(state)

    def constructor(caps):
        held = _Held(caps)
        holder = {"cap": held, "idle": False, "routing": None, "moving": False, "wait": 0.0}
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
            step = _marker_step(state, out, holder, batch_size, end_epoch, hand_off, early)
        else:
            step = _ingestion_step(state, out, holder, batch_size, end_epoch, epoch_records, epoch_ms,
                                   hand_off)

        def logic():
            taken = False
            for cap, records in hand_in:
                for handoff in records:
                    state.take(handoff)
                taken = True
                if holder["cap"] is None or cap.time < holder["cap"].time:
                    if holder["cap"] is not None:
                        holder["cap"].drop()
                    holder["cap"] = _Held([cap.retain_for_output(0), cap.retain_for_output(1)])
            if holder["cap"] is None:
                return
            if taken or worker.routing_workers is not holder["routing"]:
                # a partition sent by a worker that had not yet seen the latest join or
                # leave goes on to its owner at once
                holder["routing"] = worker.routing_workers
                holder["moving"] = True
            step()
            if holder["cap"] is None:
                return
            if holder["idle"]:              # nothing came: poll again later, the worker parks
                holder["wait"] = min(idle_poll, max(_FIRST_IDLE_WAIT, 2 * holder["wait"]))
                worker.activations.activate_after(path, holder["wait"])
            else:
                holder["wait"] = 0.0
                activate()
        activate()
        return logic
    builder.build(constructor)
    return stream


class _Held:
    """The source's capability: one for its records and one for its hand-offs, moved
    together (what ``OutputPort`` asks of a capability: ``time``, ``covers``)."""

    __slots__ = ("caps",)

    def __init__(self, caps: list) -> None:
        self.caps = caps

    @property
    def time(self) -> Any:
        return self.caps[0].time

    @property
    def is_pending(self) -> bool:
        return any(c.is_pending for c in self.caps)

    def covers(self, internal: Any) -> bool:
        return any(c.covers(internal) for c in self.caps)

    def downgrade(self, time: Any) -> None:
        for c in self.caps:
            c.downgrade(time)

    def drop(self) -> None:
        for c in self.caps:
            c.drop()


def _hand_off(state: KafkaSourceState, out: Any, data: Any, cap: _Held, routing: Sequence[int],
              markers: bool) -> bool:
    """Give the partitions this worker reads but no longer owns to their owners; returns
    whether some must wait. Records of a partition's unfinished epochs that were handed
    on early are withdrawn on ``data``: the new owner reads them again.

    The hand-off loops back with timestamps advanced by one, so one at time t lets its
    receiver produce from t + 1 on. A partition whose next unfinished epoch is e goes at
    e - 1, which needs this worker's capability to be before e: the partition holding the
    source back moves once its next marker is read (the epoch contract writes one every
    epoch). Ingestion epochs are the reader's clock: they move at once.
    """
    owners = state.owners(routing)
    waiting = False
    by_time: dict[Any, list] = {}
    for tp in [tp for tp in state.parts if owners[tp] != state.index]:
        if markers:
            bound = state.parts[tp].bound()
            if bound is None or bound <= cap.time:
                waiting = True
                continue
            at = bound - 1
        else:
            at = cap.time
        early = state.parts[tp].handed_early()
        if early:
            state.withdraw(data, cap, tp, early)
        by_time.setdefault(at, []).append(state.release(tp, owners[tp]))
    for at, handoffs in sorted(by_time.items()):
        out.give_batch(cap, handoffs, at)
    out.flush()
    return waiting


def _marker_step(state: KafkaSourceState, out: Any, holder: dict, batch_size: int,
                 end_epoch: Optional[int], hand_off: Callable[[], None],
                 early: bool) -> Callable[[], None]:
    parts = state.parts
    resumed = state.resumed

    def step():
        messages = state.poll(batch_size)
        holder["idle"] = not messages
        cap = holder["cap"]
        touched = set()
        for m in messages:
            if m.error() is not None:
                continue
            key = (m.topic(), m.partition())
            if key not in parts:        # handed to another worker since it was fetched
                continue
            if resumed and key in resumed and m.offset() < resumed.pop(key):
                # the record before the committed offset: only its marker is wanted
                if any(h[0] == "marker" for h in m.headers() or ()):
                    parts[key].record(m.offset(), m.headers(), None)
                continue
            touched.add(key)
            part = parts[key]
            for epoch, records in part.record(m.offset(), m.headers(), m.value()):
                if end_epoch is not None and epoch >= end_epoch:
                    continue
                state.give(out, cap, state.events(key[0], key[1], records), epoch)
            if part.withdrawn:
                state.withdraw(out, cap, key, part.withdrawn)
        for key in touched:
            part = parts.get(key)
            if part is not None and part.pending:
                state.prepare_pending(part)
                if early:
                    state.hand_on_early(out, cap, key, part, end_epoch)
        hand_off()
        if holder["cap"] is None:
            return
        bounds = [p.bound() for p in parts.values()]
        if None in bounds:
            return
        least = min(bounds)
        if end_epoch is not None and least >= end_epoch:
            cap.drop()
            holder["cap"] = None
        elif least > cap.time:
            cap.downgrade(least)
    return step


def _ingestion_step(state: KafkaSourceState, out: Any, holder: dict, batch_size: int,
                    end_epoch: Optional[int], epoch_records: Optional[int],
                    epoch_ms: Optional[float], hand_off: Callable[[], None]) -> Callable[[], None]:
    parts = state.parts
    now_ms = lambda: int(time.time() * 1000)  # noqa: E731
    clock = {"epoch": None, "count": 0, "started": time.monotonic()}

    def catch_up():
        # the first step, or a capability taken with a partition from another worker
        cap = holder["cap"]
        if clock["epoch"] is None or clock["epoch"] < cap.time:
            clock["epoch"] = max(cap.time, now_ms())
        if cap.time < clock["epoch"]:
            cap.downgrade(clock["epoch"])

    def advance():
        epoch = clock["epoch"]
        for p in parts.values():
            if p.position is not None:
                p.completed = epoch
                p.commit_points.append((epoch, p.position))
        clock["epoch"] = max(epoch + 1, now_ms())
        clock["count"] = 0
        clock["started"] = time.monotonic()
        if end_epoch is not None and clock["epoch"] >= end_epoch:
            holder["cap"].drop()
            holder["cap"] = None
        else:
            holder["cap"].downgrade(clock["epoch"])

    def step():
        catch_up()
        hand_off()
        if holder["cap"] is None:
            return
        messages = state.poll(min(batch_size, epoch_records or batch_size))
        holder["idle"] = not messages
        batches: dict = {}
        for m in messages:
            if m.error() is not None:
                continue
            key = (m.topic(), m.partition())
            if key not in parts:
                continue
            parts[key].position = m.offset() + 1
            batches.setdefault(key, []).append((m.offset(), m.value(), None))
        for (topic, partition), records in batches.items():
            state.give(out, holder["cap"], state.events(topic, partition, records))
            clock["count"] += len(records)
        if ((epoch_records and clock["count"] >= epoch_records)
                or (epoch_ms and (time.monotonic() - clock["started"]) * 1000 >= epoch_ms)):
            advance()
    return step

