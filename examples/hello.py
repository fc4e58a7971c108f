"""Hello, timely: seed 003 §4.1's rescalable HelloWorld.

Worker 0 introduces the numbers 0..rounds-1, one per epoch; each number x is exchanged
to worker ``x % peers`` (timely's ``exchange(|x| *x)``) and printed there ("worker 1:
seen 3"). A process can join while it runs; from then on the numbers are spread over
the larger cluster:

    python examples/hello.py -n 2 -p 0 -h hosts --delay 1     # and -p 1
    python examples/hello.py -n 2 -p 2 -h hosts -j 0 --nn 3   # joins, worker 0 bootstraps it

With ``--wait-join 6`` worker 0 holds round 6 back until the joiner is routed to, so the
run prints the seed's output whatever the timing: worker 0 sees 0 2 4 6 9, worker 1
sees 1 3 5 7, worker 2 sees 8 (8 mod 3 = 2).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import timely  # noqa: E402


def hello(worker, rounds: int, delay: float, out=print, wait_join: int | None = None):
    index = worker.index
    peers = worker.routing_peers

    def build(scope):
        source, stream = scope.new_input()
        probe = (stream.exchange(lambda x: x)
                 .inspect(lambda x: out(f"worker {index}: seen {x}"))
                 .probe())
        return source, probe

    source, probe = worker.dataflow(build)
    # A worker joining a running cluster (--join B --nn N) bootstraps its progress state
    # here, after building every dataflow; its input then holds a capability at the round
    # its bootstrap worker was in, and it takes part in the rounds from there.
    start = source.time() if worker.bootstrap() else 0
    for round_ in range(start, rounds):
        if index == 0:
            if delay:
                time.sleep(delay)
            if round_ == wait_join:              # until a joiner takes its share of keys
                worker.step_while(lambda: worker.routing_peers == peers)
            source.send(round_)
        source.advance_to(round_ + 1)
        worker.step_while(lambda: probe.less_than(source.time()))
    source.close()


def main(argv):
    timely.config.log_to_stderr()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)  # -h is the hostfile
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between rounds")
    parser.add_argument("--wait-join", type=int, default=None, metavar="ROUND",
                        help="worker 0 sends ROUND only once a process has joined")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    timely.execute(config, lambda worker: hello(worker, args.rounds, args.delay,
                                                lambda line: sys.stdout.write(line + "\n"),
                                                args.wait_join))


if __name__ == "__main__":
    main(sys.argv[1:])
