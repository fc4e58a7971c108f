"""CPU seconds by pipeline stage, sampled from ``/proc``: the Spark JVM, Spark's Python
workers, the dataflow processes, the broker (Tansu) and the driver.

``StageSampler(root)`` samples, every ``interval`` seconds on a thread, the CPU time of
``root`` and every process descended from it, each counted under its stage (by its
command line, by ``stage_of`` or the ``classify`` given, with its own ``stages``) at the
last value seen, so a process that has exited still counts what it had used at its last
sample. ``totals()`` is the CPU by stage so far; the difference of
two is what a phase used. Cost per sample: one read of ``/proc/*/stat``, and of the command
line of each process of the tree.

Caveat: a process that lives less than an interval, or the last interval of one, is
under-counted (Spark's short-lived Python workers most).
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Optional

STAGES = ["Spark JVM", "Spark Python workers", "dataflow processes", "broker (Tansu)", "driver"]


def stage_of(cmdline: str) -> Optional[str]:
    """The stage of a process by its command line (None: not part of the pipeline).

    >>> stage_of("/usr/bin/java -cp spark.jar org.apache.spark.deploy.SparkSubmit")
    'Spark JVM'
    >>> stage_of("python examples/pipeline/dataflow.py -n 2 -p 0")
    'dataflow processes'
    """
    if "tansu" in cmdline:
        return "broker (Tansu)"
    if "java" in cmdline:
        return "Spark JVM"
    if "pyspark" in cmdline:
        return "Spark Python workers"
    if "dataflow.py" in cmdline:
        return "dataflow processes"
    if "run.py" in cmdline or "pipeline.py" in cmdline:
        return "driver"
    return None


def _stat(pid: str) -> Optional[tuple[int, float]]:
    """``(parent pid, CPU seconds)`` of a process, or None once it has gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class StageSampler:
    """Samples the CPU of ``root``'s process tree by stage (see the module); a context
    manager that starts and stops its thread."""

    def __init__(self, root: int, interval: float = 0.2, stages: Optional[list] = None,
                 classify: Optional[Callable[[str], Optional[str]]] = None) -> None:
        self.root = root
        self.interval = interval
        #: the stages counted, and the stage of a command line (default: this module's)
        self.stages = STAGES if stages is None else stages
        self.classify = stage_of if classify is None else classify
        self._seen: dict[int, tuple[str, float]] = {}     # pid -> (stage, CPU at its last sample)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="stage-sampler")

    def sample(self) -> None:
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                found = _stat(name)
                if found is not None:
                    stats[int(name)] = found
        ours = {self.root}
        changed = True
        while changed:                  # descendants of root: parents before children
            more = {pid for pid, (ppid, _) in stats.items() if ppid in ours and pid not in ours}
            ours |= more
            changed = bool(more)
        with self._lock:
            for pid in ours & stats.keys():
                # read every time: a process may exec another program (spark-submit, a
                # shell script under pyspark/, becomes the JVM under the same pid)
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                stage = self.classify(cmdline)
                if stage is not None:
                    self._seen[pid] = (stage, stats[pid][1])

    def totals(self) -> dict[str, float]:
        """CPU seconds by stage so far (takes a sample first)."""
        self.sample()
        with self._lock:
            out = dict.fromkeys(self.stages, 0.0)
            for stage, cpu in self._seen.values():
                out[stage] += cpu
        return out

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> "StageSampler":
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def difference(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """What each stage used between two ``totals``."""
    return {s: after[s] - before.get(s, 0.0) for s in after}
