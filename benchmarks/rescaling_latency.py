"""Rescaling latency: seed 003 §5's experiment, with its Figure 2 as a PNG.

WordCount on 2 processes x 2 workers; worker 0 injects 100 lines/s of 100 words over
1,000 keys; a third process joins at 1/3 and a fourth at 2/3 of a 40 s run
(``--quick``: 12 s). Per-epoch latency (injection to the probe passing the epoch) is
plotted over time with rolling percentiles and the joins marked, and summarised as
p50/p99 before, during (from the join's start until one second after the joiner
finished bootstrapping) and after each join.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time

import numpy as np
from _common import ROOT, figure, parse_args, percentiles, style, table, write_report

from timely.launch import LocalCluster

JOB = os.path.join(ROOT, "benchmarks", "_rescaling_latency_job.py")
JOINED = re.compile(r"joined at ([0-9.]+) after ([0-9.]+) s")
CPU = re.compile(r"^cpu ([0-9.]+) s after building$")
INJECTING = r"^injecting from [0-9.]+$"


def run(duration, rate, joins, extra=(), processes=2, workers=2, join_at=None, start_timeout=120.0):
    """Run the job on ``processes`` x ``workers`` with ``joins`` joins, at ``join_at``
    seconds after worker 0 starts injecting (default: spread evenly over ``duration``);
    returns the raw results, with each process's ``traffic`` samples if the job was
    asked for them (``--traffic-every``)."""
    offsets = list(join_at) if join_at is not None else [duration * (k + 1) / (joins + 1) for k in range(joins)]
    with tempfile.TemporaryDirectory() as tmp:
        output = os.path.join(tmp, "latency.json")
        args = ["--duration", str(duration), "--rate", str(rate), "--output", output, "--timeout", "15",
                *extra]
        with LocalCluster(JOB, slots=processes + len(offsets), workers=workers, extra=args) as cluster:
            first = cluster.start(processes)[0]
            if offsets:
                if not first.wait_for(INJECTING, start_timeout):
                    raise SystemExit("the job did not start:\n" + "\n".join(cluster.interleaved()[-40:]))
                started = float(next(line for _, line in first.lines if line.startswith("injecting from "))
                                .split()[-1])
            for offset in offsets:
                time.sleep(max(0.0, started + offset - time.time()))
                cluster.join(original=processes, bootstrap=0)
            codes = cluster.wait(duration + start_timeout)
            if any(codes):
                raise SystemExit("a process failed:\n" + "\n".join(cluster.interleaved()[-40:]))
            joined = []
            for proc in cluster.processes[processes:]:
                times = [float(m.group(1)) for _, line in proc.lines if (m := JOINED.search(line))]
                client = [float(m.group(2)) for _, line in proc.lines if (m := JOINED.search(line))]
                joined.append((max(times), max(client)))
            with open(output) as f:
                result = json.load(f)
        result["cpu_seconds"] = [max((float(m.group(1)) for _, line in proc.lines if (m := CPU.search(line))),
                                     default=None) for proc in cluster.processes]
        result["traffic"] = [json.loads(line[len("traffic "):]) for proc in cluster.processes
                             for _, line in proc.lines if line.startswith("traffic ")]
        result["join_spawn"] = [t - result["start"] for t in cluster.join_walltimes]
        result["join_done"] = [t - result["start"] for t, _ in joined]
        result["bootstrap_client_s"] = [c for _, c in joined]
        return result


def phases(result):
    epochs = result["epochs"]
    spawn, done = result["join_spawn"], result["join_done"]
    bounds = []
    start = 0.0
    for k, (s, d) in enumerate(zip(spawn, done)):
        bounds.append((f"before join {k + 1}" if k == 0 else f"after join {k}", start, s))
        bounds.append((f"during join {k + 1}", s, d + 1.0))
        start = d + 1.0
    bounds.append((f"after join {len(spawn)}" if spawn else "steady", start, float("inf")))
    out = {}
    for name, lo, hi in bounds:
        out[name] = percentiles([lat * 1e3 for t, lat in epochs if lo <= t < hi])
    return out


def plot(result, path):
    t = np.array([e[0] for e in result["epochs"]])
    lat = np.array([e[1] * 1e3 for e in result["epochs"]])
    with figure(path, figsize=(10, 4.5)) as ax:
        ax.scatter(t, lat, s=3, alpha=0.35, color="tab:gray", label="epoch latency")
        windows = np.arange(0, t.max() + 1, 1.0) if t.size else []
        for q, color in ((50, "tab:blue"), (99, "tab:red")):
            xs, ys = [], []
            for w in windows:
                sel = lat[(t >= w) & (t < w + 1)]
                if sel.size:
                    xs.append(w + 0.5)
                    ys.append(np.percentile(sel, q))
            ax.plot(xs, ys, color=color, label=f"p{q} per second")
        for k, (s, d) in enumerate(zip(result["join_spawn"], result["join_done"])):
            ax.axvline(s, color="tab:green", linestyle="--", label="join starts" if k == 0 else None)
            ax.axvline(d, color="tab:purple", linestyle=":", label="joiner bootstrapped" if k == 0 else None)
        style(ax, ylog=True, xlabel="time since start (s)", ylabel="epoch latency (ms)",
              title="WordCount, 2x2 workers, +1 process at 1/3 and 2/3 (pytimely, peer-to-peer bootstrap)",
              legend={"loc": "upper right", "fontsize": 8})


def main():
    args = parse_args("rescaling_latency", __doc__.splitlines()[0])
    duration = 12.0 if args.quick else 40.0
    result = run(duration, 100.0, joins=2)
    summary = phases(result)
    rows = [[name, p["n"], f"{p['p50']:.2f}" if p["p50"] else "-", f"{p['p99']:.2f}" if p["p99"] else "-",
             f"{p['max']:.2f}" if p["max"] else "-"] for name, p in summary.items()]
    print(table(rows, ["phase", "epochs", "p50 ms", "p99 ms", "max ms"]))
    print(f"bootstrap: server pauses {[f'{x * 1e3:.3f} ms' for x in result['bootstrap_pauses']]}, "
          f"client {[f'{x * 1e3:.1f} ms' for x in result['bootstrap_client_s']]}")
    summary["bootstrap_server_pause_ms"] = [x * 1e3 for x in result["bootstrap_pauses"]]
    summary["bootstrap_client_ms"] = [x * 1e3 for x in result["bootstrap_client_s"]]
    summary["join_effective_s"] = [d - s for s, d in zip(result["join_spawn"], result["join_done"])]
    png = os.path.splitext(args.json)[0] + ".png"
    plot(result, png)
    write_report(args.json, "rescaling_latency", summary, {"epochs": result["epochs"],
                 "join_spawn": result["join_spawn"], "join_done": result["join_done"],
                 "state_sizes": result["state_sizes"]}, duration=duration, png=png)


if __name__ == "__main__":
    main()
