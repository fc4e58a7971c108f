"""Shared plumbing for the benchmark programs: arguments, timing, the JSON report.

Every benchmark is ``python benchmarks/NAME.py [--quick] [--json PATH]`` and writes a
JSON document whose ``summary`` holds its headline figures (default path:
``benchmarks/results/NAME.json``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from typing import Any, Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def parse_args(name: str, description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None):
    parser = argparse.ArgumentParser(prog=f"benchmarks/{name}.py", description=description)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--json", default=os.path.join(ROOT, "benchmarks", "results", f"{name}.json"),
                        help="where to write the JSON report")
    if extra:
        extra(parser)
    return parser.parse_args()


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    """The fastest of ``repeat`` wall-clock timings of ``fn()``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def write_report(path: str, name: str, summary: dict, results: Any, **extra: Any) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    doc = {"benchmark": name, "python": platform.python_version(), "machine": platform.machine(),
           "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "summary": summary, "results": results, **extra}
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"wrote {path}")


def percentiles(latencies_ms) -> dict:
    """``{"n", "p50", "p99", "max"}`` of a list of latencies (None for an empty list)."""
    if not latencies_ms:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    import numpy as np
    a = np.asarray(latencies_ms)
    return {"n": int(a.size), "p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)),
            "max": float(a.max())}


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
