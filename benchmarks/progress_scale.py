"""Peer-to-peer vs Kafka progress as the cluster grows: N = 2, 4, 8, 16 processes.

Both progress modes run the same light dataflow on N processes of one worker each:
seed 003's WordCount (benchmarks/_rescaling_latency_job.py: a line of 10 words over 100
keys per epoch, exchanged by word, counted per epoch), worker 0 injecting epochs at a
fixed rate. Two runs per mode and N, on one Tansu broker:

1. steady: a few seconds without epochs, then ``STEADY_RATE`` epochs/s; per-epoch
   latency p50/p99 and, from every process's samples (``--traffic-every``), progress
   messages and bytes per epoch sent and received per process, its TCP connections and
   log subscriptions, its CPU seconds per epoch (all of it, and the marginal part: less
   what it spends per second with nothing to do, measured in the quiet seconds), and
   the broker's CPU (idle, and per epoch), over the window from 1 s after the epochs
   start to the join; then one more process joins: the time from its start to its
   bootstrap done (``joined at``), and the p99 around it;
2. search: rates ``SEARCH_RATES`` for a few seconds each, a pause between them; a
   rate is *sustained* when worker 0 injected at least 95% of the epochs due and their
   p99 stays below 100 ms; the highest rate sustained with every lower one reported.

Messages per epoch: peer-to-peer, the progress frames a process writes to its peers
(one per batch per peer); Kafka, the records it appends (one per step) and the
records it reads from the other processes' logs. The summary fits, per mode, the
exponent of each figure in N (log-log least squares) and extrapolates to 64 and 256
processes on paper: messages per epoch from the counts' shape in N, CPU per epoch from
the measured CPU per message (a least-squares line of CPU per epoch against messages
per epoch), and the broker's CPU from its measured growth. On 2 cores the absolute
times at 16 processes are the machine's; read the growth. ``--quick``: N = 2, 4, 8,
shorter runs, two search rates.

Output: ``benchmarks/results/progress_scale.json`` (summary ``{"p2p": {"N": {...}},
"kafka": {"N": {...}}, "fits": ..., "extrapolated": ...}``) and
``progress_scale.png`` (latency and messages per epoch against N, a line per mode).
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np
from matplotlib.ticker import NullLocator
from _common import cpu_seconds, figure, parse_args, percentiles, style, table, write_report
from progress_modes import SUSTAINED_P99_MS, SUSTAINED_SHARE, mode_args
from rescaling_latency import run as run_latency

from broker.tansu import TansuBroker

MODES = ("p2p", "kafka")
STEADY_RATE = 20.0
SEARCH_RATES = (50.0, 100.0, 200.0, 400.0)
JOB_ARGS = ["--words", "10", "--keys", "100"]
EXTRAPOLATE_TO = (64, 256)


class CpuSampler:
    """The CPU seconds of process ``pid`` sampled every ``every`` seconds (wall time)."""

    def __init__(self, pid: int, every: float = 0.25) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append((time.time(), cpu_seconds(self.pid)))
            if self._stop.wait(self.every):
                return

    def __enter__(self) -> "CpuSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, t0: float, t1: float) -> float:
        """CPU seconds used between wall times t0 and t1 (nearest samples inside)."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        return inside[-1][1] - inside[0][1] if len(inside) >= 2 else float("nan")


def window_traffic(traffic: list[dict], t0: float, t1: float) -> dict:
    """Per process, its counters' growth between the first and the last sample inside
    wall times [t0, t1], per second: sent and received messages and bytes (received,
    peer-to-peer: what every other process sent it), CPU; its connections and logs
    tailed at the window's end."""
    out = {}
    spans = {}
    for proc in traffic:
        inside = [s for s in proc["samples"] if t0 <= s[0] <= t1]
        if len(inside) < 2:
            continue
        spans[proc["process"]] = (inside[0], inside[-1])
    for p, (a, b) in spans.items():
        seconds = b[0] - a[0]
        row = {"seconds": seconds, "cpu": (b[1] - a[1]) / seconds,
               "sent_messages": (b[2] - a[2]) / seconds, "sent_bytes": (b[3] - a[3]) / seconds,
               "connections": b[7], "subscriptions": b[8]}
        if b[4] or not b[5]:                    # peer-to-peer: from what the others sent to p
            msgs = byts = 0.0
            for q, (qa, qb) in spans.items():
                if q == p:
                    continue
                first, last = qa[4].get(str(p), [0, 0]), qb[4].get(str(p), [0, 0])
                span = qb[0] - qa[0]
                msgs += (last[0] - first[0]) / span
                byts += (last[1] - first[1]) / span
            row["received_messages"], row["received_bytes"] = msgs, byts
        else:
            row["received_messages"] = (b[5] - a[5]) / seconds
            row["received_bytes"] = (b[6] - a[6]) / seconds
        out[p] = row
    return out


def steady_point(mode: str, n: int, broker: TansuBroker, steady: float, join_after: float,
                 idle: float) -> dict:
    """Run 1 (see the module docstring) for ``mode`` on ``n`` processes, after ``idle``
    seconds without epochs (what a process and the broker spend with nothing to do)."""
    prefix = f"ps{int(time.time() * 1000) % 10**9}{mode[0]}{n}"
    extra = [*mode_args(mode, broker, prefix), *JOB_ARGS, "--traffic-every", "0.5",
             "--phases", f"0:{idle:g},{STEADY_RATE:g}:{steady:g}"]
    with CpuSampler(broker.proc.pid) as tansu:
        result = run_latency(idle + steady, STEADY_RATE, joins=1, extra=extra, processes=n, workers=1,
                             join_at=[idle + join_after])
    start = result["start"]
    spawn, done = result["join_spawn"][0], result["join_done"][0]
    t0, t1 = start + idle + 1.0, start + spawn
    lat = percentiles([lat * 1e3 for t, lat in result["epochs"] if idle + 1.0 <= t < spawn])
    around = percentiles([lat * 1e3 for t, lat in result["epochs"] if spawn <= t < done + 1.0])
    originals = [t for t in result["traffic"] if t["process"] < n]
    rows = list(window_traffic(originals, t0, t1).values())
    quiet = list(window_traffic(originals, start + 0.25, start + idle).values())
    rate = STEADY_RATE

    def mean(key: str, of: list = rows) -> float:
        return float(np.mean([r[key] for r in of])) / rate

    idle_cpu = mean("cpu", quiet) * rate if quiet else float("nan")
    broker_idle = tansu.between(start + 0.25, start + idle) / (idle - 0.25)
    broker_busy = tansu.between(t0, t1) / (t1 - t0)
    return {"p50_ms": lat["p50"], "p99_ms": lat["p99"], "epochs": lat["n"],
            "idle_cpu_s_per_s_per_process": idle_cpu,
            "marginal_cpu_s_per_epoch": mean("cpu") - idle_cpu / rate,
            "broker_idle_cpu_s_per_s": broker_idle,
            "broker_marginal_cpu_s_per_epoch": (broker_busy - broker_idle) / rate,
            "sent_messages_per_epoch": mean("sent_messages"), "sent_bytes_per_epoch": mean("sent_bytes"),
            "received_messages_per_epoch": mean("received_messages"),
            "received_bytes_per_epoch": mean("received_bytes"),
            "max_received_messages_per_epoch": max(r["received_messages"] for r in rows) / rate,
            "cpu_s_per_epoch_per_process": mean("cpu"),
            "broker_cpu_s_per_epoch": broker_busy / rate,
            "tcp_connections_per_process": float(np.mean([r["connections"] for r in rows])),
            "log_subscriptions_per_process": float(np.mean([r["subscriptions"] for r in rows])),
            "join_s": done - spawn, "join_bootstrap_s": result["bootstrap_client_s"][0],
            "join_p99_ms": around["p99"], "processes_sampled": len(rows)}


def search_point(mode: str, n: int, broker: TansuBroker, rates: tuple, seconds: float,
                 pause: float) -> dict:
    """Run 2: the rates in turn, ``pause`` seconds without injections between them."""
    phases, spans, at = [], [], 0.0
    for rate in rates:
        phases += [f"{rate:g}:{seconds:g}", f"0:{pause:g}"]
        spans.append((rate, at, at + seconds))
        at += seconds + pause
    prefix = f"pr{int(time.time() * 1000) % 10**9}{mode[0]}{n}"
    extra = [*mode_args(mode, broker, prefix), *JOB_ARGS, "--phases", ",".join(phases)]
    result = run_latency(at, rates[0], joins=0, extra=extra, processes=n, workers=1)
    found, sustained, below = {}, None, True
    for rate, lo, hi in spans:
        lats = [lat * 1e3 for t, lat in result["epochs"] if lo <= t < hi]
        p = percentiles(lats)
        share = len(lats) / (rate * seconds)
        ok = share >= SUSTAINED_SHARE and p["p99"] is not None and p["p99"] < SUSTAINED_P99_MS
        found[f"{rate:g}"] = {"injected_share": share, "p50_ms": p["p50"], "p99_ms": p["p99"], "sustained": ok}
        below = below and ok              # this rate and every lower one
        if below:
            sustained = rate
    return {"rates": found, "highest_sustained_rate": sustained}


def fit_exponent(ns: list[int], values: list[float]) -> float | None:
    """The slope of log(value) against log(N): value ~ N^slope."""
    pairs = [(n, v) for n, v in zip(ns, values) if v is not None and v > 0 and np.isfinite(v)]
    if len(pairs) < 2:
        return None
    x, y = np.log([p[0] for p in pairs]), np.log([p[1] for p in pairs])
    return float(np.polyfit(x, y, 1)[0])


FITTED = ("p50_ms", "p99_ms", "sent_messages_per_epoch", "received_messages_per_epoch",
          "cpu_s_per_epoch_per_process", "marginal_cpu_s_per_epoch", "idle_cpu_s_per_s_per_process",
          "broker_cpu_s_per_epoch", "broker_idle_cpu_s_per_s", "join_s")


def extrapolate(summary: dict) -> dict:
    """64 and 256 processes on paper, from the measured costs (not from the latencies'
    exponents, which on 2 cores are the machine's as soon as it saturates).

    - Messages per epoch per process: WordCount sends k batches per worker and epoch (k
      measured at the smallest N, where every epoch got its own steps); peer-to-peer
      writes each once per peer and reads every peer's (``2 k (N - 1)``), Kafka appends
      one record per step whatever N and reads every other process's (``k + k (N - 1)``).
    - CPU per message ``c``: the slope of a process's marginal CPU per epoch (its CPU
      per epoch less what it spends idle) against its messages per epoch, fitted on
      peer-to-peer, whose messages per process grow with N (Kafka's stay within the
      machine's spread from N = 2 to 8: a record read costs the subscriber little, and
      its apply is the same Progcaster.apply); ``a`` the rest of an epoch's CPU. A
      process then spends ``a + c m`` per epoch: at most ``1 / (a + c m)`` epochs/s per core.
    - The broker (Kafka): Tansu answers a fetch only when its wait ends, so every
      subscriber polls every ``fetch.wait.max.ms`` whatever happens, at a CPU cost that
      grows with the logs it tails: idle broker CPU ``N (p0 + p1 (N - 1))``, fitted on
      the N where it still grew (beyond, the machine ran out of cores); and it serves each
      record to N - 1 readers: ``k N (N - 1)`` deliveries per epoch.
    - Connections per process: N - 1 TCP connections (two threads each) in both modes
      (data flows over TCP in Kafka mode too), plus the broker's clients in Kafka mode."""
    p2p, kafka = summary["p2p"], summary["kafka"]
    ns = sorted(int(n) for n in p2p)
    m = [p2p[str(n)]["sent_messages_per_epoch"] + p2p[str(n)]["received_messages_per_epoch"] for n in ns]
    cpu = [p2p[str(n)]["marginal_cpu_s_per_epoch"] for n in ns]
    c, a = np.polyfit(m, cpu, 1) if len(ns) >= 2 else (0.0, cpu[0])
    c = max(0.0, float(c))
    small = str(ns[0])
    k_p2p = p2p[small]["sent_messages_per_epoch"] / (ns[0] - 1)
    k_kafka = kafka[small]["sent_messages_per_epoch"] if small in kafka else k_p2p
    grew = []
    for n in sorted(int(n) for n in kafka):
        idle = kafka[str(n)]["broker_idle_cpu_s_per_s"]
        if grew and idle <= kafka[str(grew[-1])]["broker_idle_cpu_s_per_s"]:
            break
        grew.append(n)
    p1, p0 = (np.polyfit([n - 1 for n in grew], [kafka[str(n)]["broker_idle_cpu_s_per_s"] / n for n in grew], 1)
              if len(grew) >= 2 else (0.0, 0.0))
    out: dict = {"cpu_per_message_s": c, "cpu_per_epoch_fixed_s": float(a),
                 "batches_per_epoch": {"p2p": k_p2p, "kafka": k_kafka},
                 "broker_poll_cpu_per_subscriber_s_per_s": float(p0), "broker_poll_cpu_per_log_tailed_s_per_s": float(p1),
                 "broker_fit_on": grew, "at": {}}
    for n in EXTRAPOLATE_TO:
        rows = {}
        for mode, msgs in (("p2p", 2 * k_p2p * (n - 1)), ("kafka", k_kafka + k_kafka * (n - 1))):
            per_epoch = float(a + c * msgs)
            rows[mode] = {"messages_per_epoch_per_process": msgs, "cpu_s_per_epoch_per_process": per_epoch,
                          "epochs_per_s_per_core_bound": 1.0 / per_epoch if per_epoch > 0 else None,
                          "tcp_connections_per_process": n - 1, "connection_threads_per_process": 2 * (n - 1),
                          "batches_applied_per_round_per_process": n - 1,
                          "cpu_s_to_apply_a_round": c * (n - 1)}
        rows["kafka"].update(broker_poll_cores=float(n * (p0 + p1 * (n - 1))),
                             broker_record_deliveries_per_epoch=k_kafka * n * (n - 1))
        out["at"][str(n)] = rows
    return out


def plot(summary: dict, path: str) -> None:
    with figure(path, 1, 2, figsize=(12, 4.5)) as (a, b):
        for mode, marker in (("p2p", "o"), ("kafka", "s")):
            ns = sorted(int(n) for n in summary[mode])
            rows = [summary[mode][str(n)] for n in ns]
            a.plot(ns, [r["p50_ms"] for r in rows], marker=marker, label=f"{mode} p50")
            a.plot(ns, [r["p99_ms"] for r in rows], marker=marker, linestyle="--", label=f"{mode} p99")
            b.plot(ns, [r["sent_messages_per_epoch"] for r in rows], marker=marker, label=f"{mode} sent")
            b.plot(ns, [r["received_messages_per_epoch"] for r in rows], marker=marker, linestyle="--",
                   label=f"{mode} received")
        style(a, xlog=True, ylog=True, xlabel="processes (1 worker each)", ylabel="epoch latency (ms)",
              title=f"WordCount at {STEADY_RATE:g} epochs/s", legend=True)
        style(b, xlog=True, ylog=True, xlabel="processes (1 worker each)",
              ylabel="progress messages per epoch per process",
              title="p2p: frames to peers; Kafka: records appended / read", legend=True)
        ticks = sorted({int(n) for mode in MODES for n in summary[mode]})
        for ax in (a, b):
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticks(ticks)
            ax.set_xticklabels([str(t) for t in ticks])


def main() -> None:
    args = parse_args("progress_scale", __doc__.splitlines()[0])
    quick = args.quick
    ns = (2, 4, 8) if quick else (2, 4, 8, 16)
    steady, join_after, idle = (6.0, 4.0, 1.5) if quick else (12.0, 8.0, 2.5)
    rates, seconds, pause = ((50.0, 200.0), 2.0, 1.0) if quick else (SEARCH_RATES, 3.0, 1.5)
    summary: dict = {mode: {} for mode in MODES}
    raw: dict = {mode: {} for mode in MODES}
    started = time.time()
    with TansuBroker() as broker:
        for n in ns:
            for mode in MODES:           # the modes in turn at each N: the load is shared alike
                point = steady_point(mode, n, broker, steady, join_after, idle)
                search = search_point(mode, n, broker, rates, seconds, pause)
                point["highest_sustained_rate"] = search["highest_sustained_rate"]
                summary[mode][str(n)] = point
                raw[mode][str(n)] = search
                print(f"{mode:5} N={n:<3} p50 {point['p50_ms']:7.2f} p99 {point['p99_ms']:7.2f} ms, "
                      f"msgs/epoch sent {point['sent_messages_per_epoch']:6.1f} received "
                      f"{point['received_messages_per_epoch']:6.1f}, cpu/epoch {point['cpu_s_per_epoch_per_process'] * 1e3:6.2f} ms "
                      f"(marginal {point['marginal_cpu_s_per_epoch'] * 1e3:.2f}), broker "
                      f"{point['broker_cpu_s_per_epoch'] * 1e3:6.2f} ms (idle {point['broker_idle_cpu_s_per_s'] * 100:.0f}%), "
                      f"join {point['join_s']:.2f} s, "
                      f"sustained {search['highest_sustained_rate']} ({time.time() - started:.0f} s)", flush=True)
    summary["fits"] = {mode: {key: fit_exponent([int(n) for n in summary[mode]],
                                                [summary[mode][n][key] for n in summary[mode]])
                              for key in FITTED} for mode in MODES}
    summary["extrapolated"] = extrapolate(summary)
    summary["steady_rate"] = STEADY_RATE
    summary["load"] = os.getloadavg()
    rows = []
    for mode in MODES:
        for n in ns:
            r = summary[mode][str(n)]
            rows.append([mode, n, f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", f"{r['sent_messages_per_epoch']:.1f}",
                         f"{r['received_messages_per_epoch']:.1f}", f"{r['sent_bytes_per_epoch']:.0f}",
                         f"{r['received_bytes_per_epoch']:.0f}", f"{r['tcp_connections_per_process']:.0f}",
                         f"{r['log_subscriptions_per_process']:.0f}", f"{r['cpu_s_per_epoch_per_process'] * 1e3:.2f}",
                         f"{r['marginal_cpu_s_per_epoch'] * 1e3:.2f}", f"{r['idle_cpu_s_per_s_per_process'] * 100:.0f}%",
                         f"{r['broker_cpu_s_per_epoch'] * 1e3:.2f}", f"{r['broker_idle_cpu_s_per_s'] * 100:.0f}%",
                         r["highest_sustained_rate"],
                         f"{r['join_s']:.2f}"])
    print(table(rows, ["mode", "N", "p50 ms", "p99 ms", "msgs sent", "msgs recv", "bytes sent", "bytes recv",
                       "tcp conns", "logs tailed", "cpu ms/epoch", "marginal ms/epoch", "idle cpu",
                       "broker ms/epoch", "broker idle", "sustained /s",
                       "join s"]))
    for mode in MODES:
        print(f"{mode} exponents in N: " + ", ".join(f"{k} {v:.2f}" for k, v in summary["fits"][mode].items()
                                                    if v is not None))
    ex = summary["extrapolated"]
    print(f"on paper: {ex['cpu_per_message_s'] * 1e6:.0f} us CPU per message, broker polls "
          f"{ex['broker_poll_cpu_per_subscriber_s_per_s'] * 100:.1f}% of a core per subscriber + "
          f"{ex['broker_poll_cpu_per_log_tailed_s_per_s'] * 100:.2f}% per log it tails")
    for n, rows in ex["at"].items():
        print(f"  N={n}: " + "; ".join(
            f"{mode} {r['messages_per_epoch_per_process']:.0f} msgs/epoch, {r['cpu_s_per_epoch_per_process'] * 1e3:.1f} ms "
            f"CPU/epoch (<= {r['epochs_per_s_per_core_bound']:.0f} epochs/s per core)" for mode, r in rows.items())
            + f"; broker polling {rows['kafka']['broker_poll_cores']:.0f} cores")
    print(f"load average {summary['load']}")
    png = os.path.splitext(args.json)[0] + ".png"
    plot(summary, png)
    write_report(args.json, "progress_scale", summary, raw, png=os.path.relpath(png, os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))), steady_seconds=steady, search_rates=list(rates))


if __name__ == "__main__":
    main()
