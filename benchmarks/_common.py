"""Shared plumbing for the benchmark programs: arguments, timing, the JSON report, plots.

Every benchmark is ``python benchmarks/NAME.py [--quick] [--json PATH]`` and writes a
JSON document whose ``summary`` holds its headline figures (default path:
``benchmarks/results/NAME.json``), and, where a plot helps, a PNG next to it
(``figure`` and ``style``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

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


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


@contextmanager
def figure(path: str, nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float],
           suptitle: str | None = None, suptitle_size: float | None = None, **subplots: Any) -> Iterator[Any]:
    """A matplotlib figure written to ``path``: ``with figure(path, figsize=(8, 4)) as ax: ...``.

    Yields the axes of ``plt.subplots(nrows, ncols, figsize=figsize, **subplots)`` (Agg
    backend; one ``Axes``, or an array of them). When the block ends without an error it
    sets ``suptitle``, lays the figure out tightly, saves it (110 dpi) and prints ``wrote
    PATH``; the figure is closed either way."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(nrows, ncols, figsize=figsize, **subplots)
    try:
        yield axes
        if suptitle is not None:
            fig.suptitle(suptitle, **({} if suptitle_size is None else {"fontsize": suptitle_size}))
        fig.tight_layout()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fig.savefig(path, dpi=110)
        print(f"wrote {path}")
    finally:
        plt.close(fig)


def stacked_bars(ax, x: Any, layers: dict[str, Any], **bar: Any) -> list[float]:
    """Bars at ``x`` stacked from ``layers`` ``{label: heights}`` in order (``bar``: more
    arguments of ``ax.bar``); returns the stacks' totals.

    >>> import matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt
    >>> stacked_bars(plt.subplots()[1], ["a", "b"], {"x": [1, 2], "y": [3, 0.5]})
    [4.0, 2.5]
    """
    bottom = [0.0] * len(x)
    for label, heights in layers.items():
        ax.bar(x, heights, bottom=bottom, label=label, **bar)
        bottom = [b + h for b, h in zip(bottom, heights)]
    return bottom


def style(ax, *, xlabel: str | None = None, ylabel: str | None = None, title: str | None = None,
          title_size: float | None = None, xlog: bool = False, ylog: bool = False, grid: str | None = None,
          legend: bool | dict = False) -> None:
    """Label and scale one axes: ``xlog``/``ylog`` make that axis logarithmic, ``grid``
    (``"major"`` or ``"both"``) draws a faint grid at those ticks, ``legend`` is True or
    the keyword arguments of ``ax.legend``."""
    if xlog:
        ax.set_xscale("log")
    if ylog:
        ax.set_yscale("log")
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title, **({} if title_size is None else {"fontsize": title_size}))
    if grid is not None:
        ax.grid(True, which=grid, alpha=0.3)
    if legend:
        ax.legend(**(legend if isinstance(legend, dict) else {}))


def conclude(problems: list[str], seconds: float) -> None:
    """A benchmark's last word, once its report is written: the first line of every failed
    check and exit status 1, or ``all checks passed (SECONDS s)``."""
    if problems:
        print("FAILED CHECKS:\n  " + "\n  ".join(p.splitlines()[0] for p in problems))
        raise SystemExit(1)
    print(f"all checks passed ({seconds} s)")
