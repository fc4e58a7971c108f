"""The default checkpoint store (``--checkpoint kafka``): a namespace's records in Kafka topics.

Every process of a job reaches the Kafka broker its sources read from, so keeping the
checkpoints there needs no shared file system. ``KafkaStore`` behaves as ``DirStore``
(``timely.checkpoint.store``): the same records, the same ``Store`` and ``Writer``
protocols. Layout under namespace ``NS`` (already ``[A-Za-z0-9._-]``):

- ``NS.inc`` (1 partition): the Incarnation records (key ``b"I"``), in write order, a
  marker (key ``b"F/" + id``, empty value) for each incarnation ``forget`` dropped, and
  one (key ``b"D/" + topic``, value: when) for each topic it doomed;
  Kafka cannot delete single records (Tansu has neither ``delete_records`` nor
  compaction), so ``read`` hides a marked incarnation instead.
- ``NS.INC.W.SEG`` (1 partition each): the chain of segments in which worker ``W``
  writes its Entry (key ``b"E/" + op + b"/" + bin``) and Commit (key ``b"C"``) records
  of incarnation ``INC`` (an id without dots), in write order; the entries a writer
  held (a crossing's, one per bin changed) go as one group record (key ``b"G"``, value:
  the msgpack array of their encodings, up to ``GROUP_BYTES``). A writer moves on to
  segment ``SEG + 1`` after ``segment_records`` entries and commits or
  ``segment_bytes`` bytes, whichever comes first, and closes the segment it leaves
  with an end marker (key ``b"S"``, empty value). An entry's key lets a reader skip it
  without decoding it (in a group, its head is decoded); a value is
  ``records.encode(record)`` (msgpack + CRC-32).

Writing: one confluent-kafka producer per store, shared by its writers (worker
threads). The records a writer takes inside ``hold()`` (a crossing's entries) go to the
producer as group records when it ends: one produce call, one Kafka record and one
delivery report for a crossing, where one per bin cost a produce request each (Tansu's
CPU goes per request, about 60 us) and, in a busy job, 12-30 us of the worker's time
per record in ``produce``. The producer
has ``broker.client.producer_config``: ``acks=all`` and one request in flight, so a
retry cannot reorder a chain. It is not idempotent: an idempotent producer waits
half a second for its producer id before its first record (measured on Tansu), and a
duplicate a retry may leave is dropped by ``read`` (an entry is identified by its
incarnation, op, writer, seq and part). A thread serves the delivery reports, which
make tickets durable, or fail them with a ``CheckpointError`` naming the topic. On
Tansu (memory-only) durable means acknowledged by the broker: a record outlives the
process that wrote it, not the broker. A segment's topic is created when its
predecessor gets its first record, and the producer learns its metadata then, so a
roll does not stall on librdkafka's metadata refresh.

Reading: the topics of the namespace are found by listing the broker's topics; each is
read from offset 0 to its true end (librdkafka's end-of-partition event: Tansu's
``end_offsets`` is wrong), with a short fetch wait (Tansu holds a waiting fetch for all
of it). Topics are created without retention (``retention.ms`` and ``retention.bytes``
-1): a broker's time-based default (Apache Kafka's: 7 days) would expire a bin's only
base; and a read of a segment whose start is gone fails rather than restore a partial
state.

``forget`` drops whole topics: those of the incarnations not kept, and the closed
segments (those with an end marker, so never one a writer anywhere still appends to)
in which every record is an entry ``obsolete`` accepts, or a commit below its
incarnation's latest complete label that no later incarnation restored from. It only
dooms them at first (a mark ``b"D/" + topic`` in ``NS.inc``, which every read takes in
before it fetches a segment, and then leaves the topic out); the first ``forget`` at
least ``grace`` seconds later deletes it. Deleting a topic that a consumer is fetching
kills the consumer's process (librdkafka: SIGSEGV, measured here), and other processes
read the store while the lowest one compacts it (a rollback's restore, a joiner).

Costs: ``write`` one encode and one ``produce`` call, plus a delivery report on the
poll thread (100k small entries: about 1 s until all were durable, on Tansu), and
once a segment a topic creation and a metadata request on a background thread;
``writer`` and ``start`` a few broker round trips; ``read`` one metadata round trip and
every record of the namespace over the network (O(store size), ~100k records/s, at
least ~0.1 s), decoding only the incarnations, the commits and the entries asked for;
``forget`` a read of heads, one append of marks, and one delete request. A read of
heads (``read(..., heads=True)``, ``forget``: compaction's) decodes only each entry's
head and fetches only what was appended since the store object's last read of heads:
it keeps what it found per segment (segments only grow until closed, and a topic name
is never used twice), so compacting now and then fetches each record about once. Every broker call and wait is bounded by ``timeout``: an unreachable broker
raises a ``CheckpointError`` naming its address.

>>> segment_topic("job.count", "2-ab12cd34", 3, 0)
'job.count.2-ab12cd34.3.0'
>>> parse_segment("job.count", "job.count.2-ab12cd34.3.0"), parse_segment("job", "job.count.2-ab12cd34.3.0")
(('2-ab12cd34', 3, 0), None)
>>> record_key(Commit("2-ab12cd34", 5, 3)), entry_bin(b"E/Count@(0, 3)/17")
(b'C', ('Count@(0, 3)', 17))
"""
from __future__ import annotations

import functools
import re
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterable, Iterator, Optional

import msgpack
from broker.client import (BrokerError, connect_admin, consumer_config, describe, ensure_topics,
                           producer_config)

from ..communication.codec import packb
from ..connectors.client import Brokers, ConnectorError, brokers_string, scan
from .records import (CheckpointCorrupt, CheckpointError, Commit, Entry, EntryHead, Incarnation,
                      complete_labels, decode, encode, entry_head)
from .store import Contents, TicketWriter, _Tickets, wait_durable

#: checkpoint topics keep everything until ``forget`` deletes them whole
_KEEP = {"retention.ms": "-1", "retention.bytes": "-1"}

__all__ = ["KafkaStore", "segment_topic", "parse_segment", "record_key", "entry_bin"]

#: the largest record a writer sends (an entry of 4096 large keys; Tansu took 9 MiB)
MAX_RECORD_BYTES = 16 << 20
_INCARNATION, _FORGOTTEN, _COMMIT, _ENTRY, _END = b"I", b"F/", b"C", b"E/", b"S"
_GROUP = b"G"               # value: the msgpack array of several entries' encodings
#: a group of held entries closes at this many bytes (a record stays far below Tansu's cap)
GROUP_BYTES = 1 << 20
_DOOMED = b"D/"             # + a topic name; value: when it was doomed (unix seconds)
_ID = re.compile(r"[A-Za-z0-9_-]+")


def segment_topic(namespace: str, inc: str, worker: int, segment: int) -> str:
    return f"{namespace}.{inc}.{worker}.{segment}"


def parse_segment(namespace: str, topic: str) -> Optional[tuple[str, int, int]]:
    """``(inc, worker, segment)`` of a segment topic of ``namespace``, else None (an
    incarnation id has no dots, so a namespace never reads another's topics)."""
    if not topic.startswith(namespace + "."):
        return None
    parts = topic[len(namespace) + 1:].split(".")
    if len(parts) != 3 or not _ID.fullmatch(parts[0]) or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


def record_key(record: Any) -> bytes:
    if isinstance(record, Entry):
        return b"%s%s/%d" % (_ENTRY, record.op.encode(), record.bin)
    if isinstance(record, Commit):
        return _COMMIT
    raise TypeError(f"a checkpoint writer takes entries and commits, not {record!r}")


def entry_bin(key: bytes) -> tuple[str, int]:
    """``(op, bin)`` from an entry's key."""
    op, _, b = key[len(_ENTRY):].rpartition(b"/")
    return op.decode(), int(b)


def _check_id(inc: str) -> str:
    if not isinstance(inc, str) or not _ID.fullmatch(inc):
        raise CheckpointError(f"incarnation id {inc!r}: a Kafka checkpoint store takes letters, digits, "
                              f"'_' and '-' only")
    return inc


class _Segment:
    """A chain's next segment topic, created (and its metadata learned) on a thread."""

    def __init__(self, store: "KafkaStore", topic: str) -> None:
        self.topic = topic
        self.error: Optional[BaseException] = None
        self.ready = threading.Event()
        threading.Thread(target=self._create, args=(store,), daemon=True,
                         name="timely-checkpoint-ahead").start()

    def _create(self, store: "KafkaStore") -> None:
        try:
            store._create(self.topic)
        except BaseException as e:  # noqa: BLE001 - the writer raises it when it rolls
            self.error = e
        self.ready.set()


class _KafkaWriter(TicketWriter):
    """One worker's chain of segments in one incarnation (see the module)."""

    def __init__(self, store: "KafkaStore", worker: int, inc: str, segment: int) -> None:
        super().__init__(worker, inc)
        self._store = store
        self.segment = segment
        self.topic = segment_topic(store.namespace, inc, worker, segment)
        self._records = 0                  # in the current segment
        self._bytes = 0
        self._next: Optional[_Segment] = None
        self._pending: list[tuple[bytes, bytes, int]] = []    # (key, value, ticket) held by ``hold``

    def write(self, record: Any) -> int:
        key = record_key(record)
        if record.inc != self.inc:
            raise CheckpointError(f"a record of incarnation {record.inc} given to the writer of "
                                  f"{self.inc} (worker {self.worker})")
        value = encode(record)
        store = self._store
        if self._records and (self._records >= store.segment_records or self._bytes >= store.segment_bytes):
            self._roll()
        ticket = self.tickets.issue()
        if self._held:
            self._pending.append((key, value, ticket))
        else:
            self._send(key, value, [ticket])
        self._records += 1
        self._bytes += len(value)
        self.bytes += len(value)
        if self._records == 1:
            self._ahead()
        return ticket

    def _send(self, key: bytes, value: bytes, tickets: list[int]) -> None:
        """Produce one record to the current segment; ``tickets``: those it makes durable."""
        store = self._store
        try:
            store._produce(self.topic, key, value, functools.partial(store._delivered, self.tickets, tickets))
        except CheckpointError as e:        # a hole in the chain: no later ticket is durable
            self.tickets.fail(e)
            raise

    def _release(self) -> None:
        """Send what ``hold`` kept: runs of entries as group records of up to
        ``GROUP_BYTES`` (one Kafka record, one delivery report and one produce call for a
        crossing's entries, not one per bin), all in one ``produce_batch``."""
        pending, self._pending = self._pending, []
        records: list[tuple[bytes, bytes, list[int]]] = []
        run: list[tuple[bytes, bytes, int]] = []

        def close_run() -> None:
            if len(run) == 1:
                records.append((run[0][0], run[0][1], [run[0][2]]))
            elif run:
                records.append((_GROUP, packb([v for _, v, _ in run]), [t for _, _, t in run]))
            run.clear()

        size = 0
        for key, value, ticket in pending:
            if not key.startswith(_ENTRY):
                close_run()
                records.append((key, value, [ticket]))
                continue
            if run and size + len(value) > GROUP_BYTES:
                close_run()
            if not run:
                size = 0
            run.append((key, value, ticket))
            size += len(value)
        close_run()
        if len(records) > 1:
            records = self._store._produce_batch(self.topic, records, self.tickets)
        for record in records:
            self._send(*record)

    def _ahead(self) -> None:
        """Start creating the next segment, ahead of the roll that needs it."""
        store = self._store
        self._next = _Segment(store, segment_topic(store.namespace, self.inc, self.worker, self.segment + 1))

    def _roll(self) -> None:
        store = self._store
        following = self._next
        if following is None:               # the last attempt failed: try again
            self._ahead()
            following = self._next
        if not following.ready.wait(store.timeout):
            raise CheckpointError(f"checkpoint segment {following.topic} was not created on the Kafka "
                                  f"broker at {store.brokers} within {store.timeout:g} s")
        if following.error is not None:
            self._next = None
            raise CheckpointError(f"cannot create checkpoint segment {following.topic}: "
                                  f"{following.error}") from None
        self._release()                     # the held records belong before the end marker
        store._produce(self.topic, _END, b"", store._ignore)
        self.segment += 1
        self.topic = following.topic
        self._records = self._bytes = 0
        self._next = None


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


class KafkaStore:
    """A namespace's checkpoints in Kafka topics at ``brokers`` (see the module).

    ``options``: librdkafka properties for its clients, on top of ``broker.client``'s;
    ``segment_bytes`` / ``segment_records``: when a writer moves on to a new segment;
    ``timeout``: the bound, in seconds, of every broker call and wait; ``grace``: the
    seconds between ``forget`` dooming a topic and deleting it."""

    def __init__(self, brokers: Brokers, namespace: str, options: Optional[dict] = None, *,
                 segment_bytes: int = 8 << 20, segment_records: int = 2000, timeout: float = 10.0,
                 grace: float = 60.0) -> None:
        from confluent_kafka import Producer
        if segment_records < 1 or segment_bytes < 1:
            raise CheckpointError(f"segment_records and segment_bytes must be at least 1, got "
                                  f"{segment_records} and {segment_bytes}")
        self.brokers = brokers_string(brokers)
        self.namespace = namespace
        self.options = dict(options or {})
        self.segment_bytes = segment_bytes
        self.segment_records = segment_records
        self.timeout = timeout
        self.grace = grace
        self.inc_topic = f"{namespace}.inc"
        self._writers: list[_KafkaWriter] = []
        self._closed = False
        #: what reads of heads (compaction's) found per segment topic, so the next one
        #: fetches only what was appended since (see ``_read_segments``)
        self._heads: dict[str, _Seen] = {}
        self._heads_lock = threading.Lock()
        #: instrument: records fetched by reads of heads, over the store's life
        self.heads_fetched = 0
        with self._naming("cannot open the checkpoint store"):
            self.admin = connect_admin(self.brokers, self.options, timeout)
            self.producer = Producer({**producer_config(self.brokers, {"message.max.bytes": MAX_RECORD_BYTES,
                                                                       **self.options}),
                                      "error_cb": self._client_error})
            self._create(self.inc_topic)
        self._closing = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, daemon=True, name="timely-checkpoint-kafka")
        self._poller.start()

    # ---- broker calls ----------------------------------------------------------------------
    @contextmanager
    def _naming(self, what: str) -> Iterator[None]:
        """Turn a client error into a CheckpointError naming the namespace and the broker."""
        from confluent_kafka import KafkaException
        try:
            yield
        except BrokerError as e:            # it names the broker
            raise CheckpointError(f"{what} {self.namespace!r}: {e}") from None
        except ConnectorError as e:
            raise CheckpointError(f"{what} {self.namespace!r} at the Kafka broker at {self.brokers}: "
                                  f"{e}") from None
        except KafkaException as e:
            raise CheckpointError(f"{what} {self.namespace!r}: the Kafka broker at {self.brokers} "
                                  f"did not answer within {self.timeout:g} s: {describe(e)}") from None

    def _create(self, topic: str) -> None:
        """Create ``topic`` if needed, and have the producer learn its metadata now:
        librdkafka holds the first record for a topic it does not know until its next
        metadata refresh."""
        ensure_topics(self.admin, [topic], self.timeout, _KEEP)
        self.producer.list_topics(topic, timeout=self.timeout)

    def _topics(self) -> dict[tuple[str, int], list[int]]:
        """The chains of the namespace: ``(inc, worker) -> [segment, ...]`` ascending."""
        with self._naming("cannot list the checkpoint topics of"):
            names = self.admin.list_topics(timeout=self.timeout).topics
        chains: dict[tuple[str, int], list[int]] = {}
        for name in names:
            found = parse_segment(self.namespace, name)
            if found is not None:
                chains.setdefault(found[:2], []).append(found[2])
        return {chain: sorted(segments) for chain, segments in sorted(chains.items())}

    def _produce(self, topic: str, key: bytes, value: bytes, on_delivery: Callable) -> None:
        if self._closed:
            raise CheckpointError(f"the checkpoint store {self.namespace!r} is closed")
        from confluent_kafka import KafkaException
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                self.producer.produce(topic, value, key, partition=0, on_delivery=on_delivery)
                return
            except BufferError:             # librdkafka's queue is full: the broker is slow
                if time.monotonic() > deadline:
                    raise CheckpointError(f"the Kafka broker at {self.brokers} took no checkpoint record "
                                          f"for {topic} within {self.timeout:g} s") from None
                self._closing.wait(0.01)
            except KafkaException as e:
                raise CheckpointError(f"cannot write a checkpoint record ({len(value)} bytes) to {topic} "
                                      f"at {self.brokers}: {describe(e)}") from None

    def _produce_batch(self, topic: str, records: list[tuple[bytes, bytes, list[int]]], tickets: _Tickets) -> list:
        """Hand ``(key, value, tickets)`` records for ``topic`` to the producer in one call
        (one lock and one wake of its thread, not one per record: in a busy job a
        ``produce`` took 12-24 us, against 2 us alone); returns those it did not take (its
        queue was full), for ``_produce`` to wait for room."""
        if self._closed:
            raise CheckpointError(f"the checkpoint store {self.namespace!r} is closed")
        delivered = self._delivered
        messages = [{"key": key, "value": value, "callback": functools.partial(delivered, tickets, made)}
                    for key, value, made in records]
        if self.producer.produce_batch(topic, messages, partition=0) == len(messages):
            return []
        from confluent_kafka import KafkaError
        left = []
        for record, message in zip(records, messages):
            error = message.get("_error")
            if error is None:
                continue
            if error.code() != KafkaError._QUEUE_FULL:
                failure = CheckpointError(f"cannot write a checkpoint record ({len(record[1])} bytes) to "
                                          f"{topic} at {self.brokers}: {describe(error)}")
                tickets.fail(failure)
                raise failure
            left.append(record)
        return left

    def _poll_loop(self) -> None:
        while not self._closing.is_set():
            self.producer.poll(0.1)

    def _delivered(self, tickets: _Tickets, made: Iterable[int], err: Any, msg: Any) -> None:
        if err is None:
            for ticket in made:
                tickets.done(ticket)
        else:
            tickets.fail(CheckpointError(f"writing a checkpoint record to {msg.topic()} at {self.brokers} "
                                         f"failed: {describe(err)}"))

    @staticmethod
    def _ignore(err: Any, msg: Any) -> None:
        """An end marker's report: a lost marker only keeps its segment from ``forget``."""

    def _client_error(self, err: Any) -> None:
        # Transport errors (a paused or restarting broker) are retried by librdkafka, and
        # a record that cannot be delivered fails its ticket: only a fatal error is ours.
        if err.fatal():
            error = CheckpointError(f"the checkpoint producer of {self.namespace!r} at {self.brokers} "
                                    f"failed: {describe(err)}")
            for w in list(self._writers):
                w.tickets.fail(error)

    # ---- the Store protocol ------------------------------------------------------------------
    def start(self, incarnation: Incarnation) -> None:
        """Append ``incarnation`` to ``NS.inc`` and wait until the broker acknowledged it."""
        _check_id(incarnation.id)
        self._append_inc([(_INCARNATION, encode(incarnation))], "the incarnation record")

    def _append_inc(self, records: list[tuple[bytes, bytes]], what: str) -> None:
        """Append ``(key, value)`` records to ``NS.inc`` and wait until they are acknowledged."""
        tickets = _Tickets()
        for key, value in records:
            ticket = tickets.issue()
            self._produce(self.inc_topic, key, value, functools.partial(self._delivered, tickets, (ticket,)))
        if not wait_durable(tickets, self.timeout):
            raise CheckpointError(f"{what} of {self.namespace!r} was not acknowledged by the Kafka broker "
                                  f"at {self.brokers} within {self.timeout:g} s")

    def writer(self, worker: int, inc: str) -> _KafkaWriter:
        """Worker ``worker``'s writer in incarnation ``inc``: a chain that starts after
        any segment of it already on the broker (a worker index used again)."""
        _check_id(inc)
        existing = self._topics().get((inc, worker), [])
        segment = existing[-1] + 1 if existing else 0
        w = _KafkaWriter(self, worker, inc, segment)
        with self._naming("cannot create a checkpoint segment of"):
            self._create(w.topic)
        self._writers.append(w)
        return w

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

    def close(self) -> None:
        """Wait (at most ``timeout``) for the records written so far, then stop: the
        tickets of those still undelivered fail."""
        if self._closed:
            return
        self._closed = True
        left = 1
        try:
            left = self.producer.flush(self.timeout)
        finally:
            self._closing.set()
            self._poller.join(self.timeout)
            if left:                        # close() would wait for them without bound
                self.producer.purge()
                self.producer.flush(0)
            self.producer.close()


def _key_bin(key: bytes, at: str) -> tuple[str, int]:
    try:
        return entry_bin(key)
    except ValueError:
        raise CheckpointCorrupt(f"a checkpoint record at {at} has an unreadable key {key!r}") from None


def _group(value: Optional[bytes], at: str) -> list:
    """The encoded entries of a group record (each with its own checksum)."""
    try:
        values = msgpack.unpackb(value or b"", raw=False, use_list=True)
    except Exception as e:  # noqa: BLE001 - any decoding failure is a corrupt record
        raise CheckpointCorrupt(f"the checkpoint group record at {at} does not decode: {e}") from None
    if not isinstance(values, list) or not all(isinstance(v, bytes) for v in values):
        raise CheckpointCorrupt(f"the checkpoint group record at {at} is not a list of entries")
    return values


def _decoded(value: Optional[bytes], at: str, kind: type) -> Any:
    record = decode(value or b"", at)
    if not isinstance(record, kind):
        raise CheckpointCorrupt(f"the checkpoint record at {at} is a {type(record).__name__} where its key "
                                f"says {kind.__name__}")
    return record
