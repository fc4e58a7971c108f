"""The default checkpoint store (``--checkpoint kafka``): a namespace's records in Kafka topics.

Every process of a job reaches the Kafka broker its sources read from, so keeping the
checkpoints there needs no shared file system. ``KafkaStore`` behaves as ``DirStore``
(``timely.checkpoint.store``): the same records, the same ``Store`` and ``Writer``
protocols. Its parts: the topics and keys (``timely.checkpoint.kafka_layout``), the
writers here, reads (``kafka_reads``) and ``forget`` (``kafka_forget``).

Writing: each worker writes a chain of segment topics; a writer moves on to segment
``SEG + 1`` after ``segment_records`` entries and commits or ``segment_bytes`` bytes,
whichever comes first, and closes the segment it leaves with an end marker. One
confluent-kafka producer per store, shared by its writers (worker
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

Costs: ``write`` one encode and one ``produce`` call, plus a delivery report on the
poll thread (100k small entries: about 1 s until all were durable, on Tansu), and
once a segment a topic creation and a metadata request on a background thread;
``writer`` and ``start`` a few broker round trips; ``read`` and ``forget``: see their
modules. Every broker call and wait is bounded by ``timeout``: an unreachable broker
raises a ``CheckpointError`` naming its address.
"""
from __future__ import annotations

import functools
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterable, Iterator, Optional

from broker import health as broker_health
from broker.client import BrokerError, connect_admin, describe, ensure_topics, producer_config

from ..communication.codec import packb
from ..connectors.client import Brokers, ConnectorError, brokers_string
from .kafka_forget import Forgetting
from .kafka_layout import (_END, _ENTRY, _GROUP, _INCARNATION, _KEEP, GROUP_BYTES, MAX_RECORD_BYTES, _check_id,
                           entry_bin, parse_segment, record_key, segment_topic)
from .kafka_reads import Reading, _Seen
from .records import CheckpointError, Incarnation, encode
from .store import TicketWriter, _Tickets, wait_durable

# (the layout's names are still offered here, where they were first)
__all__ = ["KafkaStore", "segment_topic", "parse_segment", "record_key", "entry_bin"]


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


class KafkaStore(Reading, Forgetting):
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
            self.producer = Producer(producer_config(self.brokers, {"message.max.bytes": MAX_RECORD_BYTES,
                                                                    **self.options}, self._client_error))
            self._create(self.inc_topic)
            broker_health.health(self.brokers).expect([self.inc_topic])   # a broker back empty is noticed
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
        except broker_health.BrokerUnreachable:
            raise
        except BrokerError as e:            # it names the broker
            raise CheckpointError(f"{what} {self.namespace!r}: {e}") from None
        except ConnectorError as e:
            raise CheckpointError(f"{what} {self.namespace!r} at the Kafka broker at {self.brokers}: "
                                  f"{e}") from None
        except KafkaException as e:
            unreachable = broker_health.health(self.brokers).failure()   # away past --broker-timeout
            if unreachable is not None:
                raise unreachable from None
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
