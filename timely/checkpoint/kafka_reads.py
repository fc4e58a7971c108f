"""Reading the Kafka checkpoint store: ``read``, and the scan that ``forget`` shares.

``Reading`` is part of ``KafkaStore`` (``timely.checkpoint.kafka_store``), which
inherits it, as ``Membership`` inherits ``Rollbacks``. The topics of the namespace
(``timely.checkpoint.kafka_layout``) are found by listing the broker's topics; each is
read from offset 0 to its true end (librdkafka's end-of-partition event: Tansu's
``end_offsets`` is wrong), with a short fetch wait (Tansu holds a waiting fetch for all
of it). ``NS.inc`` is read first, so a topic ``forget`` doomed is never fetched. A read
of a segment whose start is gone fails rather than restore a partial state; a
duplicate a producer retry left is dropped (an entry is identified by its
incarnation, op, writer, seq and part).

Costs: ``read`` one metadata round trip and every record of the namespace over the
network (O(store size), ~100k records/s, at least ~0.1 s), decoding only the
incarnations, the commits and the entries asked for. A read of heads
(``read(..., heads=True)``, ``forget``: compaction's) decodes only each entry's head
and fetches only what was appended since the store object's last read of heads: it
keeps what it found per segment (segments only grow until closed, and a topic name is
never used twice), so compacting now and then fetches each record about once.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, Iterable, Iterator, Optional

from broker.client import consumer_config

from ..connectors.client import scan
from .kafka_layout import (_COMMIT, _DOOMED, _END, _ENTRY, _FORGOTTEN, _GROUP, _INCARNATION, MAX_RECORD_BYTES,
                           _decoded, _group, _key_bin, segment_topic)
from .records import CheckpointCorrupt, Commit, Entry, Incarnation, entry_head
from .store import Contents


class _Seen:
    """What reads found in one segment topic: its records in order (each with the
    ``(op, bin)`` of an entry head a later read still filters, None for a commit or an
    entry the read chose already), whether it is closed, how many records it holds,
    and the offset the next read starts at."""

    __slots__ = ("records", "closed", "count", "next")

    def __init__(self) -> None:
        self.records: list[tuple[Any, Optional[tuple[str, int]]]] = []
        self.closed = False
        self.count = 0
        self.next = 0


class Reading:
    """The reads of ``KafkaStore`` (whose state they use: ``brokers``, ``namespace``,
    ``options``, ``timeout``, ``inc_topic``, ``_heads``, ``_heads_lock``,
    ``heads_fetched``, ``_naming`` and ``_topics``)."""

    def _scan(self, incs: set, want: Optional[Callable[[str, int], bool]], heads: bool = False,
              ) -> tuple[list, set, dict, dict[tuple[str, int], list[tuple[int, list, bool, int]]]]:
        """Everything ``read`` and ``forget`` need: the incarnation records, the ids marked
        forgotten, the doomed topics (``{topic: when}``), and per chain its segments in
        order, doomed ones left out: ``(segment, records decoded, closed, records in
        it)``. ``NS.inc`` is read first, so a topic ``forget`` doomed is never fetched:
        it is deleted only ``grace`` seconds later, and deleting a topic a consumer
        fetches kills the consumer's process (librdkafka, measured: SIGSEGV)."""
        from confluent_kafka import Consumer
        config = consumer_config(self.brokers, f"{self.namespace}.reader",
                                 {"max.partition.fetch.bytes": MAX_RECORD_BYTES,
                                  "fetch.max.bytes": 4 * MAX_RECORD_BYTES, **self.options,
                                  "enable.partition.eof": True})
        with self._naming("cannot read the checkpoint store"):
            # one consumer per phase: assigning anew on the same consumer costs a second
            inc_reader, reader = Consumer(config), Consumer(config)
            try:
                listing = self._topics()
                incarnations, forgotten, doomed = self._read_inc(inc_reader)
                chains = {chain: [seg for seg in segments
                                  if segment_topic(self.namespace, *chain, seg) not in doomed]
                          for chain, segments in listing.items()}
                segments = self._read_segments(reader, chains, incs, want, heads)
            finally:
                inc_reader.close()
                reader.close()
        return incarnations, forgotten, doomed, segments

    def _records(self, consumer: Any, starts: dict[str, int]) -> Iterator[Any]:
        """Every record of each topic from its start offset (``{topic: offset}``) on.
        A whole topic is read from offset 0, not OFFSET_BEGINNING (a ListOffsets that
        costs librdkafka 0.5 s on Tansu): a topic whose start a broker trimmed lost
        records, and auto.offset.reset=error makes that an error."""
        for batch in scan(consumer, {(t, 0): offset for t, offset in starts.items()}, timeout=self.timeout):
            yield from batch

    def _read_inc(self, consumer: Any) -> tuple[list, set, dict]:
        incarnations, forgotten, doomed = [], set(), {}
        for m in self._records(consumer, {self.inc_topic: 0}):
            key, at = m.key() or b"", f"{self.inc_topic}[0]@{m.offset()}"
            if key == _INCARNATION:
                incarnations.append(_decoded(m.value(), at, Incarnation))
            elif key.startswith(_FORGOTTEN):
                forgotten.add(key[len(_FORGOTTEN):].decode(errors="replace"))
            elif key.startswith(_DOOMED):
                try:
                    doomed[key[len(_DOOMED):].decode()] = float(m.value() or b"0")
                except ValueError:
                    raise CheckpointCorrupt(f"the doomed mark at {at} holds {m.value()!r}, not a time") from None
            else:
                raise CheckpointCorrupt(f"a checkpoint record at {at} has an unknown key {key!r}")
        return incarnations, forgotten, doomed

    def _read_segments(self, consumer: Any, chains: dict, incs: set,
                       want: Optional[Callable[[str, int], bool]], heads: bool) -> dict:
        """Per chain its segments ``(segment, records, closed, records in it)``. Reads of
        heads fetch each segment from where the last one stopped: a segment only grows,
        until its writer closes it, and a topic name is never reused, so only what was
        appended since is fetched (compaction reads the store once per run, not its
        whole history)."""
        where_of = {segment_topic(self.namespace, inc, w, s): (inc, w, s)
                    for (inc, w), segments in chains.items() for s in segments}
        with self._heads_lock if heads else nullcontext():
            if heads:
                for topic in [t for t in self._heads if t not in where_of]:
                    del self._heads[topic]          # deleted: nothing reads it again
                seen = {topic: self._heads.setdefault(topic, _Seen()) for topic in where_of}
            else:
                seen = {topic: _Seen() for topic in where_of}
            fetch = {topic: s.next for topic, s in seen.items() if not s.closed}
            for m in self._records(consumer, fetch):
                topic, key = m.topic(), m.key() or b""
                at = f"{topic}[0]@{m.offset()}"
                found = seen[topic]
                if heads:
                    self.heads_fetched += 1
                if key == _END:
                    found.closed = True
                    found.next = m.offset() + 1
                    continue
                elif key == _COMMIT:
                    found.records.append((_decoded(m.value(), at, Commit), None))
                elif key.startswith(_ENTRY):
                    if heads:               # kept whole: the next read may ask for other incs
                        found.records.append((entry_head(m.value() or b"", at), _key_bin(key, at)))
                    elif where_of[topic][0] in incs and (want is None or want(*_key_bin(key, at))):
                        found.records.append((_decoded(m.value(), at, Entry), None))
                elif key == _GROUP:
                    wanted = where_of[topic][0] in incs
                    values = _group(m.value(), at)
                    for i, value in enumerate(values):
                        where = f"{at} entry {i}"
                        head = entry_head(value, where)
                        if heads:
                            found.records.append((head, (head.op, head.bin)))
                        elif wanted and (want is None or want(head.op, head.bin)):
                            found.records.append((_decoded(value, where, Entry), None))
                    found.count += len(values) - 1      # (entries count, as records do)
                else:
                    raise CheckpointCorrupt(f"a checkpoint record at {at} has an unknown key {key!r}")
                found.count += 1
                found.next = m.offset() + 1     # (after the decode: a corrupt record is read again)
            segments = {}
            for chain, numbers in chains.items():
                out = []
                for seg in numbers:
                    found = seen[segment_topic(self.namespace, *chain, seg)]
                    # (where is None: a commit, or an entry this read already chose)
                    records = [r for r, where in found.records
                               if where is None or chain[0] in incs and (want is None or want(*where))]
                    out.append((seg, records, found.closed, found.count))
                segments[chain] = out
        return segments

    def read(self, incs: Optional[Iterable[str]] = None,
             want: Optional[Callable[[str, int], bool]] = None, heads: bool = False) -> Contents:
        """Every incarnation (write order) and commit; the entries of ``incs`` (None:
        none) that ``want(op, bin)`` accepts (None: all), each chain in write order (as
        ``EntryHead``s if ``heads``: their keys not decoded)."""
        incarnations, forgotten, _, segments = self._scan(set(incs or ()), want, heads)
        out = Contents(incarnations=[i for i in incarnations if i.id not in forgotten])
        seen: set = set()
        for (inc, _), chain in segments.items():
            if inc in forgotten:
                continue
            for _, records, _, _ in chain:
                for r in records:
                    if isinstance(r, Commit):
                        out.commits.append(r)
                        continue
                    if heads:                       # a duplicate changes no decision on heads
                        out.entries.append(r)
                        continue
                    identity = (r.inc, r.op, r.writer, r.seq, r.part)
                    if identity not in seen:        # a duplicate a producer retry left
                        seen.add(identity)
                        out.entries.append(r)
        return out
