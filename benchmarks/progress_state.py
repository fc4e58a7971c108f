"""Progress state: does the accumulated progress state stay bounded? (seed 003 §5)

With rescaling support on, every Progcaster keeps the accumulation of every progress
batch it applied (seed 003 §3.4.1): the state a bootstrap server sends to a joining
worker. Seed 003 expects it not to grow in steady state, since updates cancel out.
Three dataflows — ``chain`` (input -> 10 maps -> probe), ``exchange`` (input -> 3 x
exchange + map -> per-epoch count with unary_notify, exchanged -> probe) and ``iterate``
(input -> iterative scope: concat(entered, loop_variable) -> map -> filter ending the
loop after 3 rounds, leave -> probe) — each on 1, 2 and 4 workers, run as a cluster of
ONE process with a hostfile (so accumulation is on), every worker sending 3 records per
epoch and stepping until the probe passes it. Every ``epochs/40`` epochs each worker
samples ``worker.progress_state_size()``. Reported per (dataflow, workers): the largest
and the final number of state entries (worker 0's; the max over workers is in the
JSON), and the least-squares slope over the last half of the run, in entries per 1,000
epochs (bounded: ~0; ``bounded`` in the summary: under 1 per 1,000 epochs, or no new
high in the last half). 1 worker runs 100,000 epochs per dataflow (``--quick``: 10,000);
2 and 4 workers run 20,000 (``iterate``: 10,000; ``--quick``: 2,500) and two
configurations run at a time (``--parallel``), to keep the whole run within ~5 minutes
on 2 cores: a state that grows makes every sample (``state_size()`` consolidates the
accumulation, O(entries)) and the run itself slower.
"""
from __future__ import annotations

import json
import os
import tempfile
import time

import numpy as np
from _common import ROOT, figure, parse_args, style, table, write_report

from timely.launch import LocalCluster

JOB = os.path.join(ROOT, "benchmarks", "_progress_state_job.py")
DATAFLOWS = ("chain", "exchange", "iterate")
WORKERS = (1, 2, 4)
SAMPLES = 40


def run(dataflow, workers, epochs, records=3):
    """One process, ``workers`` workers, a hostfile: returns the job's JSON and wall time."""
    every = max(1, epochs // SAMPLES)
    with tempfile.TemporaryDirectory() as tmp:
        output = os.path.join(tmp, "state.json")
        args = ["--dataflow", dataflow, "--epochs", str(epochs), "--records", str(records),
                "--every", str(every), "--output", output]
        started = time.perf_counter()
        with LocalCluster(JOB, slots=1, workers=workers, extra=args) as cluster:
            cluster.start(1)
            codes = cluster.wait(900)
            if any(codes):
                raise SystemExit(f"{dataflow} on {workers} workers failed:\n"
                                 + "\n".join(cluster.interleaved()[-40:]))
        wall = time.perf_counter() - started
        with open(output) as f:
            result = json.load(f)
    result["wall_seconds"] = wall
    result["every"] = every
    return result


def slope_last_half(samples):
    """Least-squares slope of entries vs epochs over the second half, per 1,000 epochs."""
    half = samples[len(samples) // 2:]
    if len(half) < 2:
        return 0.0
    x = np.array([s[0] for s in half], dtype=float)
    y = np.array([s[1] for s in half], dtype=float)
    return float(np.polyfit(x, y, 1)[0] * 1000.0)


def bounded(samples, tolerance=1.0):
    """No growth: a last-half slope under ``tolerance`` entries per 1,000 epochs, or no new
    high in the last half (the state fluctuates by the few entries in flight)."""
    half = len(samples) // 2
    return (slope_last_half(samples) < tolerance
            or max(s[1] for s in samples[half:]) <= max(s[1] for s in samples[:half]))


def plot(results, path):
    with figure(path, 1, len(DATAFLOWS), figsize=(14, 4.2),
                suptitle="Accumulated progress state vs epochs (1 process with a hostfile, rescaling on)") as axes:
        for ax, dataflow in zip(axes, DATAFLOWS):
            top = 0
            for r in results:
                if r["dataflow"] != dataflow:
                    continue
                samples = r["samples"][0]
                top = max(top, max(s[1] for s in samples))
                ax.plot([s[0] for s in samples], [s[1] for s in samples], marker=".", markersize=3,
                        label=f"{r['workers']} worker{'s' if r['workers'] > 1 else ''} ({r['epochs']:,} epochs)")
            ax.set_ylim(0, top * 1.15 + 1)
            style(ax, title=dataflow, xlabel="epochs", ylabel="progress state entries (worker 0)",
                  legend={"fontsize": 8})


def epochs_for(dataflow, workers, quick):
    if quick:
        return 10_000 if workers == 1 else 2_500
    if workers == 1:
        return 100_000
    return 10_000 if dataflow == "iterate" else 20_000


def main():
    args = parse_args("progress_state", __doc__.splitlines()[0],
                      lambda p: p.add_argument("--parallel", type=int, default=2,
                                               help="configurations run at a time"))
    from concurrent.futures import ThreadPoolExecutor
    configs = [(d, w, epochs_for(d, w, args.quick)) for d in DATAFLOWS for w in WORKERS]
    started = time.perf_counter()
    # longest first, so that the pool finishes together
    order = sorted(configs, key=lambda c: -c[2] * c[1] * (4 if c[0] == "iterate" else 1))
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        futures = {c: pool.submit(run, *c) for c in order}
        raw = {c: f.result() for c, f in futures.items()}
    results, rows = [], []
    for dataflow, workers, epochs in configs:
        r = raw[(dataflow, workers, epochs)]
        samples = r["workers"]
        w0 = samples[0]
        entry = {"dataflow": dataflow, "workers": workers, "epochs": r["epochs"],
                 "sample_every": r["every"], "accumulating": r["accumulating"],
                 "max_entries": max(s[1] for s in w0), "final_entries": w0[-1][1],
                 "max_entries_any_worker": max(s[1] for ws in samples for s in ws),
                 "slope_last_half_per_1000_epochs": slope_last_half(w0),
                 "max_recorded_batches": max(s[2] for ws in samples for s in ws),
                 "seconds": r["seconds"], "wall_seconds": r["wall_seconds"],
                 "ms_per_epoch": r["seconds"] / r["epochs"] * 1e3, "samples": samples}
        results.append(entry)
        rows.append([dataflow, workers, f"{r['epochs']:,}", entry["max_entries"], entry["final_entries"],
                     f"{entry['slope_last_half_per_1000_epochs']:.2f}", f"{entry['ms_per_epoch']:.3f}",
                     f"{r['wall_seconds']:.1f}"])
    total = time.perf_counter() - started
    print(table(rows, ["dataflow", "workers", "epochs", "max entries", "final", "slope /1k ep",
                       "ms/epoch", "wall s"]))
    summary = {f"{e['dataflow']}_{e['workers']}w": {"epochs": e["epochs"], "max_entries": e["max_entries"],
                                                     "final_entries": e["final_entries"],
                                                     "slope_last_half_per_1000_epochs":
                                                         round(e["slope_last_half_per_1000_epochs"], 3),
                                                     "bounded": bounded(e["samples"][0])}
               for e in results}
    summary["bounded"] = {d: all(bounded(e["samples"][0]) for e in results if e["dataflow"] == d)
                          for d in DATAFLOWS}
    summary["epochs"] = {f"{d}_{w}w": n for d, w, n in configs}
    summary["parallel"] = args.parallel
    summary["total_seconds"] = round(total, 1)
    png = os.path.splitext(args.json)[0] + ".png"
    plot(results, png)
    write_report(args.json, "progress_state", summary, results, png=png,
                 note=(f"1 worker runs {epochs_for('chain', 1, args.quick):,} epochs per dataflow; 2 and 4 "
                       f"workers run {epochs_for('chain', 2, args.quick):,} (iterate: "
                       f"{epochs_for('iterate', 2, args.quick):,}) to keep the full run within ~5 minutes on "
                       f"this machine, {args.parallel} configurations at a time (ms/epoch is therefore "
                       "measured under contention). "
                       "Entries are worker 0's accumulated state summed over its scopes' Progcasters; "
                       "'bounded' means a last-half slope under 1 entry per 1,000 epochs, or no new "
                       "high in the last half."))


if __name__ == "__main__":
    main()
