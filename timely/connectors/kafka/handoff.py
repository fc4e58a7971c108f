"""A Kafka source's partitions follow the workers: the hand-off of a partition to its owner.

When a process joins or leaves, the worker reading a partition hands it to its new
owner as a record (``KafkaSourceState.release``, over a feedback edge that adds one to
its time, just before the partition's next unfinished epoch), carrying the offset just
past the last marker it read and the commit points not yet committed; the receiver
takes its capability from that record (``KafkaSourceState.take``) and reads on from
there. Records of the unfinished epoch are read again there and dropped here (those
handed on early are withdrawn here): none is lost or given twice.

``_hand_off`` gives away the partitions this worker no longer owns; the source's two
capabilities (records, hand-offs) move together as one ``Capabilities``.

Costs: per partition moved, one small record and one (un)assign, plus a withdrawal of
the records of its unfinished epochs handed on early; O(partitions) to find them.
"""
from __future__ import annotations

from typing import Any, Sequence

from ...dataflow.capability import Capabilities
from .source_state import KafkaSourceState


def _hand_off(state: KafkaSourceState, out: Any, data: Any, cap: Capabilities, routing: Sequence[int],
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
