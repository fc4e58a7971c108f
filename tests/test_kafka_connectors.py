"""Kafka source, sink and commit operators on a real Kafka-protocol broker (Tansu).

Protects what a user of ``scope.kafka_source`` / ``stream.kafka_sink`` /
``stream.kafka_commit`` relies on:
- a 2-worker dataflow reading an epoch-marked topic and writing its per-epoch counts
  gives exactly the right counts per epoch when the output is read back by a
  marker-trusting reader (json, and msgpack packed several rows per message);
- an epoch is complete only at its markers: with a marker missing on one partition
  nothing of that epoch comes out downstream and the frontier stays before it; the
  marker arriving while the dataflow runs releases it;
- a failed run resumes from the committed offsets (which sit just past a marker) and
  the output then holds every epoch exactly once, orphan records of a crashed writer
  notwithstanding; a bounded run (``end_epoch``) followed by a second run with the same
  group loses and repeats nothing;
- ``epochs="ingestion"`` reads a marker-less topic exactly once with increasing times
  and commits its offsets;
- bad input is named: an unreachable broker, a missing topic, an undecodable value
  (topic, partition, offset; the group does not commit past it; or the dead-letter
  topic gets it), a marker going back in time;
- ``fields`` gives each event as a tuple, one event per record or packed; values decode
  as they are read, yet a bad record outside its marker's range is still dropped
  quietly, and one inside it (an event without a field) is named.

Every test uses its own uuid-named topics and consumer group on the session broker.
"""
from __future__ import annotations

import collections
import os
import socket
import sys
import threading
import time
import uuid

import orjson
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import timely  # noqa: E402
from timely.connectors.client import (BrokerUnreachable, ConnectorError, TopicMissing, consumer_config,  # noqa: E402
                                      create_topics, producer_config, scan)
from timely.connectors.epochs import (JSON, MSGPACK, DecodeError, EpochOrderError,  # noqa: E402
                                      PartitionEpochs, data_headers, marker_headers)

USERS = 5
STEP_TIMEOUT = 30.0      # s: no test waits longer than this for its dataflow


def name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:10]}"


# ---- writing and reading topics under the epoch contract -----------------------------------
def event(epoch: int, partition: int, i: int) -> dict:
    return {"user": (i * 3 + partition) % USERS, "e": epoch, "p": partition, "i": i}


def epoch_events(epoch: int, partitions: int, per_partition: int) -> dict[int, list[dict]]:
    return {p: [event(epoch, p, i) for i in range(per_partition + p)] for p in range(partitions)}


class Writer:
    """Produces epochs to a topic the way pytimely's sink does: an epoch's records, a
    flush, then one marker per partition naming the records' offsets."""

    def __init__(self, brokers: str, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(producer_config(brokers, None))
        self.markers: dict[tuple[int, int], int] = {}     # (partition, epoch) -> marker offset
        self._last: dict[int, list[int]] = collections.defaultdict(list)

    def _produce(self, value: bytes, partition: int, headers: list) -> None:
        def delivered(error, message):
            assert error is None, error
            self._last[partition].append(message.offset())
        self.producer.produce(self.topic, value, partition=partition, headers=headers, on_delivery=delivered)

    def records(self, epoch: int, by_partition: dict[int, list], raw: bool = False) -> dict[int, list[int]]:
        """Write ``epoch``'s records; returns their offsets per partition."""
        self._last = collections.defaultdict(list)
        for p, values in by_partition.items():
            for v in values:
                self._produce(v if raw else orjson.dumps(v), p, data_headers(epoch))
        assert self.producer.flush(10) == 0
        return dict(self._last)

    def marker(self, epoch: int, partition: int, offsets: list[int] | None = None) -> int:
        """Write ``epoch``'s marker naming ``offsets``; returns the marker's offset."""
        self._last = collections.defaultdict(list)
        first, end = (min(offsets), max(offsets) + 1) if offsets else (0, 0)
        self._produce(b"", partition, marker_headers(epoch, first, end))
        assert self.producer.flush(10) == 0
        offset = self._last[partition][0]
        self.markers[(partition, epoch)] = offset
        return offset

    def epoch(self, epoch: int, by_partition: dict[int, list]) -> None:
        written = self.records(epoch, by_partition)
        for p in by_partition:
            self.marker(epoch, p, written.get(p))


def expected_counts(epochs: dict[int, dict[int, list[dict]]]) -> dict[tuple[int, int], int]:
    counts: collections.Counter = collections.Counter()
    for e, by_partition in epochs.items():
        for values in by_partition.values():
            for v in values:
                counts[(e, v["user"])] += 1
    return dict(counts)


def read_back(brokers: str, topic: str, partitions: int, fmt=JSON):
    """The topic's complete epochs as ``{(epoch, key): value}`` for records ``[key, value]``,
    read by a reader that trusts markers; fails on an (epoch, key) seen twice."""
    consumer = Consumer(consumer_config(brokers, None, None))
    states = {p: PartitionEpochs(topic, p) for p in range(partitions)}
    got: dict[tuple[int, int], int] = {}
    try:
        for messages in scan(consumer, {(topic, p): 0 for p in range(partitions)}, timeout=10):
            for m in messages:
                for epoch, records in states[m.partition()].record(m.offset(), m.headers(), m.value()):
                    rows = fmt.decode([r[1] for r in records], [r[2] for r in records], topic,
                                      m.partition(), [r[0] for r in records])
                    for key, value in rows:
                        assert (epoch, key) not in got, f"epoch {epoch} key {key} read twice"
                        got[(epoch, key)] = value
    finally:
        consumer.close()
    return got, states


def committed(brokers: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer(consumer_config(brokers, group, None))
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        consumer.close()
    return {c.partition: c.offset for c in found}


# ---- dataflows ------------------------------------------------------------------------------
def count_by_user(stream):
    """(user, count) per user per epoch, released when the frontier passes the epoch."""
    state: dict = {}

    def logic(inp, out, notificator):
        for cap, records in inp:
            found = state.get(cap.time)
            if found is None:
                found = state[cap.time] = collections.Counter()
                notificator.notify_at(cap.retain())
            found.update(records)
        for cap in notificator:
            out.give_batch(cap, sorted(state.pop(cap.time).items()))
    return stream.map(lambda ev: ev["user"]).unary_notify(timely.Exchange(lambda u: u), "Count", [], logic)


def steps_until(worker, condition, timeout: float = STEP_TIMEOUT, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"worker {worker.index}: {what} not reached in {timeout:g} s")
        worker.step_or_park(0.005)


def run_to_end(worker, timeout: float = STEP_TIMEOUT) -> None:
    """``worker.run()`` with a deadline: a test never hangs."""
    deadline = time.monotonic() + timeout
    while worker.step_or_park(0.005):
        if time.monotonic() > deadline:
            raise AssertionError(f"worker {worker.index}: dataflow not complete in {timeout:g} s")


def source_records(worker) -> int:
    return sum(s.records for s in worker.kafka_sources.values())


def pipeline(brokers, inp, out, group, end_epoch, fail_at=None, source_options=None, sink_options=None):
    """kafka_source -> count per user per epoch -> kafka_sink -> kafka_commit; returns
    the probe of the sink's durable stream."""
    def build(scope):
        src = scope.kafka_source(brokers, inp, group_id=group, end_epoch=end_epoch, **(source_options or {}))
        events = src
        if fail_at is not None:
            def check(ev):
                if ev["e"] == fail_at:
                    raise Crash(f"crash at epoch {fail_at}")
                return ev
            events = src.map(check)
        done = count_by_user(events).kafka_sink(brokers, out, key=lambda r: r[0], **(sink_options or {}))
        done.kafka_commit(src)
        return done.probe()
    return build


class Crash(RuntimeError):
    pass


# ---- round trip -----------------------------------------------------------------------------
@pytest.mark.parametrize("sink_options", [{}, {"value_format": "msgpack", "rows_per_message": 3}],
                         ids=["json", "msgpack-packed"])
def test_round_trip_counts_every_epoch_exactly(tansu, sink_options):
    B = tansu.bootstrap
    inp, out, group = name("in"), name("out"), name("g")
    create_topics(B, {inp: 4, out: 2})
    writer = Writer(B, inp)
    epochs = {e: epoch_events(e, 4, 40 + 10 * e) for e in range(4)}
    for e, by_partition in epochs.items():
        writer.epoch(e, by_partition)

    def build(worker):
        worker.dataflow(pipeline(B, inp, out, group, end_epoch=4, sink_options=sink_options))
        run_to_end(worker)
        return source_records(worker)

    delivered = timely.execute(2, build)
    fmt = MSGPACK if sink_options else JSON
    got, states = read_back(B, out, 2, fmt)
    assert got == expected_counts(epochs)
    assert sum(delivered) == sum(len(v) for by in epochs.values() for v in by.values())
    assert all(s.completed == 3 and s.orphans == 0 and s.duplicates == 0 for s in states.values())
    # the group committed each input partition just past its last marker
    assert committed(B, group, inp, 4) == {p: writer.markers[(p, 3)] + 1 for p in range(4)}


# ---- epochs complete only at markers --------------------------------------------------------
def test_an_epoch_is_released_only_when_every_partition_marked_it(tansu):
    B = tansu.bootstrap
    inp, group = name("in"), name("g")
    create_topics(B, {inp: 4})
    writer = Writer(B, inp)
    epochs = {e: epoch_events(e, 4, 20) for e in range(2)}
    writer.epoch(0, epochs[0])
    written = writer.records(1, epochs[1])
    for p in range(3):                      # partition 3 has epoch 1's records but no marker yet
        writer.marker(1, p, written[p])
    barrier = threading.Barrier(2, timeout=STEP_TIMEOUT)
    before: dict = {}
    held_commits: dict = {}

    def build(worker):
        def df(scope):
            src = scope.kafka_source(B, inp, group_id=group, end_epoch=2)
            counts = count_by_user(src)
            counts.kafka_commit(src)
            return src.capture(), counts.capture(), counts.probe()
        raw, counted, probe = worker.dataflow(df)
        steps_until(worker, lambda: not probe.less_equal(0), what="epoch 0 passing")
        held_from = time.monotonic()
        while time.monotonic() - held_from < 0.5:    # give epoch 1 every chance to leak
            worker.step_or_park(0.005)
        before[worker.index] = (probe.less_equal(1), [t for t, _ in counted.batches],
                                sorted({ev["p"] for t, b in raw.batches if t == 1 for ev in b}))
        barrier.wait()
        if worker.index == 0:
            held_commits.update(committed(B, group, inp, 4))
            writer.marker(1, 3, written[3])
        run_to_end(worker)
        return raw.by_time(), counted.by_time(), probe.done()

    results = timely.execute(2, build)
    for index, (held, count_times, partitions_out) in before.items():
        assert held, f"worker {index}: the frontier passed epoch 1 before partition 3's marker"
        assert 1 not in count_times, f"worker {index}: counts of epoch 1 came out before its last marker"
        assert 3 not in partitions_out, f"worker {index}: partition 3's unmarked records came out"
    # each complete partition's records are handed on at its own marker (not all held back)
    assert sorted(p for v in before.values() for p in v[2]) == [0, 1, 2]
    counts: collections.Counter = collections.Counter()
    raw_partitions = collections.defaultdict(set)
    for raw, counted, done in results:
        assert done
        for t, records in counted.items():
            for user, n in records:
                counts[(t, user)] += n
        for t, records in raw.items():
            raw_partitions[t] |= {ev["p"] for ev in records}
            assert all(ev["e"] == t for ev in records)
    assert dict(counts) == expected_counts(epochs)
    assert raw_partitions == {0: {0, 1, 2, 3}, 1: {0, 1, 2, 3}}
    # while epoch 1 was held the group stayed just past epoch 0's markers, then moved on
    assert held_commits == {p: writer.markers[(p, 0)] + 1 for p in range(4)}
    assert committed(B, group, inp, 4) == {p: writer.markers[(p, 1)] + 1 for p in range(4)}


# ---- restart --------------------------------------------------------------------------------
def test_a_failed_run_resumes_from_the_committed_offsets_with_every_epoch_once(tansu):
    B = tansu.bootstrap
    inp, out, group = name("in"), name("out"), name("g")
    create_topics(B, {inp: 4, out: 2})
    writer = Writer(B, inp)
    epochs = {e: epoch_events(e, 4, 25 + e) for e in range(5)}
    for e in range(3):
        writer.epoch(e, epochs[e])
    marker2 = {p: writer.markers[(p, 2)] + 1 for p in range(4)}

    def first(worker):
        probe = worker.dataflow(pipeline(B, inp, out, group, end_epoch=5, fail_at=3))
        steps_until(worker, lambda: not probe.less_than(3), what="epochs 0-2 durable")
        if worker.index == 0:
            # epochs 0-2 are written and their offsets committed before epoch 3 arrives
            steps_until(worker, lambda: committed(B, group, inp, 4) == marker2, what="commit of epoch 2")
            for e in (3, 4):
                writer.epoch(e, epochs[e])
        run_to_end(worker)

    with pytest.raises(Crash, match="crash at epoch 3"):
        timely.execute(2, first)
    assert committed(B, group, inp, 4) == marker2, "the failed run moved the group past epoch 2"
    # a writer that died mid-epoch 3 left records without a marker in the output
    orphans = Producer(producer_config(B, None))
    for p in range(2):
        for user in range(USERS):
            orphans.produce(out, orjson.dumps([user, 999]), partition=p, headers=data_headers(3))
    assert orphans.flush(10) == 0

    def second(worker):
        worker.dataflow(pipeline(B, inp, out, group, end_epoch=5))
        run_to_end(worker)
        return source_records(worker)

    delivered = timely.execute(2, second)
    assert sum(delivered) == sum(len(v) for e in (3, 4) for v in epochs[e].values()), \
        "the second run did not resume at the committed offsets"
    got, states = read_back(B, out, 2)
    assert got == expected_counts(epochs)
    assert sum(s.orphans for s in states.values()) == 2 * USERS
    assert committed(B, group, inp, 4) == {p: writer.markers[(p, 4)] + 1 for p in range(4)}

    # a run that re-reads every epoch (a new group) writes none of them again
    def again(worker):
        worker.dataflow(pipeline(B, inp, out, name("g"), end_epoch=5))
        run_to_end(worker)
        return source_records(worker)

    assert sum(timely.execute(2, again)) == sum(len(v) for by in epochs.values() for v in by.values())
    got_again, states_again = read_back(B, out, 2)
    assert got_again == got
    assert {p: s.position for p, s in states_again.items()} == {p: s.position for p, s in states.items()}


def test_a_resumed_source_drops_a_replay_of_the_epoch_it_committed(tansu):
    """The input's writer replays epoch 1 (records and markers again) right after the
    offset the group committed: the resumed source knows epoch 1 was complete."""
    B = tansu.bootstrap
    inp, group = name("in"), name("g")
    create_topics(B, {inp: 2})
    writer = Writer(B, inp)
    epochs = {e: epoch_events(e, 2, 8) for e in range(3)}
    for e in (0, 1):
        writer.epoch(e, epochs[e])

    def run(end_epoch):
        def build(worker):
            def df(scope):
                src = scope.kafka_source(B, inp, group_id=group, end_epoch=end_epoch)
                src.kafka_commit(src)
                return src.capture()
            captured = worker.dataflow(df)
            run_to_end(worker)
            return captured.by_time()
        seen = collections.defaultdict(list)
        for by_time in timely.execute(2, build):
            for t, records in by_time.items():
                seen[t].extend(records)
        return {t: sorted(records, key=lambda r: (r["p"], r["i"])) for t, records in seen.items()}

    assert run(2) == {e: [v for p in range(2) for v in epochs[e][p]] for e in (0, 1)}
    assert committed(B, group, inp, 2) == {p: writer.markers[(p, 1)] + 1 for p in range(2)}
    writer.epoch(1, epochs[1])          # the replay
    writer.epoch(2, epochs[2])
    assert run(3) == {2: [v for p in range(2) for v in epochs[2][p]]}
    assert committed(B, group, inp, 2) == {p: writer.markers[(p, 2)] + 1 for p in range(2)}


def test_bounded_runs_with_one_group_see_every_epoch_once(tansu):
    """A run with end_epoch=2 then one with end_epoch=4: the first must not commit the
    epochs it read past its end without processing them."""
    B = tansu.bootstrap
    inp, out, group = name("in"), name("out"), name("g")
    create_topics(B, {inp: 2, out: 2})
    writer = Writer(B, inp)
    epochs = {e: epoch_events(e, 2, 15) for e in range(4)}
    for e, by_partition in epochs.items():
        writer.epoch(e, by_partition)

    for end in (2, 4):
        def build(worker, end=end):
            worker.dataflow(pipeline(B, inp, out, group, end_epoch=end))
            run_to_end(worker)
        timely.execute(2, build)
        assert committed(B, group, inp, 2) == {p: writer.markers[(p, end - 1)] + 1 for p in range(2)}
    got, _ = read_back(B, out, 2)
    assert got == expected_counts(epochs)


# ---- ingestion epochs -----------------------------------------------------------------------
class JumpingClock:
    """The ``time`` module as the Kafka source sees it, with a wall clock that jumps
    ``jump_ms`` ahead once ``jumped`` is set: an ingestion source whose ``end_epoch``
    lies within the jump ends when the test says so (every record read), not when the
    real clock gets there, whatever the machine's speed."""

    def __init__(self, jump_ms: int) -> None:
        self.jump_ms = jump_ms
        self.jumped = threading.Event()

    def time(self) -> float:
        return time.time() + (self.jump_ms / 1000 if self.jumped.is_set() else 0.0)

    def __getattr__(self, name):
        return getattr(time, name)


def test_ingestion_epochs_read_a_topic_without_markers_once(tansu, monkeypatch):
    """A topic without markers, read with ingestion epochs: every record once, each
    worker's epochs (milliseconds since 1970) advance every ``epoch_records`` records at
    the latest, never go back along a partition, and the group's offsets end at the end.
    The source runs until every record was read; then its wall clock jumps past
    ``end_epoch`` (a day away in real time), and it ends."""
    from timely.connectors.kafka import steps as source_module
    B = tansu.bootstrap
    inp, group = name("in"), name("g")
    create_topics(B, {inp: 2})
    producer = Producer(producer_config(B, None))
    per_partition, epoch_records = 150, 10
    for p in range(2):
        for i in range(per_partition):
            producer.produce(inp, orjson.dumps({"p": p, "i": i}), partition=p)
    assert producer.flush(10) == 0
    day_ms = 86_400_000
    start_ms = int(time.time() * 1000)
    end_epoch = start_ms + day_ms
    clock = JumpingClock(2 * day_ms)
    monkeypatch.setattr(source_module, "time", clock)
    workers = []

    def build(worker):
        def df(scope):
            src = scope.kafka_source(B, inp, group_id=group, epochs="ingestion", epoch_records=epoch_records,
                                     epoch_ms=100, end_epoch=end_epoch)
            src.kafka_commit(src)
            return src.capture()
        captured = worker.dataflow(df)
        workers.append(worker)
        steps_until(worker, lambda: len(workers) == 2 and sum(map(source_records, workers)) == 2 * per_partition,
                    what="every record read")
        clock.jumped.set()
        run_to_end(worker)
        return captured.by_time()

    results = timely.execute(2, build)
    seen = collections.Counter()
    times: dict[tuple[int, int], int] = {}
    for by_time in results:
        for t, records in by_time.items():
            assert start_ms <= t < end_epoch, f"epoch {t}: ingestion epochs are milliseconds since 1970, " \
                                              f"from the start of the run and before the end"
            # an epoch ends once it holds epoch_records, and a poll reads at most that many
            assert len(records) <= 2 * epoch_records - 1, f"epoch {t} holds {len(records)} records"
            for r in records:
                seen[(r["p"], r["i"])] += 1
                times[(r["p"], r["i"])] = t
    assert seen == {(p, i): 1 for p in range(2) for i in range(per_partition)}
    for p in range(2):
        stamps = [times[(p, i)] for i in range(per_partition)]
        assert stamps == sorted(stamps), "times go back along a partition"
        # at most 2 * epoch_records - 1 records an epoch: a partition's records span at
        # least this many epochs (8 here), or the epochs did not advance
        least = -(-per_partition // (2 * epoch_records - 1))
        assert len(set(stamps)) >= least, f"partition {p}: {len(set(stamps))} epochs, at least {least} expected"
    assert committed(B, group, inp, 2) == {0: per_partition, 1: per_partition}


# ---- bad input ------------------------------------------------------------------------------
def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("idle_poll", [0, -0.01, "fast"])
def test_a_bad_idle_poll_is_refused_naming_it(idle_poll):
    def build(worker):
        worker.dataflow(lambda scope: scope.kafka_source("127.0.0.1:1", "clicks", idle_poll=idle_poll))
    with pytest.raises((ValueError, TypeError), match="idle_poll"):
        timely.execute(1, build)


def test_unreachable_broker_is_named_when_building():
    """Worker 0 builds a source, worker 1 a sink, both at a closed port (in parallel:
    each waits the client's 10 s metadata timeout)."""
    address = f"127.0.0.1:{closed_port()}"
    raised: dict = {}

    def build(worker):
        def df(scope):
            if worker.index == 0:
                scope.kafka_source(address, "clicks", group_id="g")
            else:
                scope.to_stream([]).kafka_sink(address, "counts")
        try:
            worker.dataflow(df)
        except BaseException as exc:
            raised[worker.index] = exc
            raise
        raised[worker.index] = None

    with pytest.raises(BrokerUnreachable, match=address):
        timely.execute(timely.Config(workers=2, broker_timeout=1.0), build)
    assert sorted(raised) == [0, 1]
    for index, exc in raised.items():
        assert isinstance(exc, BrokerUnreachable) and address in str(exc), (index, exc)


@pytest.mark.parametrize("where", ["source", "sink"])
def test_missing_topic_is_named(tansu, where):
    B = tansu.bootstrap
    present, missing = name("present"), name("missing")
    create_topics(B, {present: 1})

    def build(worker):
        def df(scope):
            if where == "source":
                scope.kafka_source(B, [present, missing])
            else:
                scope.kafka_source(B, present, end_epoch=0).kafka_sink(B, missing)
        worker.dataflow(df)

    with pytest.raises(TopicMissing, match=missing):
        timely.execute(1, build)


def bad_value_topic(brokers):
    """Epochs 0-2 on 2 partitions; partition 1's epoch 1 holds an undecodable value."""
    inp = name("in")
    create_topics(brokers, {inp: 2})
    writer = Writer(brokers, inp)
    epochs = {e: epoch_events(e, 2, 10) for e in range(3)}
    writer.epoch(0, epochs[0])
    written = writer.records(1, epochs[1])
    bad = writer.records(1, {1: [b'{"user": 1, oops']}, raw=True)[1][0]
    written[1].append(bad)
    for p in range(2):
        writer.marker(1, p, written[p])
    writer.epoch(2, epochs[2])
    return inp, writer, epochs, bad


def test_undecodable_value_fails_naming_it_and_is_not_committed(tansu):
    B = tansu.bootstrap
    group = name("g")
    inp, writer, _, bad = bad_value_topic(B)

    def build(worker):
        def df(scope):
            src = scope.kafka_source(B, inp, group_id=group, end_epoch=3)
            src.kafka_commit(src)
            return src.probe()
        worker.dataflow(df)
        run_to_end(worker)

    with pytest.raises(DecodeError) as info:
        timely.execute(2, build)
    assert (info.value.topic, info.value.partition, info.value.offset) == (inp, 1, bad)
    assert f"{inp}[1] offset {bad}" in str(info.value)
    offset = committed(B, group, inp, 2)[1]
    assert offset <= writer.markers[(1, 0)] + 1, "the group committed past the bad record's epoch"


def test_dead_letter_topic_takes_the_bad_value_and_the_rest_is_counted(tansu):
    B = tansu.bootstrap
    group, dlq = name("g"), name("dlq")
    inp, writer, epochs, bad = bad_value_topic(B)
    create_topics(B, {dlq: 1})

    def build(worker):
        def df(scope):
            src = scope.kafka_source(B, inp, group_id=group, end_epoch=3, dead_letter_topic=dlq)
            counts = count_by_user(src)
            counts.kafka_commit(src)
            return counts.capture()
        captured = worker.dataflow(df)
        run_to_end(worker)
        return captured.by_time()

    counts: collections.Counter = collections.Counter()
    for by_time in timely.execute(2, build):
        for t, records in by_time.items():
            for user, n in records:
                counts[(t, user)] += n
    assert dict(counts) == expected_counts(epochs)
    assert committed(B, group, inp, 2) == {p: writer.markers[(p, 2)] + 1 for p in range(2)}
    consumer = Consumer(consumer_config(B, None, None))
    try:
        letters = [m for ms in scan(consumer, {(dlq, 0): 0}, timeout=10) for m in ms]
    finally:
        consumer.close()
    assert len(letters) == 1
    headers = dict(letters[0].headers())
    assert letters[0].value() == b'{"user": 1, oops'
    assert (headers["source.topic"], headers["source.partition"], headers["source.offset"]) == \
        (inp.encode(), b"1", str(bad).encode())
    assert b"json" in headers["error"] and f"offset {bad}".encode() in headers["error"]


# ---- fields, taken as records are read ---------------------------------------------------------
def read_fields(brokers: str, topic: str, fields, end_epoch: int, workers: int = 1) -> dict:
    """{epoch: sorted events} that ``kafka_source(..., fields=fields)`` gives."""
    def build(worker):
        captured = worker.dataflow(
            lambda scope: scope.kafka_source(brokers, topic, end_epoch=end_epoch, fields=fields).capture())
        run_to_end(worker)
        return captured.by_time()
    got: dict = collections.defaultdict(list)
    for by_time in timely.execute(workers, build):
        for t, records in by_time.items():
            got[t].extend(records)
    return {t: sorted(rs) for t, rs in got.items()}


def test_fields_give_each_event_as_a_tuple_one_per_record_or_packed(tansu):
    B = tansu.bootstrap
    inp = name("in")
    create_topics(B, {inp: 2})
    writer = Writer(B, inp)
    epochs = {e: epoch_events(e, 2, 7) for e in range(2)}
    writer.epoch(0, epochs[0])                      # one event per record
    for p, events in epochs[1].items():            # packed: 3 events per record, and a rest
        writer._last = collections.defaultdict(list)
        for i in range(0, len(events), 3):
            chunk = events[i:i + 3]
            writer._produce(JSON.dumps_many(chunk), p, data_headers(1, rows=len(chunk)))
        assert writer.producer.flush(10) == 0
        writer.marker(1, p, writer._last[p])
    got = read_fields(B, inp, ("i", "user"), end_epoch=2, workers=2)
    assert got == {e: sorted((ev["i"], ev["user"]) for evs in by_p.values() for ev in evs)
                   for e, by_p in epochs.items()}
    assert read_fields(B, inp, ["p"], end_epoch=1) == {0: sorted((ev["p"],) for evs in epochs[0].values()
                                                                 for ev in evs)}


def test_a_bad_record_its_marker_leaves_out_is_dropped_and_one_it_covers_is_named(tansu):
    """Values decode as they are read, before their marker: a crashed writer's record
    outside the marker's range must still be dropped quietly, whatever it holds."""
    B = tansu.bootstrap
    inp = name("in")
    create_topics(B, {inp: 1})
    writer = Writer(B, inp)
    writer.records(0, {0: [b'{"user": 1, oops', b'{"user": 2}', b'[{"user": 3, "i": 0}]']}, raw=True)
    events = [event(0, 0, i) for i in range(4)]
    writer.marker(0, 0, writer.records(0, {0: events})[0])      # the range leaves the three out
    assert read_fields(B, inp, ("user", "i"), end_epoch=1) == {0: sorted((e["user"], e["i"]) for e in events)}

    missing = writer.records(1, {0: [{"user": 4}]})[0][0]       # inside epoch 1's range
    writer.marker(1, 0, [missing])
    with pytest.raises(DecodeError, match=f"offset {missing}: event has no field 'i'") as info:
        read_fields(B, inp, ("user", "i"), end_epoch=2)
    assert (info.value.topic, info.value.partition, info.value.offset) == (inp, 0, missing)


def test_records_waiting_for_their_marker_are_decoded_before_it_comes(tansu):
    """A live stream's records are decoded after the poll that read them, so the marker
    only hands events on; the orphan among them is decoded too, and still dropped."""
    B = tansu.bootstrap
    inp = name("in")
    create_topics(B, {inp: 1})
    writer = Writer(B, inp)
    writer.records(0, {0: [b'{"user": 1, oops']}, raw=True)                 # a crashed writer's
    events = [event(0, 0, i) for i in range(5)]
    offsets = writer.records(0, {0: events})[0]

    def build(worker):
        captured = worker.dataflow(
            lambda scope: scope.kafka_source(B, inp, end_epoch=1, fields=("i", "user")).capture())
        (state,) = worker.kafka_sources.values()
        part = state.parts[(inp, 0)]
        steps_until(worker, lambda: part.position == offsets[-1] + 1, what="the records read")
        waiting = part.pending[0]
        assert [type(v) for _, v, _ in waiting] == [tuple] * 6, "not decoded before the marker"
        assert type(waiting[0][1][1]).__name__ == "Undecodable"
        assert [v[1] for _, v, _ in waiting[1:]] == [(e["i"], e["user"]) for e in events]
        writer.marker(0, 0, offsets)
        run_to_end(worker)
        return captured.by_time(), part.orphans

    (by_time, orphans), = timely.execute(1, build)
    assert {t: sorted(rs) for t, rs in by_time.items()} == {0: sorted((e["i"], e["user"]) for e in events)}
    assert orphans == 1


@pytest.mark.parametrize("fields, match", [
    ("page", "non-empty sequence of field names"), ([], "non-empty sequence"),
    ([1, 2], "non-empty sequence"), (("a", "b", "a"), "names a field twice"),
])
def test_fields_that_name_no_fields_are_refused(tansu, fields, match):
    B = tansu.bootstrap
    inp = name("in")
    create_topics(B, {inp: 1})

    def build(worker):
        worker.dataflow(lambda scope: scope.kafka_source(B, inp, end_epoch=0, fields=fields).probe())

    with pytest.raises(ValueError, match=match):
        timely.execute(1, build)


def test_a_zombie_writers_late_copy_of_complete_epochs_is_dropped(tansu):
    """A writer replaced while paused sends, once resumed, records and a marker of an
    epoch its partition completed long ago: the source drops them, and every epoch is
    read once (an error would make the topic unreadable to every reader, for good)."""
    B = tansu.bootstrap
    inp = name("in")
    create_topics(B, {inp: 1})
    writer = Writer(B, inp)
    epochs = {e: epoch_events(e, 1, 5) for e in range(4)}
    for e in (0, 1, 2):
        writer.epoch(e, epochs[e])
    writer.epoch(1, epochs[1])          # the zombie's
    writer.epoch(3, epochs[3])

    def build(worker):
        captured = worker.dataflow(lambda scope: scope.kafka_source(B, inp, end_epoch=4).capture())
        run_to_end(worker)
        return captured.by_time()

    [by_time] = timely.execute(1, build)
    assert {t: sorted(r["i"] for r in records) for t, records in by_time.items()} == \
        {e: sorted(v["i"] for v in epochs[e][0]) for e in range(4)}


def test_a_marker_going_back_in_time_is_an_epoch_order_error(tansu):
    B = tansu.bootstrap
    inp = name("in")
    create_topics(B, {inp: 1})
    writer = Writer(B, inp)
    writer.epoch(2, {0: [event(2, 0, i) for i in range(3)]})
    writer.records(5, {0: [event(5, 0, 0)]})
    back = writer.marker(4, 0)      # epoch 5 was begun: 4 cannot complete any more
    writer.marker(5, 0)             # ends the run (end_epoch=6) should the error be missed

    def build(worker):
        worker.dataflow(lambda scope: scope.kafka_source(B, inp, end_epoch=6).probe())
        run_to_end(worker)

    with pytest.raises(EpochOrderError, match="goes back") as info:
        timely.execute(1, build)
    assert (info.value.topic, info.value.partition, info.value.offset) == (inp, 0, back)


# ---- packing by default ---------------------------------------------------------------------
def _data_records(brokers: str, topic: str, partitions: int) -> list:
    """The rows header (None: one value) of every data record of ``topic``."""
    consumer = Consumer(consumer_config(brokers, None, None))
    found = []
    try:
        for messages in scan(consumer, {(topic, p): 0 for p in range(partitions)}, timeout=10):
            for m in messages:
                headers = dict(m.headers() or [])
                if "marker" not in headers:
                    found.append(int(headers["rows"]) if "rows" in headers else None)
    finally:
        consumer.close()
    return found


def test_kafka_sink_packs_by_default_without_a_key_and_not_with_one(tansu):
    """Our readers decode packed records, so a sink without a key packs PACKED_ROWS
    values per Kafka record; with a key function each value keeps its own Kafka key."""
    from timely.connectors.epochs import PACKED_ROWS
    B = tansu.bootstrap
    packed, keyed = name("packed"), name("keyed")
    create_topics(B, {packed: 2, keyed: 2})
    sent = {0: [[f"k{i}", i] for i in range(250)], 1: [[f"k{i}", -i] for i in range(10)]}

    def build(worker):
        def df(scope):
            source, stream = scope.new_input()
            stream.kafka_sink(B, packed)
            stream.kafka_sink(B, keyed, key=lambda r: r[0])
            return source
        source = worker.dataflow(df)
        for epoch, records in sent.items():
            source.send_batch(records)
            source.advance_to(epoch + 1)
        source.close()
        worker.run()
    timely.execute(1, build)
    want = {(e, k): v for e, records in sent.items() for k, v in records}
    for topic in (packed, keyed):
        got, _ = read_back(B, topic, 2)
        assert got == want, topic
    rows = _data_records(B, packed, 2)
    assert sum(rows) == 260 and max(rows) == PACKED_ROWS and len(rows) <= 260 // PACKED_ROWS + 4, rows
    assert _data_records(B, keyed, 2) == [None] * 260


# ---- records handed on before their marker (early=True) -----------------------------------
def keep_all(time, records, state, notificator, output):
    output.extend(records)


def test_early_records_a_marker_does_not_count_are_withdrawn_and_the_rest_counted_once(tansu):
    """With ``early=True`` a crashed writer's records are handed on as they are read;
    the retry's marker leaves them out, so they are withdrawn before the stateful
    operator applies the epoch, which sees exactly the marker's records (and the
    worker's metrics count them). A value that does not decode holds the rest of its
    epoch back for the marker (which drops it); the next epoch is handed on early again."""
    from timely.metrics.instruments import worker_numbers
    B = tansu.bootstrap
    inp = name("in")
    create_topics(B, {inp: 1})
    writer = Writer(B, inp)
    crashed = [event(0, 0, i) for i in range(3)]
    writer.records(0, {0: crashed})                                        # no marker: orphans
    writer.records(0, {0: [b'{"user": 1, oops']}, raw=True)
    retried = [event(0, 0, i) for i in range(10, 14)]
    later = [event(1, 0, i) for i in range(5)]

    def build(worker):
        captured = worker.dataflow(lambda scope: scope.kafka_source(
            B, inp, end_epoch=2, fields=("user", "i"), early=True)
            .stateful_unary(None, lambda r: r[0], "Keep", keep_all).capture())
        (state,) = worker.kafka_sources.values()
        part = state.parts[(inp, 0)]
        steps_until(worker, lambda: part.given.get(0) == 3 and 0 in part.held,
                    what="the crashed writer's records handed on, the bad one held back")
        writer.marker(0, 0, writer.records(0, {0: retried})[0])
        offsets = writer.records(1, {0: later})[0]
        steps_until(worker, lambda: part.given.get(1) == len(later), what="epoch 1 handed on early")
        assert state.withdrawals == 3 and part.completed == 0
        writer.marker(1, 0, offsets)
        run_to_end(worker)
        assert worker_numbers(worker)["withdrawn"] == 3        # timely_kafka_source_withdrawn_total
        return captured.by_time(), state.withdrawals, state.records, part.orphans

    (by_time, withdrawals, records, orphans), = timely.execute(1, build)
    assert {t: sorted(rs) for t, rs in by_time.items()} == {
        0: sorted((e["user"], e["i"]) for e in retried), 1: sorted((e["user"], e["i"]) for e in later)}
    assert (withdrawals, records, orphans) == (3, len(retried) + len(later), 4)


def test_a_partition_given_away_withdraws_what_it_handed_on_early(tansu):
    """A reader that gives a partition to another worker withdraws the records of its
    unfinished epoch that it handed on early, at that epoch: the new owner reads them
    again from just past the last marker."""
    from timely.connectors.kafka.source import KafkaSourceState, _hand_off
    B = tansu.bootstrap
    inp = name("in")
    create_topics(B, {inp: 1})
    tp = (inp, 0)

    class Out:
        def __init__(self):
            self.sent = []

        def give_batch(self, cap, batch, time=None):
            self.sent.append((time, type(batch).__name__, list(batch)))

        def flush(self):
            pass

    class Cap:
        time = 0

    state = KafkaSourceState(B, [inp], None, "earliest", None, JSON, 0, [0], None, fields=("user", "i"))
    try:
        part = state.parts[tp]
        log = [(data_headers(0), orjson.dumps(event(0, 0, 0))), (marker_headers(0, 0, 1), b""),
               (data_headers(1), orjson.dumps(event(1, 0, 1))), (data_headers(1), orjson.dumps(event(1, 0, 2)))]
        data, handoffs = Out(), Out()
        for offset, (headers, value) in enumerate(log):
            for epoch, records in part.record(offset, headers, value):
                data.give_batch(Cap, state.events(inp, 0, records), epoch)
        state.prepare_pending(part)
        state.hand_on_early(data, Cap, tp, part, None)
        waiting = _hand_off(state, handoffs, data, Cap, [1], True)
    finally:
        state.close()
    early = [(event(1, 0, i)["user"], i) for i in (1, 2)]
    assert data.sent == [(0, "list", [(event(0, 0, 0)["user"], 0)]), (1, "list", early),
                         (1, "Withdrawal", early)]
    # to worker 1 at epoch 0, reading on at offset 2 (just past epoch 0's marker)
    assert not waiting and handoffs.sent == [(0, "list", [[1, inp, 0, 2, 0, [(0, 2)], None]])]
    assert (state.withdrawals, tp in state.parts) == (2, False)


class GatedCommits:
    """A source's consumer with its commits watched: the first waits for ``gate``, each
    is logged in ``calls`` (its offset, then "<offset> landed"), and ``fail`` (an
    exception) makes every later one fail."""

    def __init__(self, consumer):
        self.consumer, self.fail, self.calls = consumer, None, []
        self.gate, self.entered = threading.Event(), threading.Event()

    def __getattr__(self, attr):
        return getattr(self.consumer, attr)

    def commit(self, **kwargs):
        if self.fail is not None:
            raise self.fail
        offset = kwargs["offsets"][0].offset
        self.calls.append(offset)
        if len(self.calls) == 1:
            self.entered.set()
            assert self.gate.wait(10), "the test never let the first commit through"
        done = self.consumer.commit(**kwargs)
        self.calls.append(f"{offset} landed")
        return done


def gated_source(brokers: str, epochs: int):
    """A source state of group ``g`` on a new one-partition topic whose first ``epochs``
    epochs were read (one record and its marker each, offsets 2e and 2e + 1), its
    consumer's commits gated; ``(state, gated, topic, group)``."""
    from timely.connectors.kafka.source_state import KafkaSourceState
    inp, group = name("in"), name("g")
    create_topics(brokers, {inp: 1})
    state = KafkaSourceState(brokers, [inp], group, "earliest", None, JSON, 0, [0], None)
    state.consumer = gated = GatedCommits(state.consumer)
    part = state.parts[(inp, 0)]
    for epoch in range(epochs):
        list(part.record(2 * epoch, data_headers(epoch), orjson.dumps(event(epoch, 0, epoch))))
        list(part.record(2 * epoch + 1, marker_headers(epoch, 2 * epoch, 2 * epoch + 1), b""))
    return state, gated, inp, group


def test_a_commit_the_worker_does_not_wait_for_lands_before_the_next_and_fails_loudly(tansu):
    """At checkpoints the worker goes on while its offsets commit; the next commit waits
    for the one in flight (commits land in order), and ``close`` raises its error."""
    B = tansu.bootstrap
    state, gated, inp, group = gated_source(B, 3)
    closing = False
    try:
        assert state.commit(0, wait=False) == 1
        # the commit is in flight, held at the gate, and the worker went on
        assert gated.entered.wait(10) and not state._committing.done()
        threading.Timer(0.2, gated.gate.set).start()
        assert state.commit(1, wait=False) == 1
        state.settle()
        # the second was sent only once the first had landed
        assert gated.calls == [2, "2 landed", 4, "4 landed"]
        assert committed(B, group, inp, 1) == {0: 4}

        gated.fail = KafkaException(KafkaError(KafkaError.OFFSET_METADATA_TOO_LARGE, "offset metadata too large"))
        state.commit(2, wait=False)
        closing = True
        with pytest.raises(ConnectorError, match=f"committing offsets of group '{group}'.*metadata too large"):
            state.close()
    finally:
        if not closing:
            state.close(quiet=True)
    assert committed(B, group, inp, 1) == {0: 4}


def test_a_teardown_waits_a_bounded_time_for_a_commit_and_never_raises(tansu, caplog):
    """A dataflow torn down after a failure neither hangs on a commit in flight nor
    fails on one that failed: the checkpoint holds the positions."""
    B = tansu.bootstrap
    state, gated, inp, group = gated_source(B, 1)
    state.commit(0, wait=False)
    in_flight = state._committing
    assert gated.entered.wait(10)
    state.close(quiet=True, timeout=0.2)        # the gate stays shut: still in flight
    assert "still in flight when the dataflow was torn down" in caplog.text
    gated.gate.set()
    in_flight.result(10)
    assert gated.calls == [2, "2 landed"]       # it landed after all, on the consumer left open
    gated.consumer.close()

    state, gated, inp, group = gated_source(B, 1)
    gated.fail = KafkaException(KafkaError(KafkaError.OFFSET_METADATA_TOO_LARGE, "offset metadata too large"))
    state.commit(0, wait=False)
    state.close(quiet=True, timeout=10)
    assert "the last offsets commit failed while the dataflow was torn down" in caplog.text
    assert "metadata too large" in caplog.text


def test_early_applies_only_to_epochs_that_markers_end():
    with pytest.raises(ValueError, match="early=True hands records on before their epoch's marker"):
        timely.execute(1, lambda w: w.dataflow(lambda scope: scope.kafka_source(
            "127.0.0.1:1", "t", epochs="ingestion", epoch_records=10, early=True)))


# ---- read-ahead: a backlog is read a bounded amount ahead of what the dataflow finished ----------
def padded_epoch(epoch: int, partitions, per_partition: int) -> dict[int, list[dict]]:
    """Events of about 200 bytes each (the read-ahead counts the bytes of values)."""
    return {p: [{**event(epoch, p, i), "pad": "x" * 150} for i in range(per_partition)] for p in partitions}


def write_backlog(brokers: str, topic: str, epochs: dict[int, dict[int, list]], rows: int = 80) -> None:
    """Append ``epochs`` to a topic that holds nothing yet in the partitions named, under
    the epoch contract (each epoch's events ``rows`` to a record, as Spark's writer packs
    them, then its markers), with one flush at the end: the offsets count from 0."""
    producer = Producer(producer_config(brokers, None))
    offsets: dict[int, int] = collections.defaultdict(int)
    for e, by_partition in sorted(epochs.items()):
        for p, events in by_partition.items():
            first = offsets[p]
            for i in range(0, len(events), rows):
                chunk = events[i:i + rows]
                producer.produce(topic, JSON.dumps_many(chunk), partition=p, headers=data_headers(e, rows=len(chunk)))
                offsets[p] += 1
            producer.produce(topic, b"", partition=p, headers=marker_headers(e, first, offsets[p]))
            offsets[p] += 1
    assert producer.flush(30) == 0


def read_counts_bounded(brokers: str, topic: str, epochs: int, limit: int, on_step) -> tuple:
    """Count per user and epoch with ``kafka_source(read_ahead=limit)``, one worker,
    stepping by hand with ``on_step(flow)`` after every step. Returns the counts and
    the source's ``ReadAhead``."""
    def build(worker):
        captured = worker.dataflow(lambda scope: count_by_user(
            scope.kafka_source(brokers, topic, end_epoch=epochs, read_ahead=limit)).capture())
        (state,) = worker.kafka_sources.values()
        flow = state.flow
        deadline = time.monotonic() + STEP_TIMEOUT
        while worker.step_or_park(0.005):
            assert time.monotonic() < deadline, "the dataflow did not complete"
            on_step(flow)
        return {(t, u): n for t, rs in captured.by_time().items() for u, n in rs}, flow
    (counts, flow), = timely.execute(1, build)
    return counts, flow


def read_ahead_bound(limit: int) -> int:
    """What a source bounded to ``limit`` may hold (``timely.connectors.kafka.read_ahead``):
    half the bound more while a partition lags, one step's read, and what the client
    hands on before the lagging partition's records (its queue, and one fetch)."""
    from timely.connectors.kafka.read_ahead import client_settings, default_step
    client = client_settings(limit)
    return limit + limit // 2 + default_step(limit) + (client["queued.max.messages.kbytes"] << 10) \
        + client["fetch.max.bytes"]


def test_a_backlog_is_read_at_most_the_read_ahead_past_what_the_dataflow_finished(tansu):
    B = tansu.bootstrap
    inp = name("in")
    create_topics(B, {inp: 4})
    epochs = {e: padded_epoch(e, range(4), 80) for e in range(160)}   # 64 KB an epoch, 10 MB in all
    write_backlog(B, inp, epochs)
    limit = 512 << 10
    seen = []

    def check(flow):
        assert flow.buffered <= read_ahead_bound(limit), flow.by_epoch
        seen.append(flow.buffered)

    counts, flow = read_counts_bounded(B, inp, 160, limit, check)
    assert counts == expected_counts(epochs)
    assert flow.held > 0 and max(seen) >= limit, "the bound never held the source: the test reads too little"
    backlog = sum(len(orjson.dumps(ev)) for by in epochs.values() for evs in by.values() for ev in evs)
    assert 3 * read_ahead_bound(limit) < backlog, "the backlog would fit under the bound"
    assert flow.buffered == 0


def test_partitions_ahead_of_a_lagging_one_pause_and_resume_exactly(tansu):
    """Three partitions hold a backlog, the fourth has not written epoch 0 yet: the
    frontier waits for it, so the others are paused once half the bound more went by,
    instead of being read to their end; when the fourth is written everything
    resumes, and every epoch is counted once."""
    B = tansu.bootstrap
    inp = name("in")
    create_topics(B, {inp: 4})
    epochs = {e: padded_epoch(e, range(4), 80) for e in range(160)}
    write_backlog(B, inp, {e: {p: by[p] for p in range(3)} for e, by in epochs.items()})
    limit = 512 << 10
    late: list = []

    def check(flow):
        assert flow.buffered <= read_ahead_bound(limit), flow.by_epoch
        if not late and flow.paused == {(inp, p) for p in range(3)}:
            assert flow.frontier == 0
            late.append(flow.buffered)
            write_backlog(B, inp, {e: {3: by[3]} for e, by in epochs.items()})   # it catches up

    counts, flow = read_counts_bounded(B, inp, 160, limit, check)
    assert late and late[0] >= limit + limit // 2, "the partitions ahead were never paused"
    assert counts == expected_counts(epochs)
    assert not flow.paused and flow.buffered == 0
