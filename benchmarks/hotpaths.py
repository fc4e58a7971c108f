"""Hot paths of the progress core and of Megaphone, Cython twin beside pure-Python twin.

Workloads:
- ChangeBatch: many updates over a small key space, then drain (compaction included);
- MutableAntichain.update_iter: a moving frontier of pair timestamps with churn;
- Tracker.propagate_all on (a) a chain of 1,000 operators, (b) an iterative loop whose
  feedback summary advances the inner coordinate, (c) a wide fan-out: one source feeding
  1,000 operators. Each round moves a capability forward by one time, so every round
  propagates a frontier change through the whole graph;
- Megaphone bins (``timely.megaphone.bins``): ``stable_hash64`` of 100,000 distinct short
  strings, and ``group_by_bin`` of 100,000 ``(word, 1)`` records into 256 bins (k=8),
  costed per 1,000 records.

``summary`` holds the Cython/pure-Python speedup per workload and the per-unit cost
(per round, update, batch or 1k records: the ``unit`` of each result).
"""
from __future__ import annotations

import random

from _common import best_of, parse_args, table, write_report

from timely.megaphone import bins
from timely.progress import Builder, Source, Target, twins


def change_batch_workload(cls, n):
    rng = random.Random(1)
    keys = [((rng.randrange(50), rng.randrange(4)), rng.randrange(20)) for _ in range(n)]

    def run():
        batch = cls()
        for i, k in enumerate(keys):
            batch.update(k, 1 if i & 1 else -1)
            if i % 1000 == 999:
                batch.drain()
        batch.drain()
    return run, n


def antichain_workload(cls, n):
    rng = random.Random(2)
    ups = []
    for i in range(n):
        t = (i // 8 + rng.randrange(3), rng.randrange(6))
        ups.append((t, 1))
        ups.append((t, -1)) if i > 4 else None
    pairs = [ups[i:i + 4] for i in range(0, len(ups), 4)]

    def run():
        m = cls()
        for batch in pairs:
            m.update_iter(batch)
    return run, len(pairs)


def chain_graph(length):
    b = Builder(minimum=0)
    b.add_node(0, 1, 1, [[[]]])
    for i in range(1, length + 1):
        b.add_node(i, 1, 1, [[[0]]])
    b.add_edge(Source(0, 0), Target(1, 0))
    for i in range(1, length):
        b.add_edge(Source(i, 0), Target(i + 1, 0))
    b.add_edge(Source(length, 0), Target(0, 0))
    return b, Source(1, 0)


def loop_graph(length):
    """An iterative scope: ingress -> length operators -> feedback (0, 1) -> back."""
    b = Builder(minimum=(0, 0))
    b.add_node(0, 1, 1, [[[]]])
    b.add_node(1, 2, 1, [[[(0, 0)]], [[(0, 0)]]])          # the loop head: concat
    for i in range(2, length + 1):
        b.add_node(i, 1, 1, [[[(0, 0)]]])
    fb = length + 1
    b.add_node(fb, 1, 1, [[[(0, 1)]]])                       # feedback
    b.add_edge(Source(0, 0), Target(1, 0))
    for i in range(1, length):
        b.add_edge(Source(i, 0), Target(i + 1, 0))
    b.add_edge(Source(length, 0), Target(fb, 0))
    b.add_edge(Source(fb, 0), Target(1, 1))
    b.add_edge(Source(length, 0), Target(0, 0))
    return b, Source(1, 0)


def fanout_graph(width):
    b = Builder(minimum=0)
    b.add_node(0, width, 1, [[[]] for _ in range(width)])
    b.add_node(1, 1, 1, [[[0]]])
    b.add_edge(Source(0, 0), Target(1, 0))
    for i in range(2, width + 2):
        b.add_node(i, 1, 1, [[[0]]])
        b.add_edge(Source(1, 0), Target(i, 0))
        b.add_edge(Source(i, 0), Target(0, i - 2))
    return b, Source(1, 0)


def tracker_workload(cls, graph, rounds, pair):
    """Rounds of propagation on a tracker built beforehand: building (summarize_outputs)
    is not a hot path and stays out of the timed region."""
    builder, source = graph

    def time(i):
        return (i, 0) if pair else i

    tracker = builder.build(tracker_class=cls)
    tracker.update_source(source, time(0), 1)
    tracker.propagate_all()
    tracker.pushed_changes().drain()
    done = [0]

    def run():
        base = done[0]
        done[0] += rounds
        for i in range(base, base + rounds):
            tracker.update_source(source, time(i + 1), 1)
            tracker.update_source(source, time(i), -1)
            tracker.propagate_all()
            tracker.pushed_changes().drain()
            for out in tracker.output_changes:
                out.drain()
    return run, rounds


def bins_twins(name):
    """Both twins of ``timely.megaphone.bins.<name>`` (``"stable_hash64"``, from
    ``timely.hashing``, or ``"group_by_bin"``); the ``"cython"`` entry is missing when
    it is not built."""
    found = {"python": getattr(bins, f"py_{name}")}
    try:
        if name == "stable_hash64":
            from timely import _chash as compiled
        else:
            from timely.megaphone import _cbins as compiled
        found["cython"] = getattr(compiled, name)
    except ImportError:
        pass
    return found


def words(n):
    """n distinct short strings (6 to 11 characters)."""
    return [f"w{i:05d}{'xyz'[:i % 4]}" for i in range(n)]


def hash_workload(fn, n):
    keys = words(n)

    def run():
        for _ in map(fn, keys):
            pass
    return run, n / 1000


def group_workload(fn, n, k=8):
    records = [(w, 1) for w in words(n)]

    def run():
        fn(records, None, k)
    return run, n / 1000


def main():
    args = parse_args("hotpaths", __doc__.splitlines()[0])
    q = args.quick
    size = 200 if q else 1000
    rounds = 5 if q else 20
    records = 10_000 if q else 100_000
    workloads = [
        ("ChangeBatch update+drain", "ChangeBatch", lambda c: change_batch_workload(c, 20_000 if q else 200_000), "update"),
        ("MutableAntichain update_iter", "MutableAntichain", lambda c: antichain_workload(c, 5_000 if q else 50_000), "batch"),
        (f"Tracker chain x{size}", "Tracker", lambda c: tracker_workload(c, chain_graph(size), rounds, False), "round"),
        (f"Tracker loop x{size}", "Tracker", lambda c: tracker_workload(c, loop_graph(size), rounds, True), "round"),
        (f"Tracker fan-out x{size}", "Tracker", lambda c: tracker_workload(c, fanout_graph(size), rounds, False), "round"),
        ("bins.stable_hash64 short str", "bins.stable_hash64", lambda f: hash_workload(f, records), "1k records"),
        ("bins.group_by_bin k=8", "bins.group_by_bin", lambda f: group_workload(f, records, 8), "1k records"),
    ]
    rows, results, summary = [], [], {}
    for label, family, make, unit in workloads:
        found = bins_twins(family[len("bins."):]) if family.startswith("bins.") else twins(family)
        per = {}
        for impl in ("python", "cython"):
            if impl not in found:
                continue
            run, count = make(found[impl])
            seconds = best_of(run, 3)
            per[impl] = seconds / count
        speedup = per["python"] / per["cython"] if "cython" in per else None
        rows.append([label, f"{per['python'] * 1e6:.2f}", f"{per.get('cython', float('nan')) * 1e6:.2f}",
                     f"{speedup:.1f}x" if speedup else "n/a", unit])
        results.append({"workload": label, "unit": unit, "us_per_unit": {k: v * 1e6 for k, v in per.items()},
                        "speedup": speedup})
        summary[label] = {"speedup": speedup, "cython_us": per.get("cython", 0) * 1e6,
                          "python_us": per["python"] * 1e6}
    print(table(rows, ["workload", "python µs", "cython µs", "speedup", "per"]))
    write_report(args.json, "hotpaths", summary, results, quick=q)


if __name__ == "__main__":
    main()
