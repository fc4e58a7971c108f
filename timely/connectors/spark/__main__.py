"""``python -m timely.connectors.spark standalone``: a Spark standalone cluster on this
machine until Ctrl-C (or SIGTERM), to point ``make run SPARK_MASTER=...`` or
``session("spark://...")`` at.

Prints the master's URL, its web UI and the folder of the logs, then waits; stops the
workers, their executors and the master by PID on the way out. Costs: see
``timely.connectors.spark.standalone``.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from .standalone import StandaloneCluster


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m timely.connectors.spark", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    standalone = commands.add_parser("standalone", help="run a standalone master and workers on 127.0.0.1")
    standalone.add_argument("--workers", type=int, default=1)
    standalone.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="cores of each worker")
    standalone.add_argument("--memory", default="2g", help="memory of each worker (1g: one executor of Spark's default size)")
    standalone.add_argument("--dir", default=None, help="logs and scratch space (default: a temporary folder, removed at the end)")
    standalone.add_argument("--nice", type=int, default=0, help="niceness of the daemons and the executors they start")
    args = parser.parse_args(argv)
    try:
        cluster = StandaloneCluster(args.workers, args.cores, args.memory, args.dir, args.nice)
    except ValueError as exc:
        parser.error(str(exc))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with cluster:
        print(f"master: {cluster.master_url}   web UI: {cluster.web_url}   logs: {cluster.directory}", flush=True)
        print(f"{args.workers} worker(s) of {args.cores} cores and {args.memory}; Ctrl-C stops them", flush=True)
        try:
            done.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
