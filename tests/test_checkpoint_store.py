"""Checkpoint stores: the contract a restore relies on, kept by DirStore (SQLite) and
KafkaStore (on the session's Tansu broker) alike.

Protects: records written by several writers (threads) come back whole, in write order
per writer, once durable, also to a second store object (another process); ``read``
filters entries by incarnation and ``want`` but always returns every incarnation and
commit; a restore (``restore_point`` + ``fold_bin``) gives back exactly the state
written, multi-part entries of ~1 MiB included; KafkaStore's segments roll by records
and by bytes without changing the order; ``forget`` drops other incarnations and
obsolete records but nothing a restore needs (a commit newer in one worker's chain
only does not make an older complete one needless); a corrupt record is named, never
applied; an unusable store (a broker nothing listens for, a directory that cannot be
made) raises ``CheckpointError`` naming it, promptly.
"""
from __future__ import annotations

import random
import sqlite3
import threading
import uuid

import pytest

from broker.client import producer_config
from broker.tansu import free_port
from timely.checkpoint.kafka_store import KafkaStore, parse_segment, segment_topic
from timely.checkpoint.records import (CheckpointCorrupt, CheckpointError, Commit, Entry, Incarnation,
                                       encode, fold_bin, restore_point)
from timely.checkpoint.store import DirStore
from timely.communication.codec import py_packb

OP = "Count@(0, 3)"


class Backend:
    """Stores of one fresh namespace, of one kind, and what differs between the kinds."""

    def __init__(self, kind: str, tmp_path, tansu) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.tansu = tansu
        self.namespace = f"t{uuid.uuid4().hex[:10]}.ckpt"
        self.opened: list = []

    def open(self, **kafka_options):
        """A store object on the namespace (each one stands for a process)."""
        if self.kind == "dir":
            store = DirStore(str(self.tmp_path), self.namespace)
        else:
            store = KafkaStore(self.tansu.bootstrap, self.namespace, **kafka_options)
        self.opened.append(store)
        return store

    def segments(self, inc: str, worker: int):
        """The segment numbers of a chain (None for a store without segments)."""
        if self.kind == "dir":
            return None
        store = self.opened[0]
        found = [parse_segment(self.namespace, t) for t in store.admin.list_topics(timeout=10).topics]
        return sorted(s for i, w, s in filter(None, found) if (i, w) == (inc, worker))

    def corrupt(self, inc: str, worker: int, key: str) -> str:
        """Put a record that fails its checksum where a commit (``key`` "C") or an entry
        of bin 1 (``key`` "E") of ``worker`` goes; returns where a read must say it is."""
        garbage = b"\x93\x01\x02garbage"
        if self.kind == "dir":
            db = sqlite3.connect(self.opened[0].path, isolation_level=None)
            cur = db.execute("INSERT INTO records (kind, inc, worker, op, bin, label, data) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)", (key, inc, worker, OP if key == "E" else None,
                                                              1 if key == "E" else None, 1, garbage))
            row = cur.lastrowid
            db.close()
            return f"{self.opened[0].path}, row {row}"
        from confluent_kafka import Producer
        topic = segment_topic(self.namespace, inc, worker, 0)
        producer = Producer(producer_config(self.tansu.bootstrap, None))
        offsets = []
        producer.produce(topic, garbage, b"C" if key == "C" else f"E/{OP}/1".encode(), partition=0,
                         on_delivery=lambda err, msg: offsets.append((err, msg.offset())))
        assert producer.flush(10) == 0 and offsets[0][0] is None
        return f"{topic}[0]@{offsets[0][1]}"

    def unusable(self):
        """``(open, text)``: opening a store where none can be; the error must name ``text``."""
        if self.kind == "dir":
            blocker = self.tmp_path / "a-file"
            blocker.write_text("")
            return (lambda: DirStore(str(blocker / "sub"), self.namespace)), str(blocker)
        address = f"127.0.0.1:{free_port()}"
        return (lambda: KafkaStore(address, self.namespace, timeout=2)), address

    def close(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=["dir", "kafka"])
def backend(request, tmp_path):
    tansu = request.getfixturevalue("tansu") if request.param == "kafka" else None
    found = Backend(request.param, tmp_path, tansu)
    yield found
    found.close()


def entry(inc, worker, seq, b, label, kind="delta", items=(), deleted=(), pending=(), part=0, parts=1, op=OP):
    return Entry(inc, op, b, label, kind, worker, seq, part, parts, list(items), list(deleted), list(pending))


def commit(inc, label, worker, partitions=2, ops=None):
    """Worker ``worker``'s commit at ``label``: it read partition ``worker`` of a source
    of ``partitions`` partitions (so every worker's commit is needed for a complete one)."""
    return Commit(inc, label, worker, {("src", worker): 100 * label + worker}, {"src": partitions},
                  ops if ops is not None else {OP: 4})


def start(store, inc="a", seq=1, parent=None, at=None):
    store.start(Incarnation(inc, seq, parent, at, (0, 1)))


def restored(store):
    """What a restore of the store finds: ``(inc, label, {bin: (state, pending)})``."""
    contents = store.read()
    point = restore_point(contents.incarnations, contents.commits)
    entries = store.read([point.inc.id]).entries
    bins = {}
    for e in entries:
        bins.setdefault(e.bin, []).append(e)
    folded = {b: fold_bin(es, point.label, f"bin {b}") for b, es in sorted(bins.items())}
    return point.inc.id, point.label, folded


# ---- writing and reading back ---------------------------------------------------------------------
def test_writers_in_threads_are_read_back_in_order_once_durable(backend):
    store = backend.open(segment_records=7)
    start(store)
    written: dict[int, list] = {}
    tickets: dict[int, list] = {}

    def work(worker):
        w = store.writer(worker, "a")
        mine = written[worker] = []
        for i in range(120):
            if i % 10 == 9:
                record = commit("a", i, worker)
            else:
                record = entry("a", worker, i, i % 4, i, "base" if i < 4 else "delta",
                               [(f"k{i}", i), (f"w{worker}", (i, "x"))], [f"old{i}"],
                               [(i + 1, ((0, f"n{i}"),))])
            mine.append(record)
            tickets.setdefault(worker, []).append(w.write(record))
        assert w.flush(30) is True
        assert all(w.durable(t) for t in tickets[worker])

    threads = [threading.Thread(target=work, args=(worker,)) for worker in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(written) == [0, 1, 2, 3] and all(len(v) == 120 for v in written.values())

    other = backend.open()                          # another process
    got = other.read(["a"])
    assert [i.id for i in got.incarnations] == ["a"]
    for worker, records in written.items():
        assert [e for e in got.entries if e.writer == worker] == [r for r in records if isinstance(r, Entry)]
        assert [c for c in got.commits if c.worker == worker] == [r for r in records if isinstance(r, Commit)]
    assert len(got.entries) + len(got.commits) == 480


def test_a_fresh_namespace_reads_empty_and_a_second_store_sees_what_is_durable(backend):
    store = backend.open()
    got = store.read(["a"])
    assert (got.incarnations, got.commits, got.entries) == ([], [], [])
    start(store)
    w = store.writer(0, "a")
    ticket = w.write(commit("a", 3, 0))
    assert w.flush(10) and w.durable(ticket)
    got = backend.open().read()
    assert [i.id for i in got.incarnations] == ["a"] and got.commits == [commit("a", 3, 0)]


def test_read_filters_entries_but_returns_every_incarnation_and_commit(backend):
    store = backend.open()
    start(store, "a")
    start(store, "b", 2, "a", 1)
    for inc in ("a", "b"):
        w = store.writer(0, inc)
        for b in range(6):
            w.write(entry(inc, 0, b, b, 1, "base", [(b, inc)], op=OP if b % 3 else "Other"))
        w.write(commit(inc, 1, 0, partitions=1))
        assert w.flush(10)
    everything = store.read()
    assert [i.id for i in everything.incarnations] == ["a", "b"]
    assert [(c.inc, c.label) for c in everything.commits] in ([("a", 1), ("b", 1)], [("b", 1), ("a", 1)])
    assert everything.entries == []
    only_b = store.read(["b"])
    assert [(e.inc, e.bin) for e in only_b.entries] == [("b", b) for b in range(6)]
    assert len(only_b.commits) == 2 and len(only_b.incarnations) == 2
    some = store.read(["a", "b"], lambda op, b: op == OP and b % 2 == 0)
    assert sorted((e.inc, e.bin) for e in some.entries) == [("a", 2), ("a", 4), ("b", 2), ("b", 4)]
    assert len(some.commits) == 2 and len(some.incarnations) == 2


# ---- a restore ----------------------------------------------------------------------------------------
def test_restore_gives_back_exactly_the_state_written(backend):
    rng = random.Random(7)
    store = backend.open(segment_records=50)
    start(store)
    writers = {w: store.writer(w, "a") for w in (0, 1)}
    owner = {b: b % 2 for b in range(4)}            # bin -> the worker that holds it
    state = {b: {} for b in owner}
    pending: dict = {b: {} for b in owner}
    seq = {w: 0 for w in writers}

    def write(b, label, kind, items, deleted=()):
        w = owner[b]
        seq[w] += 1
        pend = [(t, tuple(rs)) for t, rs in sorted(pending[b].items())]
        writers[w].write(entry("a", w, seq[w], b, label, kind, items, deleted, pend))

    big = {f"key-{i:05d}": "v" * 240 for i in range(5000)}     # ~1.2 MiB: two parts
    for b in owner:
        state[b] = dict(big) if b == 3 else {}
    for b in (0, 1, 2):
        write(b, 0, "base", [])
    seq[1] += 1
    items = sorted(big.items())
    for part, chunk in enumerate((items[:4096], items[4096:])):
        writers[1].write(entry("a", 1, seq[1], 3, 0, "base", chunk, part=part, parts=2))
    for label in range(1, 6):
        for b in owner:
            keys = rng.sample(range(40), 8)
            changed = [(f"k{k}", rng.randrange(1000)) for k in keys[:6]]
            gone = [f"k{k}" for k in keys[6:] if f"k{k}" in state[b]]
            state[b].update(changed)
            for k in gone:
                del state[b][k]
            pending[b] = {label + 10: [(label, f"note{b}")]}
            write(b, label, "delta", changed, gone)
        for w in writers:
            writers[w].write(commit("a", label, w))
    assert all(w.flush(30) for w in writers.values())

    inc, label, bins = restored(backend.open())
    assert (inc, label) == ("a", 5)
    assert {b: s for b, (s, _) in bins.items()} == state
    assert {b: p for b, (_, p) in bins.items()} == {b: {15: [(5, f"note{b}")]} for b in owner}


# ---- segments -------------------------------------------------------------------------------------
def test_segments_roll_by_records_and_by_bytes_and_keep_the_order(backend):
    by_records = backend.open(segment_records=5)
    by_bytes = backend.open(segment_records=10_000, segment_bytes=3000)
    start(by_records)
    written = {0: [], 1: []}
    for worker, store in ((0, by_records), (1, by_bytes)):
        w = store.writer(worker, "a")
        for i in range(40):
            if i % 8 == 7:
                record = commit("a", i, worker)
            else:
                record = entry("a", worker, i, i % 3, i, items=[(i, "x" * 1000)])
            written[worker].append(record)
            w.write(record)
        assert w.flush(30)
    got = backend.open().read(["a"])
    for worker, records in written.items():
        assert [e for e in got.entries if e.writer == worker] == [r for r in records if isinstance(r, Entry)]
        assert [c for c in got.commits if c.worker == worker] == [r for r in records if isinstance(r, Commit)]
    if backend.kind == "kafka":
        assert len(backend.segments("a", 0)) >= 8    # 40 records, 5 a segment
        assert len(backend.segments("a", 1)) >= 13   # ~1 KiB records, 3000 bytes a segment


def test_records_written_in_a_hold_go_together_in_order_and_across_segment_rolls(backend):
    """A crossing writes its entries inside ``hold``: they must come back in write order,
    nested holds included, when the hold spans segment rolls, and be durable once it ends."""
    store = backend.open(segment_records=5)
    start(store)
    w = store.writer(0, "a")
    written = []
    with w.hold():
        first = w.write(entry("a", 0, 0, 0, 0, items=[(0, "x")]))
        written.append(0)
        if backend.kind == "kafka":     # held: not handed to the broker, so never acknowledged
            assert not w.durable(first)
        for i in range(1, 23):
            with w.hold():
                w.write(entry("a", 0, i, i % 3, i, items=[(i, "x")]))
                written.append(i)
    assert w.flush(30)
    got = backend.open().read(["a"])
    assert [e.seq for e in got.entries] == written
    if backend.kind == "kafka":
        assert len(backend.segments("a", 0)) >= 5    # 23 entries, 5 a segment
        heads = backend.open()
        assert [e.label for e in heads.read(["a"], heads=True).entries] == written
        # the entries held together went as group records: fewer Kafka records than
        # entries (the held ones, grouped up to each roll, plus the end markers)
        assert heads.heads_fetched < len(written)


def test_a_corrupt_group_of_held_entries_is_named_by_read(tansu, tmp_path):
    """A group record whose array or one of whose entries is damaged stops a read (whole
    and of heads) with an error naming the record and the entry in it, never a restore
    of what is left."""
    from confluent_kafka import Producer
    damaged_entry = py_packb([encode(entry("a", 0, 7, 1, 1, "base", [("k", 1)]))[:-1]])
    for value, text in ((b"\x93\x01garbage", "does not decode"), (py_packb([1, 2]), "is not a list"),
                        (damaged_entry, "entry 0 fails its checksum")):
        backend = Backend("kafka", tmp_path, tansu)
        try:
            store = backend.open()
            start(store)
            w = store.writer(0, "a")
            with w.hold():
                for b in range(3):
                    w.write(entry("a", 0, b, b, 0, "base", [("k", b)]))
            assert w.flush(10) and len(store.read(["a"]).entries) == 3
            topic = segment_topic(backend.namespace, "a", 0, 0)
            producer = Producer(producer_config(tansu.bootstrap, None))
            producer.produce(topic, value, b"G", partition=0)
            assert producer.flush(10) == 0
            for heads in (False, True):
                with pytest.raises(CheckpointCorrupt, match=text) as raised:
                    backend.open().read(["a"], heads=heads)
                assert f"{topic}[0]@1" in str(raised.value)    # the 3 held entries: one record at 0
        finally:
            backend.close()


# ---- forget -----------------------------------------------------------------------------------------
def test_forget_drops_other_incarnations_and_obsolete_records_but_nothing_a_restore_needs(backend):
    store = backend.open(segment_records=1, grace=0)   # a segment per record: each can go alone
    start(store, "a")
    wa = store.writer(0, "a")
    wa.write(entry("a", 0, 1, 0, 0, "base", [("old", 1)]))
    wa.write(commit("a", 2, 0, partitions=1))
    assert wa.flush(10)
    start(store, "b", 2, "a", 2)
    writers = {w: store.writer(w, "b") for w in (0, 1)}
    seq = {0: 0, 1: 0}

    def write(w, *records):
        for r in records:
            writers[w].write(r)

    def e(w, b, label, kind, items):
        seq[w] += 1
        return entry("b", w, seq[w], b, label, kind, items)

    for w in (0, 1):
        write(w, e(w, w, 10, "base", [("x", 1)]), commit("b", 10, w))
        write(w, e(w, w, 12, "delta", [("y", 2)]), commit("b", 12, w))
        write(w, e(w, w, 14, "base", [("x", 3), ("z", 4)]), commit("b", 14, w))
    # worker 0 alone reaches 16: 14 stays the latest complete label, so its commits at
    # 14 are needed although worker 0's chain holds a later one
    write(0, e(0, 0, 16, "delta", [("w", 5)]), commit("b", 16, 0))
    assert all(w.flush(10) for w in writers.values())
    before = restored(store)
    assert before[:2] == ("b", 14)
    segments_before = backend.segments("b", 0)

    gone = store.forget({"b"}, lambda entry: entry.label < 14)
    # dir: a's 3 records and b's 4 obsolete entries; kafka: a's 3 records and b's closed
    # segments holding only obsolete entries and commits below 14 (4 in either chain)
    assert gone == {"dir": 7, "kafka": 11}[backend.kind]
    other = backend.open()
    assert [i.id for i in other.read().incarnations] == ["b"]
    assert other.read(["a"]).entries == [] and {c.inc for c in other.read().commits} == {"b"}
    assert restored(other) == before
    remaining = {(e.writer, e.label) for e in other.read(["b"]).entries}
    assert {(0, 14), (1, 14), (0, 16)} <= remaining
    labels = sorted((c.worker, c.label) for c in other.read().commits)
    assert {(0, 14), (1, 14), (0, 16)} <= set(labels)
    if backend.kind == "kafka":
        assert backend.segments("a", 0) == []
        after = backend.segments("b", 0)
        assert len(after) < len(segments_before) and after[-1] == segments_before[-1]
    # the writers go on after a forget, and what they write is read back
    write(1, commit("b", 16, 1))
    assert writers[1].flush(10)
    assert restored(backend.open())[:2] == ("b", 16)


# ---- what goes wrong --------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["C", "E"])
def test_a_corrupt_record_is_named_by_read(backend, key):
    store = backend.open()
    start(store)
    w = store.writer(0, "a")
    w.write(entry("a", 0, 1, 1, 0, "base", [("k", 1)]))
    assert w.flush(10)
    where = backend.corrupt("a", 0, key)
    if key == "E":                                  # an entry no one asked for is not decoded
        assert store.read().commits == [] and store.read(["a"], lambda op, b: b != 1).entries == []
    with pytest.raises(CheckpointCorrupt, match=r"fails its checksum") as raised:
        store.read(["a"])
    assert where in str(raised.value)


def test_an_unusable_store_raises_a_checkpoint_error_naming_it_promptly(backend):
    """Promptly: a broker that does not answer is waited for up to the broker timeout
    (``--broker-timeout``, here 1 s), then named; a directory at once."""
    from broker import health
    health.configure(1.0)
    open_it, text = backend.unusable()
    with pytest.raises(CheckpointError) as raised:
        open_it()
    assert text in str(raised.value)


def one_base(store) -> tuple:
    """Start incarnation "a" and write one durable base of bin 0: ``(writer, entry)``."""
    start(store)
    w = store.writer(0, "a")
    base = entry("a", 0, 1, 0, 0, "base", [("k", 1)])
    w.write(base)
    assert w.flush(10)
    return w, base


def test_kafka_read_drops_a_duplicate_a_producer_retry_left(tansu):
    """A producer without idempotence may write a record twice when it retries: the
    store reads it once, so the bin's parts still fold."""
    from confluent_kafka import Producer
    namespace = f"t{uuid.uuid4().hex[:10]}"
    store = KafkaStore(tansu.bootstrap, namespace)
    try:
        w, base = one_base(store)
        producer = Producer(producer_config(tansu.bootstrap, None))
        producer.produce(w.topic, encode(base), f"E/{OP}/0".encode(), partition=0)
        assert producer.flush(10) == 0
        entries = store.read(["a"]).entries
        assert entries == [base] and fold_bin(entries, 0, "bin 0") == ({"k": 1}, {})
    finally:
        store.close()


def test_the_models_memory_store_forgets_as_the_directory_store_does(tmp_path):
    """``timely.verify``'s MemStore stands for the real stores in the model: its forget
    drops exactly what DirStore's drops, and a restore finds the same afterwards."""
    from timely.checkpoint.store import DirStore
    from timely.verify.checkpoints.store import MemStore
    stores = [DirStore(str(tmp_path), "ns"), MemStore()]
    for store in stores:
        start(store, "a")
        start(store, "b", 2, "a", 2)
        wa, wb = store.writer(0, "a"), store.writer(0, "b")
        wa.write(entry("a", 0, 1, 0, 0, "base", [("old", 1)]))
        for seq, (label, kind, items) in enumerate([(10, "base", [("x", 1)]), (12, "delta", [("y", 2)]),
                                                    (14, "base", [("x", 3)])], 1):
            wb.write(entry("b", 0, seq, 0, label, kind, items))
            wb.write(commit("b", label, 0, partitions=1))
        if isinstance(store, MemStore):
            store.ack(wa, 10)
            store.ack(wb, 10)
        assert wa.flush(10) and wb.flush(10)
    gone = [store.forget({"b"}, lambda e: e.label < 14) for store in stores]
    assert gone == [4, 4]        # a: its incarnation and its entry; b: its two entries below 14
    assert restored(stores[0]) == restored(stores[1]) == ("b", 14, {0: ({"x": 3}, {})})
    stores[0].close()


def test_kafka_forget_dooms_a_topic_at_once_and_deletes_it_after_the_grace(tansu):
    """Deleting a topic a consumer is fetching kills the consumer's process (librdkafka
    SIGSEGV), and the lowest process compacts while others may read the store (a
    rollback's restore, a joiner): so forget only dooms a topic, which every read from
    then on leaves out, and the first forget after the grace deletes it."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    store = KafkaStore(tansu.bootstrap, namespace, segment_records=2, grace=3600)
    try:
        start(store)
        w = store.writer(0, "a")
        for label, kind in [(0, "base"), (1, "delta"), (2, "base"), (3, "delta")]:
            w.write(entry("a", 0, label, 0, label, kind, [("k", label)]))
        w.write(Commit("a", 3, 0))
        assert w.flush(10)
        first = segment_topic(namespace, "a", 0, 0)           # labels 0 and 1: before the base at 2
        assert store.forget({"a"}, lambda e: e.label < 2) == 2
        assert [e.label for e in store.read(["a"]).entries] == [2, 3]
        assert first in store.admin.list_topics(timeout=10).topics      # doomed, not deleted yet
        store.grace = 0
        assert store.forget({"a"}, lambda e: e.label < 2) == 0          # nothing newly doomed ...
        assert first not in store.admin.list_topics(timeout=10).topics  # ... and the grace is over
        assert [e.label for e in store.read(["a"]).entries] == [2, 3]
    finally:
        store.close()


def test_kafka_reads_of_heads_fetch_only_what_was_appended_since(tansu):
    """Compaction reads the store's heads once per run: a store object remembers what
    its reads of heads found per segment, so the next read fetches only the records
    appended since (by any process), and answers exactly what a fresh store object,
    reading everything, answers; what forget doomed is left out of both."""
    namespace = f"t{uuid.uuid4().hex[:10]}"
    store = KafkaStore(tansu.bootstrap, namespace, segment_records=3, grace=3600)
    other = KafkaStore(tansu.bootstrap, namespace, segment_records=3)     # another process's writer

    def heads(s):
        c = s.read(["a"], heads=True)
        return ([(e.op, e.bin, e.label, e.kind) for e in c.entries],
                sorted((c.worker, c.label) for c in c.commits))

    try:
        start(store)
        mine, theirs = store.writer(0, "a"), other.writer(1, "a")
        appended = 0
        for round_ in range(4):
            for label in range(round_ * 4, round_ * 4 + 4):
                for w, b in ((mine, 0), (theirs, 1)):
                    w.write(entry("a", w.worker, label, b, label, "base" if label % 4 == 0 else "delta",
                                  [("k", label)]))
                    w.write(Commit("a", label, w.worker))
                    appended += 2
            assert mine.flush(10) and theirs.flush(10)
            fetched = store.heads_fetched
            fresh = KafkaStore(tansu.bootstrap, namespace)
            try:
                assert heads(store) == heads(fresh)
            finally:
                fresh.close()
            # every record once, and the segment-closing marks of the rolls since
            new = store.heads_fetched - fetched
            assert appended <= new <= appended + appended // 3 + 2, (round_, new, appended)
            appended = 0
            if round_ == 1:
                held = len(heads(store)[0])
                assert store.forget({"a"}, lambda e: e.label < 4) > 0
                assert len(heads(store)[0]) < held      # the doomed segments left out at once
        fetched = store.heads_fetched
        heads(store)
        assert store.heads_fetched == fetched           # nothing appended: nothing fetched
    finally:
        store.close()
        other.close()


def test_a_joiner_of_a_life_whose_parent_was_compacted_away_starts_from_its_latest_checkpoint(tmp_path):
    """A replacement joins after a rollback, once the new life completed a checkpoint and
    compaction forgot the life it restored from (seen in ``run.py --leaver 2``): the
    agreed decision still names the forgotten restore point. A joiner restores no bin, so
    it starts from the life's latest complete checkpoint; a member that restores bins
    cannot, and says which incarnation it cannot read."""
    from timely.checkpoint.compaction import compact
    from timely.checkpoint.registry import Registry
    namespace = "job.Dataflow0"
    positions = {("clicks", 0): 40}

    def commit(inc: str, label: int) -> Commit:
        return Commit(inc, label, 0, positions, {"clicks": 1}, {OP: 4})

    store = DirStore(str(tmp_path), namespace)
    first = Registry(lambda key, make: make())
    first.stores[namespace] = store
    life1 = first.decide(namespace, [0])
    writer = store.writer(0, life1.inc.id)
    writer.write(commit(life1.inc.id, 6))
    writer.flush(5)
    (wire,) = first.redecide([0]).values()          # a rollback: life 2 restores life 1 at 6
    life2 = wire[0][0]
    assert wire[1] == (life1.inc.id, 6)
    writer = store.writer(0, life2)
    writer.write(commit(life2, 8))
    writer.flush(5)
    assert compact(store, life2) > 0
    assert [i.id for i in store.read().incarnations] == [life2]

    joiner = Registry(lambda key, make: wire)
    joiner.stores[namespace] = DirStore(str(tmp_path), namespace)
    decision = joiner.decide(namespace, [0, 1], lambda op, b: False, joiner=True)
    assert (decision.inc.id, decision.restore.inc.id, decision.restore.label) == (life2, life2, 8)
    assert decision.restore.positions() == positions

    member = Registry(lambda key, make: wire)
    member.stores[namespace] = DirStore(str(tmp_path), namespace)
    with pytest.raises(CheckpointError, match=f"names incarnation {life1.inc.id}, which this process cannot read"):
        member.decide(namespace, [0, 1])
