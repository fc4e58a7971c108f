"""The protocol verification harness (``timely.verify``): seed 002's safety, on our classes.

Protects the safety of progress tracking as implemented: random schedules of the
exchange protocol (perf_op under the capability rules, partial sends with a justified
remainder, FIFO deliveries in any interleaving), local propagation and the combined
protocol, whose workers are our real ChangeBatch (both twins), Progcaster and Tracker,
plus workers joining mid-run through the real bootstrap code (peer-to-peer:
BootstrapServer + run_client; Kafka: snapshot + tail, run_kafka_client), with the
capabilities their bootstrap worker grants them (``grants.implied_times``), and workers
leaving mid-run (net-zero handovers, then gone). After every
transition the checker evaluates seed 002's exchange ``Safe`` (temporal form), the
``glob`` lemma, the combined ``Safe`` of §6, convergence of every Tracker to the
oracle's ``implied_frontier`` once its worklists are empty, and the accounting those
rest on; each schedule ends drained, with every view equal to the true state.

The mutation tests keep the checker honest: each deliberately broken variant must be
caught within its budget (among them the two races the model found in the grant and
handover rules: a grant at exactly a held pointstamp, a handover its sender's batches in
flight rest on), and the silent one (an off-by-one in the bootstrap sequence
number, which the real Progcaster cannot notice) must be caught by seed 002's
properties alone.

Budgets: ``TIMELY_VERIFY_SEEDS`` (default 16) seeds x ``TIMELY_VERIFY_STEPS`` (default
2000) transitions per (twin, mode): about 90 schedules and 33,000 transitions each,
about 880 schedules and 330,000 checked transitions in all (about 50 s; every mutation
below is caught within 1,000); set them higher for a nightly run, or use
``python -m timely.verify --steps N --seeds K``.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest

from timely.verify import MUTATIONS, Options, explore, mutated, run_schedule
from timely.verify.__main__ import main

TWIN_NEEDS = ("ChangeBatch", "Tracker")

SEEDS = int(os.environ.get("TIMELY_VERIFY_SEEDS", "16"))
STEPS = int(os.environ.get("TIMELY_VERIFY_STEPS", "2000"))
MUTATION_BUDGET = 20_000          # transitions; every mutation is caught in < 1,000 today
SAFETY_ONLY_BUDGET = 40_000       # seed 002's properties alone, for the silent off-by-one

MODES = {"p2p": Options(), "p2p-join": Options(join=True), "kafka-join": Options(join=True, kafka=True),
         "p2p-join-leave": Options(join=True, leave=True),
         "kafka-join-leave": Options(join=True, kafka=True, leave=True)}


def _describe(report) -> str:
    result = report.violations[0]
    return (f"{result.violation}\n{result.summary}, after {result.transitions} transitions; "
            f"last transitions:\n  " + "\n  ".join(result.trace[-20:]) +
            f"\nreplay: python -m timely.verify --replay {result.seed} ...")


# =========================================================================================
# The properties hold
# =========================================================================================


@pytest.mark.parametrize("mode", list(MODES))
def test_properties_hold_on_random_schedules(twin, mode):
    options = replace(MODES[mode], twin=twin.name)
    report = explore(options, seeds=list(range(SEEDS)), steps=STEPS)
    print(f"\n{twin.name} {mode}: {report.schedules} schedules, {report.transitions} transitions, "
          f"{report.states} states checked, {report.joins} joins in {report.seconds:.1f}s")
    assert not report.violations, _describe(report)
    assert report.schedules >= SEEDS
    assert report.transitions >= SEEDS * STEPS * 0.9
    for prop in ("exchange_safe", "glob_lemma", "combined_safe", "convergence", "accounting", "final"):
        assert report.evaluations[prop] > 0, f"{prop} was never evaluated"
    if options.join:
        assert report.joins >= SEEDS, "joins did not happen"
    if options.leave:
        assert report.leaves >= SEEDS, "leaves did not happen"


def test_exploration_reaches_the_protocol_corners():
    """The random schedules do reach the behaviours the properties are about."""
    p2p = explore(Options(join=True), seeds=[0, 1, 2], steps=3000)
    kafka = explore(Options(join=True, kafka=True), seeds=[0, 1, 2], steps=3000)
    assert not p2p.violations and not kafka.violations
    for corner in ("negative glob count",                     # transiently negative counts
                   "partial send (justified remainder)",      # send_upd of a part of temp
                   "p2p: range requested",                    # gaps filled by range requests
                   "p2p: state meets a marker (no gap)",
                   "p2p: state ahead of a marker (held duplicates)"):
        assert p2p.coverage[corner] > 0, corner
    for corner in ("kafka: latest snapshot", "kafka: older snapshot", "kafka: no snapshot",
                   "kafka: non-empty tail", "kafka: a record of several batches",
                   "kafka: a record of several channels",
                   "kafka: grants announced in the record flushed before bs-grants"):
        assert kafka.coverage[corner] > 0, corner
    for report in (p2p, kafka):
        for corner in ("grants: capabilities granted", "grants: joiner installed holding grants",
                       "grants: none (a join without grants)",
                       "grants: after a capability held at the output itself"):
            assert report.coverage[corner] > 0, corner
    kinds = set(p2p.by_kind) | set(kafka.by_kind)
    assert kinds >= {"perf_op", "recv_cap", "send_upd", "deliver", "propagate", "join_start",
                     "apply_join", "ctrl", "serve", "client", "kafka_install", "flush_log"}


def test_exploration_reaches_the_leave_corners():
    """Leaves: handovers of both kinds, data still arriving, a departed worker's batches
    still in flight, joins after a leave (the server waiting for those batches; a Kafka
    joiner reading a departed worker's log)."""
    p2p = explore(Options(join=True, leave=True), seeds=[0, 1, 2], steps=3000)
    kafka = explore(Options(join=True, kafka=True, leave=True), seeds=[0, 1, 2], steps=3000)
    assert not p2p.violations and not kafka.violations
    assert p2p.leaves > 0 and kafka.leaves > 0
    for corner in ("leave: handover above a kept capability",
                   "leave: handover after every batch was applied",
                   "leave: data received while leaving",
                   "leave: batches of a departed worker still in flight",
                   "leave: messages to a departed worker discarded", "joins after a leave",
                   "p2p: server waited for a departed worker's batches"):
        assert p2p.coverage[corner] > 0, corner
    for corner in ("leave: handover above a kept capability", "joins after a leave",
                   "kafka: a departed worker's log read by a joiner"):
        assert kafka.coverage[corner] > 0, corner
    assert not kafka.coverage["leave: handover after every batch was applied"]
    assert set(p2p.by_kind) >= {"leave_start", "handover", "leave_finish"}


@pytest.mark.parametrize("mode", list(MODES))
def test_incremental_checks_agree_with_full_checks(mode):
    """Re-evaluating every property on every state finds nothing the incremental
    checker missed, and does not change the schedule."""
    for seed in (101, 102):
        fast = run_schedule(MODES[mode], seed, 300, trace_length=10**6)
        full = run_schedule(MODES[mode], seed, 300, trace_length=10**6, full_checks=True)
        assert fast.violation is None and full.violation is None, full.violation or fast.violation
        assert fast.trace == full.trace
        assert full.evaluations["model"] > 0


def test_schedules_are_reproducible_and_twin_independent(both_twins):
    py, cy = both_twins
    for mode in MODES.values():
        a = run_schedule(replace(mode, twin=py.name), 7, 300, trace_length=10**6)
        b = run_schedule(replace(mode, twin=py.name), 7, 300, trace_length=10**6)
        c = run_schedule(replace(mode, twin=cy.name), 7, 300, trace_length=10**6)
        assert a.trace == b.trace == c.trace
        assert a.transitions == c.transitions and a.states == c.states


# =========================================================================================
# Mutations: the checker catches broken variants
# =========================================================================================


def _caught(key: str, twin: str, budget: int = MUTATION_BUDGET, disabled: tuple = ()) -> tuple:
    started = time.perf_counter()
    report = explore(replace(mutated(key), twin=twin), seeds=[0], steps=budget,
                     stop_on_violation=True, disabled=disabled)
    assert report.violations, (f"mutation {key} ({MUTATIONS[key].description}) was NOT caught "
                               f"in {report.transitions} transitions ({report.schedules} schedules)")
    result = report.violations[0]
    print(f"\n{key}: caught by [{result.violation.prop}] after {report.transitions} transitions "
          f"({report.schedules} schedules, {time.perf_counter() - started:.2f}s)")
    return result.violation.prop, report.transitions


def test_mutation_split_progress_batch_is_caught(twin):
    """A batch sent as two, retirements first: a worker sees a consumption without the
    capability it produced; its glob becomes vacant below a pointstamp that exists."""
    prop, _ = _caught("split_batch", twin.name)
    assert prop in ("exchange_safe", "glob_lemma", "combined_safe")


def test_mutation_unjustified_send_is_caught(twin):
    """send_upd of a part of temp whose remainder is not justified."""
    prop, _ = _caught("unjustified_send", twin.name)
    assert prop in ("exchange_safe", "glob_lemma", "combined_safe")


def test_mutation_unsupported_capability_is_caught(twin):
    """An operation that creates a capability below everything held."""
    prop, _ = _caught("unsupported_positive", twin.name)
    assert prop in ("exchange_safe", "glob_lemma", "combined_safe")


def test_mutation_dropped_bootstrap_range_is_caught(twin):
    """The server's range answer loses a batch: the joiner's view lacks it."""
    _caught("dropped_range", twin.name)


def test_mutation_bootstrap_sequence_off_by_one_is_caught(twin):
    """The bootstrap state claims last_seq + 1: the joiner skips one batch per sender,
    and the real Progcaster's sequence checks cannot see it."""
    _caught("bootstrap_seq_off_by_one", twin.name)


def test_mutation_kafka_snapshot_sequence_off_by_one_is_caught(twin):
    _caught("bootstrap_seq_off_by_one_kafka", twin.name)


def test_mutation_marker_off_by_one_is_caught(twin):
    """A marker one too low: the joiner requests one batch too few."""
    _caught("marker_off_by_one", twin.name)


def test_mutation_joiner_skipping_the_snapshot_tail_is_caught(twin):
    """A Kafka joiner that installs the snapshots but tails the logs from their end."""
    _caught("skip_snapshot_tail", twin.name)


def test_mutation_grant_of_a_closed_time_is_caught(twin):
    """The bootstrap server grants the minimum time, which nothing it holds justifies."""
    prop, _ = _caught("grant_closed_time", twin.name)
    assert prop in ("exchange_safe", "glob_lemma", "combined_safe")


def test_mutation_grant_not_strictly_above_a_held_capability_is_caught(twin):
    """A grant at exactly a pointstamp the server holds (at-or-above, as
    timely.rescaling.grants computes it): the joiner's -1 for it can reach a view before
    the server's +1 and cancel the server's own count."""
    prop, _ = _caught("grant_not_strict", twin.name)
    assert prop in ("exchange_safe", "glob_lemma", "combined_safe")


def test_mutation_grants_announced_after_the_joiner_installed_is_caught(twin):
    """Grants handed over first and announced later: the server may drop what justified
    them in between."""
    prop, _ = _caught("grant_announced_late", twin.name)
    assert prop in ("exchange_safe", "glob_lemma", "combined_safe")


def test_mutation_unordered_handover_is_caught(twin):
    """A leaver's net-zero handover of a capability its batches in flight rest on."""
    prop, _ = _caught("handover_unordered", twin.name)
    assert prop in ("exchange_safe", "glob_lemma", "combined_safe")


def test_mutation_handover_that_is_not_net_zero_is_caught(twin):
    """A handover that sends -1 while the receiver takes the capability silently."""
    prop, _ = _caught("handover_not_net_zero", twin.name)
    assert prop in ("exchange_safe", "glob_lemma", "combined_safe", "final")


def test_mutation_record_that_splits_a_batch_is_caught(twin):
    """Kafka: a step's record cut through a batch, both halves under its sequence number:
    another process applies half a batch (and skips the rest as a duplicate)."""
    prop, _ = _caught("record_splits_batch", twin.name)
    assert prop in ("exchange_safe", "glob_lemma", "combined_safe", "convergence", "accounting", "final")


def test_mutation_record_keeping_one_batch_per_channel_is_caught(twin):
    """Kafka: a step's record that keeps only each channel's last batch loses the others."""
    _caught("record_last_batch_per_channel", twin.name)


def test_record_that_splits_a_batch_is_unsafe_by_seed_002_properties_alone():
    """Without the accounting check, the sequence checks and the final drain, the
    paper's Safe / glob lemma still see half a batch applied. (A record that loses a
    batch whole only stalls its readers, which the sequence checks and the drain see.)"""
    prop, _ = _caught("record_splits_batch", "python", budget=SAFETY_ONLY_BUDGET,
                      disabled=("accounting", "implementation", "final"))
    assert prop in ("exchange_safe", "glob_lemma", "combined_safe", "convergence")


@pytest.mark.parametrize("key", ["bootstrap_seq_off_by_one", "bootstrap_seq_off_by_one_kafka"])
def test_silent_off_by_one_is_caught_by_seed_002_properties_alone(key):
    """Without the accounting check, the implementation's own sequence checks and the
    final drain, the paper's Safe / glob lemma still catch the silent off-by-one."""
    prop, _ = _caught(key, "python", budget=SAFETY_ONLY_BUDGET,
                      disabled=("accounting", "implementation", "final"))
    assert prop in ("exchange_safe", "glob_lemma", "combined_safe", "convergence")


def test_every_mutation_has_a_test():
    tested = {"split_batch", "unjustified_send", "unsupported_positive", "dropped_range",
              "bootstrap_seq_off_by_one", "bootstrap_seq_off_by_one_kafka", "marker_off_by_one",
              "skip_snapshot_tail", "grant_closed_time", "grant_not_strict", "grant_announced_late",
              "handover_unordered", "handover_not_net_zero", "record_splits_batch",
              "record_last_batch_per_channel"}
    assert set(MUTATIONS) == tested


# =========================================================================================
# The command line
# =========================================================================================


def test_cli_reports_counts(capsys):
    assert main(["--steps", "400", "--seeds", "2", "--twin", "python", "--join"]) == 0
    out = capsys.readouterr().out
    for word in ("schedules:", "transitions:", "states checked:", "joins completed:", "violations: 0"):
        assert word in out, out
    assert main(["--steps", "400", "--seeds", "2", "--twin", "python", "--join", "--leave"]) == 0
    out = capsys.readouterr().out
    assert "p2p with joins and leaves" in out and "leaves completed:" in out, out


def test_cli_reports_a_violation_with_its_replay(capsys):
    assert main(["--steps", "5000", "--seeds", "1", "--twin", "python", "--mutation", "split_batch",
                 "--stop"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATION" in out and "replay: python -m timely.verify --replay" in out
    seed = int(out.split("--replay ")[1].split()[0])
    assert main(["--replay", str(seed), "--twin", "python", "--mutation", "split_batch"]) == 1
    assert "VIOLATION" in capsys.readouterr().out
