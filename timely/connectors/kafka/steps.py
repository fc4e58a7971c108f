"""A Kafka source's step, once per activation: read, give epochs, move the capability.

``kafka_source`` (``timely.connectors.kafka.source``) builds one of these per worker:

- ``_marker_step`` (``epochs="markers"``): a record is given to the dataflow when its
  epoch's marker is read; with ``early=True`` as soon as it is read and decoded
  (``KafkaSourceState.hand_on_early``), its marker withdrawing those it does not count.
  The capability is the least, over the partitions, of the next unfinished epoch.
- ``_ingestion_step`` (``epochs="ingestion"``, topics without markers): records are
  stamped with the time they were read (epochs are milliseconds since 1970, a new one
  every ``epoch_records`` records or ``epoch_ms`` ms).

Each step calls ``hand_off`` (``timely.connectors.kafka.handoff``) between reading and
moving the capability on. A step reads nothing while the dataflow's exchange credit
toward another process is used up (``timely.communication.credit``). Under a read-ahead
bound (``timely.connectors.kafka.read_ahead``) a step first asks how much it may read
(``_read``), given the dataflow's completion frontier, and counts the bytes it read by
epoch. Costs: one ``poll`` of the source's
state, O(records read) to file them by partition and epoch, and (markers)
O(partitions) to find the least epoch.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from .source_state import KafkaSourceState


def _read(state: KafkaSourceState, holder: dict, batch_size: int, next_epochs: Callable[[], dict],
          frontier: Callable[[], Optional[int]]) -> list:
    """This step's messages: ``batch_size`` of them, or under the read-ahead bound what
    it allows; none while the dataflow's exchange credit is used up (``holder["credit"]``,
    a callable) or the bound holds (``holder["held"]`` either way)."""
    if holder["credit"]():
        holder["held"] = True
        return []
    if state.flow is None:
        holder["held"] = False
        return state.poll(batch_size)
    n = state.regulate(next_epochs(), frontier(), batch_size)
    holder["held"] = not n
    return state.poll(n) if n else []


def _marker_step(state: KafkaSourceState, out: Any, holder: dict, batch_size: int,
                 end_epoch: Optional[int], hand_off: Callable[[], None],
                 early: bool, frontier: Callable[[], Optional[int]]) -> Callable[[], None]:
    parts = state.parts
    resumed = state.resumed

    def next_epochs() -> dict:
        return {tp: part.bound() for tp, part in parts.items()}

    def step():
        messages = _read(state, holder, batch_size, next_epochs, frontier)
        holder["idle"] = not messages
        cap = holder["cap"]
        flow = state.flow
        read = 0
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
            value = m.value()
            for epoch, records in part.record(m.offset(), m.headers(), value):
                if end_epoch is not None and epoch >= end_epoch:
                    continue
                state.give(out, cap, state.events(key[0], key[1], records), epoch)
            if part.withdrawn:
                state.withdraw(out, cap, key, part.withdrawn)
            if flow is not None and value:
                flow.count(part.last_epoch, len(value))
                read += len(value)
        if flow is not None:
            flow.read(len(messages), read)
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
                    epoch_ms: Optional[float], hand_off: Callable[[], None],
                    frontier: Callable[[], Optional[int]]) -> Callable[[], None]:
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
        messages = _read(state, holder, min(batch_size, epoch_records or batch_size),
                         lambda: dict.fromkeys(parts, clock["epoch"]), frontier)
        holder["idle"] = not messages
        batches: dict = {}
        read = 0
        for m in messages:
            if m.error() is not None:
                continue
            key = (m.topic(), m.partition())
            if key not in parts:
                continue
            parts[key].position = m.offset() + 1
            value = m.value()
            read += len(value) if value else 0
            batches.setdefault(key, []).append((m.offset(), value, None))
        if state.flow is not None:
            state.flow.count(clock["epoch"], read)
            state.flow.read(len(messages), read)
        for (topic, partition), records in batches.items():
            state.give(out, holder["cap"], state.events(topic, partition, records))
            clock["count"] += len(records)
        if ((epoch_records and clock["count"] >= epoch_records)
                or (epoch_ms and (time.monotonic() - clock["started"]) * 1000 >= epoch_ms)):
            advance()
    return step
