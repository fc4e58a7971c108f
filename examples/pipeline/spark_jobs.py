"""The pipeline's two Spark jobs: clean and enrich clicks into Kafka; check the results.

``raw_clicks`` makes a realistic raw clickstream in Spark: ``n`` events (user, page,
time as text) spread evenly over ``epochs`` windows of ``window_s`` seconds, with bad
rows mixed in on purpose: a missing user, a time that does not parse, a page that is
not in the catalog. ``clean`` drops those (and says how many of each), joins the page
catalog to add each page's category, and gives every event its epoch (its time window).
``write_rows`` writes to Kafka with the ``timely-kafka`` data source (rows routed so each
Kafka partition has one writer, each epoch followed by its markers); ``epoch_frames``
splits the rows into one frame per epoch, once, for ``write_rows`` to write epoch by
epoch, and ``release`` frees them.

``expected`` is Spark's own computation of what the dataflow computes, from the same
clean events: per (epoch, page) the clicks and distinct users, and their running totals.
``read_results`` reads the dataflow's results back with ``timely-kafka`` (complete epochs
only) and ``compare`` joins the two: every row must match exactly, none may be missing
or extra or present twice. ``expected_windows`` / ``read_windows`` / ``compare_windows``
do the same for the dataflow's event-time windows, against Spark's own ``window()``.
Costs: Spark jobs over the events, O(events) each.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

CATEGORIES = ["books", "music", "garden", "toys", "sports", "food", "travel", "home",
              "beauty", "games", "office", "tools"]
START = 1_767_225_600          # 2026-01-01T00:00:00Z: the first window's start
EPOCH_SECONDS = 60             # each epoch holds this many seconds of clicks

RESULT_SCHEMA = ("epoch long, page string, category string, clicks long, users long, "
                 "total_clicks long, total_users long")


def catalog(spark: Any, pages: int) -> Any:
    """The page catalog: ``/p/<i>`` and its category."""
    return spark.createDataFrame([(f"/p/{i}", CATEGORIES[i % len(CATEGORIES)]) for i in range(pages)],
                                 "page string, category string")


def raw_clicks(spark: Any, n: int, epochs: int, window_s: int = EPOCH_SECONDS, users: int = 20_000,
               pages: int = 500, seed: int = 7) -> Any:
    """``n`` raw events as text columns ``user, page, ts`` (UTC); 1 in 997 has no user, 1 in
    1009 an unparseable time, 1 in 1013 a page outside the catalog. Page popularity is
    skewed (a few pages get most clicks), as in real clickstreams."""
    from pyspark.sql import functions as F
    spark.conf.set("spark.sql.session.timeZone", "UTC")     # ts is UTC text, whatever the machine's zone
    ids = spark.range(n)
    h1 = F.pmod(F.xxhash64(F.col("id"), F.lit(seed)), F.lit(users))
    # squaring a uniform draw skews towards low page numbers
    u = F.pmod(F.xxhash64(F.col("id"), F.lit(seed + 1)), F.lit(1_000_003)) / F.lit(1_000_003.0)
    page_no = F.floor(u * u * F.lit(pages)).cast("long")
    seconds = F.lit(START) + (F.col("id") * F.lit(epochs * window_s) / F.lit(n)).cast("long")
    return ids.select(
        F.when(F.col("id") % 997 == 0, F.lit(None)).otherwise(F.concat(F.lit("u"), h1.cast("string"))).alias("user"),
        F.when(F.col("id") % 1013 == 0, F.lit("/p/unknown"))
         .otherwise(F.concat(F.lit("/p/"), page_no.cast("string"))).alias("page"),
        F.when(F.col("id") % 1009 == 0, F.lit("2026-13-45 99:00:00"))
         .otherwise(F.date_format(F.timestamp_seconds(seconds), "yyyy-MM-dd HH:mm:ss")).alias("ts"))


def clean(raw: Any, pages: Any, window_s: int = EPOCH_SECONDS) -> tuple[Any, dict]:
    """``(clean events, {reason: rows dropped})``: rows without a user or a parseable
    time are dropped, the rest joined to the catalog (unknown pages drop out) and given
    ``epoch`` = their time window since START. The clean frame is cached."""
    from pyspark.sql import functions as F
    parsed = raw.withColumn("time", F.try_to_timestamp(F.col("ts"), F.lit("yyyy-MM-dd HH:mm:ss")))
    counts = parsed.agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.col("user").isNull().cast("long")).alias("no_user"),
        F.sum((F.col("user").isNotNull() & F.col("time").isNull()).cast("long")).alias("bad_time")).first()
    usable = parsed.where(F.col("user").isNotNull() & F.col("time").isNotNull())
    events = (usable.join(F.broadcast(pages), "page", "inner")
              .select("user", "page", "category", "ts",
                      ((F.unix_seconds(F.col("time")) - F.lit(START)) / F.lit(window_s)).cast("long").alias("epoch"))
              .cache())
    kept = events.count()
    dropped = {"no user": counts["no_user"], "bad time": counts["bad_time"],
               "unknown page": counts["rows"] - counts["no_user"] - counts["bad_time"] - kept}
    return events, {"raw": counts["rows"], "clean": kept, "dropped": dropped}


def to_kafka_rows(events: Any, partitions: int, tasks: Optional[int] = None) -> Any:
    """Events as ``value`` (JSON) + ``epoch``, laid out so that each Kafka partition
    (by user) is written by one of ``tasks`` Spark tasks (default: one per Kafka
    partition); cached."""
    from pyspark.sql import functions as F
    from timely.connectors.spark import partition_for_kafka
    rows = events.select(F.to_json(F.struct("user", "page", "category", "ts")).alias("value"),
                         "epoch", "user")
    return partition_for_kafka(rows, partitions, key_col="user", tasks=tasks).cache()


def warm_up(spark: Any, brokers: str) -> Optional[str]:
    """Write one row with ``timely-kafka`` to a scratch topic, then delete the topic.
    Spark starts its data source's Python workers (lookup, create, write, commit) at
    their first use: seconds of CPU that would otherwise land on the first epoch.
    Returns why the scratch topic could not be deleted (a broker that refuses deletes),
    or None."""
    import uuid

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient
    from timely.connectors.client import client_config, create_topics
    from timely.connectors.spark import partition_for_kafka
    topic = f"warm-up-{uuid.uuid4().hex[:8]}"
    create_topics(brokers, {topic: 1})
    write_rows(partition_for_kafka(spark.createDataFrame([("{}", 0)], "value string, epoch long"), 1),
               brokers, topic)
    admin = AdminClient(client_config(brokers))     # (alive until the deletion is done)
    try:
        admin.delete_topics([topic])[topic].result(30)
    except KafkaException as e:
        return f"the scratch topic {topic} is left behind: {e}"
    return None


def write_rows(rows: Any, brokers: str, topic: str, rows_per_message: Optional[int] = None) -> None:
    """Write ``rows`` (``value``, ``epoch``, ``partition``) to ``topic`` with ``timely-kafka``:
    each epoch's rows, then its markers on every partition; ``rows_per_message``: events
    per Kafka record (None: the writer's default, packed)."""
    writer = (rows.write.format("timely-kafka").option("kafka.bootstrap.servers", brokers)
              .option("topic", topic))
    if rows_per_message is not None:
        writer = writer.option("rowsPerMessage", str(rows_per_message))
    writer.mode("append").save()


def epoch_frames(rows: Any, epochs: Iterable[int]) -> dict[int, Any]:
    """``{epoch: its rows of to_kafka_rows' frame}`` (columns ``value, epoch, partition``,
    laid out as in ``rows``), each checkpointed locally: its plan is then a scan of its own
    rows. Writing an epoch as a filter over ``rows`` had Spark analyse the whole lineage
    (generation, cleaning, the catalog join, the shuffles) again for every epoch, and
    compile a new filter for each epoch's literal: about 70 ms of Spark's CPU and 40 ms
    of wall time per epoch, a third of the write's. Costs one job per epoch, up front."""
    from pyspark.sql import functions as F
    return {e: rows.where(F.col("epoch") == e).drop("user").localCheckpoint() for e in epochs}


def release(frames: dict[int, Any]) -> None:
    """Free the checkpointed rows of ``epoch_frames``' frames now. Spark would keep them
    until its cleaner finds, after a garbage collection in the JVM, that nothing refers
    to them; a session that runs the pipeline again meanwhile spills to disk. (Through
    the SparkContext: unpersisting a locally checkpointed RDD itself logs a warning
    that its lineage is gone, which is the point here.)"""
    for frame in frames.values():
        rdd = frame._jdf.queryExecution().logical().rdd()
        frame.sparkSession.sparkContext._jsc.sc().unpersistRDD(rdd.id(), True)


def expected(events: Any) -> Any:
    """Spark's own per-(epoch, page) aggregates with running totals over epochs."""
    from pyspark.sql import Window, functions as F
    per = events.groupBy("epoch", "page", "category").agg(
        F.count(F.lit(1)).alias("clicks"), F.countDistinct("user").alias("users"))
    first_seen = events.groupBy("page", "user").agg(F.min("epoch").alias("epoch"))
    new_users = first_seen.groupBy("page", "epoch").agg(F.count(F.lit(1)).alias("new_users"))
    running = Window.partitionBy("page").orderBy("epoch").rowsBetween(Window.unboundedPreceding, 0)
    return (per.join(new_users, ["page", "epoch"], "left").fillna(0, ["new_users"])
            .withColumn("total_clicks", F.sum("clicks").over(running))
            .withColumn("total_users", F.sum("new_users").over(running))
            .drop("new_users"))


def read_results(spark: Any, brokers: str, topic: str) -> Any:
    """The dataflow's results, complete epochs only, parsed from JSON."""
    from pyspark.sql import functions as F
    raw = (spark.read.format("timely-kafka").option("kafka.bootstrap.servers", brokers)
           .option("subscribe", topic).load())
    parsed = raw.select(F.col("epoch").alias("marker_epoch"),
                        F.from_json(F.col("value").cast("string"), RESULT_SCHEMA).alias("r"))
    return parsed.select("marker_epoch", "r.*")


COLUMNS = ("category", "clicks", "users", "total_clicks", "total_users")


def compare(want: Any, got: Any) -> list[dict]:
    """Per epoch: rows expected, rows received, and how many are missing, extra,
    duplicated or different. Exact equality means every count but the first two is 0."""
    from pyspark.sql import functions as F
    dup = (got.groupBy("epoch", "page").count().where(F.col("count") > 1)
           .groupBy("epoch").agg(F.count(F.lit(1)).alias("duplicated")))
    stamped = got.where(F.col("epoch") != F.col("marker_epoch")).groupBy("epoch").agg(
        F.count(F.lit(1)).alias("wrong_epoch"))
    g = got.dropDuplicates(["epoch", "page"]).select("epoch", "page", *[F.col(c).alias("g_" + c) for c in COLUMNS])
    w = want.select("epoch", "page", *[F.col(c).alias("w_" + c) for c in COLUMNS])
    joined = w.join(g, ["epoch", "page"], "full_outer")
    differs = F.lit(False)
    for c in COLUMNS:
        differs = differs | ~F.col("w_" + c).eqNullSafe(F.col("g_" + c))
    per_epoch = joined.groupBy("epoch").agg(
        F.count(F.col("w_clicks")).alias("expected"),
        F.count(F.col("g_clicks")).alias("received"),
        F.sum((F.col("g_clicks").isNull()).cast("long")).alias("missing"),
        F.sum((F.col("w_clicks").isNull()).cast("long")).alias("extra"),
        F.sum((F.col("w_clicks").isNotNull() & F.col("g_clicks").isNotNull() & differs).cast("long"))
         .alias("different"),
        F.sum(F.col("w_clicks")).alias("clicks"))
    rows = (per_epoch.join(dup, "epoch", "left").join(stamped, "epoch", "left")
            .fillna(0, ["duplicated", "wrong_epoch"]).orderBy("epoch").collect())
    return [row.asDict() for row in rows]


WINDOW_SCHEMA = "page string, start long, end long, clicks long, users long"
WINDOW_COLUMNS = ("clicks", "users")


def expected_windows(events: Any, length_s: int, every_s: int) -> Any:
    """Spark's own windows over the clean events: per page and ``window(ts, length,
    every)`` (aligned to second 0, as Spark aligns them), the clicks and distinct users,
    with ``start``/``end`` in seconds."""
    from pyspark.sql import functions as F
    at = F.to_timestamp(F.col("ts"), "yyyy-MM-dd HH:mm:ss")
    w = F.window(at, f"{length_s} seconds", f"{every_s} seconds")
    return (events.groupBy(w.alias("w"), "page")
            .agg(F.count(F.lit(1)).alias("clicks"), F.countDistinct("user").alias("users"))
            .select("page", F.unix_seconds(F.col("w.start")).alias("start"),
                    F.unix_seconds(F.col("w.end")).alias("end"), "clicks", "users"))


def read_windows(spark: Any, brokers: str, topic: str) -> Any:
    """The dataflow's window rows, complete epochs only, with the epoch they came in."""
    from pyspark.sql import functions as F
    raw = (spark.read.format("timely-kafka").option("kafka.bootstrap.servers", brokers)
           .option("subscribe", topic).load())
    return raw.select(F.col("epoch").alias("marker_epoch"),
                      F.from_json(F.col("value").cast("string"), WINDOW_SCHEMA).alias("r")).select("marker_epoch", "r.*")


def compare_windows(want: Any, got: Any, epoch_seconds: int, origin: int) -> dict:
    """Rows expected, received, and how many are missing, extra, duplicated, different,
    or in another epoch than the one whose completion closes their window (the last
    epoch holding a second before ``end``: ``ceil((end - origin) / epoch_seconds) - 1``),
    in one Spark job. Exact equality means every count but the first two is 0."""
    from pyspark.sql import functions as F
    keys = ["page", "start", "end"]
    closes = (F.ceil((F.col("end") - F.lit(origin)) / F.lit(epoch_seconds)) - 1).cast("long")
    g = got.groupBy(*keys).agg(F.count(F.lit(1)).alias("copies"),
                               F.sum((F.col("marker_epoch") != closes).cast("long")).alias("misplaced"),
                               *[F.first(c).alias("g_" + c) for c in WINDOW_COLUMNS])
    w = want.select(*keys, *[F.col(c).alias("w_" + c) for c in WINDOW_COLUMNS])
    differs = F.lit(False)
    for c in WINDOW_COLUMNS:
        differs = differs | ~F.col("w_" + c).eqNullSafe(F.col("g_" + c))
    both = F.col("w_clicks").isNotNull() & F.col("g_clicks").isNotNull()
    row = w.join(g, keys, "full_outer").agg(
        F.count(F.col("w_clicks")).alias("expected"),
        F.sum(F.col("copies")).alias("received"),
        F.sum(F.col("g_clicks").isNull().cast("long")).alias("missing"),
        F.sum(F.col("w_clicks").isNull().cast("long")).alias("extra"),
        F.sum((both & differs).cast("long")).alias("different"),
        F.sum((F.col("copies") > 1).cast("long")).alias("duplicated"),
        F.sum(F.col("misplaced")).alias("wrong_epoch"),
        F.countDistinct("start", "end").alias("windows"),
        F.sum(F.col("w_clicks")).alias("clicks")).first().asDict()
    return {k: (v or 0) for k, v in row.items()}
