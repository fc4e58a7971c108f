"""Compaction of the Kafka checkpoint store: ``forget`` dooms topics, then deletes them.

``Forgetting`` is part of ``KafkaStore`` (``timely.checkpoint.kafka_store``), which
inherits it; ``timely.checkpoint.compaction`` decides when to call it and what is
obsolete. ``forget`` drops whole topics: those of the incarnations not kept, and the
closed segments (those with an end marker, so never one a writer anywhere still
appends to) in which every record is an entry ``obsolete`` accepts, or a commit below
its incarnation's latest complete label that no later incarnation restored from. It
only dooms them at first (a mark ``b"D/" + topic`` in ``NS.inc``, which every read
takes in before it fetches a segment, and then leaves the topic out); the first
``forget`` at least ``grace`` seconds later deletes it. Deleting a topic that a
consumer is fetching kills the consumer's process (librdkafka: SIGSEGV, measured
here), and other processes read the store while the lowest one compacts it (a
rollback's restore, a joiner).

Costs: a read of heads (``timely.checkpoint.kafka_reads``), one append of marks, and
one delete request.
"""
from __future__ import annotations

import time
from typing import Any, Callable

from .kafka_layout import _DOOMED, _FORGOTTEN, segment_topic
from .records import Commit, EntryHead, complete_labels


class Forgetting:
    """``forget`` of ``KafkaStore`` (whose state it uses: ``namespace``, ``timeout``,
    ``grace``, ``admin``, ``_writers``, ``_naming``, ``_scan`` and ``_append_inc``)."""

    def forget(self, keep: set, obsolete: Callable[[Any], bool]) -> int:
        """Drop what a restore can no longer need (see the module): the topics of every
        incarnation not in ``keep`` (their incarnation records are marked forgotten),
        and the closed segments of the others that hold only entries whose heads
        ``obsolete`` accepts and commits superseded by a later complete label. A dropped
        topic is doomed at once (every read from then on leaves it out) and deleted by
        the first ``forget`` at least ``grace`` seconds later, when no read that began
        before its doom can still be fetching it. Returns how many records went: those
        of the topics doomed now plus the incarnation records marked."""
        incarnations, forgotten, doomed, segments = self._scan(set(keep), None, heads=True)
        gone = 0
        marks: list[tuple[bytes, bytes]] = []
        dropped = sorted({i.id for i in incarnations if i.id not in keep and i.id not in forgotten})
        marks += [(_FORGOTTEN + inc.encode(), b"") for inc in dropped]
        gone += sum(1 for i in incarnations if i.id in dropped)
        # a commit may go if its label is below its incarnation's latest complete label
        # and no later life restored from it: restore_point finds the same point without it
        commits: dict[str, list] = {}
        for chain in segments.values():
            for _, records, _, _ in chain:
                for r in records:
                    if isinstance(r, Commit):
                        commits.setdefault(r.inc, []).append(r)
        latest = {inc: max(complete_labels(cs), default=None) for inc, cs in commits.items()}
        floors = {(i.parent, i.start) for i in incarnations if i.parent is not None}
        live = {w.topic for w in self._writers}

        def needless(r: Any) -> bool:
            if isinstance(r, EntryHead):
                return obsolete(r)
            top = latest.get(r.inc)
            return top is not None and r.label < top and (r.inc, r.label) not in floors

        now = time.time()
        for (inc, w), chain in segments.items():
            for seg, records, closed, count in chain:
                topic = segment_topic(self.namespace, inc, w, seg)
                if inc not in keep or (closed and topic not in live and all(needless(r) for r in records)):
                    marks.append((_DOOMED + topic.encode(), repr(now).encode()))
                    doomed[topic] = now
                    gone += count
        if marks:
            self._append_inc(marks, "the forgotten and doomed marks")
        due = [t for t, when in doomed.items() if now - when >= self.grace]
        existing = set(self.admin.list_topics(timeout=self.timeout).topics) if due else set()
        due = [t for t in due if t in existing]
        if due:
            with self._naming("cannot delete checkpoint topics of"):
                for topic, future in self.admin.delete_topics(due, operation_timeout=self.timeout).items():
                    future.result(self.timeout)
        return gone
