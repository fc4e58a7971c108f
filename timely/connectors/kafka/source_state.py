"""One worker's share of a Kafka source: its consumer, its partitions' epochs, decoding.

``KafkaSourceState`` is what ``kafka_source`` (``timely.connectors.kafka.source``)
builds per worker: the consumer of the partitions this worker reads (``owners``
spreads them: partition i of the sorted list goes to the i-th worker, round robin),
each partition's epochs until their markers (``timely.connectors.epochs``), the
decoding of their values (and projection to ``fields``), the dead-letter topic, the
early hand-on and its withdrawals, a partition's ``release`` to its new owner and its
``take`` there, and the commit of the offsets where complete epochs end.

Costs: one ``consume`` per ``poll`` (up to ``batch_size`` records); the records that
still wait for their marker are decoded (and projected to ``fields``) in one call per
partition after each poll, or an epoch's records when its marker comes in the same
poll: the marker of a live stream only hands decoded events on, and a backlog is
decoded one epoch at a time. An epoch waiting for its marker takes its events' memory.
A withdrawal costs decoding its records again; a ``release`` or ``take`` one small
record and one (un)assign; ``commit`` one synchronous commit of the partitions whose
offsets moved, on a thread of its own (the worker waits for it, or with ``wait=False``
goes on until the next commit). With a read-ahead bound (``flow``,
``timely.connectors.kafka.read_ahead``) a poll reads one step's bytes, and ``regulate``
pauses or resumes partitions in the client when the bound says: O(partitions) per step.
"""
from __future__ import annotations

import time
from typing import Any, Iterable, Optional, Sequence

from broker import health

from ...dataflow.withdrawal import Withdrawal
from ..client import (Brokers, ConnectorError, brokers_string, consumer_config, log, producer_config,
                      topic_partitions)
from ..epochs import JSON, DecodeError, Format, PartitionEpochs, Undecodable
from .projection import Rows, json_projection, projection
from .read_ahead import ReadAhead, client_settings


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


def _partitions(tps: Iterable[tuple[str, int]]) -> list:
    """``(topic, partition)`` pairs as the client's ``TopicPartition``s."""
    from confluent_kafka import TopicPartition
    return [TopicPartition(*tp) for tp in tps]


class KafkaSourceState:
    """One worker's share of a Kafka source: its consumer and its partitions' epochs."""

    def __init__(self, brokers: Brokers, topics: Sequence[str], group_id: Optional[str],
                 starting_offsets: Any, add_config: Optional[dict], value_format: Format,
                 worker_index: int, workers: Sequence[int], dead_letter_topic: Optional[str],
                 end_epoch: Optional[int] = None, resume_at_marker: bool = False,
                 fields: Optional[Sequence[Any]] = None, read_ahead: Optional[int] = None) -> None:
        from confluent_kafka import Consumer, TopicPartition
        self.brokers = brokers
        #: the read-ahead bound (``read_ahead`` bytes; None: read whatever the client holds)
        self.flow: Optional[ReadAhead] = ReadAhead(read_ahead) if read_ahead else None
        #: the fields each event is projected to (a tuple in this order), or None: whole events
        self.fields = None if fields is None else tuple(fields)
        self._project = None if fields is None else projection(self.fields)
        #: JSON values decoded straight into the fields' tuples (None: decode, then project)
        self._decode_projected = (json_projection(self.fields, self._decode_then_project)
                                  if value_format is JSON and self.fields else None)
        #: epochs from here on are read but not given to the dataflow: never committed
        self.end_epoch = end_epoch
        self.group_id = group_id
        #: the commit in flight (a Future), when ``commit`` did not wait for it
        self._committing: Optional[Any] = None
        self.format = value_format
        if self.flow is not None:     # the client's own prefetch in proportion, unless add_config says
            add_config = {**client_settings(self.flow.limit), **(add_config or {})}
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
        if self.flow is not None:       # everything is read again from here
            if self.flow.paused:
                self.consumer.resume(_partitions(self.flow.paused))
            self.flow.reset()
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

    def regulate(self, next_epochs: dict, frontier: Optional[int], batch_size: int) -> int:
        """How many records this step reads under the read-ahead bound (0: hold), given
        each partition's next unfinished epoch and the dataflow's completion frontier;
        pauses and resumes partitions in the client as ``ReadAhead.plan`` says."""
        pause, resume, n = self.flow.plan(next_epochs, frontier, batch_size)
        if resume:
            self.consumer.resume(_partitions(resume))
        if pause:
            self.consumer.pause(_partitions(pause))
        return n

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
        self.settle()               # its new owner's commits must land after this one's
        part = self.parts.pop(tp)
        resumed = self.resumed.pop(tp, None)
        if self.flow is not None:
            self.flow.forget(tp)
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
    def commit(self, upto: Optional[int], wait: bool = True) -> int:
        """Commit, per partition, the offset past the last marker of an epoch ``<= upto``
        (None: every complete epoch); returns how many partitions moved. With ``wait``
        False the worker goes on while the commit is in flight; the next commit, a
        ``release`` and ``close`` first wait for it (commits land in order) and raise
        its error."""
        from confluent_kafka import TopicPartition
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
            self.settle()
            # a synchronous commit has no timeout of its own: it waits for a lost broker
            # for ever, so it runs on a thread of its own, waited for where the broker
            # timeout bounds it
            address = brokers_string(self.brokers)
            self._committing = health.in_background(lambda: health.retrying(
                address, lambda: self.consumer.commit(offsets=offsets, asynchronous=False)))
            if wait:
                self.settle()
        return len(offsets)

    def settle(self) -> None:
        """Wait for the commit in flight, if any, and raise its error."""
        from confluent_kafka import KafkaException
        future, self._committing = self._committing, None
        if future is None:
            return
        address = brokers_string(self.brokers)
        try:
            health.awaited(address, future, f"the commit of group {self.group_id!r}")
        except KafkaException as exc:
            raise ConnectorError(f"committing offsets of group {self.group_id!r} to "
                                 f"{address}: {exc.args[0].str()}") from None

    def close(self, quiet: bool = False, timeout: float = 5.0) -> None:
        """Wait for the commit in flight and close the consumer. ``quiet`` (the dataflow
        is torn down after a failure): wait at most ``timeout`` s and log a failed
        commit instead of raising it; one still in flight then keeps the consumer open
        (closing it under a running call is not safe)."""
        if not quiet:
            self.settle()
            self.consumer.close()
            return
        future, self._committing = self._committing, None
        if future is not None:
            try:
                future.result(timeout)
            except TimeoutError:
                log.warning("worker %d: an offsets commit was still in flight when the dataflow was torn "
                            "down; its consumer stays open (the checkpoint holds the positions)", self.index)
                return
            except Exception as exc:  # noqa: BLE001 - logged: the checkpoint holds the positions
                log.warning("worker %d: the last offsets commit failed while the dataflow was torn down "
                            "(the checkpoint holds its positions): %s", self.index, exc)
        self.consumer.close()
