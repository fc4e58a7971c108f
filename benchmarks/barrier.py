"""Barrier: timely's progress-tracking microbenchmark, on both twins of the core.

One worker, one operator in a feedback loop (summary +1) that holds a single
capability and asks to be notified at the next time whenever it is notified: every
iteration is a full progress round trip (drop t, hold t+1, broadcast, propagate,
frontier change, notification). Reports µs per iteration for the Cython and the
pure-Python twins (each in its own process, since the twin is chosen at import).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from _common import ROOT, parse_args, table, write_report


def barrier(iterations: int) -> float:
    import timely

    def build(worker):
        def dataflow(scope):
            handle, stream = scope.feedback(1)

            def logic(input, output, notificator):
                for _ in input.batches():
                    pass
                for cap in notificator:
                    if cap.time + 1 < iterations:
                        notificator.notify_at(cap.delayed(cap.time + 1))
                    cap.drop()
            stream.unary_notify(None, "Barrier", [0], logic).connect_loop(handle)
        worker.dataflow(dataflow)
        start = time.perf_counter()
        worker.run()
        return time.perf_counter() - start

    return timely.execute(1, build)[0]


def child(iterations: int) -> None:
    import timely.progress
    barrier(min(iterations, 1000))  # warm-up
    seconds = min(barrier(iterations) for _ in range(3))
    print(json.dumps({"implementation": timely.progress.implementation(),
                      "us_per_iteration": seconds / iterations * 1e6}))


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        return child(int(sys.argv[2]))
    args = parse_args("barrier", __doc__.splitlines()[0])
    iterations = 2_000 if args.quick else 20_000
    results = {}
    for twin, env in (("cython", {}), ("python", {"TIMELY_PURE_PYTHON": "1"})):
        out = subprocess.run([sys.executable, __file__, "--child", str(iterations)], check=True,
                             capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT)
        found = json.loads(out.stdout.strip().splitlines()[-1])
        results[found["implementation"]] = found["us_per_iteration"]
    rows = [[impl, f"{us:.1f}"] for impl, us in results.items()]
    print(table(rows, ["core", "µs / iteration"]))
    summary = {f"{impl}_us_per_iteration": us for impl, us in results.items()}
    if "cython" in results and "python" in results:
        summary["python_over_cython"] = results["python"] / results["cython"]
    write_report(args.json, "barrier", summary, results, iterations=iterations)


if __name__ == "__main__":
    main()
