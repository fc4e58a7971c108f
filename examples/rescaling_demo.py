"""The rescaling demo behind `make run`: seed 003 §4.1.1 in one command.

Starts examples/hello.py as a 2-process cluster on free loopback ports, lets it run a
few rounds, starts a third process that joins with ``-j 0 --nn 3``, and prints every
worker's output interleaved by time with the join marked. After the join worker 2
sees the numbers that hash to it (8 mod 3 = 2), as in the report.

    python examples/rescaling_demo.py [--rounds 12 --delay 0.3 --join-after 1.2]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from timely.launch import LocalCluster  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--delay", type=float, default=0.3)
    parser.add_argument("--join-after", type=float, default=1.2, help="seconds before the join")
    parser.add_argument("--progress-mode", default="p2p")
    args = parser.parse_args(argv)
    extra = ["--rounds", str(args.rounds), "--delay", str(args.delay), "--timeout", "10"]
    with LocalCluster(os.path.join(HERE, "hello.py"), slots=3, extra=extra) as cluster:
        cluster.start(2)
        time.sleep(args.join_after)
        cluster.join(original=2, bootstrap=0)
        codes = cluster.wait(timeout=60 + args.rounds * args.delay)
        for line in cluster.interleaved():
            print(line)
        seen = {p.label: sum("seen" in line for _, line in p.lines) for p in cluster.processes}
        print(f"exit codes {codes}; records seen per process {seen} "
              f"(total {sum(seen.values())} of {args.rounds})")
        if any(codes) or sum(seen.values()) != args.rounds:
            raise SystemExit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
