"""A quiet Kafka source: the CPU its worker spends waiting, against how late a record is picked up.

``kafka_source`` polls its consumer without blocking; when a poll finds nothing it asks
to be scheduled again 1 ms later, then 2, 4, ... up to ``idle_poll`` (default 2 ms,
as quiet and as quick as the blocking 2 ms poll it replaced), and the worker parks
meanwhile (``activate_after``), woken at once by anything else.
This measures both sides of ``idle_poll``, each in its own process (one worker), with a
fresh Tansu on a loopback port and a 4-partition topic read with ``epochs="ingestion"``
(records are given to the dataflow as they are read):

1. Quiet: the source has nothing to read for 6 s (``--quick``: 2 s): the process's CPU
   (every thread: the worker, librdkafka's) as a share of one core, and the worker's
   steps per second.
2. Pick-up: a record is written every 100 ms (each one into a quiet stream), 60 of them
   (``--quick``: 20): written -> seen by an ``inspect`` in the dataflow, p50/p99/max.
   This includes the broker's own delivery (the consumer's 10 ms fetch wait: Tansu
   answers a waiting fetch at its end), which bounds it from below whatever the poll.

``idle_poll`` values: 0.001, 0.002 (the default), 0.008 and 0.05 s. Summary:
``quiet_cpu_share`` and ``pickup_p50_ms`` per value, ``cpu_default_over_1ms`` (the
default's quiet CPU over polling every millisecond) and ``cpu_8ms_over_default``. A
plot of pick-up latency against quiet CPU, one point per value (``kafka_idle.png``).
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time

from _common import ROOT, conclude, figure, parse_args, percentiles, style, table, write_report
from tqdm import tqdm

VALUES = (0.001, 0.002, 0.008, 0.05)


def child(bootstrap: str, topic: str, idle_poll: float, quiet_s: float, records: int) -> None:
    """One value of ``idle_poll``: the quiet phase, then the pick-up phase; prints JSON."""
    import timely
    from confluent_kafka import Producer
    from timely.connectors.client import producer_config

    seen: dict[int, float] = {}
    producer = Producer(producer_config(bootstrap, {"linger.ms": 0}))

    def build(worker):
        def dataflow(scope):
            stream = scope.kafka_source(bootstrap, topic, epochs="ingestion", epoch_ms=1000,
                                        idle_poll=idle_poll)
            stream.inspect(lambda event: seen.setdefault(event["i"], time.perf_counter()))
            return stream.probe()
        worker.dataflow(dataflow)
        deadline = time.monotonic() + 1.0                 # the consumer's start-up, unmeasured
        worker.step_while(lambda: time.monotonic() < deadline)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        steps, start = worker.steps, time.monotonic()
        worker.step_while(lambda: time.monotonic() < start + quiet_s)
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime) / quiet_s
        step_rate = (worker.steps - steps) / quiet_s
        sent: dict[int, float] = {}

        def write() -> None:
            for i in range(records):
                time.sleep(0.1)
                sent[i] = time.perf_counter()
                producer.produce(topic, json.dumps({"i": i}).encode(), partition=i % 4)
                producer.flush(5)
        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        limit = time.monotonic() + records * 0.1 + 30
        worker.step_while(lambda: len(seen) < records and time.monotonic() < limit)
        writer.join()
        latencies = [(seen[i] - sent[i]) * 1000 for i in range(records) if i in seen]
        print(json.dumps({"idle_poll": idle_poll, "quiet_cpu_share": cpu, "quiet_steps_per_s": step_rate,
                          "seen": len(latencies), "pickup_ms": percentiles(latencies)}), flush=True)
        os._exit(0)          # the source runs until dropped: leave once measured
    timely.execute(1, build)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]))
    args = parse_args("kafka_idle", __doc__.splitlines()[0])
    quiet_s, records = (2.0, 20) if args.quick else (6.0, 60)
    from broker.tansu import TansuBroker
    from timely.connectors.client import create_topics
    results, problems = [], []
    started = time.monotonic()
    with TansuBroker() as broker:
        for n, value in enumerate(tqdm(VALUES, desc="idle_poll")):
            topic = f"idle-{n}-{os.getpid()}"
            create_topics(broker.bootstrap, {topic: 4})
            out = subprocess.run([sys.executable, __file__, "--child", broker.bootstrap, topic, str(value),
                                  str(quiet_s), str(records)], capture_output=True, text=True, cwd=ROOT,
                                 timeout=300)
            lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
            if out.returncode != 0 or not lines:
                raise SystemExit(f"idle_poll {value}: the child failed:\n{out.stderr[-3000:]}")
            result = json.loads(lines[-1])
            if result["seen"] != records:
                problems.append(f"idle_poll {value}: {result['seen']} of {records} records seen")
            results.append(result)
    by = {r["idle_poll"]: r for r in results}
    summary = {
        "quiet_cpu_share": {str(v): by[v]["quiet_cpu_share"] for v in VALUES},
        "quiet_steps_per_s": {str(v): by[v]["quiet_steps_per_s"] for v in VALUES},
        "pickup_p50_ms": {str(v): by[v]["pickup_ms"]["p50"] for v in VALUES},
        "pickup_p99_ms": {str(v): by[v]["pickup_ms"]["p99"] for v in VALUES},
        "cpu_default_over_1ms": by[0.002]["quiet_cpu_share"] / by[0.001]["quiet_cpu_share"],
        "cpu_8ms_over_default": by[0.008]["quiet_cpu_share"] / by[0.002]["quiet_cpu_share"],
        "failed_checks": problems,
    }
    print(table([[v, f"{by[v]['quiet_cpu_share']:.1%}", f"{by[v]['quiet_steps_per_s']:.0f}",
                  f"{by[v]['pickup_ms']['p50']:.1f}", f"{by[v]['pickup_ms']['p99']:.1f}"] for v in VALUES],
                ["idle_poll s", "quiet CPU", "steps/s", "pick-up p50 ms", "p99 ms"]))
    write_report(args.json, "kafka_idle", summary, results, quiet_seconds=quiet_s, records=records)
    with figure(os.path.splitext(args.json)[0] + ".png", figsize=(6, 4)) as ax:
        for v in VALUES:
            ax.scatter(by[v]["quiet_cpu_share"] * 100, by[v]["pickup_ms"]["p50"], s=40)
            ax.annotate(f"idle_poll {v * 1000:g} ms", (by[v]["quiet_cpu_share"] * 100, by[v]["pickup_ms"]["p50"]),
                        textcoords="offset points", xytext=(6, 4), fontsize=8)
        ax.margins(x=0.2, y=0.1)
        style(ax, xlabel="CPU of a quiet worker (% of one core)", ylabel="record written -> seen, p50 (ms)",
              title="A quiet Kafka source: CPU against pick-up latency", grid="major")
    conclude(problems, round(time.monotonic() - started, 1))


if __name__ == "__main__":
    main()
