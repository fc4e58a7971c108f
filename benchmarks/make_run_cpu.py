"""Where ``make run``'s time and CPU go: CPU seconds per stage and phase, per million clicks.

Runs the main job (``examples/pipeline/run.py``, the same configuration as ``make run``:
1M clicks, 10 epochs, 2 processes, a third joining, process 1 SIGKILLed and replaced)
and samples every process's CPU time from ``/proc`` every 0.2 s, by stage: the Spark
JVM, Spark's Python workers, the dataflow processes, the broker (Tansu) and the driver
(``run.py`` and the Spark driver's Python). The run's own output lines, timestamped as
they appear, split it into phases: Spark generating and cleaning the clicks; the
epochs written and processed (what sets the end-to-end rate); Spark's check. Summary:
CPU seconds per million clicks per stage, the CPU share of the two cores used in the
write phase, and the run's own end-to-end figures. PNG: CPU per stage and phase,
stacked. ``--quick``: 200k clicks.

Caveat: a process that lives less than a sampling interval, or the last interval of
one, is under-counted (Spark's short-lived Python workers most).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

from _common import ROOT, figure, parse_args, style, table, write_report

STAGES = ["Spark JVM", "Spark Python workers", "dataflow processes", "broker (Tansu)", "driver"]
PHASES = [("clean clicks enriched", "generate + clean"), (r"spark: wrote", "write + process epochs"),
          (r"^dataflow:", "last results"), (r"spark check", "Spark's check")]


def stage_of(cmdline: str) -> str | None:
    if "tansu" in cmdline:
        return "broker (Tansu)"
    if "java" in cmdline:
        return "Spark JVM"
    if "pyspark" in cmdline:
        return "Spark Python workers"
    if "dataflow.py" in cmdline:
        return "dataflow processes"
    if "run.py" in cmdline:
        return "driver"
    return None


def sample(seen: dict) -> dict:
    """CPU seconds by stage, of every process seen so far (the last value each had)."""
    tick = os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stage = stage_of(cmdline)
        if stage is not None:
            seen[pid] = (stage, (int(fields[11]) + int(fields[12])) / tick)
    totals = dict.fromkeys(STAGES, 0.0)
    for stage, cpu in seen.values():
        totals[stage] += cpu
    return totals


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
    seen: dict = {}
    samples = []
    while proc.poll() is None:
        samples.append((time.time(), sample(seen)))
        time.sleep(0.2)
    reader.join(10)
    samples.append((time.time(), sample(seen)))
    output = "\n".join(line for _, line in lines)
    if proc.returncode != 0:
        raise SystemExit(f"make run's pipeline failed ({proc.returncode}):\n{output[-3000:]}")

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
    exact = "EXACT" in output
    print(table([[p["phase"], f"{p['seconds']:.1f}", *(f"{p['cpu'][s]:.1f}" for s in STAGES)] for p in phases],
                ["phase", "wall s", *STAGES]))
    print(table([[s, f"{per_million[s]:.1f}"] for s in STAGES], ["stage", "CPU s per million clicks"]))
    summary = {"clicks": clicks, "end_to_end_clicks_per_s":
               int(end_to_end.group(1).replace(",", "")) if end_to_end else None,
               "spark_check_exact": exact,
               "cpu_s_per_million_clicks": per_million,
               "cpu_s_per_million_clicks_total": sum(per_million.values()),
               "write_phase_seconds": write["seconds"],
               "write_phase_cpu_share_of_2_cores": sum(write["cpu"].values()) / (2 * write["seconds"])}
    write_report(args.json, "make_run_cpu", summary, phases, output=output.splitlines()[-12:])
    png = os.path.splitext(args.json)[0] + ".png"
    with figure(png, figsize=(8, 4.2)) as ax:
        bottom = [0.0] * len(phases)
        names = [p["phase"] for p in phases]
        for s in STAGES:
            values = [p["cpu"][s] for p in phases]
            ax.bar(names, values, bottom=bottom, label=s)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.plot(names, [2 * p["seconds"] for p in phases], "k_", markersize=30,
                label="2 cores x wall time")
        style(ax, ylabel="CPU seconds", title=f"make run: CPU per stage and phase ({clicks:,} clicks)",
              legend={"fontsize": 8})
    if not exact:
        raise SystemExit("Spark's check did not say EXACT")
    print(f"done in {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
