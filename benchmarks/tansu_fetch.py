"""Why Kafka progress logs are segmented: Tansu's fetch cost grows with the topic.

One worker's progress log (``broker.ProgressLog``) appends ``--rate`` records/s (200)
for ``--seconds`` (60; ``--quick``: 20) while a ``broker.Subscriber`` in the same
process tails it, exactly as Kafka progress mode does (the default client settings of
``broker.client``; the committed results were measured when the fetch wait was 2 ms,
before it became 5). Measured per
2-second window: append -> delivered latency p50/p99, the records delivered, and the
CPU the broker (a fresh Tansu on a free loopback port per run) used, against the
number of records already in the log. Two runs: one topic for the whole log (segments
longer than the run) and 500-record segments (the default ``kafka_segment_records``).

The in-memory Tansu spends time on each fetch in proportion to the records of the
topic it reads: with one topic per worker, broker CPU climbs with the log until it
saturates and the subscriber stops receiving (a few thousand records in, tens of
seconds at a few hundred epochs/s); with segments it stays flat. Summary: per run the
first and last window's p50 and broker CPU, the records delivered of those appended,
and the ratios last / first. Plot: latency and broker CPU against records in the log.
"""
from __future__ import annotations

import os
import time
import uuid

import numpy as np
from _common import ROOT, cpu_seconds, figure, parse_args, percentiles, style, table, write_report
from tqdm import tqdm

from broker import ProgressLog, Subscriber
from broker.tansu import TansuBroker

WINDOW = 2.0


def run(segment_records: int, rate: float, seconds: float, bar: tqdm, options: dict | None = None) -> dict:
    """Append ``rate`` records/s for ``seconds`` and tail them; per-window figures, and
    ``overall``: the latency percentiles of every record delivered (ms)."""
    sent: dict[int, float] = {}
    got: list[tuple[float, float]] = []          # (append time, latency s)
    errors: list[BaseException] = []

    def deliver(worker, channel, seq, updates):
        now = time.perf_counter()
        got.append((sent[seq], now - sent[seq]))

    with TansuBroker() as broker:
        prefix = f"tf{uuid.uuid4().hex[:8]}"
        log = ProgressLog(broker.bootstrap, prefix, [0], snapshot_interval=1000,
                          segment_records=segment_records, options=options)
        sub = Subscriber(broker.bootstrap, prefix, deliver, name="bench", on_error=errors.append,
                         options=options)
        sub.add(0)
        sub.start()
        time.sleep(0.5)
        windows = []
        start = time.perf_counter()
        cpu0, seq, seen = cpu_seconds(broker.proc.pid), 0, 0
        edge = start + WINDOW
        while True:
            now = time.perf_counter()
            if now >= edge:
                cpu = cpu_seconds(broker.proc.pid)
                lat = [l * 1e3 for t, l in got[seen:] if t < edge]
                seen = len(got)
                windows.append({"t": edge - start, "records": seq, "delivered": len(lat),
                                "broker_cpu": (cpu - cpu0) / WINDOW, **percentiles(lat)})
                cpu0, edge = cpu, edge + WINDOW
                bar.update(1)
                if edge - start > seconds + 1e-9:
                    break
            sent[seq] = time.perf_counter()
            log.append(0, 1, seq, [((("loc", seq), 0), 1), ((("loc", seq - 1), 0), -1)])
            seq += 1
            pause = start + seq / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
        time.sleep(1.0)
        sub.stop()
        log.close()
    return {"segment_records": segment_records, "appended": seq, "delivered": len(got),
            "errors": [str(e) for e in errors], "windows": windows,
            "overall": percentiles([latency * 1e3 for _, latency in got])}


def plot(runs: dict, path: str) -> None:
    with figure(path, 2, 1, figsize=(8, 7), sharex=True) as (a, b):
        for name, r in runs.items():
            xs = [w["records"] for w in r["windows"]]
            a.plot(xs, [np.nan if w["p50"] is None else w["p50"] for w in r["windows"]], marker="o",
                   label=f"{name} p50")
            a.plot(xs, [np.nan if w["p99"] is None else w["p99"] for w in r["windows"]], linestyle="--",
                   label=f"{name} p99")
            b.plot(xs, [100 * w["broker_cpu"] for w in r["windows"]], marker="o", label=name)
        style(a, ylog=True, ylabel="append -> delivered (ms)",
              title="One progress log tailed through Tansu: one topic vs segments", grid="both",
              legend={"fontsize": 8})
        style(b, ylabel="broker CPU (% of a core)", xlabel="records appended to the log", grid="major",
              legend={"fontsize": 8})


def main() -> None:
    def extra(p):
        p.add_argument("--rate", type=float, default=200.0, help="records appended per second")
        p.add_argument("--seconds", type=float, default=None, help="length of each run")
    args = parse_args("tansu_fetch", __doc__.splitlines()[0], extra)
    seconds = args.seconds or (20.0 if args.quick else 60.0)
    variants = {"one topic": 10**9, "segments of 500": 500}
    runs = {}
    with tqdm(total=len(variants) * int(seconds / WINDOW), unit="window") as bar:
        for name, segment in variants.items():
            bar.set_description(name)
            runs[name] = run(segment, args.rate, seconds, bar)
    rows, summary = [], {"rate": args.rate, "seconds": seconds}
    for name, r in runs.items():
        for w in r["windows"]:
            rows.append([name, f"{w['t']:.0f}", w["records"], w["delivered"],
                         "-" if w["p50"] is None else f"{w['p50']:.1f}",
                         "-" if w["p99"] is None else f"{w['p99']:.1f}", f"{100 * w['broker_cpu']:.0f}%"])
        first, last = r["windows"][0], r["windows"][-1]
        summary[name] = {
            "appended": r["appended"], "delivered": r["delivered"],
            "delivered_share": r["delivered"] / r["appended"],
            "first_p50_ms": first["p50"], "last_p50_ms": last["p50"],
            "first_broker_cpu": first["broker_cpu"], "last_broker_cpu": last["broker_cpu"],
            "last_over_first_p50": None if not (first["p50"] and last["p50"]) else last["p50"] / first["p50"],
            "last_over_first_broker_cpu": last["broker_cpu"] / max(first["broker_cpu"], 1e-9),
            "errors": r["errors"]}
    print(table(rows, ["log", "t s", "records", "delivered", "p50 ms", "p99 ms", "broker cpu"]))
    one, seg = summary["one topic"], summary["segments of 500"]
    summary["last_broker_cpu_segments_over_one_topic"] = seg["last_broker_cpu"] / max(one["last_broker_cpu"], 1e-9)
    print(f"one topic: delivered {one['delivered_share']:.0%}, broker CPU {100 * one['first_broker_cpu']:.0f}% -> "
          f"{100 * one['last_broker_cpu']:.0f}%; segments: delivered {seg['delivered_share']:.0%}, broker CPU "
          f"{100 * seg['first_broker_cpu']:.0f}% -> {100 * seg['last_broker_cpu']:.0f}%")
    png = os.path.splitext(args.json)[0] + ".png"
    plot(runs, png)
    write_report(args.json, "tansu_fetch", summary, runs, png=os.path.relpath(png, ROOT))


if __name__ == "__main__":
    main()
