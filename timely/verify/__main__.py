"""``python -m timely.verify``: long random explorations of the protocol model.

    python -m timely.verify --steps 200000 --seeds 5 [--twin python|cython|both]
                            [--join] [--kafka] [--leave] [--mutation NAME] [--full-checks]
                            [--schedule-steps 400] [--first-seed 0] [--disable PROP,...]
    python -m timely.verify --replay SCHEDULE_SEED [--join] [--kafka] [--leave] [--mutation NAME]
    python -m timely.verify --checkpoints --steps N --seeds K [--mutant NAME] [--late-writes]
    python -m timely.verify --checkpoints --replay SCHEDULE_SEED [--mutant NAME]
    python -m timely.verify --sink --seeds K [--mutant skip_verify|ship_early]

Each seed spends ``--steps`` transitions over as many schedules as it takes; the
report gives schedules, transitions, states checked, property evaluations and
coverage counters. A violation prints its property, message, the last transitions
and the ``--replay`` command that reproduces it; the exit status is then 1. Costs:
about 10-20 thousand transitions per second (pure-Python twin slower than Cython).
``--checkpoints`` explores the checkpoint and crash-recovery protocol instead
(``timely.verify.checkpoints``; ``--mutation`` / ``--mutant`` then names one of its
``CHECKPOINT_MUTANTS``), about 20 thousand transitions per second.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from typing import Optional

from .model import Options
from .checkpoints import (CHECKPOINT_MUTANTS, CheckpointOptions, explore_checkpoints, report_text,
                          run_checkpoint_schedule)
from .mutations import MUTATIONS, mutated
from .properties import PROPERTIES
from .scheduler import Report, explore, run_schedule
from .sink import SINK_MUTANTS, run_sink_schedule


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m timely.verify",
                                description="Random exploration of timely's progress protocol model, "
                                            "checking seed 002's safety properties after every transition.")
    p.add_argument("--steps", type=int, default=20000, help="transitions per seed (default 20000)")
    p.add_argument("--seeds", type=int, default=3, help="number of seeds (default 3)")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--twin", choices=("python", "cython", "both"), default="both",
                   help="ChangeBatch/Tracker twin under test (default both)")
    p.add_argument("--join", action="store_true", help="workers join mid-run (peer-to-peer bootstrap)")
    p.add_argument("--kafka", action="store_true", help="progress through logs; joins from snapshot + tail")
    p.add_argument("--leave", action="store_true",
                   help="workers leave mid-run: routing to them stops, they hand their capabilities "
                        "over net-zero where that is safe (else drop them), then are gone "
                        "(with --join: joins after leaves too)")
    p.add_argument("--mutation", "--mutant",
                   choices=sorted(set(MUTATIONS) | set(CHECKPOINT_MUTANTS) | set(SINK_MUTANTS)),
                   help="run a deliberately broken variant (with --checkpoints: one of "
                        f"{', '.join(sorted(CHECKPOINT_MUTANTS))})")
    p.add_argument("--checkpoints", action="store_true",
                   help="explore checkpoints and crash recovery (timely.verify.checkpoints) instead")
    p.add_argument("--sink", action="store_true",
                   help="explore a Kafka sink partition changing writer (timely.verify.sink) instead")
    p.add_argument("--late-writes", action="store_true",
                   help="with --checkpoints: a dead life's pending records may land after the next began")
    p.add_argument("--schedule-steps", type=int, default=None,
                   help="transitions per schedule before draining (default 400; 200 with --checkpoints)")
    p.add_argument("--full-checks", action="store_true",
                   help="re-evaluate every property on every state (slow)")
    p.add_argument("--disable", default="",
                   help=f"comma-separated properties to skip, of {', '.join(PROPERTIES)}")
    p.add_argument("--replay", type=int, metavar="SCHEDULE_SEED", help="run one schedule and print its trace")
    p.add_argument("--stop", action="store_true", help="stop at the first violation")
    return p


def _options(args: argparse.Namespace, twin: str) -> Options:
    if args.mutation:
        return replace(mutated(args.mutation), twin=twin)
    return Options(twin=twin, join=args.join or args.kafka, kafka=args.kafka, leave=args.leave)


def _print_violation(result, args: argparse.Namespace, twin: str) -> None:
    flags = f" --twin {twin}"
    if args.mutation:
        flags += f" --mutation {args.mutation}"
    else:
        flags += ((" --join" if args.join else "") + (" --kafka" if args.kafka else "")
                  + (" --leave" if args.leave else ""))
    _report_violation(result, flags)


def _report_violation(result, flags: str) -> None:
    """A violation, its last transitions and the command that replays it."""
    print(f"\nVIOLATION ({result.summary}, after {result.transitions} transitions):\n  {result.violation}")
    print("last transitions:")
    for line in result.trace[-25:]:
        print(f"  {line}")
    print(f"replay: python -m timely.verify --replay {result.seed}{flags} "
          f"--schedule-steps {result.steps}")


def _print_replay(result, checked: str) -> int:
    """A replayed schedule: its trace, its counts and its violation (exit status 1)."""
    print(result.summary)
    for line in result.trace:
        print(f"  {line}")
    print(f"{result.transitions} transitions (+{result.drain_transitions} draining), "
          f"{result.states} {checked}")
    if result.violation is not None:
        print(f"VIOLATION: {result.violation}")
        return 1
    return 0


def _checkpoints(args: argparse.Namespace) -> int:
    if args.mutation and args.mutation not in CHECKPOINT_MUTANTS:
        print(f"--mutation {args.mutation} is not a checkpoint mutant: choose from "
              f"{', '.join(sorted(CHECKPOINT_MUTANTS))}", file=sys.stderr)
        return 2
    opts = CheckpointOptions(mutant=args.mutation, late_writes=args.late_writes)
    steps = args.schedule_steps or 200
    flags = (" --checkpoints" + (f" --mutant {args.mutation}" if args.mutation else "")
             + (" --late-writes" if args.late_writes else ""))
    if args.replay is not None:
        return _print_replay(run_checkpoint_schedule(opts, args.replay, steps, trace_length=10**6),
                             "restores checked")
    print(f"== checkpoints{', mutant ' + args.mutation if args.mutation else ''}: "
          f"{args.seeds} seed(s) x {args.steps} transitions")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    report = explore_checkpoints(opts, seeds, args.steps, schedule_steps=steps, stop_on_violation=args.stop)
    print(report_text(report))
    for result in report.violations[:3]:
        _report_violation(result, flags)
    return 1 if report.violations else 0


def _sink(args: argparse.Namespace) -> int:
    if args.mutation and args.mutation not in SINK_MUTANTS:
        print(f"--mutation {args.mutation} is not a sink mutant: choose from {', '.join(SINK_MUTANTS)}",
              file=sys.stderr)
        return 2
    steps = args.schedule_steps or 300
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    bad = [r for r in (run_sink_schedule(s, steps, args.mutation) for s in seeds) if r.violation]
    print(f"== sink{', mutant ' + args.mutation if args.mutation else ''}: {args.seeds} schedule(s) of "
          f"{steps} transitions: {len(bad)} violation(s)")
    for r in bad[:3]:
        print(f"seed {r.seed}: {r.violation}\n  last transitions: {r.trace[-12:]}")
    return 1 if bad else 0


def main(argv: Optional[list] = None) -> int:
    args = _parser().parse_args(argv)
    if args.checkpoints:
        return _checkpoints(args)
    if args.sink:
        return _sink(args)
    if args.mutation and args.mutation not in MUTATIONS:
        print(f"--mutation {args.mutation} is a checkpoint mutant: add --checkpoints", file=sys.stderr)
        return 2
    if args.schedule_steps is None:
        args.schedule_steps = 400
    disabled = tuple(p for p in args.disable.split(",") if p)
    twins = ("python", "cython") if args.twin == "both" else (args.twin,)
    if args.replay is not None:
        opts = _options(args, twins[-1])
        result = run_schedule(opts, args.replay, args.schedule_steps, full_checks=args.full_checks,
                              trace_length=10**6, disabled=disabled)
        return _print_replay(result, "states checked")
    status = 0
    total = Report()
    for twin in twins:
        opts = _options(args, twin)
        mode = (("kafka" if opts.kafka else "p2p") + (" with joins" if opts.join else "")
                + (" and leaves" if opts.join and opts.leave else " with leaves" if opts.leave else ""))
        print(f"== twin {twin}, {mode}{', mutation ' + opts.mutation if opts.mutation else ''}: "
              f"{args.seeds} seed(s) x {args.steps} transitions")
        last = [time.perf_counter()]

        def progress(report: Report) -> None:
            now = time.perf_counter()
            if now - last[0] > 10:
                last[0] = now
                print(f"   ... {report.schedules} schedules, {report.transitions} transitions",
                      file=sys.stderr, flush=True)

        report = explore(opts, list(range(args.first_seed, args.first_seed + args.seeds)), args.steps,
                         schedule_steps=args.schedule_steps, full_checks=args.full_checks,
                         stop_on_violation=args.stop, disabled=disabled, progress=progress)
        print(report.text())
        for result in report.violations[:3]:
            _print_violation(result, args, twin)
        if report.violations:
            status = 1
        for name in ("schedules", "transitions", "states", "joins", "leaves"):
            setattr(total, name, getattr(total, name) + getattr(report, name))
        total.seconds += report.seconds
    if len(twins) > 1:
        print(f"== total: {total.schedules} schedules, {total.transitions} transitions, "
              f"{total.states} states checked, {total.joins} joins, {total.leaves} leaves, "
              f"{total.seconds:.1f}s")
    return status


if __name__ == "__main__":
    sys.exit(main())
