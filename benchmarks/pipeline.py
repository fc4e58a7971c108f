"""The Spark pipeline's throughput and latency, stage by stage, in one run.

1. Spark -> Kafka: the clean clickstream written with the ``timely-kafka`` data source
   (one event per Kafka record, and packed ``rowsPerMessage`` per record): clicks/s.
2. Dataflow consume rate against the limit: one process reads the topic with
   ``kafka_source`` (decoding every event, one epoch at a time) and counts; the limit is
   a bare confluent-kafka loop over the same topic that decodes each record's value into
   its events and does nothing else (no epochs, no dataflow), both timed from making the
   consumer to the last event. Both for one event per record and for packed records, and
   the packed read against the bare loop's one event per record (what packing buys over
   the client's per-record cost).
3. End to end (examples/pipeline, ``make run``'s configuration without its SIGKILL):
   Spark writes epoch by epoch, one task an epoch (``make run``'s ``--writer-tasks 1``),
   while a 2-process cluster (a third joins) aggregates
   into Kafka: clicks/s from the first write until the last results are in Kafka, and
   per epoch the time from the epoch being complete in the clicks topic (the timestamp
   of its last marker) to its results being complete in the results topic; in
   peer-to-peer mode with Spark writing packed records (its default) and one click per
   record, in Kafka progress mode (packed), and in peer-to-peer mode packed with Spark
   at niceness 10 once its workers are up (``--spark-nice 10``, ``make run``'s default;
   the others leave Spark at its own priority): the latency that priority buys, and the
   throughput it costs. For each run, the CPU seconds per
   million clicks of each stage (``_stages.StageSampler``: the Spark JVM, Spark's
   Python workers, the dataflow processes, the broker, this driver), from the clicks
   made (the cluster starting, then the epochs written) to the last results in Kafka.

A Tansu broker and a local SparkSession are started for the run. Plots: per-epoch
latency (``pipeline_latency.png``) and the CPU per million clicks by stage, stacked,
per end-to-end run (``pipeline_cpu.png``).
"""
from __future__ import annotations

import os
import sys
import time
import uuid

from _common import ROOT, figure, parse_args, percentiles, stacked_bars, style, table, write_report
from _stages import STAGES, StageSampler, difference

sys.path.insert(0, os.path.join(ROOT, "examples", "pipeline"))

import run as pipeline  # noqa: E402
import spark_jobs  # noqa: E402

from broker.tansu import TansuBroker  # noqa: E402
from timely.connectors.client import consumer_config, create_topics, scan  # noqa: E402
from timely.connectors.epochs import JSON, ROWS  # noqa: E402


def bare_loop(brokers: str, topic: str, partitions: int) -> tuple[int, int, float]:
    """The limit: a confluent-kafka consumer that reads the topic to its end
    (``client.scan``) and decodes each record's value into its events (a packed one by
    its ``rows`` header), the least a reader of the events must do; ``(records, events,
    seconds)``, timed like ``dataflow_read``: from making the consumer to the last event."""
    from confluent_kafka import Consumer
    start = time.perf_counter()
    consumer = Consumer(consumer_config(brokers, None, None))
    records = events = 0
    for messages in scan(consumer, {(topic, p): 0 for p in range(partitions)}):
        data = [m for m in messages if m.value()]           # (markers have none)
        rows = [next((int(v) for k, v in m.headers() or () if k == ROWS), None) for m in data]
        records += len(data)
        events += len(JSON.decode([m.value() for m in data], rows, topic, 0, [m.offset() for m in data]))
    elapsed = time.perf_counter() - start
    consumer.close()
    return records, events, elapsed


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
            bare_n, bare_events, bare_s = bare_loop(brokers, topic, partitions)
            flow_n, flow_s = dataflow_read(brokers, topic, epochs)
            if flow_n != n or bare_events != n:
                raise SystemExit(f"the dataflow read {flow_n} events of {n}, the bare loop {bare_events}")
            reads.append({"events_per_record": packed, "spark_write_clicks_per_s": n / write_s,
                          "bare_records": bare_n, "bare_records_per_s": bare_n / bare_s,
                          "bare_events_per_s": n / bare_s,
                          "dataflow_events_per_s": n / flow_s,
                          "dataflow_vs_bare": (n / flow_s) / (n / bare_s)})
        results["reads"] = reads
        print(table([[r["events_per_record"], f"{r['spark_write_clicks_per_s']:,.0f}", f"{r['bare_events_per_s']:,.0f}",
                      f"{r['dataflow_events_per_s']:,.0f}", f"{r['dataflow_vs_bare']:.2f}"] for r in reads],
                    ["events/record", "spark write clicks/s", "bare loop events/s", "dataflow events/s", "dataflow/bare"]))

        # 3: end to end: p2p packed and one click per record, Kafka progress packed
        clean.unpersist()
        rows.unpersist()
        ends = {}
        with StageSampler(os.getpid()) as sampler:
            for name, mode, per_record, nice in (("p2p", "p2p", None, 0), ("p2p_1_per_record", "p2p", 1, 0),
                                                 ("kafka", "kafka", None, 0), ("p2p_spark_nice_10", "p2p", None, 10)):
                progress = ([] if mode == "p2p" else
                            ["--progress-mode", "kafka", "--kafka-bootstrap", brokers,
                             "--kafka-prefix", f"bp{uuid.uuid4().hex[:8]}"])
                marks = {}
                said: list = []

                def say(line, marks=marks, said=said):
                    said.append(line)
                    if line.startswith("spark: made"):          # the clicks are made: writing starts
                        marks["start"] = sampler.totals()
                    elif line.startswith("dataflow:"):          # every result is in Kafka
                        marks["end"] = sampler.totals()
                report = pipeline.run_pipeline(spark, brokers, events, epochs, partitions, progress=progress,
                                               rows_per_message=per_record, spark_nice=nice, say=say)
                if report.differences or any(report.codes):
                    print("\n".join(said + ["the cluster's log, last 150 lines:"] + report.cluster_log[-150:]))
                    raise SystemExit(f"{name}: the Spark check found {report.differences} differences, "
                                     f"the dataflow's exit codes were {report.codes}")
                lat = percentiles(list(report.latencies_ms.values()))
                cpu = difference(marks["end"], marks["start"])
                ends[name] = {"progress": mode, "clicks_per_record": per_record or "packed (writer default)",
                              "spark_nice": nice,
                              "clicks": report.clean, "seconds": report.seconds,
                              "end_to_end_clicks_per_s": report.clean / report.seconds["dataflow"],
                              "latency_ms": lat, "per_epoch_ms": report.latencies_ms,
                              "cpu_s": cpu, "cpu_s_per_million_clicks": {k: v / report.clean * 1e6
                                                                        for k, v in cpu.items()}}
        results["end_to_end"] = ends
        spark.stop()
    print(table([[m, f"{e['end_to_end_clicks_per_s']:,.0f}", f"{e['latency_ms']['p50']:.0f}",
                  f"{e['latency_ms']['max']:.0f}"] for m, e in ends.items()],
                ["run", "end-to-end clicks/s", "epoch latency p50 ms", "max ms"]))
    print(table([[m, *(f"{e['cpu_s_per_million_clicks'][s]:.1f}" for s in STAGES),
                  f"{sum(e['cpu_s_per_million_clicks'].values()):.1f}"] for m, e in ends.items()],
                ["CPU s per million clicks", *STAGES, "total"]))
    summary = {
        "spark_write_clicks_per_s": reads[0]["spark_write_clicks_per_s"],
        "spark_write_packed_clicks_per_s": reads[1]["spark_write_clicks_per_s"],
        "dataflow_read_events_per_s": reads[0]["dataflow_events_per_s"],
        "bare_loop_events_per_s": reads[0]["bare_events_per_s"],
        "dataflow_vs_bare": reads[0]["dataflow_vs_bare"],
        "dataflow_read_packed_events_per_s": reads[1]["dataflow_events_per_s"],
        "bare_loop_packed_events_per_s": reads[1]["bare_events_per_s"],
        "dataflow_vs_bare_packed": reads[1]["dataflow_vs_bare"],
        "dataflow_packed_vs_bare_1_per_record": reads[1]["dataflow_events_per_s"] / reads[0]["bare_events_per_s"],
        "end_to_end_p2p_clicks_per_s": ends["p2p"]["end_to_end_clicks_per_s"],
        "end_to_end_p2p_1_per_record_clicks_per_s": ends["p2p_1_per_record"]["end_to_end_clicks_per_s"],
        "end_to_end_packed_over_1_per_record": (ends["p2p"]["end_to_end_clicks_per_s"]
                                                / ends["p2p_1_per_record"]["end_to_end_clicks_per_s"]),
        "end_to_end_kafka_clicks_per_s": ends["kafka"]["end_to_end_clicks_per_s"],
        "kafka_vs_p2p_end_to_end": ends["kafka"]["end_to_end_clicks_per_s"] / ends["p2p"]["end_to_end_clicks_per_s"],
        "epoch_latency_p50_ms_p2p": ends["p2p"]["latency_ms"]["p50"],
        "epoch_latency_p50_ms_kafka": ends["kafka"]["latency_ms"]["p50"],
        "epoch_latency_p50_ms_p2p_1_per_record": ends["p2p_1_per_record"]["latency_ms"]["p50"],
        "end_to_end_p2p_spark_nice_10_clicks_per_s": ends["p2p_spark_nice_10"]["end_to_end_clicks_per_s"],
        "epoch_latency_p50_ms_p2p_spark_nice_10": ends["p2p_spark_nice_10"]["latency_ms"]["p50"],
        "spark_nice_10_over_0_latency_p50": (ends["p2p_spark_nice_10"]["latency_ms"]["p50"]
                                             / ends["p2p"]["latency_ms"]["p50"]),
        "spark_nice_10_over_0_clicks_per_s": (ends["p2p_spark_nice_10"]["end_to_end_clicks_per_s"]
                                              / ends["p2p"]["end_to_end_clicks_per_s"]),
        "cpu_s_per_million_clicks": {m: e["cpu_s_per_million_clicks"] for m, e in ends.items()},
        "cpu_s_per_million_clicks_total": {m: sum(e["cpu_s_per_million_clicks"].values()) for m, e in ends.items()},
    }
    write_report(args.json, "pipeline", summary, results)
    with figure(os.path.splitext(args.json)[0] + "_latency.png", figsize=(7, 3.5)) as ax:
        for name, e in ends.items():
            xs = sorted(e["per_epoch_ms"])
            ax.plot(xs, [e["per_epoch_ms"][x] for x in xs], marker="o", label=name)
        style(ax, xlabel="epoch (a process joins after a third of them)",
              ylabel="epoch in Kafka -> results in Kafka (ms)", title=f"pipeline, {events:,} clicks: per-epoch latency",
              legend=True)
    with figure(os.path.splitext(args.json)[0] + "_cpu.png", figsize=(7.5, 4.2)) as ax:
        names = list(ends)
        bottom = stacked_bars(ax, names, {s: [ends[m]["cpu_s_per_million_clicks"][s] for m in names]
                                          for s in STAGES})
        ax.set_ylim(0, max(bottom) * 1.4)           # room for the legend above the bars
        style(ax, ylabel="CPU seconds per million clicks",
              title=f"pipeline end to end, {events:,} clicks: CPU by stage",
              legend={"fontsize": 8, "loc": "upper center", "ncol": 3})


if __name__ == "__main__":
    main()
