"""The job of ``benchmarks/bootstrap.py``: a large progress state, then a process joins.

``python benchmarks/_bootstrap_job.py [options] [timely options]``: worker 0 holds
``--caps`` capabilities at ``--caps`` distinct future times (so the progress state has
about that many entries) and prints ``ready`` once its state holds them; after a process
joined (``-j 0``) and finished bootstrapping it prints the server's pause and entries
sent, releases the capabilities and closes its input, so every process completes. A
joiner prints ``joined at WALLTIME after S s``.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import timely  # noqa: E402


def bootstrap_state(argv):
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--caps", type=int, default=1000, help="capabilities worker 0 holds")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s", stream=sys.stdout)
    logging.getLogger("timely.rescaling").setLevel(logging.INFO)   # the server's "sent N entries"

    def build(worker):
        held: list = []
        release = [False]
        activate: list = []

        def dataflow(scope):
            source, stream = scope.new_input()

            def constructor(cap, info):
                if info.worker_index == 0 and not worker.is_joiner:
                    held.extend(cap.delayed(t) for t in range(1, args.caps + 1))
                cap.drop()
                activate.append(info.activator(worker))

                def logic(input, output):
                    for _ in input:
                        pass
                    if release[0] and held:
                        for c in held:
                            c.drop()
                        held.clear()
                return logic
            return source, stream.unary(None, "Hold", constructor).probe()

        source, probe = worker.dataflow(dataflow)
        joined = worker.bootstrap()
        source.close()
        if joined:
            sys.stdout.write(f"joined at {time.time():.6f} after {worker.bootstrap_seconds:.6f} s\n")
            return None
        if worker.index != 0:
            return None
        built = time.perf_counter()
        worker.step_while(lambda: worker.progress_state_size()["state_entries"] < args.caps)
        sys.stdout.write(f"ready entries {worker.progress_state_size()['state_entries']} "
                         f"after {time.perf_counter() - built:.6f} s\n")
        # wait for a process to join and finish bootstrapping (its "joined" reaches us)
        worker.step_while(lambda: not (worker.bootstrap_pauses and worker.routing_peers > worker.initial_peers))
        sys.stdout.write(f"served pause {worker.bootstrap_pauses[0]:.6f} s, state entries now "
                         f"{worker.progress_state_size()['state_entries']}\n")
        released = time.perf_counter()
        release[0] = True
        activate[0]()
        worker.step_while(lambda: not probe.done())
        sys.stdout.write(f"released in {time.perf_counter() - released:.6f} s\n")
        return None

    timely.execute(config, build)



if __name__ == "__main__":
    bootstrap_state(sys.argv[1:])
