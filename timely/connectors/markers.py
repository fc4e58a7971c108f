"""Where the epoch-end markers of some partitions are: read once, then incrementally.

A ``MarkerIndex`` reads partitions with a consumer (to their ends, which librdkafka's
end-of-partition event finds even where Tansu's ``end_offsets`` is wrong) and looks only
at records with an empty value, feeding their markers to one ``PartitionEpochs`` per
partition. It answers: the last epoch complete in a partition (``states[tp].completed``),
in all of them (``cutoff``), and the offset just after a given epoch's marker (``ends``).
Used by the Spark reader's driver to plan complete epochs and by the Kafka sink to find,
on start-up, the epochs a previous run already wrote. Cost: one pass over the records
not read before; O(markers) memory.
"""
from __future__ import annotations

from typing import Optional, Sequence

from confluent_kafka import Consumer

from . import client, epochs

TopicPart = tuple[str, int]


def is_marker(headers: epochs.Headers) -> bool:
    return bool(headers) and any(name == epochs.MARKER for name, _ in headers)


class MarkerIndex:
    """The epoch-end markers of some partitions, read incrementally by the driver.

    One ``PartitionEpochs`` per partition is fed the markers only: its ``completed`` is
    the partition's last complete epoch, its ``commit_points`` the offsets just after
    each marker, and it raises if a marker goes back in time."""

    def __init__(self) -> None:
        self.states: dict[TopicPart, epochs.PartitionEpochs] = {}
        self.positions: dict[TopicPart, int] = {}

    def read(self, consumer: Consumer, starts: dict[TopicPart, int],
             limits: Optional[dict[TopicPart, int]] = None) -> None:
        """Read each partition of ``starts`` from where the last read stopped (``starts``
        for one not read before) to its end, or to ``limits`` where given."""
        limits = limits or {}
        unread = {}
        for tp, start in starts.items():
            if tp not in self.states:
                self.states[tp] = epochs.PartitionEpochs(*tp)
                self.positions[tp] = start
            limit = limits.get(tp)
            if limit is None or self.positions[tp] < limit:
                unread[tp] = self.positions[tp]
        unlimited = sum(1 for tp in unread if tp not in limits)
        waiting = {tp for tp in unread if tp in limits}
        for messages in client.scan(consumer, unread):
            for m in messages:
                tp = (m.topic(), m.partition())
                offset = m.offset()
                limit = limits.get(tp)
                if limit is not None and offset >= limit:
                    waiting.discard(tp)
                    continue
                self.positions[tp] = offset + 1
                # A marker's value is empty: only those records' headers are looked at.
                if not m.value():
                    headers = m.headers()
                    if is_marker(headers):
                        self.states[tp].record(offset, headers, None)
                if limit is not None and offset + 1 >= limit:
                    waiting.discard(tp)
            if not unlimited and not waiting:
                break

    def cutoff(self, parts: Sequence[TopicPart]) -> Optional[int]:
        """The last epoch complete in every one of ``parts`` (None: some has none)."""
        return epochs.complete_epochs(self.states[tp] for tp in parts)

    def ends(self, starts: dict[TopicPart, int], epoch: int) -> dict[TopicPart, int]:
        """Per partition, the offset just after its last marker of an epoch <= ``epoch``
        (its start if it has none past the start)."""
        ends = {}
        for tp, start in starts.items():
            after = self.states[tp].commit_offset(epoch)
            ends[tp] = start if after is None or after < start else after
        return ends

    def forget(self, upto: dict[TopicPart, int]) -> None:
        """Drop the markers at or before the offsets ``upto`` (they were read)."""
        for tp, offset in upto.items():
            state = self.states.get(tp)
            if state is not None:
                done = [e for e, after in state.commit_points if after <= offset]
                if done:
                    state.forget_commits(done[-1])

    def largest_within(self, starts: dict[TopicPart, int], cutoff: int, limit: int) -> int:
        """The largest epoch <= ``cutoff`` whose ends lie at most ``limit`` offsets past
        ``starts`` in total, or the least epoch past the starts if even that is over."""
        points = {tp: [pt for pt in self.states[tp].commit_points if pt[1] > starts[tp]]
                  for tp in starts}
        candidates = sorted({e for pts in points.values() for e, _ in pts if e <= cutoff})
        index = dict.fromkeys(starts, 0)
        ends = dict(starts)
        chosen = None
        for epoch in candidates:
            for tp, pts in points.items():
                i = index[tp]
                while i < len(pts) and pts[i][0] <= epoch:
                    ends[tp] = pts[i][1]
                    i += 1
                index[tp] = i
            if chosen is not None and sum(ends[tp] - starts[tp] for tp in starts) > limit:
                break
            chosen = epoch
        return cutoff if chosen is None else chosen
