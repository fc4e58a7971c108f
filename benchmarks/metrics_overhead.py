"""What metrics cost: WordCount with --metrics-port on vs off, in interleaved pairs.

The job is benchmarks/wordcount.py's (synthetic lines of 10 words over a 10k-word
vocabulary, 4 epochs, words routed by value and counted), made long enough (1M lines,
``--quick``: 300k) that starting and stopping the metrics server is a small part of
it. Each run is a fresh process. With metrics on, every operator times its schedules,
the epoch clocks follow the frontiers, and the server is up, scraped once a second
from this (another) process, as Prometheus would. Runs alternate off, on, off, on ... so a drift of the machine
hits both alike; the overhead is the median over pairs of ``1 - rate_on / rate_off``,
for 1 worker and for 2 (forked processes), and likewise of the CPU seconds the run
took (``cpu_overhead``). On this shared machine both swing by a third between runs,
so the headline is counted, not timed: valgrind's callgrind counts the instructions
of a 1-worker run of 100k and of 200k lines, metrics off and on; the difference of the
two sizes is the cost per word (start-up cancels out), and what is left is the fixed
cost of metrics (importing prometheus_client, starting the server). A plot shows
every pair.
"""
from __future__ import annotations

import importlib.util
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from _common import ROOT, parse_args, table, write_report

sys.path.insert(0, os.path.join(ROOT, "examples"))


def _wordcount_module():
    spec = importlib.util.spec_from_file_location("wordcount_bench", os.path.join(ROOT, "benchmarks", "wordcount.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scraper(port_box: dict, stop: threading.Event) -> None:
    """Scrape /metrics of every process once a second while a run is on."""
    while not stop.wait(1.0):
        port, workers = port_box.get("port"), port_box.get("workers", 1)
        if not port:
            continue
        for p in range(workers):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port + p}/metrics", timeout=2).read()
            except OSError:
                pass                 # between runs: nothing listens


def one_run(n: int, workers: int, metrics: bool, box: dict) -> tuple[float, float]:
    """``(words per second, CPU seconds)`` of one run in a fresh process: the rate its
    execute took, and the CPU it and its forked workers used, start-up included."""
    from timely.launch import free_port_range
    port = free_port_range(workers) if metrics else 0
    box.update(port=port, workers=workers)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        out = subprocess.run([sys.executable, __file__, "--child", str(n), str(workers), str(port)],
                             capture_output=True, text=True, cwd=ROOT)
    finally:
        box.update(port=0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"a run failed:\n{out.stderr[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return float(out.stdout.strip().splitlines()[-1]), cpu


def instructions(n: int, metrics: bool) -> int:
    """Instructions (callgrind's count) of a 1-worker run of ``n`` lines, start-up included."""
    from timely.launch import free_port_range
    port = free_port_range(1) if metrics else 0
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={d}/cg.out",
                              sys.executable, __file__, "--child", str(n), "1", str(port)],
                             capture_output=True, text=True, cwd=ROOT)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed:\n{out.stderr[-2000:]}")
    return int(found.group(1))


def counted(small: int) -> dict:
    """Per-word and fixed instruction costs of metrics (see the module)."""
    from tqdm import tqdm
    runs = {}
    for size, metrics in tqdm([(s, m) for s in (small, 2 * small) for m in (False, True)], desc="callgrind"):
        runs[(size, metrics)] = instructions(size, metrics)
    words = small * 10
    per_word = {m: (runs[(2 * small, m)] - runs[(small, m)]) / words for m in (False, True)}
    fixed = {m: runs[(small, m)] - per_word[m] * words for m in (False, True)}
    return {"instructions_per_word_off": per_word[False], "instructions_per_word_on": per_word[True],
            "metrics_instruction_overhead_per_word": per_word[True] / per_word[False] - 1,
            "metrics_fixed_minstructions": (fixed[True] - fixed[False]) / 1e6,
            "runs": {f"{size} lines, metrics {'on' if m else 'off'}": v for (size, m), v in runs.items()}}


def child(n: int, workers: int, port: int) -> None:
    import timely
    import wordcount
    lines = _wordcount_module().lines_for(n)
    config = timely.Config(workers=workers, metrics_port=port)
    start = time.perf_counter()
    totals = wordcount.merge(timely.execute(config, lambda w: wordcount.run(w, lines, 4, all_workers=True,
                                                                            exchange=True)))
    seconds = time.perf_counter() - start
    counted = sum(sum(c.values()) for c in totals.values())
    if counted != n * 10:
        raise SystemExit(f"counted {counted} words of {n * 10}")
    print(n * 10 / seconds)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
    args = parse_args("metrics_overhead", __doc__.splitlines()[0])
    n, pairs = (300_000, 3) if args.quick else (1_000_000, 11)
    box: dict = {}
    stop = threading.Event()
    threading.Thread(target=scraper, args=(box, stop), daemon=True).start()
    results = []
    try:
        from tqdm import tqdm
        for workers in (1, 2):
            for pair in tqdm(range(pairs), desc=f"-w {workers}", leave=False):
                off, off_cpu = one_run(n, workers, False, box)
                on, on_cpu = one_run(n, workers, True, box)
                results.append({"workers": workers, "pair": pair, "off_words_per_s": off,
                                "on_words_per_s": on, "off_cpu_s": off_cpu, "on_cpu_s": on_cpu,
                                "overhead": 1 - on / off, "cpu_overhead": on_cpu / off_cpu - 1})
    finally:
        stop.set()
    summary = {}
    rows = []
    for workers in (1, 2):
        mine = [r for r in results if r.get("workers") == workers]
        overhead = statistics.median(r["overhead"] for r in mine)
        cpu = statistics.median(r["cpu_overhead"] for r in mine)
        summary[f"metrics_overhead_{workers}w"] = overhead
        summary[f"metrics_cpu_overhead_{workers}w"] = cpu
        summary[f"off_{workers}w_words_per_s"] = statistics.median(r["off_words_per_s"] for r in mine)
        summary[f"on_{workers}w_words_per_s"] = statistics.median(r["on_words_per_s"] for r in mine)
        rows.append([workers, f"{summary[f'off_{workers}w_words_per_s']:,.0f}",
                     f"{summary[f'on_{workers}w_words_per_s']:,.0f}", f"{overhead:+.1%}", f"{cpu:+.1%}",
                     " ".join(f"{r['cpu_overhead']:+.0%}" for r in mine)])
    print(table(rows, ["workers", "off words/s", "on words/s", "wall overhead", "CPU overhead",
                       "CPU overhead per pair"]))
    if shutil.which("valgrind"):
        count = counted(50_000 if args.quick else 100_000)
        summary.update({k: v for k, v in count.items() if k != "runs"})
        results.append({"callgrind": count["runs"]})
        print(f"instructions per word: off {count['instructions_per_word_off']:,.0f}, on "
              f"{count['instructions_per_word_on']:,.0f} ({count['metrics_instruction_overhead_per_word']:+.2%}); "
              f"fixed cost of metrics {count['metrics_fixed_minstructions']:,.0f} M instructions")
    else:
        print("valgrind is not installed: no instruction counts")
    write_report(args.json, "metrics_overhead", summary, results, lines=n, pairs=pairs)
    plot(results, args.json)


def plot(results: list, json_path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for workers, color in ((1, "tab:blue"), (2, "tab:orange")):
        mine = [r for r in results if r.get("workers") == workers]
        ax.plot([r["pair"] for r in mine], [100 * r["cpu_overhead"] for r in mine], "o-", color=color,
                label=f"-w {workers}, CPU (median {100 * statistics.median(r['cpu_overhead'] for r in mine):+.1f}%)")
        ax.plot([r["pair"] for r in mine], [100 * r["overhead"] for r in mine], "x:", color=color, alpha=0.5,
                label=f"-w {workers}, wall (median {100 * statistics.median(r['overhead'] for r in mine):+.1f}%)")
    ax.axhline(3, color="gray", linestyle="--", label="goal: 3%")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xlabel("pair (off, then on)")
    ax.set_ylabel("overhead of --metrics-port, %")
    ax.set_title("WordCount with metrics on vs off")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.splitext(json_path)[0] + ".png", dpi=120)


if __name__ == "__main__":
    main()
