"""Peer-to-peer vs Kafka progress, the same dataflows and the same join, in one run.

1. Latency: seed 003's WordCount (benchmarks/_rescaling_latency_job.py) on 2 processes x 2
   workers at 20, 50, 200 and 500 epochs/s in each mode, each run with one join
   halfway: per-epoch latency p50/p99 over the whole run and before the join, and p99
   around the join (from the joiner's start until 1 s after it finished
   bootstrapping). A mode *sustains* a rate when worker 0 injected at least 95% of
   the epochs offered (rate x duration: the injection loop falls behind when steps
   take too long) and the p99 over the whole run, join included, is below 100 ms.
   ``--quick`` runs every rate for a few seconds.
2. Traffic: progress messages and bytes per epoch sent by one process
   (benchmarks/_history_job.py, a record and a step per epoch).
3. Join time against the length of history: after H epochs a third process joins;
   the time from its start until its view of progress is current, its bootstrap
   time, and what it read.
   Kafka mode with snapshots must stay flat; without snapshots (an interval longer
   than the history) the joiner reads the whole log; peer-to-peer sends the
   accumulated state, whose size does not grow with history either.
4. Rounds: where an epoch's latency goes. A run of each mode at 50 epochs/s without a
   join, traced (``--progress-trace``, ``timely.communication.progress_trace``), for
   WordCount, for the plain exchange (``--dataflow exchange``: the words exchanged
   and probed, no per-epoch count) and for the pipeline's shape (``--dataflow
   pipeline``: Megaphone's F and S folding each epoch, then a sink stand-in that
   releases an epoch once its frontier passed it). Per epoch, its critical path of progress rounds
   from the injection to worker 0's probe (``epoch_rounds``: each round the batch a
   worker applied last before it sent the next one), and the latency split along it:
   remote hops (Kafka: ``buffered`` in the sender's step, ``broker`` from append to the
   reader's fetch, ``handoff`` to the worker), hops within a process, the workers'
   steps between a round's apply and the next send (``react``), and the last step
   (``tail``). ``--rounds-only`` runs this part alone.
A Tansu broker is started on a free loopback port for the Kafka runs. Plotted:
latency per mode and join time vs history. The summary's goals (issue 12): Kafka p50 /
p2p p50 at 50 epochs/s at most 3, Kafka sustaining 500 epochs/s with a join, Kafka p99
around the join below 100 ms; issue 41's: at most 4, a p99 before the join at 50/s of
at most 60 ms, and 50 epochs/s sustained with a join.
"""
from __future__ import annotations

import json
import os
import tempfile
import time

import numpy as np
from _common import ROOT, figure, parse_args, style, table, write_report
from rescaling_latency import percentiles, phases, run as run_latency

from broker.tansu import TansuBroker
from timely.communication.progress_trace import Timeline, epoch_rounds, hop_stages, load
from timely.launch import LocalCluster

HISTORY_JOB = os.path.join(ROOT, "benchmarks", "_history_job.py")


def mode_args(mode, broker, prefix, interval=None):
    """A cluster's arguments for ``mode`` (Kafka: with a snapshot every ``interval``
    records, default the runtime's)."""
    if mode == "p2p":
        return []
    snapshots = [] if interval is None else ["--kafka-snapshot-interval", str(interval)]
    return ["--progress-mode", "kafka", "--kafka-bootstrap", broker.bootstrap, "--kafka-prefix", prefix,
            *snapshots]


def history_run(mode, history, broker, interval=1000):
    with tempfile.TemporaryDirectory() as tmp:
        go = os.path.join(tmp, "go")
        prefix = f"pm{int(time.time() * 1000) % 10**9}{mode[0]}{history}"
        extra = ["--history", str(history), "--go", go, "--timeout", "30",
                 *mode_args(mode, broker, prefix, interval)]
        with LocalCluster(HISTORY_JOB, slots=3, workers=1, extra=extra) as cluster:
            p0, _ = cluster.start(2)
            deadline = time.monotonic() + 600
            while not any(line.startswith("history ") for _, line in p0.lines):
                if time.monotonic() > deadline or p0.popen.poll() is not None:
                    raise SystemExit("history run failed:\n" + p0.output())
                time.sleep(0.05)
            traffic = json.loads(next(line for _, line in p0.lines if line.startswith("history "))
                                 .split(" ", 2)[2])
            spawned = time.time()
            joiner = cluster.join(original=2, bootstrap=0)
            while not any(line.startswith("joined ") for _, line in joiner.lines):
                if time.monotonic() > deadline or joiner.popen.poll() is not None:
                    raise SystemExit("join failed:\n" + "\n".join(cluster.interleaved()[-30:]))
                time.sleep(0.01)
            report = json.loads(next(line for _, line in joiner.lines if line.startswith("joined "))[7:])
            open(go, "w").close()
            codes = cluster.wait(120)
            if any(codes):
                raise SystemExit("a process failed:\n" + "\n".join(cluster.interleaved()[-30:]))
    report["join_s"] = report["at"] - spawned
    report["traffic"] = traffic
    return report


def _p(values, q=50):
    return float(np.percentile(values, q)) * 1e3 if len(values) else None


def rounds_run(mode, dataflow, broker, seconds, rate=50.0):
    """Part 4 for one mode and dataflow: the traced run and its breakdown (ms)."""
    with tempfile.TemporaryDirectory() as trace:
        prefix = f"rr{int(time.time() * 1000) % 10**9}{mode[0]}{dataflow[0]}"
        result = run_latency(seconds, rate, joins=0, extra=[*mode_args(mode, broker, prefix), "--progress-trace",
                                                             trace, "--dataflow", dataflow])
        timeline = Timeline(load(trace), workers_per_process=2)
    epochs = [(t, lat) for t, lat in result["epochs"] if t >= 1.0]
    per_epoch = epoch_rounds(timeline, epochs, result["start"])
    parts: dict = {k: [] for k in ("remote hops", "local hops", "react", "tail", "remote buffered",
                                    "remote broker", "remote handoff")}
    for e in per_epoch:
        sums = dict.fromkeys(parts, 0.0)
        for hop in e["path"]:
            remote = hop["sender"] // 2 != hop["receiver"] // 2
            sums["remote hops" if remote else "local hops"] += hop["applied"] - hop["sent"]
            sums["react"] += hop["react"]
            st = hop["stages"]
            if remote and st["append"] is not None and st["fetch"] is not None:
                sums["remote buffered"] += st["append"]
                sums["remote broker"] += st["fetch"] - st["append"]
                sums["remote handoff"] += st["apply"] - st["fetch"]
        sums["tail"] = e["tail"]
        for k, v in sums.items():
            parts[k].append(v)
    remote_counts = [e["remote"] for e in per_epoch]
    stages = hop_stages(timeline)
    sends = sum(1 for b in timeline.batches.values() if "send" in b)
    return {"epoch_p50_ms": _p([lat for _, lat in epochs]), "epoch_p99_ms": _p([lat for _, lat in epochs], 99),
            "epochs": len(epochs),
            "remote_rounds": {str(k): remote_counts.count(k) for k in sorted(set(remote_counts))},
            "remote_rounds_median": float(np.median(remote_counts)) if remote_counts else None,
            "hops_on_path_median": float(np.median([len(e["path"]) for e in per_epoch])) if per_epoch else None,
            "critical_path_p50_ms": {k: _p(v) for k, v in parts.items()},
            "remote_hop_p50_ms": {k: _p(v) for k, v in stages.items()},
            "remote_hop_p90_ms": {k: _p(v, 90) for k, v in stages.items()},
            "batches_per_epoch_per_worker": sends / max(1, result["injected"]) / 4}


def rounds_part(broker, seconds):
    """Part 4: both dataflows, the two modes in turn."""
    out = {}
    for dataflow in ("exchange", "wordcount", "pipeline"):
        for mode in ("p2p", "kafka"):
            r = out[f"{mode} {dataflow}"] = rounds_run(mode, dataflow, broker, seconds)
            cp = r["critical_path_p50_ms"]
            print(f"rounds {mode:5} {dataflow:9}: epoch p50 {r['epoch_p50_ms']:.2f} ms, remote rounds "
                  f"{r['remote_rounds']}, path p50: " + ", ".join(f"{k} {v:.2f}" for k, v in cp.items()
                                                                   if v is not None), flush=True)
    return out


def plot(latency, joins, path):
    with figure(path, 1, 2, figsize=(12, 4.5)) as (a, b):
        for mode, result in latency.items():
            if "@50/s" not in mode and "@500/s" not in mode:
                continue
            t = np.array([e[0] for e in result["epochs"]])
            lat = np.array([e[1] * 1e3 for e in result["epochs"]])
            a.scatter(t, lat, s=3, alpha=0.4, label=mode)
            for s in result["join_spawn"]:
                a.axvline(s, linestyle="--", color="gray")
        style(a, ylog=True, xlabel="time (s)", ylabel="epoch latency (ms)",
              title="WordCount 2x2 at 50 and 500 epochs/s, one join (dashed)", legend=True)
        for label, rows in joins.items():
            b.plot([r["history"] for r in rows], [r["join_s"] * 1e3 for r in rows], marker="o", label=label)
        style(b, xlog=True, ylog=True, xlabel="history before the join (epochs)",
              ylabel="join time: start to caught up (ms)", title="Join time vs length of history", legend=True)


RATES = (20, 50, 200, 500)
SUSTAINED_P99_MS = 100.0
SUSTAINED_SHARE = 0.95


def latency_row(key, result, traffic):
    """The summary of one latency run (``traffic``: its mode's history run)."""
    ph = phases(result)
    everything = percentiles([lat * 1e3 for t, lat in result["epochs"]])
    steady = percentiles([lat * 1e3 for t, lat in result["epochs"] if t < result["join_spawn"][0]])
    during = ph.get("during join 1", {})
    per_epoch = {k: v / traffic["history"] for k, v in traffic["traffic"].items()}
    offered = result["rate"] * result["duration"]
    injected_share = result["injected"] / offered
    return {"p50_ms": everything["p50"], "p99_ms": everything["p99"],
            "steady_p50_ms": steady["p50"], "steady_p99_ms": steady["p99"],
            "join_p99_ms": during.get("p99"),
            "join_effective_ms": (result["join_done"][0] - result["join_spawn"][0]) * 1e3,
            "injected_share": injected_share,
            "sustained": bool(injected_share >= SUSTAINED_SHARE and everything["p99"] is not None
                              and everything["p99"] < SUSTAINED_P99_MS),
            "cpu_seconds": result["cpu_seconds"],
            "progress_messages_per_epoch_per_process": per_epoch["messages"],
            "progress_bytes_per_epoch_per_process": per_epoch["bytes"]}


def main():
    def extra(p):
        p.add_argument("--rounds-only", action="store_true", help="part 4 alone (prints it, writes nothing)")
    args = parse_args("progress_modes", __doc__.splitlines()[0], extra)
    quick = args.quick
    duration = 5.0 if quick else 20.0
    histories = [500, 2000] if quick else [500, 2000, 8000, 20000]
    if args.rounds_only:
        with TansuBroker() as broker:
            rounds_part(broker, 4.0 if quick else 8.0)
        print(f"load average {os.getloadavg()}")
        return
    with TansuBroker() as broker:
        rounds = rounds_part(broker, 4.0 if quick else 8.0)
        latency = {}
        for rate in RATES:
            for mode in ("p2p", "kafka"):
                prefix = f"lat{int(time.time())}{mode}{rate}"
                result = run_latency(duration, float(rate), joins=1, extra=mode_args(mode, broker, prefix))
                result["rate"], result["duration"] = rate, duration
                latency[f"{mode} @{rate}/s"] = result
        joins: dict[str, list] = {"p2p": [], "kafka (snapshot every 1000)": [], "kafka (no snapshots)": []}
        for history in histories:
            for label, mode, interval in (("p2p", "p2p", 1000), ("kafka (snapshot every 1000)", "kafka", 1000),
                                          ("kafka (no snapshots)", "kafka", 10**9)):
                report = history_run(mode, history, broker, interval)
                report["history"] = history
                joins[label].append(report)
                print(f"history {history:>6} {label:<28} join {report['join_s'] * 1e3:8.1f} ms, "
                      f"bootstrap {report['bootstrap_s'] * 1e3:7.2f} ms, read "
                      f"{report.get('records_read', report.get('state_entries'))}")
    rows, summary = [], {}

    def ms(x):
        return "-" if x is None else f"{x:.2f}"
    for key, result in latency.items():
        mode = key.split()[0]
        traffic = joins["p2p" if mode == "p2p" else "kafka (snapshot every 1000)"][-1]
        row = summary[key] = latency_row(key, result, traffic)
        rows.append([key, ms(row["p50_ms"]), ms(row["p99_ms"]), ms(row["steady_p99_ms"]), ms(row["join_p99_ms"]),
                     f"{row['join_effective_ms']:.0f}", f"{row['injected_share']:.2f}",
                     "yes" if row["sustained"] else "no",
                     f"{row['progress_messages_per_epoch_per_process']:.2f}",
                     f"{row['progress_bytes_per_epoch_per_process']:.0f}"])
    print(table(rows, ["mode", "p50 ms", "p99 ms", "p99 before join", "p99 around join", "join ms",
                       "injected", "sustained", "msgs/epoch", "bytes/epoch"]))
    for mode in ("p2p", "kafka"):
        sustained = [r for r in RATES if summary[f"{mode} @{r}/s"]["sustained"]]
        summary[f"{mode} highest sustained rate with a join"] = max(sustained) if sustained else None
    kafka50, p2p50 = summary["kafka @50/s"], summary["p2p @50/s"]
    summary["kafka p50 / p2p p50 at 50/s"] = kafka50["p50_ms"] / p2p50["p50_ms"]
    summary["kafka steady p50 / p2p steady p50 at 50/s"] = kafka50["steady_p50_ms"] / p2p50["steady_p50_ms"]
    summary["rounds"] = rounds
    summary["load"] = os.getloadavg()
    summary["kafka p99 around the join"] = {r: summary[f"kafka @{r}/s"]["join_p99_ms"] for r in RATES}
    summary["goals"] = {"kafka p50 / p2p p50 at 50/s <= 3": summary["kafka p50 / p2p p50 at 50/s"] <= 3,
                        "kafka sustains 500/s with a join":
                            summary["kafka highest sustained rate with a join"] == 500,
                        # at least one sustained rate, or the goal would hold vacuously
                        "kafka p99 around the join < 100 ms at every sustained rate":
                            summary["kafka highest sustained rate with a join"] is not None and all(
                                summary[f"kafka @{r}/s"]["join_p99_ms"] is not None
                                and summary[f"kafka @{r}/s"]["join_p99_ms"] < 100
                                for r in RATES if summary[f"kafka @{r}/s"]["sustained"]),
                        # issue 41
                        "kafka p50 / p2p p50 at 50/s <= 4": summary["kafka p50 / p2p p50 at 50/s"] <= 4,
                        "kafka steady p99 at 50/s <= 60 ms": kafka50["steady_p99_ms"] <= 60,
                        "kafka sustains 50/s with a join": kafka50["sustained"]}
    for k in ("kafka p50 / p2p p50 at 50/s", "kafka steady p50 / p2p steady p50 at 50/s",
              "p2p highest sustained rate with a join",
              "kafka highest sustained rate with a join", "kafka p99 around the join", "goals"):
        print(f"{k}: {summary[k]}")
    for label, reports in joins.items():
        hs = np.log([r["history"] for r in reports])
        ts = np.log([max(r["join_s"], 1e-4) for r in reports])
        summary[f"join_growth_exponent {label}"] = float(np.polyfit(hs, ts, 1)[0])
        summary[f"join_ms {label}"] = {r["history"]: r["join_s"] * 1e3 for r in reports}
    png = os.path.splitext(args.json)[0] + ".png"
    plot(latency, joins, png)
    write_report(args.json, "progress_modes", summary, {"joins": joins,
                 "latency": {m: {"epochs": r["epochs"], "join_spawn": r["join_spawn"],
                                 "join_done": r["join_done"], "injected": r["injected"]}
                             for m, r in latency.items()}},
                 duration=duration, png=png)


if __name__ == "__main__":
    main()
