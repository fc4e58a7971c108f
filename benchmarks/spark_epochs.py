"""What Spark's epoch-by-epoch writes cost, by writer tasks: why ``make run`` writes each
epoch with one Spark task.

Spark alone (no dataflow running) writes the pipeline's clean clicks (1M, 10 epochs, 4
Kafka partitions; ``--quick``: 200k) with ``timely-kafka`` three ways, for each layout of
``partition_for_kafka(..., tasks=N)`` (N = 4, one task per Kafka partition; 2; 1):

- epoch by epoch: one Spark job per epoch, as ``make run`` does, each writing its
  epoch's frame of ``spark_jobs.epoch_frames`` (split off once, before the writes);
- empty jobs: as many jobs again, for epochs that have no rows (frames split off the
  same way): what a job costs whatever it writes (planning it, its tasks, its commit);
- one job: every epoch in a single write.

For each, the wall time and the CPU seconds per million clicks of the Spark JVM and of
Spark's Python processes by role: the workers that run the write tasks, the planner
(``write_into_data_source``, once per job) and the committer
(``commit_data_source_write``, once per job), and Tansu's. One layout at a time
(``--repeat`` rounds of each way; the best of the rounds by wall time is reported). PNG: CPU per million
clicks by role, per layout and way, stacked.
"""
from __future__ import annotations

import os
import sys
import time

from _common import ROOT, figure, parse_args, stacked_bars, style, table, write_report
from _stages import StageSampler, difference, stage_of

sys.path.insert(0, os.path.join(ROOT, "examples", "pipeline"))

import spark_jobs  # noqa: E402

from broker.tansu import TansuBroker  # noqa: E402
from timely.connectors.client import create_topics  # noqa: E402

ROLES = ["Spark JVM", "Python: write tasks", "Python: planner", "Python: committer", "broker (Tansu)"]


def role_of(cmdline: str):
    """A process's role: Spark's Python processes by the pyspark module they serve."""
    stage = stage_of(cmdline)
    if stage != "Spark Python workers":
        return stage if stage in ROLES else None
    if "write_into_data_source" in cmdline:
        return "Python: planner"
    if "commit_data_source_write" in cmdline:
        return "Python: committer"
    if cmdline.rstrip().endswith("pyspark.worker"):
        return "Python: write tasks"
    return None


def layout(tasks: int) -> str:
    return f"{tasks} task{'s' if tasks > 1 else ''}"


def main() -> None:
    args = parse_args("spark_epochs", __doc__.splitlines()[0],
                      lambda p: p.add_argument("--repeat", type=int, default=2, help="rounds, layouts in turns"))
    events, epochs, partitions = (200_000, 10, 4) if args.quick else (1_000_000, 10, 4)
    from timely.connectors.spark import local_session
    results: dict = {}
    with TansuBroker() as broker:
        brokers = broker.bootstrap
        spark = local_session("spark-epochs")
        raw = spark_jobs.raw_clicks(spark, events, epochs)
        clean, counts = spark_jobs.clean(raw, spark_jobs.catalog(spark, 500))
        spark_jobs.warm_up(spark, brokers)
        clicks = counts["clean"]
        per_million = 1e6 / clicks
        with StageSampler(os.getpid(), stages=ROLES, classify=role_of) as sampler:
            def measure(label: str, tasks: int, write) -> None:
                topic = f"{label.replace(' ', '-')}-{tasks}-{time.monotonic_ns()}"
                create_topics(brokers, {topic: partitions})
                before, t = sampler.totals(), time.monotonic()
                write(topic)
                wall = time.monotonic() - t
                cpu = difference(sampler.totals(), before)
                key = f"{layout(tasks)}, {label}"
                best = results.setdefault(key, None)
                if best is None or wall < best["wall_s"]:
                    results[key] = {
                        "tasks": tasks, "way": label, "wall_s": wall,
                        "cpu_s_per_million_clicks": {r: cpu[r] * per_million for r in ROLES}}

            # One layout's data at a time: three layouts cached at once, and their frames,
            # did not fit in the JVM's memory, and the reads from disk were measured instead.
            for tasks in (4, 2, 1):
                rows = spark_jobs.to_kafka_rows(clean, partitions, tasks)
                rows.count()
                for _ in range(args.repeat):
                    measure("one job", tasks, lambda topic: spark_jobs.write_rows(rows.drop("user"), brokers, topic))
                frames = spark_jobs.epoch_frames(rows, range(epochs))
                empties = spark_jobs.epoch_frames(rows, range(1_000, 1_000 + epochs))
                rows.unpersist()

                def by_epoch(topic, frames=frames):
                    for frame in frames.values():
                        spark_jobs.write_rows(frame, brokers, topic)

                def empty(topic, empties=empties):
                    for frame in empties.values():
                        spark_jobs.write_rows(frame, brokers, topic)

                for _ in range(args.repeat):
                    measure("epoch by epoch", tasks, by_epoch)
                    measure("empty jobs", tasks, empty)
                spark_jobs.release(frames)
                spark_jobs.release(empties)
        spark.stop()

    def total(key: str) -> float:
        return sum(results[key]["cpu_s_per_million_clicks"].values())

    rows = [[k, f"{r['wall_s']:.2f}"] + [f"{r['cpu_s_per_million_clicks'][role]:.2f}" for role in ROLES]
            + [f"{total(k):.2f}"] for k, r in results.items()]
    print(table(rows, ["layout, way", "wall s"] + ROLES + ["total"]))
    summary = {
        "clicks": clicks, "epochs": epochs, "kafka_partitions": partitions,
        "epoch_by_epoch_cpu_s_per_million_clicks": {t: total(f"{layout(t)}, epoch by epoch") for t in (4, 2, 1)},
        "one_job_cpu_s_per_million_clicks": {t: total(f"{layout(t)}, one job") for t in (4, 2, 1)},
        "cpu_s_per_empty_job": {t: total(f"{layout(t)}, empty jobs") * clicks / 1e6 / epochs for t in (4, 2, 1)},
        "python_task_cpu_s_per_empty_job": {
            t: results[f"{layout(t)}, empty jobs"]["cpu_s_per_million_clicks"]["Python: write tasks"] * clicks / 1e6 / epochs
            for t in (4, 2, 1)},
        "epoch_by_epoch_over_one_job_cpu_4_tasks": total(f"{layout(4)}, epoch by epoch") / total(f"{layout(4)}, one job"),
        "one_task_over_four_cpu_epoch_by_epoch": total(f"{layout(1)}, epoch by epoch") / total(f"{layout(4)}, epoch by epoch"),
        "epoch_by_epoch_clicks_per_s": {t: clicks / results[f"{layout(t)}, epoch by epoch"]["wall_s"] for t in (4, 2, 1)},
    }
    write_report(args.json, "spark_epochs", summary, results)
    png = os.path.join(os.path.dirname(os.path.abspath(args.json)), "spark_epochs.png")
    with figure(png, figsize=(9, 4.5)) as ax:
        labels = list(results)
        stacked_bars(ax, range(len(labels)), {r: [results[k]["cpu_s_per_million_clicks"][r] for k in labels]
                                              for r in ROLES})
        ax.set_xticks(range(len(labels)), [k.replace(", ", "\n") for k in labels], fontsize=7)
        style(ax, ylabel="CPU s per million clicks", grid="major", legend={"fontsize": 7},
              title=f"Spark writing {clicks:,} clicks in {epochs} epochs to {partitions} Kafka partitions")


if __name__ == "__main__":
    main()
