"""The experiment seed 003 §5 wished it had run: a saturated process, a join, latency falls.

One process (1 worker) runs WordCount over ``state_machine`` whose fold also does
``--work`` steps of per-key work (``_migration_job.heavy_add``: the stateful operator,
not the routing, is the bottleneck, as with an expensive per-key model update). Input is
due at a fixed rate the process cannot keep up with, so epochs queue and latency
(measured from when each epoch was due: an open loop, no coordinated omission) grows. A
second process joins; the rebalancer moves half of the bins (their state) to it, the
backlog drains, and latency falls. Final states are checked against what was injected.

Headline: p50 latency of the epochs injected in the last third of the run over the p50
of those injected in the second before the join (goal: at most 0.7). Also: the same
rate run without a join (latency keeps growing), for contrast. Plot: per-epoch latency
over time, the join and the migration marked.
"""
from __future__ import annotations

import os

from _common import figure, parse_args, percentiles, style, table, write_report
from migration import run_migration


def phase(epochs, lo, hi):
    """Latencies (ms) of the epochs injected in [lo, hi) seconds."""
    return [lat * 1e3 for _, t, lat in epochs if lo <= t < hi]


def main() -> None:
    args = parse_args("saturation", __doc__.splitlines()[0], lambda p: (
        p.add_argument("--rate", type=float, default=50.0, help="epochs per second"),
        p.add_argument("--work", type=int, default=3000, help="per-record fold work (steps)"),
        p.add_argument("--words", type=int, default=100, help="words per epoch")))
    duration = 12.0 if args.quick else 30.0
    join_after = duration / 3
    job = ["--rate", str(args.rate), "--words", str(args.words), "--keys", "5000", "--bins", "64",
           "--work", str(args.work), "--open-loop", "--duration", str(duration), "--max-seconds", str(duration * 4),
           "--timeout", "30"]
    runs = {}
    for joins in (1, 0):
        result = run_migration("all-at-once", processes=1, workers=1, joins=joins,
                               join_at=lambda k, steady: steady + join_after,
                               job_args=job, timeout=duration * 6)
        if result["problems"]:
            raise SystemExit("; ".join(result["problems"]))
        runs["join" if joins else "alone"] = result
    epochs = runs["join"]["epochs"]
    end = max(t for _, t, _ in epochs)
    before = percentiles(phase(epochs, join_after - 1.0, join_after))
    after = percentiles(phase(epochs, end - (end / 3), end + 1))
    alone = runs["alone"]["epochs"]
    alone_end = max(t for _, t, _ in alone)
    alone_before = percentiles(phase(alone, join_after - 1.0, join_after))
    alone_after = percentiles(phase(alone, alone_end - alone_end / 3, alone_end + 1))
    join = runs["join"]["joins"][0]
    print(table([["with a join", f"{before['p50']:.0f}", f"{after['p50']:.0f}", f"{after['p50'] / before['p50']:.2f}"],
                 ["alone", f"{alone_before['p50']:.0f}", f"{alone_after['p50']:.0f}",
                  f"{alone_after['p50'] / alone_before['p50']:.2f}"]],
                ["run", "p50 ms, 1 s before join", "p50 ms, last third", "after / before"]))
    summary = {"rate_epochs_per_s": args.rate, "work": args.work, "words_per_epoch": args.words,
               "p50_ms_before_join": before["p50"], "p50_ms_last_third": after["p50"],
               "after_over_before_p50": after["p50"] / before["p50"],
               "alone_after_over_before_p50": alone_after["p50"] / alone_before["p50"],
               "migration_start_s": join["start"], "migration_end_s": join["end"],
               "bins_moved": join["bins_moved"], "keys_shipped": runs["join"]["keys_shipped"]}
    write_report(args.json, "saturation", summary,
                 {name: {"epochs": r["epochs"], "joins": r["joins"], "join_spawn": r["join_spawn"]}
                  for name, r in runs.items()})
    with figure(os.path.splitext(args.json)[0] + ".png", figsize=(8, 3.8)) as ax:
        for name, color in (("alone", "tab:gray"), ("join", "tab:blue")):
            r = runs[name]
            ax.scatter([t for _, t, _ in r["epochs"]], [lat * 1e3 for _, _, lat in r["epochs"]], s=3,
                       color=color, label="1 process, no join" if name == "alone" else "a 2nd process joins")
        ax.axvline(runs["join"]["join_spawn"][0], color="tab:red", ls="--", label="join")
        if join["start"] is not None and join["end"] is not None:
            ax.axvspan(join["start"], join["end"], color="tab:orange", alpha=0.2, label="bins move")
        style(ax, ylog=True, xlabel="injection time (s)", ylabel="epoch latency (ms)",
              title=f"saturated WordCount ({args.rate:g} epochs/s, heavy fold): a join takes a share",
              legend={"loc": "upper left", "fontsize": 8})


if __name__ == "__main__":
    main()
