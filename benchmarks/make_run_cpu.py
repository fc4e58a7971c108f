"""Where ``make run``'s time and CPU go: CPU seconds per stage and phase, per million clicks.

Runs the main job (``examples/pipeline/run.py``, the same configuration as ``make run``:
1M clicks, 10 epochs, 2 processes, a third joining, process 1 SIGKILLed and replaced,
Spark at niceness 10)
and samples every process's CPU time from ``/proc`` every 0.2 s, by stage: the Spark
JVM, Spark's Python workers, the dataflow processes, the broker (Tansu) and the driver
(``run.py`` and the Spark driver's Python). The run's own output lines, timestamped as
they appear, split it into phases: Spark generating and cleaning the clicks; the
epochs written and processed (what sets the end-to-end rate); Spark's check. Summary:
CPU seconds per million clicks per stage, the CPU share of the two cores used in the
write phase, and the run's own end-to-end figures. PNG: CPU per stage and phase,
stacked. ``--quick``: 200k clicks.

Sampling: ``_stages.StageSampler`` over the run's process tree (see its caveat).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

from _common import ROOT, figure, parse_args, stacked_bars, style, table, write_report
from _stages import STAGES, StageSampler

PHASES = [("clean clicks enriched", "generate + clean"), (r"spark: wrote", "write + process epochs"),
          (r"^dataflow:", "last results"), (r"spark check", "Spark's check")]


def main() -> None:
    args = parse_args("make_run_cpu", __doc__.splitlines()[0])
    events = 200_000 if args.quick else 1_000_000
    started = time.time()
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "examples", "pipeline", "run.py"),
                             "--events", str(events)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list = []

    def read() -> None:
        for line in proc.stdout:
            lines.append((time.time(), line.rstrip()))
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    samples = []
    with StageSampler(proc.pid) as sampler:
        while proc.poll() is None:
            samples.append((time.time(), sampler.totals()))
            time.sleep(0.2)
        reader.join(10)
        samples.append((time.time(), sampler.totals()))
    output = "\n".join(line for _, line in lines)
    if proc.returncode != 0:
        # every process's lines: the one that failed first is rarely in the last screen
        saved = os.path.splitext(args.json)[0] + "_failure.log"
        with open(saved, "w") as f:
            f.write(output + "\n")
        raise SystemExit(f"make run's pipeline failed ({proc.returncode}); its whole output is in "
                         f"{saved}; the end of it:\n{output[-3000:]}")

    def at(t: float) -> dict:
        return next((s for ts, s in reversed(samples) if ts <= t), samples[0][1])

    marks = [("start", samples[0][0])]
    for pattern, name in PHASES:
        found = next((t for t, line in lines if re.search(pattern, line)), None)
        if found is not None:
            marks.append((name, found))
    marks.append(("end", samples[-1][0]))
    phases = []
    for (_, t0), (name, t1) in zip(marks, marks[1:]):
        a, b = at(t0), at(t1)
        phases.append({"phase": name if name != "end" else "shut down", "seconds": t1 - t0,
                       "cpu": {s: b[s] - a[s] for s in STAGES}})
    clicks = int(re.search(r"wrote ([\d,]+) clicks", output).group(1).replace(",", ""))
    total = samples[-1][1]
    per_million = {s: total[s] / clicks * 1e6 for s in STAGES}
    write = next(p for p in phases if p["phase"] == "write + process epochs")
    end_to_end = re.search(r"\(([\d,]+) clicks/s end to end\)", output)
    p50 = re.search(r"results readable: p50 (\d+) ms", output)
    exact = "EXACT" in output
    print(table([[p["phase"], f"{p['seconds']:.1f}", *(f"{p['cpu'][s]:.1f}" for s in STAGES)] for p in phases],
                ["phase", "wall s", *STAGES]))
    print(table([[s, f"{per_million[s]:.1f}"] for s in STAGES], ["stage", "CPU s per million clicks"]))
    summary = {"clicks": clicks, "end_to_end_clicks_per_s":
               int(end_to_end.group(1).replace(",", "")) if end_to_end else None,
               "epoch_latency_p50_ms": int(p50.group(1)) if p50 else None,
               "spark_check_exact": exact,
               "cpu_s_per_million_clicks": per_million,
               "cpu_s_per_million_clicks_total": sum(per_million.values()),
               "write_phase_seconds": write["seconds"],
               "write_phase_cpu_share_of_2_cores": sum(write["cpu"].values()) / (2 * write["seconds"])}
    write_report(args.json, "make_run_cpu", summary, phases, output=output.splitlines()[-12:])
    png = os.path.splitext(args.json)[0] + ".png"
    with figure(png, figsize=(8, 4.2)) as ax:
        names = [p["phase"] for p in phases]
        stacked_bars(ax, names, {s: [p["cpu"][s] for p in phases] for s in STAGES})
        ax.plot(names, [2 * p["seconds"] for p in phases], "k_", markersize=30,
                label="2 cores x wall time")
        style(ax, ylabel="CPU seconds", title=f"make run: CPU per stage and phase ({clicks:,} clicks)",
              legend={"fontsize": 8})
    if not exact:
        raise SystemExit("Spark's check did not say EXACT")
    print(f"done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
