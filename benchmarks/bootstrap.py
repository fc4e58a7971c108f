"""Bootstrap: time per bootstrap step, and how it grows with the progress state (seed 003 §5).

A cluster of 2 processes x 1 worker where worker 0 holds K capabilities at K distinct
future times (``_bootstrap_job.py``), so every progress state has about K
entries; once worker 0 reports its state built, a third process joins with ``-j 0
--nn 3``. Measured per K (10 .. 50,000; ``--quick``: up to 5,000), median of the
repetitions:

- server pause: the bootstrap server's time to snapshot its state and send it
  (``BootstrapServer.pause``, from ``worker.bootstrap_pauses`` on worker 0), during
  which it does no other work;
- entries sent: the state entries the server sent (its "sent N progress entries" log);
- client bootstrap: ``worker.bootstrap_seconds`` on the joiner (receive the state,
  request and receive the missing ranges, install, replay);
- join wall time: from spawning the joiner until it printed that it joined (includes
  starting Python, importing, connecting and building the dataflow);
- release: on worker 0, from dropping the K capabilities until the probe completes.

After the join worker 0 releases the capabilities and every process must exit 0. The
growth exponent of each time is the least-squares slope of log(time) vs log(K), over
all K and over K >= 1,000 (where fixed costs matter less).
"""
from __future__ import annotations

import os
import re
import statistics
import time

import numpy as np
from _common import ROOT, figure, parse_args, style, table, write_report

from timely.launch import LocalCluster

JOB = os.path.join(ROOT, "benchmarks", "_bootstrap_job.py")
READY = re.compile(r"ready entries (\d+) after ([0-9.]+) s")
SENT = re.compile(r"sent (\d+) progress entries in ([0-9.]+) ms")
SERVED = re.compile(r"served pause ([0-9.]+) s")
JOINED = re.compile(r"joined at ([0-9.]+) after ([0-9.]+) s")
RELEASED = re.compile(r"released in ([0-9.]+) s")


def find(proc, pattern):
    for _, line in proc.lines:
        m = pattern.search(line)
        if m:
            return m
    return None


def run(caps, timeout=300.0):
    """One cluster: 2 processes, state of ~``caps`` entries, a third joins. Returns the timings."""
    with LocalCluster(JOB, slots=3, workers=1, extra=["--caps", str(caps), "--timeout", "60"]) as cluster:
        p0 = cluster.start(2)[0]
        deadline = time.monotonic() + timeout
        while find(p0, READY) is None:
            if p0.popen.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"K={caps}: worker 0 never got ready:\n" + "\n".join(cluster.interleaved()[-40:]))
            time.sleep(0.005)
        joiner = cluster.join(original=2, bootstrap=0)
        codes = cluster.wait(max(1.0, deadline - time.monotonic()))
        if any(codes):
            raise SystemExit(f"K={caps}: exit codes {codes}:\n" + "\n".join(cluster.interleaved()[-40:]))
        ready, sent, served = find(p0, READY), find(p0, SENT), find(p0, SERVED)
        joined, released = find(joiner, JOINED), find(p0, RELEASED)
        if not (sent and served and joined and released):
            raise SystemExit(f"K={caps}: missing output:\n" + "\n".join(cluster.interleaved()[-40:]))
        return {"caps": caps, "ready_entries": int(ready.group(1)), "build_state_s": float(ready.group(2)),
                "entries_sent": int(sent.group(1)), "server_pause_s": float(served.group(1)),
                "client_bootstrap_s": float(joined.group(2)),
                "join_wall_s": float(joined.group(1)) - cluster.join_walltimes[0],
                "release_s": float(released.group(1)), "exit_codes": codes}


MEASURES = ("server_pause_s", "client_bootstrap_s", "join_wall_s", "release_s")


def exponent(ks, ys, least=0):
    pts = [(k, y) for k, y in zip(ks, ys) if k >= least and y > 0]
    if len(pts) < 2:
        return None
    return float(np.polyfit(np.log([k for k, _ in pts]), np.log([y for _, y in pts]), 1)[0])


def plot(ks, medians, path):
    labels = {"server_pause_s": "server pause (snapshot + send)", "client_bootstrap_s": "client bootstrap",
              "join_wall_s": "join wall time (spawn -> joined)", "release_s": "release K capabilities"}
    with figure(path, figsize=(7.5, 5)) as ax:
        for m in MEASURES:
            ax.plot(ks, [medians[k][m] * 1e3 for k in ks], marker="o", label=labels[m])
        style(ax, xlog=True, ylog=True, xlabel="progress state entries K (capabilities held by worker 0)",
              ylabel="time (ms)", title="Bootstrap of a joining process vs progress state size (2x1 + 1)",
              grid="both", legend={"fontsize": 8})


def main():
    args = parse_args("bootstrap", __doc__.splitlines()[0])
    ks = [10, 100, 1000, 5000] if args.quick else [10, 100, 1000, 10_000, 50_000]
    repeats = 1 if args.quick else 3
    started = time.perf_counter()
    runs = []
    for k in ks:
        for _ in range(repeats):
            r = run(k)
            runs.append(r)
            print(f"  K={k}: pause {r['server_pause_s'] * 1e3:.2f} ms, client {r['client_bootstrap_s'] * 1e3:.2f} ms, "
                  f"wall {r['join_wall_s']:.3f} s, sent {r['entries_sent']}", flush=True)
    medians = {k: {m: statistics.median(r[m] for r in runs if r["caps"] == k) for m in MEASURES} for k in ks}
    for k in ks:
        medians[k]["entries_sent"] = max(r["entries_sent"] for r in runs if r["caps"] == k)
    total = time.perf_counter() - started
    rows = [[f"{k:,}", medians[k]["entries_sent"], f"{medians[k]['server_pause_s'] * 1e3:.2f}",
             f"{medians[k]['client_bootstrap_s'] * 1e3:.2f}", f"{medians[k]['join_wall_s'] * 1e3:.0f}",
             f"{medians[k]['release_s'] * 1e3:.1f}"] for k in ks]
    print(table(rows, ["K", "entries sent", "server pause ms", "client ms", "join wall ms", "release ms"]))
    growth = {m: {"all": exponent(ks, [medians[k][m] for k in ks]),
                  "k_ge_1000": exponent(ks, [medians[k][m] for k in ks], least=1000)} for m in MEASURES}
    for m in MEASURES:
        print(f"growth exponent {m}: {growth[m]['all']:.2f} (all K), {growth[m]['k_ge_1000']:.2f} (K >= 1000)")
    summary = {"k": ks, "repeats": repeats,
               "entries_sent": [medians[k]["entries_sent"] for k in ks],
               "server_pause_ms": [round(medians[k]["server_pause_s"] * 1e3, 3) for k in ks],
               "client_bootstrap_ms": [round(medians[k]["client_bootstrap_s"] * 1e3, 3) for k in ks],
               "join_wall_ms": [round(medians[k]["join_wall_s"] * 1e3, 1) for k in ks],
               "release_ms": [round(medians[k]["release_s"] * 1e3, 1) for k in ks],
               "growth_exponent": growth,
               "server_pause_us_per_entry_at_max_k": round(medians[ks[-1]]["server_pause_s"] * 1e6
                                                          / medians[ks[-1]]["entries_sent"], 3),
               "total_seconds": round(total, 1)}
    png = os.path.splitext(args.json)[0] + ".png"
    plot(ks, medians, png)
    write_report(args.json, "bootstrap", summary, runs, png=png)


if __name__ == "__main__":
    main()
