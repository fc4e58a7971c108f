"""The Spark data source ``timely-kafka`` on a real Kafka-protocol broker (Tansu).

Protects what a Spark job relies on:
- a batch read returns exactly the epochs complete in every partition, decided by
  markers: an epoch whose marker is missing on one partition, a crashed writer's
  orphan records outside a marker's range and a replay of a complete epoch are not
  returned; the ``epoch`` column is the record's epoch; ``startingOffsets`` given as
  JSON (offsets just after markers) starts there, ``endingOffsets`` ends before;
- a batch write puts each epoch's rows in a partition before one marker naming their
  exact offsets, appends empty-epoch markers to the partitions no row went to, packs
  rows with ``rowsPerMessage``, and reads back as written; two Spark tasks writing one
  Kafka partition, or rows going back in epoch within a partition, are refused by name;
- a streaming read with ``availableNow`` ends every micro-batch on an epoch boundary
  within ``maxOffsetsPerTrigger`` (at least one epoch even when one is bigger) and,
  restarted on its checkpoint, reads only what came after;
- a streaming write makes each micro-batch id (+ ``epochOffset``) an epoch, with one
  marker per partition right after the micro-batch's rows;
- missing options, a missing topic and an unreachable broker are named in the error.

One SparkSession for the run (fixture ``spark``), uuid-named topics per test.
"""
from __future__ import annotations

import json
import os
import sys
import uuid
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, Producer
from pyspark.sql import Row
from pyspark.sql import functions as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from broker.tansu import free_port  # noqa: E402
from timely.connectors import client, epochs  # noqa: E402
from timely.connectors.spark import partition_for_kafka  # noqa: E402

FORMAT = "timely-kafka"


def new_topic(tansu, partitions: int) -> str:
    topic = f"spark-{uuid.uuid4().hex[:10]}"
    client.create_topics(tansu.bootstrap, {topic: partitions})
    return topic


class Writer:
    """Hand-written records on a topic: data of an epoch, markers, anything."""

    def __init__(self, tansu, topic: str) -> None:
        self.topic = topic
        self.producer = Producer(client.producer_config(tansu.bootstrap, None))

    def data(self, partition: int, epoch: int, *values: bytes) -> None:
        for value in values:
            self.producer.produce(self.topic, value, None, partition, headers=epochs.data_headers(epoch))

    def marker(self, partition: int, epoch: int, first=None, end=None) -> None:
        self.producer.produce(self.topic, b"", None, partition,
                              headers=epochs.marker_headers(epoch, first, end))

    def flush(self) -> None:
        assert self.producer.flush(10) == 0


def raw_records(tansu, topic: str, partitions: int) -> dict[int, list]:
    """Every record of ``topic``: ``{partition: [(offset, key, value, headers dict)]}``."""
    consumer = Consumer(client.consumer_config(tansu.bootstrap, None, None))
    found = defaultdict(list)
    try:
        for batch in client.scan(consumer, {(topic, p): 0 for p in range(partitions)}):
            for m in batch:
                found[m.partition()].append((m.offset(), m.key(), m.value(), dict(m.headers() or ())))
    finally:
        consumer.close()
    return {p: sorted(found[p]) for p in range(partitions)}


def read(spark, tansu, topic: str, **options):
    reader = spark.read.format(FORMAT).option("kafka.bootstrap.servers", tansu.bootstrap).option("subscribe", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def check_epochs_and_markers(records: list, want_epochs: list[int]) -> dict[int, list]:
    """Check one partition's raw records: each epoch's data records, then exactly one
    marker; a marker's range names exactly the data records before it (no range: none).
    Returns ``{epoch: [values]}``."""
    values: dict[int, list] = {}
    pending: list = []
    for offset, _key, value, headers in records:
        epoch = int(headers["epoch"])
        if headers.get("marker") == b"epoch_end":
            assert epoch not in values, f"second marker of epoch {epoch}"
            if pending:
                assert headers["offsets"] == f"{pending[0][0]}-{offset}".encode()
            else:
                assert "offsets" not in headers
            assert all(e == epoch for _, e, _ in pending)
            values[epoch] = [v for _, _, v in pending]
            pending = []
        else:
            pending.append((offset, epoch, value))
    assert pending == [], "records after the last marker"
    assert list(values) == want_epochs
    return values


def test_a_local_sessions_python_workers_import_pyspark_from_the_installed_package(spark):
    """Spark puts pyspark.zip first on its Python workers' path, and Python compiles a
    zip's sources in every process that imports them (a second of CPU each);
    local_session's workers import the driver's installed pyspark, with its bytecode,
    and nothing of the driver's own environment changes: only Spark's zips leave their
    path (the interpreter's own entries, its stdlib zip included, stay)."""
    import sys

    import pyspark

    def origin(_):
        import sys

        import pyspark as worker_pyspark
        yield worker_pyspark.__file__, [p for p in sys.path if p.endswith(".zip")]

    (found, zips), = spark.sparkContext.parallelize([0], 1).mapPartitions(origin).collect()
    assert found == pyspark.__file__ and ".zip" not in found
    assert not [z for z in zips if os.path.basename(z) == "pyspark.zip" or os.path.basename(z).startswith("py4j-")]
    stdlib_zips = [p for p in sys.path if p.endswith(".zip")]
    assert stdlib_zips and zips == stdlib_zips
    assert "worker_path" not in os.environ.get("PYTHONPATH", "")


# ---- batch read ---------------------------------------------------------------------------
def test_lower_priority_reaches_every_thread_of_the_jvm_and_the_python_workers_it_starts(spark):
    """``lower_priority`` (make run's ``--spark-nice``) lowers Spark's priority, not the
    driver's: every thread of the JVM, and the Python worker that runs a task after it,
    are at the niceness asked for; asking again changes nothing; a niceness outside
    0..19 is refused."""
    from timely.connectors.spark import lower_priority

    driver = os.getpriority(os.PRIO_PROCESS, 0)
    lower_priority(spark, max(driver, 1))
    jvm = spark.sparkContext._gateway.proc.pid
    assert {os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir(f"/proc/{jvm}/task")} == {max(driver, 1)}

    def niceness(_):
        import os
        yield os.getpriority(os.PRIO_PROCESS, 0)

    assert spark.sparkContext.parallelize([0], 1).mapPartitions(niceness).collect() == [max(driver, 1)]
    assert lower_priority(spark, max(driver, 1)) == 0
    assert os.getpriority(os.PRIO_PROCESS, 0) == driver
    with pytest.raises(ValueError, match="between 0 and 19"):
        lower_priority(spark, 20)


def test_batch_read_returns_exactly_the_complete_epochs(spark, tansu):
    topic = new_topic(tansu, 2)
    w = Writer(tansu, topic)
    # partition 0: epoch 1 at 0-1 | marker | an orphan of a crashed epoch-2 writer at 3,
    # the retry's record at 4 | marker naming 4-5 | epoch 3 without its marker
    w.data(0, 1, b"a", b"b")
    w.marker(0, 1, 0, 2)
    w.data(0, 2, b"orphan")
    w.data(0, 2, b"c")
    w.marker(0, 2, 4, 5)
    w.data(0, 3, b"tail")
    # partition 1: epoch 1 | marker | a replay of epoch 1 | epoch 2 | a marker naming no
    # range (so only knowing epoch 1 complete drops the replay) | epoch 3 | marker
    w.data(1, 1, b"x")
    w.marker(1, 1, 0, 1)
    w.data(1, 1, b"x")
    w.data(1, 2, b"y")
    w.marker(1, 2)
    w.data(1, 3, b"z")
    w.marker(1, 3, 5, 6)
    w.flush()

    rows = read(spark, tansu, topic).collect()
    got = sorted((r.epoch, r.partition, r.offset, r.value, r.topic) for r in rows)
    assert got == [(1, 0, 0, b"a", topic), (1, 0, 1, b"b", topic), (1, 1, 0, b"x", topic),
                   (2, 0, 4, b"c", topic), (2, 1, 3, b"y", topic)]
    assert all(r.key is None and r.timestamp is not None for r in rows)

    # Offsets just after epoch 1's markers: epoch 2 only (the replay at 1:2 is known as one).
    after_one = json.dumps({topic: {"0": 3, "1": 2}})
    rows = read(spark, tansu, topic, startingOffsets=after_one).collect()
    assert sorted((r.epoch, r.value) for r in rows) == [(2, b"c"), (2, b"y")]

    # Ending before partition 0's second marker: epoch 1 is the last complete everywhere.
    rows = read(spark, tansu, topic, endingOffsets=json.dumps({topic: {"0": 5}})).collect()
    assert sorted((r.epoch, r.value) for r in rows) == [(1, b"a"), (1, b"b"), (1, b"x")]

    # The marker of epoch 3 on partition 0 completes epoch 3 everywhere.
    w.marker(0, 3, 6, 7)
    w.flush()
    rows = read(spark, tansu, topic, startingOffsets=after_one).collect()
    assert sorted((r.epoch, r.value) for r in rows) == [(2, b"c"), (2, b"y"), (3, b"tail"), (3, b"z")]


# ---- batch write --------------------------------------------------------------------------
def test_batch_write_then_read_round_trip(spark, tansu):
    topic = new_topic(tansu, 3)
    # Kafka partitions 0 and 1 only, epochs 4 and 5, rows shuffled: the writer's
    # layout (partition_for_kafka's) is one Spark partition per Kafka partition.
    data = [(f"k{i}", f'{{"n": {i}}}', 4 + i % 2, (i // 2) % 2) for i in range(40)]
    df = spark.createDataFrame(data[::-1], "key string, value string, epoch long, partition int")
    laid_out = df.repartition(2, "partition").sortWithinPartitions("partition", "epoch")
    (laid_out.write.format(FORMAT).option("kafka.bootstrap.servers", tansu.bootstrap)
     .option("topic", topic).mode("append").save())

    raw = raw_records(tansu, topic, 3)
    for p in (0, 1):
        values = check_epochs_and_markers(raw[p], [4, 5])
        want = {e: sorted(v.encode() for _, v, ee, pp in data if ee == e and pp == p) for e in (4, 5)}
        assert {e: sorted(v) for e, v in values.items()} == want
    # No row went to partition 2: it still gets each epoch's marker, in order, no range.
    assert check_epochs_and_markers(raw[2], [4, 5]) == {4: [], 5: []}

    back = read(spark, tansu, topic).collect()
    assert sorted((r.key.decode(), r.value.decode(), r.epoch, r.partition) for r in back) == sorted(data)

    # A later epoch, given by option, packed 3 rows per record, laid out by key hash.
    packed = spark.createDataFrame([(f'{{"m": {i}}}',) for i in range(10)], "value string")
    (partition_for_kafka(packed, 3).write.format(FORMAT).option("kafka.bootstrap.servers", tansu.bootstrap)
     .option("topic", topic).option("epoch", "6").option("rowsPerMessage", "3").mode("append").save())
    raw = raw_records(tansu, topic, 3)
    new = [rec for p in range(3) for rec in raw[p] if rec[3]["epoch"] == b"6" and "marker" not in rec[3]]
    assert sum(int(h["rows"]) for _, _, _, h in new) == 10 and len(new) < 10
    back = read(spark, tansu, topic).where(F.col("epoch") == 6).collect()
    assert sorted(json.loads(r.value)["m"] for r in back) == list(range(10))


def test_fewer_writer_tasks_than_kafka_partitions_keep_each_partition_in_one_task(spark, tansu):
    # One task per epoch is what the pipeline writes with: each Kafka partition must still
    # have one writer, in epoch order, and land where one task per partition puts it.
    topic = new_topic(tansu, 4)
    data = [(f"u{i % 37}", f'{{"n":{i}}}', i % 3) for i in range(600)]
    df = spark.createDataFrame(data, "user string, value string, epoch long")
    laid = partition_for_kafka(df, 4, "user", tasks=2)
    per_task = laid.rdd.glom().map(lambda rows: [(r.partition, r.epoch) for r in rows]).collect()
    assert len(per_task) == 2
    owner: dict[int, int] = {}
    for task, rows in enumerate(per_task):
        assert [e for _, e in rows] == sorted(e for _, e in rows)
        for p, _ in rows:
            assert owner.setdefault(p, task) == task, f"Kafka partition {p} is in two tasks"
    assert sorted(owner) == [0, 1, 2, 3] and set(owner.values()) == {0, 1}
    one_each = {r.user: r.partition for r in partition_for_kafka(df, 4, "user").collect()}
    assert {r.user: r.partition for r in laid.collect()} == one_each

    (laid.drop("user").write.format(FORMAT).option("kafka.bootstrap.servers", tansu.bootstrap)
     .option("topic", topic).mode("append").save())
    raw = raw_records(tansu, topic, 4)
    for p in range(4):
        values = check_epochs_and_markers(raw[p], [0, 1, 2])
        want = {e: sorted(v for u, v, ee in data if ee == e and one_each[u] == p) for e in range(3)}
        got = {e: sorted(json.dumps(n, separators=(",", ":")) for v in vs for n in json.loads(v))
               for e, vs in values.items()}
        assert got == want
    back = read(spark, tansu, topic).collect()
    assert sorted((r.value.decode(), r.epoch, r.partition) for r in back) == sorted(
        (v, e, one_each[u]) for u, v, e in data)
    with pytest.raises(ValueError, match="tasks must be 1..4"):
        partition_for_kafka(df, 4, "user", tasks=5)


def test_a_write_without_keys_is_packed_by_default_and_text_values_go_alone(spark, tansu):
    topic = new_topic(tansu, 1)
    values = [f'{{"n": {i}}}' for i in range(250)]
    values[120:122] = ["plain text", "more text"]        # not JSON: written alone, in place
    df = spark.createDataFrame([(v,) for v in values], "value string").coalesce(1)
    (df.write.format(FORMAT).option("kafka.bootstrap.servers", tansu.bootstrap).option("topic", topic)
     .option("epoch", "3").mode("append").save())
    data = [rec for rec in raw_records(tansu, topic, 1)[0] if "marker" not in rec[3]]
    rows = [int(h.get("rows", b"1")) for _, _, _, h in data]
    assert sum(rows) == 250 and max(rows) == 100 and len(data) <= 6       # not 250 records
    alone = [v for _, _, v, h in data if "rows" not in h]
    assert alone == [b"plain text", b"more text"]
    back = read(spark, tansu, topic).collect()
    assert [r.value.decode() for r in back] == [v if not v.startswith("{") else json.dumps(json.loads(v))
                                                .replace(" ", "") for v in values]
    # rowsPerMessage=1: one value per record, for readers other than pytimely's
    (df.write.format(FORMAT).option("kafka.bootstrap.servers", tansu.bootstrap).option("topic", topic)
     .option("epoch", "4").option("rowsPerMessage", "1").mode("append").save())
    four = [rec for rec in raw_records(tansu, topic, 1)[0] if rec[3]["epoch"] == b"4" and "marker" not in rec[3]]
    assert len(four) == 250 and all("rows" not in h for _, _, _, h in four)


def test_batch_write_refuses_a_partition_of_two_tasks_or_an_epoch_going_back(spark, tansu):
    topic = new_topic(tansu, 2)

    def save(df):
        (df.write.format(FORMAT).option("kafka.bootstrap.servers", tansu.bootstrap)
         .option("topic", topic).mode("append").save())

    # Two Spark partitions, both with rows for Kafka partition 1.
    two_tasks = spark.createDataFrame(spark.sparkContext.parallelize([("a", 1, 1), ("b", 1, 1)], 2),
                                      "value string, epoch long, partition int")
    with pytest.raises(Exception, match=rf"{topic}\[1\] was written by two Spark tasks"):
        save(two_tasks)

    # One Kafka partition whose rows go from epoch 8 back to epoch 7.
    back = spark.createDataFrame([("a", 8, 0), ("b", 7, 0)], "value string, epoch long, partition int")
    with pytest.raises(Exception, match=rf"{topic}\[0\].*epoch 7 after rows of epoch 8"):
        save(back.coalesce(1))


# ---- streaming ----------------------------------------------------------------------------
def test_streaming_read_honours_max_offsets_on_epoch_boundaries_and_resumes(spark, tansu, tmp_path):
    topic = new_topic(tansu, 2)
    w = Writer(tansu, topic)
    sizes = {1: 3, 2: 3, 3: 10, 4: 3}            # records per partition; epoch 3 alone is over 17
    for epoch, n in sizes.items():
        for p in (0, 1):
            w.data(p, epoch, *[f"{epoch}-{p}-{i}".encode() for i in range(n)])
            w.marker(p, epoch)
    w.data(0, 5, b"5-0-0")
    w.marker(0, 5)
    w.data(1, 5, b"5-1-0")                       # epoch 5 not complete on partition 1 yet
    w.flush()

    batches: list = []

    def run() -> None:
        def keep(df, batch_id):
            batches.append((batch_id, sorted((r.epoch, r.value.decode()) for r in df.collect())))
        stream = (spark.readStream.format(FORMAT).option("kafka.bootstrap.servers", tansu.bootstrap)
                  .option("subscribe", topic).option("maxOffsetsPerTrigger", "17").load())
        query = (stream.writeStream.foreachBatch(keep).option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None

    def epoch_values(epoch, parts=(0, 1)):
        return sorted((epoch, f"{epoch}-{p}-{i}") for p in parts for i in range(sizes[epoch]))

    run()
    # 1+2 (16 offsets); 3 alone (22, over the limit but one epoch); 4 (8); 5 incomplete.
    assert batches == [(0, epoch_values(1) + epoch_values(2)), (1, epoch_values(3)), (2, epoch_values(4))]

    batches.clear()
    w.marker(1, 5)
    sizes[6] = 2
    for p in (0, 1):
        w.data(p, 6, *[f"6-{p}-{i}".encode() for i in range(2)])
        w.marker(p, 6)
    w.flush()
    run()
    assert batches == [(3, sorted([(5, "5-0-0"), (5, "5-1-0")] + epoch_values(6)))]


def test_streaming_write_makes_micro_batches_epochs_with_markers_after_their_rows(spark, tansu, tmp_path):
    topic = new_topic(tansu, 2)
    source = tmp_path / "in"
    source.mkdir()
    files = [[("u1", "a"), ("u2", "b"), ("u3", "c")], [("u1", "d")], [("u4", "e"), ("u2", "f")]]
    for i, rows in enumerate(files):
        (source / f"{i}.json").write_text("".join(json.dumps({"k": k, "v": v}) + "\n" for k, v in rows))
        os.utime(source / f"{i}.json", (1_000_000 + i, 1_000_000 + i))   # read in this order
    stream = (spark.readStream.schema("k string, v string").option("maxFilesPerTrigger", 1)
              .json(str(source)).select(F.col("k").alias("key"), F.col("v").alias("value")))
    query = (partition_for_kafka(stream, 2, "key").writeStream.format(FORMAT)
             .option("kafka.bootstrap.servers", tansu.bootstrap).option("topic", topic)
             .option("epochOffset", "100").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None

    raw = raw_records(tansu, topic, 2)
    written = defaultdict(list)
    for p in (0, 1):
        for epoch, values in check_epochs_and_markers(raw[p], [100, 101, 102]).items():
            written[epoch] += values
    assert {e: sorted(v) for e, v in written.items()} == {
        100 + i: sorted(v.encode() for _, v in rows) for i, rows in enumerate(files)}
    # a key stays on one partition across epochs
    key_partition = {}
    for p in (0, 1):
        for _, key, _, headers in raw[p]:
            if key is not None:
                assert key_partition.setdefault(key, p) == p

    back = read(spark, tansu, topic).collect()
    assert sorted((r.epoch, r.key.decode(), r.value.decode()) for r in back) == sorted(
        (100 + i, k, v) for i, rows in enumerate(files) for k, v in rows)


# ---- errors -------------------------------------------------------------------------------
def test_errors_name_the_missing_option_topic_or_broker(spark, tansu):
    with pytest.raises(Exception, match="kafka.bootstrap.servers' is required"):
        spark.read.format(FORMAT).option("subscribe", "x").load().collect()
    with pytest.raises(Exception, match="'subscribe' is required"):
        spark.read.format(FORMAT).option("kafka.bootstrap.servers", tansu.bootstrap).load().collect()
    missing = f"nosuch-{uuid.uuid4().hex[:8]}"
    with pytest.raises(Exception, match=f"topic '{missing}' does not exist on {tansu.bootstrap}"):
        read(spark, tansu, missing).collect()
    df = spark.createDataFrame([Row(value="v")])
    with pytest.raises(Exception, match="'topic' is required"):
        df.write.format(FORMAT).option("kafka.bootstrap.servers", tansu.bootstrap).option("epoch", "1") \
            .mode("append").save()
    with pytest.raises(Exception, match=f"topic '{missing}' does not exist"):
        df.write.format(FORMAT).option("kafka.bootstrap.servers", tansu.bootstrap).option("epoch", "1") \
            .option("topic", missing).mode("append").save()
    nobody = f"127.0.0.1:{free_port()}"
    with pytest.raises(Exception, match=f"no Kafka broker answered at {nobody}"):
        spark.read.format(FORMAT).option("kafka.bootstrap.servers", nobody).option("subscribe", "t") \
            .load().collect()
