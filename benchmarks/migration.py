"""Megaphone migration: latency while bins move to joined processes, by strategy (seed 003 §5).

Three measurements in one run, each strategy (``--migration all-at-once|fluid|batched``)
in its own clusters (``_migration_job.py migration`` / ``stateful_steady``):

1. Timeline. Seed 003 §5's WordCount over ``state_machine`` (``running_counts``, 256
   bins, the cluster's rebalancer as control): 2 processes x 2 workers, worker 0 injects
   100 lines/s of 100 words over 1,000 keys for 40 s (``--quick``: 8 s); a process of 2
   workers joins at 1/3 and another at 2/3, and the rebalancer moves bins to each.
   Per-epoch latency (injection on worker 0 to its probe passing the epoch) over time,
   with the joins (process spawned) and the migrations marked. A migration starts when
   the rebalancer issues its first step (its log record on worker 0) and ends when
   worker 0's probe passes the time of the configuration that balances the table (so
   every bin shipped has arrived and been applied). Phases per join: before it, joining
   (spawn to the first step), migration (every epoch in flight between its start and
   end), and after the last.
2. State size. 2 processes x 1 worker, worker 0 loads N distinct keys (batches of
   100,000 per epoch), then injects 100 lines/s of 100 words over those keys; after 3 s
   (``--quick``: 1 s) a third process joins and about a third of the bins (so of the
   state) moves to it. N = 10k, 100k, 1M (``--quick``: 1k, 10k). Per strategy: migration
   duration, steps, keys shipped, and p50/p99/max latency of the epochs in flight during
   the migration. With one joining worker the batched strategy (no worker in two moves
   of one step) moves one bin per step, as fluid does.
3. Steady-state cost. 2 processes x 1 worker (separate processes, so records cross a
   socket), three dataflows in the same workers: ``exchange`` (``pairs`` per batch, a
   plain ``Exchange`` by word, the ``add`` fold into one dict per worker at each time
   once the frontier passed it) and ``state_machine`` with 256 and 4,096 bins (the same
   ``pairs`` and ``add``, plus F/S, bins, rebalancer and control stream). Both workers
   inject 10 lines of 100 words over 10,000 keys per epoch, closed loop (next epoch when
   the probe passed the last); rounds of 50 epochs per variant (``--quick``: 10), the
   same lines for every variant, in rotating order, after a warm-up round. Cost ratio:
   the median over rounds of (state_machine block time / exchange block time).

Every run is checked: each process exits 0; the final states of all workers add up to
exactly what worker 0 (part 3: every worker) injected (digest of keys, counts); every
bin is held by exactly one worker, as the final routing table (the same on every worker,
balanced over all workers) says; every join was followed by a migration that ended. A
failed check is printed, listed in the summary's ``failed_checks``, and makes the
program exit 1 after writing the report.
"""
from __future__ import annotations

import json
import os
import re
import statistics
import tempfile
import time

import numpy as np
from _common import ROOT, figure, parse_args, percentiles, style, table, write_report
from tqdm import tqdm

from timely.launch import LocalCluster

JOB = os.path.join(ROOT, "benchmarks", "_migration_job.py")
STRATEGIES = ("all-at-once", "fluid", "batched")
STEADY = re.compile(r"^steady at ([0-9.]+)")
FINAL = re.compile(r"^final (\{.*\})$")
INJECTED = re.compile(r"^injected (\{.*\})$")


def ms(x):
    return "-" if x is None else f"{x:.1f}"


def nan(x, scale=1.0):
    return float("nan") if x is None else x * scale


def failure(cluster, what):
    raise SystemExit(f"{what}:\n" + "\n".join(cluster.interleaved()[-60:]))


def wait_line(cluster, proc, pattern, timeout):
    deadline = time.monotonic() + timeout
    while True:
        for _, line in proc.lines:
            m = pattern.search(line)
            if m:
                return m
        if proc.popen.poll() is not None or time.monotonic() > deadline:
            failure(cluster, f"{proc.label} never printed {pattern.pattern!r}")
        time.sleep(0.01)


def lines_matching(cluster, pattern):
    return [json.loads(m.group(1)) for proc in cluster.processes for _, line in proc.lines
            if (m := pattern.search(line))]


def check_states(finals, expected, bins, workers, what):
    """The problems with a run's final states (an empty list if none); ``finals``: the
    ``final`` reports of one operator, ``expected``: the digest of what was injected."""
    problems = []
    if sorted(f["worker"] for f in finals) != list(range(workers)):
        problems.append(f"{what}: final states from workers {sorted(f['worker'] for f in finals)}, "
                        f"expected 0..{workers - 1}")
    total = [sum(f["digest"][i] for f in finals) for i in range(4)]
    if total != expected:
        problems.append(f"{what}: final states add up to {total} (keys, sum, weighted, squares), "
                        f"injected {expected}")
    if finals and "table" in finals[0]:
        tables = {tuple(f["table"]) for f in finals}
        if len(tables) != 1:
            problems.append(f"{what}: {len(tables)} different final routing tables")
        held = sorted(b for f in finals for b in f["bins"])
        if held != list(range(bins)):
            problems.append(f"{what}: bins held {len(held)} ({len(set(held))} distinct), expected {bins}")
        final = tables.pop()
        for f in finals:
            if f["bins"] != [b for b, w in enumerate(final) if w == f["worker"]]:
                problems.append(f"{what}: worker {f['worker']} holds bins its table does not give it")
        load = [final.count(w) for w in range(workers)]
        if max(load) - min(load) > 1:
            problems.append(f"{what}: final table not balanced over {workers} workers: {load}")
    return problems


def run_migration(strategy, *, processes, workers, joins, join_at, job_args, timeout):
    """One cluster: ``processes`` x ``workers``, ``joins`` processes join at ``join_at(k,
    steady)`` (wall clock). Returns worker 0's results, with join spawn times, the keys
    shipped, and ``problems`` (failed checks)."""
    with tempfile.TemporaryDirectory() as tmp:
        output = os.path.join(tmp, "migration.json")
        extra = ["--migration", strategy, "--joins", str(joins), "--output", output, *job_args]
        with LocalCluster([JOB, "migration"], slots=processes + joins, workers=workers, extra=extra) as cluster:
            p0 = cluster.start(processes)[0]
            steady = float(wait_line(cluster, p0, STEADY, timeout).group(1))
            for k in range(joins):
                time.sleep(max(0.0, join_at(k, steady) - time.time()))
                cluster.join(original=processes, bootstrap=0)
            codes = cluster.wait(timeout)
            if any(codes):
                failure(cluster, f"{strategy}: exit codes {codes}")
            with open(output) as f:
                result = json.load(f)
            finals = lines_matching(cluster, FINAL)
    result["strategy"] = strategy
    result["join_spawn"] = [t - result["start"] for t in cluster.join_walltimes]
    total_workers = (processes + joins) * workers
    result["workers"] = total_workers
    result["keys_shipped"] = sum(k for f in finals for _, _, k in f["shipped"])
    result["bins_shipped"] = sum(b for f in finals for _, b, _ in f["shipped"])
    problems = check_states(finals, result["expected"], int(job_args[job_args.index("--bins") + 1]),
                            total_workers, f"{strategy}")
    if len(result["joins"]) != joins:
        problems.append(f"{strategy}: worker 0 saw {len(result['joins'])} joins, expected {joins}")
    for k, j in enumerate(result["joins"]):
        if j["end"] is None or j["start"] is None:
            problems.append(f"{strategy}: migration {k + 1} did not end (steps {j['steps']})")
    if result["timed_out"]:
        problems.append(f"{strategy}: the job hit its time limit")
    result["problems"] = problems
    return result


def in_flight(epochs, lo, hi):
    """Latencies (ms) of the epochs in flight at some moment of [lo, hi]."""
    return [lat * 1e3 for _, t, lat in epochs if t <= hi and t + lat >= lo]


def migration_window(join):
    return join["start"], join["end"]


def timeline_phases(result):
    """Phases of part 1's run: before each join, joining, migration, after the last."""
    epochs = result["epochs"]
    label = [None] * len(epochs)
    names = []
    start = 0.0
    for k, (spawn, join) in enumerate(zip(result["join_spawn"], result["joins"])):
        lo, hi = migration_window(join)
        hi = hi if hi is not None else float("inf")
        lo = lo if lo is not None else hi
        before, joining, migrating = f"before join {k + 1}", f"join {k + 1}", f"migration {k + 1}"
        names += [before, joining, migrating]
        for i, (_, t, lat) in enumerate(epochs):
            if label[i] is not None:
                continue
            if t <= hi and t + lat >= lo:
                label[i] = migrating
            elif start <= t < spawn:
                label[i] = before
            elif spawn <= t < lo:
                label[i] = joining
        start = hi
    names.append("after")
    for i, (_, t, _) in enumerate(epochs):
        if label[i] is None and t >= start:
            label[i] = "after"
    return {name: percentiles([lat * 1e3 for (_, _, lat), l in zip(epochs, label) if l == name])
            for name in names}


def plot_timeline(results, path):
    title = "WordCount over state_machine, 2x2 workers, +2 workers at 1/3 and 2/3 (Megaphone migration)"
    with figure(path, len(results), 1, figsize=(10, 2.8 * len(results)), sharex=True, squeeze=False,
                suptitle=title, suptitle_size=10) as axes:
        for ax, r in zip(axes[:, 0], results):
            t = np.array([e[1] for e in r["epochs"]])
            lat = np.array([e[2] * 1e3 for e in r["epochs"]])
            ax.scatter(t, lat, s=3, alpha=0.35, color="tab:gray", label="epoch latency")
            xs, ys = [], []
            for w in np.arange(0, (t.max() if t.size else 0) + 0.5, 0.5):
                sel = lat[(t >= w) & (t < w + 0.5)]
                if sel.size:
                    xs.append(w + 0.25)
                    ys.append(sel.max())
            ax.plot(xs, ys, color="tab:red", linewidth=1, label="max per 0.5 s")
            for k, (spawn, j) in enumerate(zip(r["join_spawn"], r["joins"])):
                ax.axvline(spawn, color="tab:green", linestyle="--", label="process spawned" if k == 0 else None)
                if j["start"] is not None:
                    ax.axvspan(j["start"], j["end"] if j["end"] is not None else t.max(), color="tab:orange",
                               alpha=0.25, label="migration" if k == 0 else None)
            style(ax, ylog=True, ylabel="latency (ms)", title=f"{r['strategy']}", title_size=10,
                  legend={"loc": "upper left", "fontsize": 7})
        axes[-1, 0].set_xlabel("time since steady start (s)")


def plot_sizes(sizes, keys, path):
    title = "Migration of ~1/3 of the state to a joined process (2x1 + 1 workers, 256 bins)"
    with figure(path, 1, 2, figsize=(11, 4.5), suptitle=title, suptitle_size=10) as (a1, a2):
        for s, marker in zip(STRATEGIES, "os^"):
            runs = [sizes[s][n] for n in keys]
            a1.plot(keys, [nan(r["duration_s"], 1e3) for r in runs], marker=marker, fillstyle="none", label=s)
            line, = a2.plot(keys, [nan(r["max_ms"]) for r in runs], marker=marker, fillstyle="none",
                            label=f"{s} max")
            a2.plot(keys, [nan(r["p99_ms"]) for r in runs], marker="x", linestyle=":", color=line.get_color(),
                    label=f"{s} p99")
        for ax, ylabel in ((a1, "migration duration (ms)"), (a2, "epoch latency during migration (ms)")):
            style(ax, xlog=True, ylog=True, xlabel="keys in the state", ylabel=ylabel, grid="both",
                  legend={"fontsize": 8})


def part_timeline(args, bar, problems):
    duration = 8.0 if args.quick else 40.0
    job = ["--duration", str(duration), "--rate", "100", "--words", "100", "--keys", "1000",
           "--bins", "256", "--timeout", "15", "--max-seconds", str(duration + 60)]
    results = []
    for s in STRATEGIES:
        bar.set_description(f"timeline {s}")
        r = run_migration(s, processes=2, workers=2, joins=2, job_args=job, timeout=duration + 120,
                          join_at=lambda k, steady: steady + duration * (k + 1) / 3)
        r["phases"] = timeline_phases(r)
        problems += r["problems"]
        results.append(r)
        bar.update()
    rows = []
    for r in results:
        for name, p in r["phases"].items():
            k = name.split()[-1]
            dur = ""
            if name.startswith("migration"):
                j = r["joins"][int(k) - 1]
                dur = f"{(j['end'] - j['start']) * 1e3:.0f}" if j["end"] is not None and j["start"] is not None else "?"
            rows.append([r["strategy"], name, p["n"], ms(p["p50"]), ms(p["p99"]), ms(p["max"]), dur])
    tqdm.write("\n1. timeline: 2x2 workers, +2 at 1/3 and 2/3 (epochs by phase; migration = in flight during it)")
    tqdm.write(table(rows, ["strategy", "phase", "epochs", "p50 ms", "p99 ms", "max ms", "duration ms"]))
    return results, duration


def part_sizes(args, bar, problems):
    keys = [1000, 10_000] if args.quick else [10_000, 100_000, 1_000_000]
    baseline = 1.0 if args.quick else 3.0
    sizes = {s: {} for s in STRATEGIES}
    raw = []
    for n in keys:
        for s in STRATEGIES:
            bar.set_description(f"state {n:,} keys {s}")
            job = ["--load", str(n), "--keys", str(n), "--rate", "100", "--words", "100", "--bins", "256",
                   "--tail", "0.5" if args.quick else "2", "--timeout", "60", "--max-seconds", "600"]
            r = run_migration(s, processes=2, workers=1, joins=1, job_args=job, timeout=900,
                              join_at=lambda k, steady: steady + baseline)
            problems += r["problems"]
            j = r["joins"][0] if r["joins"] else {"start": None, "end": None, "steps": 0, "bins_moved": 0}
            ok = j["start"] is not None and j["end"] is not None
            during = percentiles(in_flight(r["epochs"], j["start"], j["end"])) if ok else percentiles([])
            before = percentiles([lat * 1e3 for _, t, lat in r["epochs"] if t < r["join_spawn"][0]])
            sizes[s][n] = {"keys": n, "duration_s": (j["end"] - j["start"]) if ok else None,
                           "steps": j["steps"], "bins_moved": j["bins_moved"],
                           "keys_shipped": r["keys_shipped"], "load_s": r["load_seconds"],
                           "p50_ms": during["p50"], "p99_ms": during["p99"], "max_ms": during["max"],
                           "epochs_during": during["n"], "before_p50_ms": before["p50"],
                           "before_max_ms": before["max"]}
            raw.append({"strategy": s, "keys": n, "epochs": r["epochs"], "joins": r["joins"],
                        "join_spawn": r["join_spawn"]})
            bar.update()
    rows = [[s, f"{n:,}", v["steps"], v["bins_moved"], f"{v['keys_shipped']:,}",
             "?" if v["duration_s"] is None else f"{v['duration_s'] * 1e3:.0f}", v["epochs_during"],
             ms(v["p50_ms"]), ms(v["p99_ms"]), ms(v["max_ms"]), ms(v["before_p50_ms"])]
            for n in keys for s in STRATEGIES for v in [sizes[s][n]]]
    tqdm.write("\n2. migration vs state size: 2x1 workers + 1 joining (latency of epochs in flight during the migration)")
    tqdm.write(table(rows, ["strategy", "keys", "steps", "bins", "keys shipped", "duration ms", "epochs",
                       "p50 ms", "p99 ms", "max ms", "before p50 ms"]))
    return sizes, keys, raw


def part_steady(args, bar, problems):
    bar.set_description("steady state")
    bins = [256, 4096]
    job = ["--bins", ",".join(map(str, bins)), "--blocks", "2" if args.quick else "10",
           "--epochs", "10" if args.quick else "50", "--lines", "10", "--words", "100", "--keys", "10000",
           "--timeout", "30"]
    with tempfile.TemporaryDirectory() as tmp:
        output = os.path.join(tmp, "steady.json")
        with LocalCluster([JOB, "stateful_steady"], slots=2, workers=1, extra=[*job, "--output", output]) as cluster:
            cluster.start(2)
            codes = cluster.wait(900)
            if any(codes):
                failure(cluster, f"steady: exit codes {codes}")
            with open(output) as f:
                doc = json.load(f)
            finals = lines_matching(cluster, FINAL)
            injected: dict = {}
            for counts in lines_matching(cluster, INJECTED):
                for k, n in counts.items():
                    injected[k] = injected.get(k, 0) + n
    from _migration_job import digest
    expected = digest(injected)
    for v, b in zip(doc["variants"], [None] + bins):
        problems += check_states([f for f in finals if f["label"] == v], expected, b, doc["workers"],
                                 f"steady {v}")
    bar.update()
    words = doc["words_per_epoch"]
    blocks = doc["blocks"]
    out = {}
    for v in doc["variants"]:
        seconds = sum(b["seconds"] for b in blocks[v])
        epochs = sum(len(b["latencies"]) for b in blocks[v])
        lat = percentiles([x * 1e3 for b in blocks[v] for x in b["latencies"]])
        ratio = None
        if v != "exchange":
            ratio = statistics.median(b["seconds"] / e["seconds"] for b, e in zip(blocks[v], blocks["exchange"]))
        out[v] = {"words_per_s": words * epochs / seconds, "epoch_p50_ms": lat["p50"],
                  "epoch_p99_ms": lat["p99"], "cost_ratio": ratio}
    rows = [[v, f"{r['words_per_s']:,.0f}", f"{r['epoch_p50_ms']:.2f}", f"{r['epoch_p99_ms']:.2f}",
             "-" if r["cost_ratio"] is None else f"{r['cost_ratio']:.3f}"] for v, r in out.items()]
    tqdm.write(f"\n3. steady state: 2 processes x 1 worker, both injecting {words // 2:,} words/epoch, closed loop, "
          f"{len(blocks['exchange'])} rounds x {len(blocks['exchange'][0]['latencies'])} epochs per variant")
    tqdm.write(table(rows, ["variant", "words/s", "epoch p50 ms", "epoch p99 ms", "cost vs exchange"]))
    return out, doc


def main():
    args = parse_args("migration", __doc__.splitlines()[0])
    started = time.perf_counter()
    problems: list[str] = []
    n_sizes = 2 if args.quick else 3
    with tqdm(total=len(STRATEGIES) * (1 + n_sizes) + 1, unit="run") as bar:
        timeline, duration = part_timeline(args, bar, problems)
        sizes, keys, sizes_raw = part_sizes(args, bar, problems)
        steady, steady_doc = part_steady(args, bar, problems)
    top = keys[-1]
    at_top = {s: sizes[s][top] for s in STRATEGIES}
    aao_max = at_top["all-at-once"]["max_ms"]

    def over_aao(s):
        return at_top[s]["max_ms"] / aao_max if aao_max and at_top[s]["max_ms"] else None
    summary = {
        "migration_at_max_keys": {"keys": top, **{s: {k: at_top[s][k] for k in (
            "duration_s", "p50_ms", "p99_ms", "max_ms", "steps", "bins_moved", "keys_shipped")}
            for s in STRATEGIES}},
        "batched_max_over_all_at_once_max": over_aao("batched"),
        "fluid_max_over_all_at_once_max": over_aao("fluid"),
        "timeline": {r["strategy"]: {"phases": r["phases"], "migration_s": [
            None if j["end"] is None or j["start"] is None else j["end"] - j["start"] for j in r["joins"]]}
            for r in timeline},
        "steady_cost_ratio_256": steady["megaphone-256"]["cost_ratio"],
        "steady_cost_ratio_4096": steady["megaphone-4096"]["cost_ratio"],
        "steady_words_per_s": {v: r["words_per_s"] for v, r in steady.items()},
        "failed_checks": problems,
        "total_seconds": round(time.perf_counter() - started, 1),
    }
    ratio = summary["batched_max_over_all_at_once_max"]
    print(f"\nbatched max / all-at-once max latency during migration at {top:,} keys: "
          f"{'-' if ratio is None else f'{ratio:.2f}'} (the paper: batched about 10x below all-at-once)")
    print(f"steady cost state_machine / exchange: {summary['steady_cost_ratio_256']:.3f} at 256 bins, "
          f"{summary['steady_cost_ratio_4096']:.3f} at 4096 bins")
    base = os.path.splitext(args.json)[0]
    os.makedirs(os.path.dirname(os.path.abspath(base)), exist_ok=True)
    plot_timeline(timeline, base + "_timeline.png")
    plot_sizes(sizes, keys, base + "_sizes.png")
    write_report(args.json, "migration", summary,
                 {"timeline": [{k: r[k] for k in ("strategy", "epochs", "joins", "join_spawn", "phases",
                                                  "keys_shipped", "bins_shipped")} for r in timeline],
                  "sizes": {s: {str(n): v for n, v in sizes[s].items()} for s in STRATEGIES},
                  "sizes_runs": sizes_raw, "steady": steady, "steady_blocks": steady_doc["blocks"]},
                 duration=duration, quick=args.quick,
                 png=[base + "_timeline.png", base + "_sizes.png"])
    if problems:
        print("FAILED CHECKS:\n  " + "\n  ".join(problems))
        raise SystemExit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
