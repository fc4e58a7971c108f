"""What a used heap costs the source's hot path: decoding clicks in a fresh process against one whose heap is fragmented.

The pipeline's source decodes each Kafka value (100 clicks, JSON) into tuples
(``json_projection``, as ``kafka_source(fields=...)`` does) and the dataflow folds them
per page (``epoch_pages``). Each round runs that on ``--values`` values in a new
process, in one of two heaps:

- fresh: nothing allocated before; pymalloc hands out new arenas, in address order;
- fragmented: ``--junk`` small tuples allocated first, shuffled, and every other one
  freed: the freed slots are scattered over the heap, as in a process that has run a
  while (the objects still alive stay alive while it decodes, frozen out of the
  collector's sight, ``gc.freeze``, so that collections walk the same objects either way).

An unbounded Kafka read of a large backlog allocates mostly from fresh arenas, since it
frees nothing until its epochs complete; a bounded read recycles its memory epoch
after epoch. This shows what that alone costs. The rounds alternate, ``--reps`` of each.

Summary: seconds per million clicks, best and median of each heap, and
fragmented/fresh.
"""
from __future__ import annotations

import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time

from _common import ROOT, conclude, parse_args, table, write_report

sys.path.insert(0, os.path.join(ROOT, "examples", "pipeline"))

CLICKS_PER_VALUE = 100


def child(heap: str, values: int, junk: int) -> float:
    """Seconds to decode and fold ``values`` values in this process, in ``heap``."""
    import orjson

    from dataflow import epoch_pages
    from timely.connectors.kafka.projection import json_projection
    keep = None
    if heap == "fragmented":
        keep = [(i, i + 1) for i in range(junk)]
        random.Random(1).shuffle(keep)
        del keep[::2]
    # the objects alive so far are out of the collector's sight: what differs is where
    # new objects land, not what a collection walks
    gc.freeze()
    decode = json_projection(("page", "category", "user"), lambda vs: [None] * len(vs))
    data = [orjson.dumps([{"user": (i * 7 + j) % 2000, "page": f"p{(i + j) % 40}", "category": f"c{i % 5}",
                           "ts": j} for i in range(CLICKS_PER_VALUE)]) for j in range(values)]
    started = time.perf_counter()
    live: list = []
    for k in range(0, values, 50):          # a step's read, folded; a few steps stay alive
        pages = None
        for rows in decode(data[k:k + 50]):
            pages = epoch_pages(pages, rows)
        live.append(pages)
        if len(live) > 8:
            live.pop(0)
    seconds = time.perf_counter() - started
    del keep
    return seconds


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
        return

    def extra(parser):
        parser.add_argument("--values", type=int, default=None, help="values decoded per round (20,000; --quick 3,000)")
        parser.add_argument("--junk", type=int, default=3_000_000, help="tuples allocated to fragment the heap")
        parser.add_argument("--reps", type=int, default=None, help="rounds of each heap (5; --quick 2)")
    args = parse_args("heap_locality", __doc__.splitlines()[0], extra)
    values = args.values or (3_000 if args.quick else 20_000)
    reps = args.reps or (2 if args.quick else 5)
    started = time.monotonic()
    runs: dict[str, list[float]] = {"fresh": [], "fragmented": []}
    for rep in range(reps):
        for heap in (("fresh", "fragmented") if rep % 2 == 0 else ("fragmented", "fresh")):
            out = subprocess.run([sys.executable, __file__, "--child", heap, str(values), str(args.junk)],
                                 capture_output=True, text=True, check=True)
            seconds = json.loads(out.stdout.strip().splitlines()[-1])
            runs[heap].append(seconds / (values * CLICKS_PER_VALUE) * 1e6)
            print(f"rep {rep} {heap:>10}: {runs[heap][-1]:.3f} s per million clicks", flush=True)
    summary = {"values": values, "clicks_per_value": CLICKS_PER_VALUE, "junk_tuples": args.junk,
               **{f"s_per_million_{h}": {"best": min(r), "median": statistics.median(r)} for h, r in runs.items()},
               "fragmented_over_fresh": {
                   "best": min(runs["fragmented"]) / min(runs["fresh"]),
                   "median": statistics.median(runs["fragmented"]) / statistics.median(runs["fresh"])}}
    print(table([[h, f"{min(r):.3f}", f"{statistics.median(r):.3f}"] for h, r in runs.items()],
                ["heap", "best s per million clicks", "median"]))
    print(f"fragmented/fresh: {summary['fragmented_over_fresh']['median']:.2f} (median)")
    write_report(args.json, "heap_locality", summary, runs)
    conclude([], round(time.monotonic() - started, 1))


if __name__ == "__main__":
    main()
