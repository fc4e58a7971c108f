"""Seeded schedules of the checkpoint model: one run, an exploration, its report."""
from __future__ import annotations

import random
from collections import deque
from typing import Callable, Optional

from ..properties import Violation
from ..scheduler import Report, ScheduleResult, explore_with, walk
from .model import WEIGHTS, CheckpointModel, CheckpointOptions
from .mutants import mutant_applied


def run_checkpoint_schedule(options: CheckpointOptions, seed: int, steps: int = 200,
                            trace_length: int = 60) -> ScheduleResult:
    """Run one schedule; never raises a Violation, returns it (``result.violation``)."""
    result = ScheduleResult(seed=seed, steps=steps)
    rng = random.Random(seed ^ 0xC4EC)
    weights = {k: v * rng.uniform(0.25, 2.0) for k, v in WEIGHTS.items()}
    trace: deque = deque(maxlen=trace_length)
    with mutant_applied(options.mutant):
        model = CheckpointModel(options, seed)

        def take(kind: str, args: tuple) -> bool:
            try:
                label = model.run(kind, args)
            except Violation:
                if model.doing:
                    trace.append(model.doing)
                raise
            if label is None:
                return False
            model.steps += 1
            result.by_kind[kind] += 1
            trace.append(label)
            model.check()
            return True

        try:
            trace.append(model.begin())
            model.check()
            walk(rng, weights, steps, model.quiescent, model.enabled, take, result)
            before = model.steps
            model.drain(take)
            result.drain_transitions = model.steps - before
            model.final()
        except Violation as v:
            result.violation = v
    result.states = model.restores
    result.evaluations = model.evaluations
    result.coverage = model.coverage
    result.trace = list(trace)
    result.summary = (f"seed {seed}: {model.summary()}"
                      f"{', mutant ' + options.mutant if options.mutant else ''}")
    return result


def explore_checkpoints(options: CheckpointOptions, seeds: list, steps: int, schedule_steps: int = 200,
                        stop_on_violation: bool = False,
                        progress: Optional[Callable[[Report], None]] = None) -> Report:
    """Run schedules for every seed until each has spent ``steps`` transitions (schedule
    lengths vary from a quarter to 1.5 times ``schedule_steps``)."""
    return explore_with(lambda seed, length: run_checkpoint_schedule(options, seed, length),
                        seeds, steps, schedule_steps, stop_on_violation, progress)


def report_text(report: Report) -> str:
    rate = report.transitions / report.seconds if report.seconds else 0.0
    return "\n".join([
        f"schedules:   {report.schedules}",
        f"transitions: {report.transitions} ({rate:,.0f}/s)",
        f"restores checked: {report.states}",
        f"schedules that ran to quiescence: {report.quiescent}",
        "coverage: " + ", ".join(f"{k} {v}" for k, v in sorted(report.coverage.items())),
        "transitions by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(report.by_kind.items())),
        "property evaluations: " + ", ".join(f"{k} {v}" for k, v in sorted(report.evaluations.items())),
        f"violations: {len(report.violations)}",
        f"time: {report.seconds:.1f}s"])
