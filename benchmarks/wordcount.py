"""WordCount throughput: pytimely with 1 and 2 workers (processes and threads), a plain dict loop, and bytewax.

The job: synthetic lines of 10 words over a 10k-word vocabulary, at two sizes: 200k
lines (2M words) and 2M lines (20M words) (``--quick``: 50k and 500k); every worker
reads its own share of the lines, as in timely's WordCount, and counts per epoch (4
epochs), emitting each epoch's counts when the frontier passes it. Two forms of the
dataflow (``examples/wordcount.py``):

- ``pytimely`` (``--exchange``): timely's WordCount. Lines are split into words and every
  word is routed by value (``Exchange``) to the worker that counts it: with 2 workers
  half of all words cross between processes;
- ``pytimely-combine`` (``--combine``): each worker first counts its own words per
  epoch (``accumulate``, a ``Counter`` in C), and only the partial counts are exchanged
  and summed: one record per word, worker and epoch crosses (Naiad's partial
  aggregation), not one per occurrence.

``-w 2`` runs two forked worker processes (the default on a GIL build), ``-w 2
--worker-mode threads`` two threads of one process (one GIL: no faster than one
worker). bytewax 0.21.1 (when installed) runs ``flat_map`` + ``count_final`` over the
small size; the plain loop is ``for line: for word in line.split(): d[word] += 1``, and
``plain`` with 2 workers runs it in two forked processes over half the lines each (no
exchange, dicts merged at the end): the most two processes get from this machine's
cores, the ceiling for ``-w 2`` (``plain_2_forked_over_1``). Every run's counts are
checked against the plain loop's.

Timing: every system runs in a process of its own, twice (the best counts), and the
systems take turns, ``--repeat`` rounds (3): a ratio compares runs made minutes apart at
most, on a shared machine whose speed drifts. A run includes starting its workers
(forking and connecting them, for processes): ``startup_s`` is that cost alone (a run
over no lines), which the small size does not amortise (a run of 0.2 s) and the large
one does. Headlines, at the large size: ``pytimely_combine_2w_over_1w`` and
``pytimely_2w_over_1w``; ``wordcount.png`` plots words/s per system and workers.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter

from _common import ROOT, best_of, figure, parse_args, style, table, write_report
from tqdm import tqdm

sys.path.insert(0, os.path.join(ROOT, "examples"))


def lines_for(n):
    import wordcount
    return wordcount.synthetic_lines(n, 10, 10_000)


def plain(lines):
    counts: dict = {}
    for line in lines:
        for word in line.split():
            counts[word] = counts.get(word, 0) + 1
    return counts


def run_pytimely(lines, workers, mode="auto", combine=False):
    import timely
    import wordcount
    config = timely.Config(workers=workers, worker_mode=mode)
    totals = wordcount.merge(timely.execute(config, lambda w: wordcount.run(w, lines, 4, all_workers=True,
                                                                            exchange=True, combine=combine)))
    result: Counter = Counter()
    for counts in totals.values():
        result.update(counts)
    return result


def run_bytewax(lines, workers):
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, cluster_main, run_main
    out: list = []
    flow = Dataflow("wordcount")
    stream = op.input("lines", flow, TestingSource(lines, batch_size=1024))
    words = op.flat_map("split", stream, str.split)
    counted = op.count_final("count", words, lambda w: w)
    op.output("out", counted, TestingSink(out))
    if workers == 1:
        run_main(flow)
    else:
        cluster_main(flow, [], 0, worker_count_per_proc=workers)
    return dict(out)


def plain_forked(lines, workers):
    """The plain loop in ``workers`` forked processes, each over its share of the lines
    (``lines[i::workers]``), their dicts merged: what this machine's cores give a job
    that needs no exchange at all, the ceiling for pytimely's ``-w``."""
    import multiprocessing
    global _SHARED
    _SHARED = lines
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        parts = pool.starmap(_plain_share, [(i, workers) for i in range(workers)])
    total: Counter = Counter()
    for part in parts:
        total.update(part)
    return total


_SHARED: list = []


def _plain_share(i, workers):
    return plain(_SHARED[i::workers])


def child(system, workers, n):
    lines = lines_for(n)
    expected = plain(lines)
    fn = {"plain": lambda: plain(lines) if workers == 1 else plain_forked(lines, workers),
          "pytimely": lambda: run_pytimely(lines, workers),
          "pytimely-threads": lambda: run_pytimely(lines, workers, "threads"),
          "pytimely-combine": lambda: run_pytimely(lines, workers, combine=True),
          "bytewax": lambda: run_bytewax(lines, workers)}[system]
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
        if dict(result) != expected:
            raise SystemExit(f"{system} with {workers} workers counted wrong")
    print(json.dumps({"words_per_s": n * 10 / best, "seconds": best}))


def startup(workers, mode):
    """Seconds for ``execute`` over no lines: forking, connecting, building, shutting down."""
    def run():
        if run_pytimely([], workers, mode) != Counter():
            raise SystemExit("pytimely counted words in no lines")
    return best_of(run, 3)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    if len(sys.argv) > 1 and sys.argv[1] == "--startup":
        print(json.dumps({"startup_s": startup(int(sys.argv[2]), sys.argv[3])}))
        return
    args = parse_args("wordcount", __doc__.splitlines()[0],
                      lambda p: p.add_argument("--repeat", type=int, default=3, help="rounds of runs"))
    small, large = (50_000, 500_000) if args.quick else (200_000, 2_000_000)
    systems = [("plain", 1), ("plain", 2), ("pytimely", 1), ("pytimely", 2), ("pytimely-threads", 2),
               ("pytimely-combine", 1), ("pytimely-combine", 2)]
    with_bytewax = importlib.util.find_spec("bytewax") is not None
    if not with_bytewax:
        print("bytewax is not installed (pip install bytewax==0.21.1): comparing without it")
    runs = [(system, workers, n) for n in (small, large) for system, workers in systems]
    if with_bytewax:
        runs += [("bytewax", 1, small), ("bytewax", 2, small)]
    best: dict = {}
    with tqdm(total=len(runs) * args.repeat, desc="wordcount") as bar:
        for _ in range(args.repeat):
            for system, workers, n in runs:
                out = subprocess.run([sys.executable, __file__, "--child", system, str(workers), str(n)],
                                     capture_output=True, text=True, cwd=ROOT)
                if out.returncode != 0:
                    raise SystemExit(f"{system} x{workers} ({n} lines) failed:\n{out.stderr[-2000:]}")
                found = json.loads(out.stdout.strip().splitlines()[-1])
                if (system, workers, n) not in best or found["seconds"] < best[(system, workers, n)]["seconds"]:
                    best[(system, workers, n)] = found
                bar.update()
    results = [{"system": system, "workers": workers, "lines": n, **best[(system, workers, n)]}
               for system, workers, n in runs]
    starts = {}
    for workers, mode in ((1, "auto"), (2, "auto"), (2, "threads")):
        out = subprocess.run([sys.executable, __file__, "--startup", str(workers), mode],
                             capture_output=True, text=True, cwd=ROOT, check=True)
        starts[f"{workers}w_{mode}"] = json.loads(out.stdout.strip().splitlines()[-1])["startup_s"]
    rate = {(r["system"], r["workers"], r["lines"]): r["words_per_s"] for r in results}
    print(table([[r["system"], r["workers"], f"{r['lines']:,}", f"{r['seconds']:.3f}", f"{r['words_per_s']:,.0f}"]
                 for r in results], ["system", "workers", "lines", "seconds", "words/s"]))
    print(table([[k, f"{v:.3f}"] for k, v in starts.items()], ["pytimely workers", "startup s"]))
    summary = {f"{s.replace('-', '_')}_{w}w_words_per_s": v for (s, w, n), v in rate.items() if n == large}
    summary.update({f"{s.replace('-', '_')}_{w}w_words_per_s_{small // 1000}k_lines": v
                    for (s, w, n), v in rate.items() if n == small})
    for w in (1, 2):
        if ("bytewax", w, small) in rate:
            summary[f"pytimely_over_bytewax_{w}w"] = rate[("pytimely", w, small)] / rate[("bytewax", w, small)]
    for n, suffix in ((large, ""), (small, f"_{small // 1000}k_lines")):
        summary["pytimely_1w_over_plain" + suffix] = rate[("pytimely", 1, n)] / rate[("plain", 1, n)]
        summary["pytimely_2w_over_1w" + suffix] = rate[("pytimely", 2, n)] / rate[("pytimely", 1, n)]
        summary["pytimely_combine_2w_over_1w" + suffix] = (rate[("pytimely-combine", 2, n)]
                                                           / rate[("pytimely-combine", 1, n)])
        summary["pytimely_combine_1w_over_pytimely_1w" + suffix] = (rate[("pytimely-combine", 1, n)]
                                                                    / rate[("pytimely", 1, n)])
        summary["pytimely_2_threads_over_1w" + suffix] = rate[("pytimely-threads", 2, n)] / rate[("pytimely", 1, n)]
        summary["plain_2_forked_over_1" + suffix] = rate[("plain", 2, n)] / rate[("plain", 1, n)]
    summary["startup_s"] = starts
    write_report(args.json, "wordcount", summary, results, lines=[small, large], words=[small * 10, large * 10])
    plot(os.path.splitext(args.json)[0] + ".png", rate, large)


def plot(path, rate, lines):
    """Words/s at the large size, one group of bars per system, one bar per worker count."""
    import numpy as np
    names = ["plain", "pytimely", "pytimely-combine", "pytimely-threads"]
    labels = ["plain loop", "pytimely\n(every word exchanged)", "pytimely --combine\n(partial counts)",
              "pytimely threads"]
    x = np.arange(len(names))
    with figure(path, figsize=(8, 4.2)) as ax:
        for i, workers in enumerate((1, 2)):
            values = [rate.get((name, workers, lines), 0) / 1e6 for name in names]
            bars = ax.bar(x + (i - 0.5) * 0.38, values, 0.38, label=f"{workers} worker{'s' * (workers > 1)}")
            ax.bar_label(bars, labels=[f"{v:.1f}" if v else "" for v in values], fontsize=8)
        ax.set_xticks(x, labels, fontsize=8)
        style(ax, ylabel="million words/s", title=f"WordCount, {lines * 10 / 1e6:.0f}M words, best run",
              grid="major", legend=True)

if __name__ == "__main__":
    main()
