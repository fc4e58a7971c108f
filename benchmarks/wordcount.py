"""WordCount throughput: pytimely with 1 and 2 workers (processes and threads), a plain dict loop, and bytewax.

The job: 200k synthetic lines of 10 words over a 10k-word vocabulary (``--quick``:
50k lines); split, route words by value, count. pytimely counts per epoch (4 epochs)
and emits each epoch's counts when the frontier passes it; every worker reads its own
share of the lines, as in timely's WordCount. ``-w 2`` runs two forked worker processes
(the default on a GIL build), ``-w 2 --worker-mode threads`` two threads of one process
(one GIL: no faster than one worker). bytewax 0.21.1 (when installed) runs ``flat_map``
+ ``count_final`` over the same lines; the plain loop is ``for line: for word in
line.split(): d[word] += 1``. Every run's counts are checked against the plain loop's.
Each number is the best of 3 runs, in one process per system; a run includes starting
its workers (forking and connecting them, for processes).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections import Counter

from _common import ROOT, parse_args, table, write_report

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


def run_pytimely(lines, workers, mode="auto"):
    import timely
    import wordcount
    config = timely.Config(workers=workers, worker_mode=mode)
    totals = wordcount.merge(timely.execute(config, lambda w: wordcount.run(w, lines, 4, all_workers=True,
                                                                            exchange=True)))
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


def child(system, workers, n):
    lines = lines_for(n)
    expected = plain(lines)
    fn = {"plain": lambda: plain(lines), "pytimely": lambda: run_pytimely(lines, workers),
          "pytimely-threads": lambda: run_pytimely(lines, workers, "threads"),
          "bytewax": lambda: run_bytewax(lines, workers)}[system]
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
        if dict(result) != expected:
            raise SystemExit(f"{system} with {workers} workers counted wrong")
    print(json.dumps({"words_per_s": n * 10 / best, "seconds": best}))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    args = parse_args("wordcount", __doc__.splitlines()[0])
    n = 50_000 if args.quick else 200_000
    systems = [("plain", 1), ("pytimely", 1), ("pytimely", 2), ("pytimely-threads", 2)]
    if importlib.util.find_spec("bytewax") is not None:
        systems += [("bytewax", 1), ("bytewax", 2)]
    else:
        print("bytewax is not installed (pip install bytewax==0.21.1): comparing without it")
    results = []
    for system, workers in systems:
        out = subprocess.run([sys.executable, __file__, "--child", system, str(workers), str(n)],
                             capture_output=True, text=True, cwd=ROOT)
        if out.returncode != 0:
            raise SystemExit(f"{system} x{workers} failed:\n{out.stderr[-2000:]}")
        found = json.loads(out.stdout.strip().splitlines()[-1])
        results.append({"system": system, "workers": workers, **found})
    rate = {(r["system"], r["workers"]): r["words_per_s"] for r in results}
    print(table([[r["system"], r["workers"], f"{r['words_per_s']:,.0f}"] for r in results],
                ["system", "workers", "words/s"]))
    summary = {f"{s.replace('-', '_')}_{w}w_words_per_s": v for (s, w), v in rate.items()}
    for w in (1, 2):
        if ("bytewax", w) in rate:
            summary[f"pytimely_over_bytewax_{w}w"] = rate[("pytimely", w)] / rate[("bytewax", w)]
    summary["pytimely_1w_over_plain"] = rate[("pytimely", 1)] / rate[("plain", 1)]
    summary["pytimely_2w_over_1w"] = rate[("pytimely", 2)] / rate[("pytimely", 1)]
    summary["pytimely_2_threads_over_1w"] = rate[("pytimely-threads", 2)] / rate[("pytimely", 1)]
    write_report(args.json, "wordcount", summary, results, lines=n, words=n * 10)


if __name__ == "__main__":
    main()
