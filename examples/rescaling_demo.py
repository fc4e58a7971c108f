"""The rescaling demo behind `make run`: a cluster grows while it counts, and every count
stays exact.

Starts examples/wordcount.py as a 2-process x 2-worker cluster on free loopback ports
(running word counts on ``state_machine``), lets it run a few epochs, starts a third
process that joins with ``-j 0 --nn 3``, and prints what happened, in time order: the
join, the Bootstrap of the new workers' routing state, the rebalancer's steps and the
bins (with their words) shipped to the joiners, then each worker's final share. At the
end it checks every running count against a plain Counter and exits non-zero on any
difference.

    python examples/rescaling_demo.py [--epochs 30 --epoch-delay 0.15 --join-after 1.0
                                       --migration batched|fluid|all-at-once]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from timely.launch import LocalCluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import wordcount  # noqa: E402

SHOWN = ("joins", "rebalancer", "routing state", " ships ", " holds ", "updates in")


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lines", type=int, default=6000)
    parser.add_argument("--vocabulary", type=int, default=2000)
    parser.add_argument("--bins", type=int, default=64)
    parser.add_argument("--epoch-delay", type=float, default=0.15)
    parser.add_argument("--join-after", type=float, default=1.0, help="seconds before the join")
    parser.add_argument("--migration", default="batched")
    parser.add_argument("--progress-mode", default="p2p")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="timely-demo-") as out:
        extra = ["--lines", str(args.lines), "--epochs", str(args.epochs), "--vocabulary", str(args.vocabulary),
                 "--bins", str(args.bins), "--epoch-delay", str(args.epoch_delay), "--timeout", "10",
                 "--migration", args.migration, "--output", os.path.join(out, "out-{process}.json")]
        with LocalCluster(os.path.join(HERE, "wordcount.py"), slots=3, workers=2, extra=extra) as cluster:
            cluster.start(2)
            time.sleep(args.join_after)
            cluster.join(original=2, bootstrap=0)
            codes = cluster.wait(120 + args.epochs * args.epoch_delay)
            log = cluster.interleaved()
        shown = [line for line in log if any(s in line for s in SHOWN)]
        print("\n".join(shown if not any(codes) else log))
        batches = []
        for p in range(3):
            with open(os.path.join(out, f"out-{p}.json")) as f:
                batches += json.load(f)["batches"]
    lines = wordcount.synthetic_lines(args.lines, 10, args.vocabulary)
    got, want = wordcount.latest(batches), wordcount.expected_running(lines, args.epochs)
    wrong = sum(got.get(e, {}).get(w) != n for e in want for w, n in want[e].items())
    print(f"exit codes {codes}; {sum(len(c) for c in want.values())} running counts over "
          f"{args.epochs} epochs, {wrong} wrong")
    if any(codes) or wrong or got != want:
        raise SystemExit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
