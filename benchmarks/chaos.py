"""Liveness under seeded chaos: every fault schedule ends, and every result is exact.

Each run is the pipeline's dataflow (``examples/pipeline/dataflow.py``: Kafka source,
per-page Megaphone state, Kafka sink, commits with checkpoints) on 3 processes, each
under a supervisor that starts it again with the same arguments whenever it exits
non-zero, as Kubernetes restarts a failed pod. Clicks arrive one epoch every ``--pace``
seconds. The run's schedule, drawn from its seed, has 2 to 5 faults:

- ``kill``: SIGKILL one process (the coordinator, the lowest live process, or another);
- ``kill2``: SIGKILL two processes at once;
- ``term``: SIGTERM one process, a scale-in: it leaves and is not started again.

Each fault fires at a moment keyed to what the cluster does: once an epoch is written,
or (when a fault before it made them happen) while a replacement joins, during its
bootstrap, during the survivors' rollback, or while a process leaves. A run passes if
every process exits 0 within 30 s of the later of its last fault and the last epoch
written, no process was started more than 20 times (a crash loop), and the results
topic holds every epoch once, every figure exact.

    python benchmarks/chaos.py [--runs 40] [--seed 1] [--mode p2p|kafka|both] [--json PATH]

prints per run its seed, mode, faults with their times, end and verdict, and a summary;
``--seed S --runs 1 --mode M`` replays one run. ``run_one`` is what the suite's
regression seeds call (tests/test_chaos.py).
"""
from __future__ import annotations

import os
import random
import re
import signal
import sys
import threading
import time
import uuid
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for path in (ROOT, os.path.join(ROOT, "tests")):
    if path not in sys.path:
        sys.path.insert(0, path)

from _common import conclude, parse_args, table, write_report  # noqa: E402
from test_kafka_connectors import Writer  # noqa: E402
from test_recovery import DATAFLOW, PARTITIONS, clicks, differences, expected, read_results  # noqa: E402
from timely.connectors.client import create_topics  # noqa: E402
from timely.launch import LocalCluster  # noqa: E402

PROCESSES = 3
#: a run must end this long after the later of its last fault and its last epoch
END_WITHIN = 30.0
#: starts of one process slot beyond which the run counts as a crash loop
MAX_STARTS = 20
#: how long a fault keyed to an event (a join, a rollback ...) waits for it
TRIGGER_WAIT = 8.0
TRIGGERS = {
    "join": r"is joining",
    "bootstrap": r"the cluster runs without it|bootstrap",
    "rollback": r"rollback \d+:",
    "leave": r"leaves the cluster$",
}


def schedule(seed: int, epochs: int) -> list[dict]:
    """The faults of run ``seed``: ``{"kind", "after", "when", "target"}`` (``after``: the
    epoch whose write arms it; ``when``: what it then waits for)."""
    rng = random.Random(seed)
    faults: list[dict] = []
    termed = False
    after = rng.randrange(1, 4)
    for _ in range(rng.randint(2, 5)):
        if after > epochs - 4:
            break
        kinds = ["kill"] * 5 + ["kill2"] * 2 + ([] if termed else ["term"] * 2)
        kind = rng.choice(kinds)
        termed = termed or kind == "term"
        last = faults[-1]["kind"] if faults else None
        whens = ["epoch"]
        if last in ("kill", "kill2"):
            whens += ["rollback", "join", "bootstrap"]
        if last == "term":
            whens += ["leave"]
        faults.append({"kind": kind, "after": after, "when": rng.choice(whens),
                       "target": rng.choice(["coordinator", "other"]),
                       "delay": round(rng.uniform(0.0, 0.3), 3)})
        after += rng.randrange(1, 4)
    return faults


class Supervised:
    """The cluster's processes, each started again with its arguments when it exits
    non-zero (a SIGTERM'd process that exits 0 has left: it stays gone)."""

    def __init__(self, cluster: LocalCluster, clock: float) -> None:
        self.cluster = cluster
        self.clock = clock
        self.lock = threading.Lock()
        self.starts = [1] * PROCESSES
        self.done = [False] * PROCESSES
        self.exits: list[tuple[float, int, int]] = []      # (time, process, code)
        self.stopping = False
        self.crash_loop: Optional[int] = None
        self.retired: list = []                  # processes that were started again
        self.threads = [threading.Thread(target=self._watch, args=(i,), daemon=True) for i in range(PROCESSES)]
        for t in self.threads:
            t.start()

    def now(self) -> float:
        return time.monotonic() - self.clock

    def process(self, index: int) -> Any:
        with self.lock:
            return self.cluster.processes[index]

    def live(self) -> list[int]:
        with self.lock:
            return [i for i, p in enumerate(self.cluster.processes) if p.popen.poll() is None]

    def _watch(self, index: int) -> None:
        while True:
            proc = self.process(index)
            code = proc.popen.wait()
            with self.lock:
                self.exits.append((self.now(), index, code))
                if code == 0 or self.stopping:
                    self.done[index] = code == 0
                    return
                if self.starts[index] >= MAX_STARTS:
                    self.crash_loop = index
                    return
                self.starts[index] += 1
            time.sleep(0.5)         # a supervisor's back-off
            with self.lock:
                if self.stopping:
                    return
                self.retired.append(proc)           # its lines stay in the run's log
                self.cluster.restart(index, PROCESSES)

    def all_done(self) -> bool:
        with self.lock:
            return all(self.done)

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
        for p in list(self.cluster.processes):
            if p.popen.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
        for t in self.threads:
            t.join(10)


def _wait_line(sup: Supervised, pattern: str, since: float, timeout: float) -> Optional[int]:
    """The first process to print a line matching ``pattern`` later than ``since``
    (seconds on the cluster's clock), or None after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern)
    while time.monotonic() < deadline:
        with sup.lock:
            procs = list(enumerate(sup.cluster.processes))
        for i, p in procs:
            if any(t > since and rx.search(line) for t, line in list(p.lines)):
                return i
        time.sleep(0.02)
    return None


def _targets(sup: Supervised, fault: dict, rng: random.Random, hint: Optional[int]) -> list[int]:
    live = sup.live()
    if not live:
        return []
    if fault["kind"] == "kill2":
        return sorted(rng.sample(live, min(2, len(live))))
    if fault["kind"] == "term" and len(live) < 2:
        return []
    if hint is not None and hint in live and fault["when"] != "epoch":
        return [hint]
    if fault["target"] == "coordinator":
        return [min(live)]
    others = [i for i in live if i != min(live)] or live
    return [rng.choice(others)]


def run_one(seed: int, mode: str, brokers: str, epochs: int = 20, pace: float = 0.4,
            say=print) -> dict:
    """One run of seed ``seed`` in progress mode ``mode`` against ``brokers`` (see the
    module docstring); returns what happened."""
    rng = random.Random(seed * 7919 + (1 if mode == "kafka" else 0))
    faults = schedule(seed, epochs)
    run = uuid.uuid4().hex[:8]
    clicks_topic, results_topic, group = f"chaos-clicks-{run}", f"chaos-results-{run}", f"chaos-{run}"
    create_topics(brokers, {clicks_topic: PARTITIONS, results_topic: PARTITIONS})
    writer = Writer(brokers, clicks_topic)
    progress = ([] if mode == "p2p" else
                ["--progress-mode", "kafka", "--kafka-bootstrap", brokers, "--kafka-prefix", f"chaos{run}"])
    extra = ["--brokers", brokers, "--clicks", clicks_topic, "--results", results_topic, "--group", group,
             "--epochs", str(epochs), "--bins", "16", "--timeout", "10",
             "--migration", rng.choice(["batched", "all-at-once", "fluid"]), *progress]
    fired: list[dict] = []
    written_at: dict[int, float] = {}
    with LocalCluster([DATAFLOW], slots=PROCESSES, extra=extra) as cluster:
        cluster.start(PROCESSES)
        sup = Supervised(cluster, cluster.start_time)
        try:
            pending = list(faults)
            for e in range(epochs):
                writer.epoch(e, clicks(e))
                written_at[e] = sup.now()
                while pending and pending[0]["after"] == e:
                    fault = pending.pop(0)
                    hint = None
                    if fault["when"] != "epoch":
                        hint = _wait_line(sup, TRIGGERS[fault["when"]], sup.now() - 2.0, TRIGGER_WAIT)
                    time.sleep(fault["delay"])
                    targets = _targets(sup, fault, rng, hint)
                    sig = signal.SIGTERM if fault["kind"] == "term" else signal.SIGKILL
                    for i in targets:
                        cluster.kill(sup.process(i), sig)
                    fired.append({**fault, "at": round(sup.now(), 2), "processes": targets,
                                  "seen": fault["when"] == "epoch" or hint is not None})
                time.sleep(pace)
            last_fault = max([f["at"] for f in fired], default=0.0)
            last = max(written_at[epochs - 1], last_fault)
            while not sup.all_done() and sup.crash_loop is None and sup.now() < last + END_WITHIN:
                time.sleep(0.1)
            ended = sup.all_done()
            end = max(t for t, _, _ in sup.exits) if ended else None
        finally:
            sup.stop()
        rows = [(t, f"[{t:7.3f}s {p.label}] {line}") for p in cluster.processes + sup.retired
                for t, line in list(p.lines)]
        log = [text for _, text in sorted(rows)]
    try:
        got = read_results(brokers, results_topic)
        want = expected(epochs)
        exact = got == want
        problem = None if exact else differences(got, want)
    except AssertionError as exc:       # an (epoch, page) read twice
        exact, problem = False, str(exc).splitlines()[0]
    result = {"seed": seed, "mode": mode, "faults": fired, "ended": ended, "exact": exact,
              "end_after_last_fault": None if end is None else round(end - last_fault, 2),
              "end_after_last_epoch": None if end is None else round(end - written_at[epochs - 1], 2),
              "starts": sup.starts, "crash_loop": sup.crash_loop, "problem": problem,
              "exits": [(round(t, 2), i, c) for t, i, c in sup.exits]}
    faults_text = "; ".join(f"{f['kind']}@{f['at']}s {f['processes']} ({f['when']}"
                            f"{'' if f['seen'] else ', not seen'})" for f in fired)
    say(f"seed {seed} {mode}: {faults_text or 'no fault'} -> "
        + (f"ended {result['end_after_last_fault']} s after the last fault" if ended else "DID NOT END")
        + (", exact" if exact else f", NOT EXACT ({problem})"))
    if not (ended and exact):
        result["log"] = log[-400:]
        say(f"  replay: python benchmarks/chaos.py --seed {seed} --runs 1 --mode {mode}")
    return result


def main() -> None:
    args = parse_args("chaos", __doc__.splitlines()[0], lambda p: (
        p.add_argument("--runs", type=int, default=40, help="runs in all (split over the modes)"),
        p.add_argument("--seed", type=int, default=1, help="the first run's seed"),
        p.add_argument("--mode", default="both", choices=["p2p", "kafka", "both"]),
        p.add_argument("--epochs", type=int, default=20),
        p.add_argument("--pace", type=float, default=0.4, help="seconds between epochs")))
    from tqdm import tqdm
    from kafka_broker import TansuBroker
    modes = ["p2p", "kafka"] if args.mode == "both" else [args.mode]
    runs = 4 if args.quick else args.runs
    plan = [(args.seed + i // len(modes), modes[i % len(modes)]) for i in range(runs)]
    started = time.monotonic()
    broker = TansuBroker().start()
    results = []
    try:
        for seed, mode in tqdm(plan, desc="chaos", unit="run"):
            results.append(run_one(seed, mode, broker.bootstrap, args.epochs, args.pace, say=tqdm.write))
    finally:
        broker.stop()
    rows = [[r["seed"], r["mode"], len(r["faults"]), " ".join(f["kind"] for f in r["faults"]),
             "yes" if r["ended"] else "NO", r["end_after_last_fault"], "yes" if r["exact"] else "NO"]
            for r in results]
    print(table(rows, ["seed", "mode", "faults", "kinds", "ended", "end after last fault (s)", "exact"]))
    ends = [r["end_after_last_fault"] for r in results if r["end_after_last_fault"] is not None]
    summary = {"runs": len(results), "ended": sum(r["ended"] for r in results),
               "exact": sum(r["exact"] for r in results),
               "passed": sum(r["ended"] and r["exact"] for r in results),
               "faults": sum(len(r["faults"]) for r in results),
               "slowest_end_after_last_fault_s": max(ends) if ends else None,
               "per_mode": {m: {"runs": sum(r["mode"] == m for r in results),
                                "passed": sum(r["mode"] == m and r["ended"] and r["exact"] for r in results)}
                            for m in modes},
               "failed": [(r["seed"], r["mode"]) for r in results if not (r["ended"] and r["exact"])]}
    print(f"chaos: {summary['passed']}/{summary['runs']} runs ended exact; slowest end "
          f"{summary['slowest_end_after_last_fault_s']} s after the last fault")
    write_report(args.json, "chaos", summary, results, epochs=args.epochs, pace=args.pace)
    conclude([f"seed {s} {m} failed: replay with --seed {s} --runs 1 --mode {m}" for s, m in summary["failed"]],
             round(time.monotonic() - started, 1))


if __name__ == "__main__":
    main()
