"""The checkpoint protocol's verification harness (``timely.verify.checkpoints``).

Protects exactly-once recovery as implemented: random schedules of workers applying
keyed records, crossing checkpoint boundaries, moving bins, a store acknowledging
writes late, commit operators committing, and crashes (some workers, or all) that lose
any suffix of every writer's pending records, run on the real ``BinLog``, records and
codec, ``Registry`` (``decide`` / ``redecide`` / ``install``), ``restore_point`` and
``fold_bin``. At every restore (and after every transition that made something durable,
as if every worker died then) the restored label must be complete in its incarnation,
the restore must not fail, every bin must equal the fold of exactly the records before
the label and the sources must read on from there; at the end every key must hold the
fold of every record.

The mutant tests keep the checker honest: each deliberately broken variant of the real
code (monkeypatched) or of the protocol's steps must be caught within its budget, by
the property it breaks, both with the after-every-transition restore checks and with
only the restores of the crashes and restarts the schedules make.

Budgets: ``TIMELY_VERIFY_CHECKPOINT_SEEDS`` (default 16) seeds x
``TIMELY_VERIFY_CHECKPOINT_STEPS`` (default 8000) transitions: about 1,900 schedules in
about 10 s; ``python -m timely.verify --checkpoints --steps N --seeds K`` for more.
"""
from __future__ import annotations

import os
import time

import pytest

from timely.checkpoint import records, registry
from timely.checkpoint.binlog import BinLog
from timely.verify import (CHECKPOINT_MUTANTS, CheckpointOptions, explore_checkpoints,
                           run_checkpoint_schedule)
from timely.verify.__main__ import main
from timely.verify.checkpoints import CHECKPOINT_PROPERTIES, mutant_applied

SEEDS = int(os.environ.get("TIMELY_VERIFY_CHECKPOINT_SEEDS", "16"))
STEPS = int(os.environ.get("TIMELY_VERIFY_CHECKPOINT_STEPS", "8000"))
MUTANT_BUDGET = 40_000            # transitions; every mutant is caught in < 10,000 today
CRASHES_ONLY_BUDGET = 250_000     # without the after-every-transition checks: < 70,000 today


def _describe(report) -> str:
    result = report.violations[0]
    return (f"{result.violation}\n{result.summary}, after {result.transitions} transitions; "
            f"last transitions:\n  " + "\n  ".join(result.trace[-25:]) +
            f"\nreplay: python -m timely.verify --checkpoints --replay {result.seed} "
            f"--schedule-steps {result.steps}")


# =========================================================================================
# The properties hold
# =========================================================================================


def test_properties_hold_on_random_schedules():
    report = explore_checkpoints(CheckpointOptions(), seeds=list(range(SEEDS)), steps=STEPS)
    print(f"\n{report.schedules} schedules, {report.transitions} transitions, {report.states} restores "
          f"checked in {report.seconds:.1f}s")
    assert not report.violations, _describe(report)
    assert report.schedules >= 200
    assert report.transitions >= SEEDS * STEPS * 0.9
    for prop in CHECKPOINT_PROPERTIES:
        assert report.evaluations[prop] > 0, f"{prop} was never evaluated"
    # the schedules reach what the properties are about
    for corner in ("bin moves", "commit", "commit at the end", "crash (survivors roll back)",
                   "restart of every worker", "restore: a checkpoint of the life that died",
                   "restore: the dead life's start (its parent's checkpoint)",
                   "restore: none (the dead lives never completed a checkpoint)",
                   "restore: at the end epoch"):
        assert report.coverage[corner] > 0, corner
    assert set(report.by_kind) == {"apply", "cross", "ack", "commit", "config", "ship", "arrive",
                                   "crash", "restart"}


def test_properties_hold_when_a_dead_life_writes_late():
    """Beyond the fault model (pending records lost or landed at the crash): some land
    after the next life began, in order per writer. Restores stay exact."""
    report = explore_checkpoints(CheckpointOptions(late_writes=True), seeds=list(range(4)), steps=STEPS)
    assert not report.violations, _describe(report)
    assert report.coverage["late writes of a dead life"] > 0


@pytest.mark.parametrize("shape", [dict(workers=4, partitions=1), dict(interval=1, bins=8),
                                   dict(workers=2, interval=3, max_crashes=4, tracked=True)])
def test_properties_hold_in_fixed_shapes(shape):
    """Shapes worth forcing: workers without partitions (their commits complete nothing),
    a boundary every epoch, many crashes of two workers."""
    report = explore_checkpoints(CheckpointOptions(**shape), seeds=[1, 2], steps=2000)
    assert not report.violations, _describe(report)


def test_schedules_are_reproducible():
    for seed in (3, 4, 5):
        a = run_checkpoint_schedule(CheckpointOptions(late_writes=True), seed, 200, trace_length=10**6)
        b = run_checkpoint_schedule(CheckpointOptions(late_writes=True), seed, 200, trace_length=10**6)
        assert a.violation is None and a.trace == b.trace and a.transitions == b.transitions


# =========================================================================================
# Mutants: the checker catches broken variants
# =========================================================================================


def _caught(name: str, budget: int, virtual: bool = True) -> tuple:
    started = time.perf_counter()
    report = explore_checkpoints(CheckpointOptions(mutant=name, virtual=virtual), seeds=[0], steps=budget,
                                 stop_on_violation=True)
    mutant = CHECKPOINT_MUTANTS[name]
    assert report.violations, (f"mutant {name} ({mutant.description}) was NOT caught in "
                               f"{report.transitions} transitions ({report.schedules} schedules)")
    result = report.violations[0]
    print(f"\n{name}: caught by [{result.violation.prop}] in schedule {result.seed} after "
          f"{report.transitions} transitions ({report.schedules} schedules, "
          f"{time.perf_counter() - started:.2f}s)")
    assert result.violation.prop in mutant.props, _describe(report)
    return result.violation.prop, report.transitions


@pytest.mark.parametrize("name", sorted(CHECKPOINT_MUTANTS))
def test_mutant_is_caught(name):
    _caught(name, MUTANT_BUDGET)


@pytest.mark.parametrize("name", sorted(CHECKPOINT_MUTANTS))
def test_mutant_is_caught_by_the_restores_of_crashes_alone(name):
    """Without the restore checks after every durable change: the schedules' own
    crashes and restarts find every mutant too."""
    _caught(name, CRASHES_ONLY_BUDGET, virtual=False)


def test_every_mutant_has_a_property_and_is_tested():
    assert set(CHECKPOINT_MUTANTS) == {"delta_label_applied_max", "arrival_base_at_crossing_label",
                                       "commit_before_durable", "complete_ignores_partitions",
                                       "restore_ignores_incarnations", "fold_stale_deltas",
                                       "start_without_bases", "ship_without_cross", "delta_without_deletes"}
    for mutant in CHECKPOINT_MUTANTS.values():
        assert mutant.props and set(mutant.props) <= set(CHECKPOINT_PROPERTIES)


def test_mutants_patch_the_real_code_only_while_they_run():
    originals = (BinLog._write, BinLog.cross, BinLog.durable, BinLog.start, records.complete_labels,
                 records.restore_point, registry.restore_point, records.fold_bin)
    with mutant_applied("restore_ignores_incarnations"):
        assert records.restore_point is not originals[5] and registry.restore_point is records.restore_point
    with mutant_applied("commit_before_durable"):
        assert BinLog.durable is not originals[2]
    for name in CHECKPOINT_MUTANTS:
        run_checkpoint_schedule(CheckpointOptions(mutant=name), 1, 50)
    assert (BinLog._write, BinLog.cross, BinLog.durable, BinLog.start, records.complete_labels,
            records.restore_point, registry.restore_point, records.fold_bin) == originals


# =========================================================================================
# The command line
# =========================================================================================


def test_cli_reports_counts(capsys):
    assert main(["--checkpoints", "--steps", "400", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    for word in ("== checkpoints", "schedules:", "transitions:", "restores checked:", "violations: 0"):
        assert word in out, out


def test_cli_reports_a_violation_and_replays_it_with_its_trace(capsys):
    assert main(["--checkpoints", "--steps", "5000", "--seeds", "1", "--mutant", "fold_stale_deltas",
                 "--stop"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATION" in out and "[exactly_once]" in out, out
    replay = out.split("replay: python -m timely.verify ")[1].split("\n")[0].split()
    assert replay[0] == "--replay" and "--checkpoints" in replay
    assert main(replay) == 1
    out = capsys.readouterr().out
    assert "VIOLATION: [exactly_once]" in out and "life #1 (fresh)" in out and " commits " in out, out
    assert main(["--checkpoints", "--mutant", "split_batch", "--steps", "10"]) == 2
    assert main(["--mutant", "fold_stale_deltas", "--steps", "10"]) == 2
