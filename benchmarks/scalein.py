"""Scale-in: a process leaves a running cluster on SIGTERM; how long it takes, what latency does.

Every run is real processes on 127.0.0.1: a cluster of 3 processes x 1 worker
(``--workers``) runs seed 003's WordCount over ``state_machine`` (running counts per
key, 256 bins, the cluster's own rebalancer as control; ``_scalein_job.py``, which is
``_migration_job.py migration`` with the leave's log lines at INFO and wall-clock stamped).
Worker 0 (process 0) first loads N distinct keys (100,000 per epoch), prints ``steady``,
then injects ``--rate`` epochs/s (20), each one line of 100 words drawn from those N
keys, recording per epoch the time from sending it to its probe passing it
(``_job_common.paced_epochs``). The other workers close their inputs at once; process 2's
worker holds a third of the bins (so about N/3 keys). Some seconds after ``steady``
the parent sends process 2 SIGTERM and times, by wall clock, SIGTERM -> the process's
exit (``waitpid`` in a thread). From the leaver's stamped log lines the leave splits
into: SIGTERM -> ``leaves the cluster`` (start; it waits while a join or other leave
runs), -> ``holds no keyed state any more`` (moving bins: the rebalancer moves its bins
to workers 0 and 1, ``ships N bins (K keys)`` per step), -> ``has drained and leaves``
(drain: everything routed to it processed, ``stopped`` from every other worker), ->
exit (goodbyes, in Kafka mode closing its log, final report, interpreter exit). Worker
0 keeps injecting until its probe passed the configuration that balances the table
over the remaining workers (``_migration_job.MigrationTracker``), then ``--tail`` seconds more.

1. Leave time against state size: N = 10k, 100k, 1M keys (``--quick``: 10k, 100k);
   each with the rebalancer's ``--migration batched`` (the default: per step several
   moves, no worker in two, so one bin per step with 1 worker per process) and
   ``all-at-once`` (one ``Map``); in each progress mode; median of ``--repeats`` runs
   (3; ``--quick``: 1). SIGTERM 1 s after steady, 0.5 s tail.
2. Latency through a leave: N = 100k (``--quick``: 10k), batched, in each progress
   mode; SIGTERM 10 s after steady (``--quick``: 3 s), 10 s tail (3 s). Epoch latency
   p50/p99 before (epochs done before SIGTERM), during (epochs in flight at some moment
   between SIGTERM and the leaver's exit) and after (injected after its exit); plotted
   over time with SIGTERM, bins moved out and exit marked. Unless ``--quick``
   (``--control``), each mode also runs once without the leave, injecting as long, and
   its latency is cut at the same moments: Kafka-mode latency drifts up over a run
   without any leave, and the control separates that drift from the leave's cost.

The rate is 20 epochs/s because Kafka progress on this 2-core machine (a Tansu broker
busy on a core of its own) does not hold 50/s even without a leave: latency climbs
into seconds within 40 s; at 20/s it only drifts up slowly.
Progress modes: ``p2p`` and ``kafka`` (per-worker logs on a Tansu broker started on a
free loopback port, with ``progress_modes.py``'s options; ``--modes`` picks).

Every run is checked, and a failed check is printed, listed in the summary's
``failed_checks`` and makes the program exit 1 after writing the report (a run that
fails or hangs is listed in ``failed_runs``, its whole log saved to a file named in
the message): every process exits 0 (the leaver too, within ``--leave-timeout``); the
leaver logs its leave, its drain, and the others that it has left; its final state is
empty and it holds no bin; the final states of the remaining workers add up exactly
(digest of keys, counts, weighted counts, squares) to what worker 0 injected; every
bin is held once, as the remaining workers' common table says, balanced over them; the
keys the leaver shipped are the keys the others received; worker 0 saw the leave's
migration end.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import tempfile
import threading
import time
from contextlib import nullcontext

import numpy as np
from _common import ROOT, figure, parse_args, percentiles, style, table, write_report
from migration import FINAL, STEADY, check_states, in_flight, lines_matching, wait_line
from progress_modes import mode_args
from tqdm import tqdm

from timely.launch import LocalCluster

JOB = os.path.join(ROOT, "benchmarks", "_scalein_job.py")
LEAVER = 2                      # the process sent SIGTERM
STAMP = r"^([0-9.]+) "
MARKS = {  # the leaver's log lines (timely/communication/cluster.py), wall-clock stamped
    "requested": re.compile(STAMP + r"timely\.cluster: process \d+: leave requested"),
    "started": re.compile(STAMP + r"timely\.cluster: process \d+ leaves the cluster"),
    "quiesced": re.compile(STAMP + r"timely\.cluster: process \d+ holds no keyed state any more"),
    "drained": re.compile(STAMP + r"timely\.cluster: process \d+ has drained and leaves"),
}
SHIPS = re.compile(STAMP + r"timely\.megaphone: .*: worker \d+ ships (\d+) bins \((\d+) keys\) at (\d+)")
REFUSED = "cannot leave the cluster"


class RunFailed(Exception):
    """A run whose processes failed or hung (the message holds a log excerpt)."""


def excerpt(log, lines=60):
    """The last ``lines`` lines of a cluster's log (``LocalCluster.interleaved()``); the
    whole log goes to a file in the temporary directory, named at the end."""
    fd, path = tempfile.mkstemp(prefix="scalein-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(log) + "\n")
    return "\n".join(line[:300] for line in log[-lines:]) + f"\n(the whole log: {path})"


def timed_exit(proc):
    """A thread that records the wall-clock time ``proc`` exits (blocking waitpid, so
    not the 50 ms polling of ``Popen.wait(timeout)``); returns ``(thread, box)``."""
    box = {}

    def wait():
        box["code"] = proc.popen.wait()
        box["at"] = time.time()
    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread, box


def window_latency(epochs, lo, hi):
    """p50/p99/max (ms) of the epochs done before ``lo``, in flight at some moment of
    [lo, hi], and injected after ``hi`` (seconds since worker 0's start)."""
    return {"before": percentiles([lat * 1e3 for _, t, lat in epochs if t + lat < lo]),
            "during": percentiles(in_flight(epochs, lo, hi)),
            "after": percentiles([lat * 1e3 for _, t, lat in epochs if t > hi])}


def run_cluster(mode, broker, *, keys, rate, strategy, workers, before, tail, leave_timeout,
                control_for=None):
    """One cluster of 3 processes; SIGTERM to process 2 ``before`` s after steady.
    Returns worker 0's results with the leave's times (wall clock relative to worker
    0's ``start``), its phases and ``problems`` (failed checks); raises ``RunFailed``.
    ``control_for``: a leave run's result; then nobody leaves, worker 0 injects as long
    as it did, and the latency is cut at that run's SIGTERM and exit."""
    bins = 256
    control = control_for is not None
    what = f"{mode} {strategy} {keys:,} keys{' (control, no leave)' if control else ''}"
    with tempfile.TemporaryDirectory() as tmp:
        output = os.path.join(tmp, "scalein.json")
        prefix = f"si{int(time.time() * 1000) % 10**9}{mode[0]}{keys}"
        if control:
            span = max(t for _, t, _ in control_for["epochs"])
            run = ["--joins", "0", "--duration", f"{span:.3f}", "--max-seconds", str(span + 60)]
        else:
            run = ["--joins", "1", "--tail", str(tail), "--max-seconds", str(before + leave_timeout + tail + 60)]
        extra = ["--load", str(keys), "--keys", str(keys), "--rate", str(rate), "--words", "100",
                 "--bins", str(bins), "--migration", strategy, "--timeout", "30", *run,
                 "--output", output, *mode_args(mode, broker, prefix)]
        with LocalCluster(JOB, slots=3, workers=workers, extra=extra) as cluster:
            procs = cluster.start(3)
            steady = float(wait_line(cluster, procs[0], STEADY, 300).group(1))
            leaver = procs[LEAVER]
            if not control:
                time.sleep(max(0.0, steady + before - time.time()))
                if leaver.popen.poll() is not None:
                    raise RunFailed(f"{what}: process {LEAVER} exited before SIGTERM:\n"
                                    f"{excerpt(cluster.interleaved())}")
                thread, box = timed_exit(leaver)
                sigterm = time.time()
                cluster.events.append((time.monotonic() - cluster.start_time, f"SIGTERM to process {LEAVER}"))
                cluster.kill(leaver, signal.SIGTERM)
                thread.join(leave_timeout)
                if "at" not in box:
                    raise RunFailed(f"{what}: process {LEAVER} did not exit within {leave_timeout:.0f} s of "
                                    f"SIGTERM (a hung leave):\n{excerpt(cluster.interleaved())}")
            codes = cluster.wait(leave_timeout + tail + before + 120)
            if any(codes):
                raise RunFailed(f"{what}: exit codes {codes}:\n{excerpt(cluster.interleaved())}")
            with open(output) as f:
                result = json.load(f)
            finals = lines_matching(cluster, FINAL)
            leaver_lines = [line for _, line in leaver.lines]
            others = [p.output() for p in procs if p is not leaver]
            log = cluster.interleaved()
    start = result["start"]
    problems = []
    epochs = result["epochs"]
    out = {"mode": mode, "strategy": strategy, "keys": keys, "rate": rate, "workers": workers,
           "epochs": epochs, "injected": result["injected"], "load_s": result["load_seconds"],
           "control": control, "problems": problems}
    if result["timed_out"]:
        problems.append(f"{what}: the job hit its time limit")
    if control:
        problems += check_states(finals, result["expected"], bins, 3 * workers, what)
        if result["joins"]:
            problems.append(f"{what}: worker 0 saw a rescale: {result['joins']}")
        out["latency"] = window_latency(epochs, control_for["sigterm"], control_for["exit"])
        if problems:
            problems[-1] += "\n" + excerpt(log, 40)
        return out
    marks = {}
    for name, pattern in MARKS.items():
        found = [float(m.group(1)) for line in leaver_lines if (m := pattern.search(line))]
        marks[name] = found[0] if found else None
        if not found:
            problems.append(f"{what}: the leaver never logged {name!r}")
    if any(REFUSED in line for line in leaver_lines):
        problems.append(f"{what}: the leave was refused")
    for text in others:
        if "has left the cluster" not in text:
            problems.append(f"{what}: a remaining process never logged that process {LEAVER} left")
    ships = [(float(m.group(1)), int(m.group(2)), int(m.group(3))) for line in leaver_lines
             if (m := SHIPS.search(line))]
    exited = box["at"]

    def span(a, b):
        return None if a is None or b is None else b - a
    phases = {"total_s": exited - sigterm, "start_s": span(sigterm, marks["started"]),
              "moving_s": span(marks["started"], marks["quiesced"]),
              "drain_s": span(marks["quiesced"], marks["drained"]),
              "exit_s": span(marks["drained"], exited)}
    # exactness: the leaver ends empty; the remaining workers hold exactly what was injected
    gone = set(range(LEAVER * workers, (LEAVER + 1) * workers))
    mine = [f for f in finals if f["worker"] in gone]
    rest = [f for f in finals if f["worker"] not in gone]
    if sorted(f["worker"] for f in mine) != sorted(gone):
        problems.append(f"{what}: final reports from leaving workers {sorted(f['worker'] for f in mine)}")
    for f in mine:
        if f["bins"] or any(f["digest"]):
            problems.append(f"{what}: leaving worker {f['worker']} still holds {len(f['bins'])} bins, "
                            f"digest {f['digest']}")
    problems += check_states(rest, result["expected"], bins, 3 * workers - len(gone), what)
    shipped = sum(k for f in mine for _, _, k in f["shipped"])
    received = sum(k for f in rest for _, _, k in f["received"])
    if shipped != received:
        problems.append(f"{what}: the leaver shipped {shipped} keys, the others received {received}")
    if sum(k for _, _, k in ships) != shipped:
        problems.append(f"{what}: the leaver's log says it shipped {sum(k for _, _, k in ships)} keys, "
                        f"its final report {shipped}")
    rebalance = result["joins"]
    if len(rebalance) != 1 or rebalance[0]["kind"] != "leave" or rebalance[0]["end"] is None \
            or rebalance[0]["start"] is None:
        problems.append(f"{what}: worker 0 did not see one leave migration end: {rebalance}")
    if problems:
        problems[-1] += "\n" + excerpt(log, 40)
    lo, hi = sigterm - start, exited - start
    r0 = rebalance[0] if rebalance else {}
    out.update({"sigterm": lo, "exit": hi, "marks": {k: None if v is None else v - start for k, v in marks.items()},
                "phases": phases, "ships": [(t - start, b, k) for t, b, k in ships],
                "keys_shipped": shipped, "steps": len(ships),
                "rebalance": {"start": r0.get("start"), "end": r0.get("end"), "steps": r0.get("steps")},
                "latency": window_latency(epochs, lo, hi)})
    return out


def ms(x, digits=1):
    return "-" if x is None else f"{x * 1e3:.{digits}f}"


def num(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def ratio(a, b):
    return a / b if a is not None and b else None


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def attempt(runs_failed, problems, fn, **kw):
    try:
        r = fn(**kw)
    except RunFailed as e:
        tqdm.write(f"RUN FAILED: {e}")
        problems.append(str(e))
        runs_failed.append({k: v for k, v in kw.items() if k not in ("broker", "control_for")})
        return None
    for p in r["problems"]:
        tqdm.write(f"CHECK FAILED: {p}")
    problems += r["problems"]
    return r


def part_sizes(args, broker, bar, problems, failed):
    sizes = [10_000, 100_000] if args.quick else [10_000, 100_000, 1_000_000]
    repeats = args.repeats or (1 if args.quick else 3)
    cells, runs = {}, []
    for mode in args.modes:
        for keys in sizes:
            for strategy in args.strategies:
                got = []
                for k in range(repeats):
                    bar.set_description(f"sizes {mode} {keys:,} {strategy} #{k + 1}")
                    r = attempt(failed, problems, run_cluster, mode=mode, broker=broker, keys=keys, rate=args.rate,
                                strategy=strategy, workers=args.workers, before=1.0, tail=0.5,
                                leave_timeout=args.leave_timeout)
                    bar.update()
                    if r is not None:
                        got.append(r)
                        runs.append({k2: v for k2, v in r.items() if k2 not in ("epochs", "problems")})
                cells[(mode, strategy, keys)] = {
                    "runs": len(got),
                    "leave_s": median(r["phases"]["total_s"] for r in got),
                    "leave_s_all": [r["phases"]["total_s"] for r in got],
                    **{name: median(r["phases"][name] for r in got)
                       for name in ("start_s", "moving_s", "drain_s", "exit_s")},
                    "keys_shipped": median(r["keys_shipped"] for r in got),
                    "steps": median(r["steps"] for r in got),
                    "before_p50_ms": median(r["latency"]["before"]["p50"] for r in got),
                    "during_p50_ms": median(r["latency"]["during"]["p50"] for r in got),
                    "during_p99_ms": median(r["latency"]["during"]["p99"] for r in got),
                    "during_max_ms": median(r["latency"]["during"]["max"] for r in got)}
    rows = [[mode, strategy, f"{keys:,}", c["runs"], num(c["keys_shipped"], 0), num(c["steps"], 0),
             num(c["leave_s"], 3), ms(c["start_s"]), num(c["moving_s"], 3), ms(c["drain_s"]), ms(c["exit_s"]),
             num(c["before_p50_ms"]), num(c["during_p50_ms"]), num(c["during_p99_ms"]), num(c["during_max_ms"])]
            for (mode, strategy, keys), c in cells.items()]
    tqdm.write(f"\n1. leave time vs state size: 3 processes x {args.workers} worker, {args.rate:g} epochs/s, "
               f"SIGTERM to process {LEAVER} (median of {repeats})")
    tqdm.write(table(rows, ["mode", "migration", "keys", "runs", "keys shipped", "steps", "SIGTERM->exit s",
                            "start ms", "moving bins s", "drain ms", "exit ms", "before p50 ms",
                            "during p50 ms", "during p99 ms", "during max ms"]))
    return cells, sizes, runs


def part_timeline(args, broker, bar, problems, failed):
    keys = 10_000 if args.quick else 100_000
    before, tail = (3.0, 3.0) if args.quick else (10.0, 10.0)
    out, controls = {}, {}
    for mode in args.modes:
        bar.set_description(f"timeline {mode}")
        r = attempt(failed, problems, run_cluster, mode=mode, broker=broker, keys=keys, rate=args.rate,
                    strategy="batched", workers=args.workers, before=before, tail=tail,
                    leave_timeout=args.leave_timeout)
        bar.update()
        if r is None:
            continue
        out[mode] = r
        if args.control:
            bar.set_description(f"timeline {mode} control")
            c = attempt(failed, problems, run_cluster, mode=mode, broker=broker, keys=keys, rate=args.rate,
                        strategy="batched", workers=args.workers, before=before, tail=tail,
                        leave_timeout=args.leave_timeout, control_for=r)
            if c is not None:
                controls[mode] = c
        bar.update()
    rows = []
    for mode, r in out.items():
        base = r["latency"]["before"]
        for name, p in r["latency"].items():
            c = controls[mode]["latency"][name] if mode in controls else {}
            rows.append([mode, name, p["n"], num(p["p50"], 2), num(p["p99"], 2), num(p["max"], 2),
                         num(ratio(p["p50"], base["p50"]), 2), num(ratio(p["p99"], base["p99"]), 2),
                         num(c.get("p50"), 2), num(c.get("p99"), 2)])
    tqdm.write(f"\n2. epoch latency through a leave: {keys:,} keys, batched, {args.rate:g} epochs/s, SIGTERM "
               f"{before:g} s after steady (during = in flight between SIGTERM and the leaver's exit; control = "
               f"a run without the leave, same windows)")
    tqdm.write(table(rows, ["mode", "phase", "epochs", "p50 ms", "p99 ms", "max ms", "p50 / before",
                            "p99 / before", "control p50", "control p99"]))
    for mode, r in out.items():
        ph = r["phases"]
        tqdm.write(f"{mode}: SIGTERM -> exit {ph['total_s']:.3f} s (start {ms(ph['start_s'])} ms, moving bins "
                   f"{num(ph['moving_s'], 3)} s in {r['steps']} steps, drain {ms(ph['drain_s'])} ms, exit "
                   f"{ms(ph['exit_s'])} ms); {r['keys_shipped']:,} keys shipped")
    return out, controls, keys


def plot(timeline, controls, cells, sizes, args, path):
    n = len(timeline) + (1 if cells else 0)
    if not n:
        return
    with figure(path, n, 1, figsize=(10, 3.2 * n), squeeze=False) as axes:
        for ax, (mode, r) in zip(axes[:, 0], timeline.items()):
            t = np.array([e[1] for e in r["epochs"]])
            lat = np.array([e[2] * 1e3 for e in r["epochs"]])
            ax.scatter(t, lat, s=3, alpha=0.35, color="tab:gray", label="epoch latency")
            for q, color in ((50, "tab:blue"), (99, "tab:red")):
                xs, ys = [], []
                for w in np.arange(0, (t.max() if t.size else 0) + 0.5, 0.5):
                    sel = lat[(t >= w) & (t < w + 0.5)]
                    if sel.size:
                        xs.append(w + 0.25)
                        ys.append(np.percentile(sel, q))
                ax.plot(xs, ys, color=color, linewidth=1, label=f"p{q} per 0.5 s")
            if mode in controls:
                ct = np.array([e[1] for e in controls[mode]["epochs"]])
                cl = np.array([e[2] * 1e3 for e in controls[mode]["epochs"]])
                xs, ys = [], []
                for w in np.arange(0, (ct.max() if ct.size else 0) + 0.5, 0.5):
                    sel = cl[(ct >= w) & (ct < w + 0.5)]
                    if sel.size:
                        xs.append(w + 0.25)
                        ys.append(np.percentile(sel, 50))
                ax.plot(xs, ys, color="tab:cyan", linewidth=1, linestyle="-.",
                        label="p50 per 0.5 s, a run without the leave")
            ax.axvspan(r["sigterm"], r["exit"], color="tab:orange", alpha=0.2, label="leaving (SIGTERM to exit)")
            ax.axvline(r["sigterm"], color="tab:red", linestyle="--", label="SIGTERM")
            if r["marks"]["quiesced"] is not None:
                ax.axvline(r["marks"]["quiesced"], color="tab:green", linestyle=":", label="bins all moved out")
            ax.axvline(r["exit"], color="tab:purple", linestyle="--", label="leaver exited")
            style(ax, ylog=True, ylabel="latency (ms)", xlabel="time since steady start (s)",
                  title=f"{mode}: WordCount over state_machine, {r['keys']:,} keys, 3 processes, "
                        f"process {LEAVER} leaves (batched)", title_size=10,
                  legend={"loc": "upper left", "fontsize": 7, "ncol": 2})
        if cells:
            ax = axes[-1, 0]
            for mode in args.modes:
                for strategy, marker in zip(args.strategies, "os^"):
                    ys = [cells.get((mode, strategy, k), {}).get("leave_s") for k in sizes]
                    ax.plot(sizes, [np.nan if y is None else y for y in ys], marker=marker,
                            linestyle="-" if mode == "p2p" else "--", label=f"{mode} {strategy}")
            style(ax, xlog=True, ylog=True, xlabel="keys in the state (the leaver holds about a third)",
                  ylabel="SIGTERM -> exit (s)", grid="both", legend={"fontsize": 8})


def main():
    def extra(p):
        p.add_argument("--modes", default="p2p,kafka", help="progress modes, comma-separated")
        p.add_argument("--strategies", default="batched,all-at-once", help="--migration values for part 1")
        p.add_argument("--rate", type=float, default=20.0, help="epochs per second")
        p.add_argument("--workers", type=int, default=1, help="workers per process")
        p.add_argument("--repeats", type=int, default=0, help="runs per cell of part 1 (default 3; quick 1)")
        p.add_argument("--leave-timeout", type=float, default=120.0, help="seconds a leave may take")
        p.add_argument("--skip-sizes", action="store_true", help="only part 2")
        p.add_argument("--control", action=argparse.BooleanOptionalAction, default=None,
                       help="part 2: also a run without the leave (default: on; --quick: off)")
    args = parse_args("scalein", __doc__.splitlines()[0], extra)
    args.modes = [m for m in args.modes.split(",") if m]
    args.strategies = [s for s in args.strategies.split(",") if s]
    if args.control is None:
        args.control = not args.quick
    started = time.perf_counter()
    problems: list[str] = []
    failed: list[dict] = []
    repeats = args.repeats or (1 if args.quick else 3)
    n_sizes = 0 if args.skip_sizes else len(args.modes) * len(args.strategies) * (2 if args.quick else 3) * repeats
    if "kafka" in args.modes:
        from broker.tansu import TansuBroker
        broker_cm = TansuBroker()
    else:
        broker_cm = nullcontext()
    with broker_cm as broker, tqdm(total=n_sizes + 2 * len(args.modes), unit="run") as bar:
        cells, sizes, size_runs = ({}, [], []) if args.skip_sizes else part_sizes(args, broker, bar, problems, failed)
        timeline, controls, timeline_keys = part_timeline(args, broker, bar, problems, failed)
    summary = {"rate_epochs_per_s": args.rate, "workers_per_process": args.workers, "processes": 3,
               "leave_seconds": {f"{mode} {strategy}": {str(k): cells[(mode, strategy, k)]["leave_s"]
                                                       for k in sizes if (mode, strategy, k) in cells}
                                 for mode in args.modes for strategy in args.strategies if cells},
               "leave_moving_bins_seconds": {f"{mode} {strategy}": {
                   str(k): cells[(mode, strategy, k)]["moving_s"] for k in sizes if (mode, strategy, k) in cells}
                   for mode in args.modes for strategy in args.strategies if cells},
               "leave_drain_seconds": {f"{mode} {strategy}": {
                   str(k): cells[(mode, strategy, k)]["drain_s"] for k in sizes if (mode, strategy, k) in cells}
                   for mode in args.modes for strategy in args.strategies if cells},
               "latency_through_leave": {}}
    for mode, r in timeline.items():
        lat = r["latency"]
        summary["latency_through_leave"][mode] = {
            "keys": timeline_keys, "leave_s": r["phases"]["total_s"],
            **{f"{phase}_{q}_ms": lat[phase][q] for phase in ("before", "during", "after") for q in ("p50", "p99")},
            "during_p50_over_before_p50": ratio(lat["during"]["p50"], lat["before"]["p50"]),
            "during_p99_over_before_p99": ratio(lat["during"]["p99"], lat["before"]["p99"]),
            "after_p50_over_before_p50": ratio(lat["after"]["p50"], lat["before"]["p50"]),
            "after_p99_over_before_p99": ratio(lat["after"]["p99"], lat["before"]["p99"])}
        if mode in controls:
            cl = controls[mode]["latency"]
            summary["latency_through_leave"][mode].update({
                **{f"control_{phase}_{q}_ms": cl[phase][q] for phase in ("before", "during", "after")
                   for q in ("p50", "p99")},
                "during_p50_over_control_during_p50": ratio(lat["during"]["p50"], cl["during"]["p50"]),
                "during_p99_over_control_during_p99": ratio(lat["during"]["p99"], cl["during"]["p99"]),
                "after_p50_over_control_after_p50": ratio(lat["after"]["p50"], cl["after"]["p50"])})
    summary["failed_runs"] = failed
    summary["failed_checks"] = problems
    summary["total_seconds"] = round(time.perf_counter() - started, 1)
    png = os.path.splitext(args.json)[0] + ".png"
    plot(timeline, controls, cells, sizes, args, png)
    write_report(args.json, "scalein", summary,
                 {"sizes": [{"mode": m, "strategy": s, "keys": k, **c} for (m, s, k), c in cells.items()],
                  "size_runs": size_runs,
                  "timeline": {mode: {k: v for k, v in r.items() if k != "problems"} for mode, r in timeline.items()},
                  "timeline_controls": {mode: {k: v for k, v in r.items() if k != "problems"}
                                        for mode, r in controls.items()}},
                 quick=args.quick, modes=args.modes, strategies=args.strategies, png=png)
    if problems:
        print("FAILED CHECKS:\n  " + "\n  ".join(p.splitlines()[0] for p in problems))
        raise SystemExit(1)
    print(f"all checks passed ({summary['total_seconds']} s)")


if __name__ == "__main__":
    main()
