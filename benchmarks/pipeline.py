"""The Spark pipeline's throughput and latency, stage by stage, in one run.

1. Spark -> Kafka: the clean clickstream written with the ``timely-kafka`` data source
   (one event per Kafka record, and packed ``rowsPerMessage`` per record): clicks/s.
2. Dataflow consume rate against the limit: one process reads the topic with
   ``kafka_source`` (decoding every event, one epoch at a time) and counts; the limit is
   a bare confluent-kafka loop over the same topic that only touches each record. Both
   for one event per record and for packed records.
3. End to end (examples/pipeline): Spark writes epoch by epoch while a 2-process
   cluster (a third joins) aggregates into Kafka: clicks/s from the first write until
   the last results are in Kafka, and per epoch the time from Spark's write of the
   epoch to its results being readable; in peer-to-peer and in Kafka progress mode.

A Tansu broker and a local SparkSession are started for the run. Plot: per-epoch
latency, both progress modes.
"""
from __future__ import annotations

import os
import sys
import time
import uuid

from _common import ROOT, figure, parse_args, percentiles, style, table, write_report

sys.path.insert(0, os.path.join(ROOT, "examples", "pipeline"))

import run as pipeline  # noqa: E402
import spark_jobs  # noqa: E402

from broker.tansu import TansuBroker  # noqa: E402
from timely.connectors.client import consumer_config, create_topics  # noqa: E402


def bare_loop(brokers: str, topic: str, partitions: int) -> tuple[int, float]:
    """The limit: a confluent-kafka consumer that touches each record's value and headers."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    consumer = Consumer(consumer_config(brokers, None, None))
    consumer.list_topics(topic, timeout=10)        # connected before the clock starts
    records, ends, start = 0, 0, time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    while ends < partitions:
        for m in consumer.consume(10_000, 1.0):
            error = m.error()
            if error is None:
                m.value()
                m.headers()
                records += 1
            elif error.code() == KafkaError._PARTITION_EOF:
                ends += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return records, elapsed


def dataflow_read(brokers: str, topic: str, epochs: int) -> tuple[int, float]:
    """One process, one worker: kafka_source (markers, decoding) -> count per epoch; timed
    from building the dataflow (consumer start-up included) to its completion."""
    import timely
    counted = []

    def build(worker):
        def dataflow(scope):
            events = scope.kafka_source(brokers, topic, end_epoch=epochs)
            return events.inspect_batch(lambda t, batch: counted.append(len(batch))).probe()
        probe = worker.dataflow(dataflow)
        worker.run()
        return probe.done()
    start = time.perf_counter()
    assert timely.execute(1, build) == [True]
    return sum(counted), time.perf_counter() - start


def main() -> None:
    args = parse_args("pipeline", __doc__.splitlines()[0])
    events, epochs = (100_000, 5) if args.quick else (1_000_000, 10)
    partitions = 4
    from timely.connectors.spark import local_session
    results: dict = {"events": events, "epochs": epochs, "partitions": partitions}
    with TansuBroker() as broker:
        brokers = broker.bootstrap
        spark = local_session("pytimely-bench")
        raw = spark_jobs.raw_clicks(spark, events, epochs)
        clean, counts = spark_jobs.clean(raw, spark_jobs.catalog(spark, 500))
        rows = spark_jobs.to_kafka_rows(clean, partitions)
        rows.count()
        n = counts["clean"]

        # 1 + 2: write, then read it back three ways
        reads = []
        for packed in (1, 100):
            topic = f"bench-{packed}-{uuid.uuid4().hex[:6]}"
            create_topics(brokers, {topic: partitions})
            start = time.perf_counter()
            # explicit both ways: packing 100 is the writer's default since it has no key column
            (rows.drop("user").write.format("timely-kafka").option("kafka.bootstrap.servers", brokers)
             .option("topic", topic).option("rowsPerMessage", str(packed)).mode("append").save())
            write_s = time.perf_counter() - start
            bare_n, bare_s = bare_loop(brokers, topic, partitions)
            flow_n, flow_s = dataflow_read(brokers, topic, epochs)
            if flow_n != n:
                raise SystemExit(f"the dataflow read {flow_n} events of {n}")
            reads.append({"events_per_record": packed, "spark_write_clicks_per_s": n / write_s,
                          "bare_records": bare_n, "bare_records_per_s": bare_n / bare_s,
                          "bare_events_per_s": n / bare_s,
                          "dataflow_events_per_s": n / flow_s,
                          "dataflow_vs_bare": (n / flow_s) / (n / bare_s)})
        results["reads"] = reads
        print(table([[r["events_per_record"], f"{r['spark_write_clicks_per_s']:,.0f}", f"{r['bare_events_per_s']:,.0f}",
                      f"{r['dataflow_events_per_s']:,.0f}", f"{r['dataflow_vs_bare']:.2f}"] for r in reads],
                    ["events/record", "spark write clicks/s", "bare loop events/s", "dataflow events/s", "dataflow/bare"]))

        # 3: end to end, both progress modes
        clean.unpersist()
        rows.unpersist()
        ends = {}
        for mode in ("p2p", "kafka"):
            progress = ([] if mode == "p2p" else
                        ["--progress-mode", "kafka", "--kafka-bootstrap", brokers,
                         "--kafka-prefix", f"bp{uuid.uuid4().hex[:8]}"])
            report = pipeline.run_pipeline(spark, brokers, events, epochs, partitions, progress=progress,
                                           say=lambda *_: None)
            if report.differences:
                raise SystemExit(f"{mode}: the Spark check found {report.differences} differences")
            lat = percentiles(list(report.latencies_ms.values()))
            ends[mode] = {"clicks": report.clean, "seconds": report.seconds,
                          "end_to_end_clicks_per_s": report.clean / report.seconds["dataflow"],
                          "latency_ms": lat, "per_epoch_ms": report.latencies_ms}
        results["end_to_end"] = ends
        spark.stop()
    print(table([[m, f"{e['end_to_end_clicks_per_s']:,.0f}", f"{e['latency_ms']['p50']:.0f}",
                  f"{e['latency_ms']['max']:.0f}"] for m, e in ends.items()],
                ["progress", "end-to-end clicks/s", "epoch latency p50 ms", "max ms"]))
    summary = {
        "spark_write_clicks_per_s": reads[0]["spark_write_clicks_per_s"],
        "spark_write_packed_clicks_per_s": reads[1]["spark_write_clicks_per_s"],
        "dataflow_read_events_per_s": reads[0]["dataflow_events_per_s"],
        "bare_loop_events_per_s": reads[0]["bare_events_per_s"],
        "dataflow_vs_bare": reads[0]["dataflow_vs_bare"],
        "dataflow_read_packed_events_per_s": reads[1]["dataflow_events_per_s"],
        "bare_loop_packed_events_per_s": reads[1]["bare_events_per_s"],
        "dataflow_vs_bare_packed": reads[1]["dataflow_vs_bare"],
        "end_to_end_p2p_clicks_per_s": ends["p2p"]["end_to_end_clicks_per_s"],
        "end_to_end_kafka_clicks_per_s": ends["kafka"]["end_to_end_clicks_per_s"],
        "kafka_vs_p2p_end_to_end": ends["kafka"]["end_to_end_clicks_per_s"] / ends["p2p"]["end_to_end_clicks_per_s"],
        "epoch_latency_p50_ms_p2p": ends["p2p"]["latency_ms"]["p50"],
        "epoch_latency_p50_ms_kafka": ends["kafka"]["latency_ms"]["p50"],
    }
    write_report(args.json, "pipeline", summary, results)
    with figure(os.path.splitext(args.json)[0] + "_latency.png", figsize=(7, 3.5)) as ax:
        for mode, e in ends.items():
            xs = sorted(e["per_epoch_ms"])
            ax.plot(xs, [e["per_epoch_ms"][x] for x in xs], marker="o", label=f"{mode} progress")
        style(ax, xlabel="epoch (a process joins after a third of them)",
              ylabel="Spark write -> results in Kafka (ms)", title=f"pipeline, {events:,} clicks: per-epoch latency",
              legend=True)


if __name__ == "__main__":
    main()
