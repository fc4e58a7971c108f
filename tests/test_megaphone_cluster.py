"""Keyed state across live joins, with real processes on 127.0.0.1, in both progress modes.

Protects what a user of a growing cluster relies on when counting with
``state_machine`` (examples/wordcount.py): a process that joins mid-run, in the middle
of an epoch, once or twice, changes no running count; the rebalancer moves bins to the
joiners by every strategy, until the shares are equal within one bin; the state that
moved is exactly the state held (no key lost, none on two workers); with
``--rebalance off`` nothing moves and the counts are still exact. Every process is
bounded in time and reaped by PID.
"""
from __future__ import annotations

import json
import os
import sys
from collections import Counter

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

import wordcount  # noqa: E402
from clusters import wait_for_line  # noqa: E402
from timely.launch import LocalCluster  # noqa: E402

WORDCOUNT = os.path.join(ROOT, "examples", "wordcount.py")
LINES, EPOCHS, VOCABULARY, BINS = 2400, 40, 300, 32


def run_cluster(tmp_path, mode, joins=1, migration="batched", rebalance="auto", epoch_delay=0.15):
    """2 processes x 2 workers count words; ``joins`` processes join one after another,
    each while an epoch is open. Returns (outputs by process, the interleaved log)."""
    args = ["--lines", str(LINES), "--epochs", str(EPOCHS), "--vocabulary", str(VOCABULARY),
            "--bins", str(BINS), "--epoch-delay", str(epoch_delay), "--timeout", "10",
            "--migration", migration, "--rebalance", rebalance,
            "--output", str(tmp_path / "out-{process}.json"), *mode]
    with LocalCluster(WORDCOUNT, slots=2 + joins, workers=2, extra=args) as cluster:
        cluster.start(2)
        # once the cluster runs, its 40 epochs stay open 0.15 s each: the join lands inside
        # one (the tests then see the Bootstrap and the bins move, which only a running job does)
        wait_for_line(cluster.processes[0], r"running, in a cluster", timeout=30)
        for j in range(joins):
            if j:           # the next join once the previous joiner has its routing state
                wait_for_line(cluster.processes[-1], r"received the routing state", timeout=30)
            cluster.join(original=2, bootstrap=0)
        codes = cluster.wait(120)
        log = "\n".join(cluster.interleaved())
        assert codes == [0] * (2 + joins), log
    outputs = {}
    for p in range(2 + joins):
        with open(tmp_path / f"out-{p}.json") as f:
            outputs[p] = json.load(f)
    return outputs, log


def expected():
    return wordcount.expected_running(wordcount.synthetic_lines(LINES, 10, VOCABULARY), EPOCHS)


def check_exact(outputs, log):
    batches = [b for out in outputs.values() for b in out["batches"]]
    assert wordcount.latest(batches) == expected(), log
    # the state held at the end is exactly the final counts: no key lost, none twice
    held = [dict(map(tuple, pairs)) for out in outputs.values() for pairs in out["state"].values()]
    union = {}
    for state in held:
        assert not set(state) & set(union), "a word is held by two workers"
        union.update(state)
    final = Counter(w for line in wordcount.synthetic_lines(LINES, 10, VOCABULARY) for w in line.split())
    assert union == dict(final)


def shares(log):
    """Bins held per worker at the end, from each worker's closing line."""
    return [int(line.split(" holds ")[1].split(" bins")[0]) for line in log.splitlines() if " holds " in line]


@pytest.mark.parametrize("migration", ["batched", "fluid", "all-at-once"])
def test_join_mid_epoch_keeps_running_counts_exact(tmp_path, mode, migration):
    outputs, log = run_cluster(tmp_path, mode, migration=migration)
    check_exact(outputs, log)
    assert "workers [4, 5] joined; Bootstrap from worker 0" in log, log
    assert "received the routing state" in log
    assert "balanced" in log, f"the rebalancer did not finish moving bins:\n{log}"
    held = shares(log)      # equal shares within one bin, the joiners' included
    assert len(held) == 6 and max(held) - min(held) <= 1 and sum(held) == BINS, held


def test_two_joins_move_bins_to_both_joiners(tmp_path, mode):
    outputs, log = run_cluster(tmp_path, mode, joins=2, migration="all-at-once")
    check_exact(outputs, log)
    assert "workers [4, 5] joined" in log and "workers [6, 7] joined" in log, log
    held = shares(log)
    assert len(held) == 8 and max(held) - min(held) <= 1 and sum(held) == BINS, held


def test_rebalance_off_moves_nothing_and_stays_exact(tmp_path):
    outputs, log = run_cluster(tmp_path, [], rebalance="off")
    check_exact(outputs, log)
    assert "received the routing state" in log      # a joiner is still bootstrapped
    assert " ships " not in log, log
    assert sorted(shares(log)) == [0, 0, 8, 8, 8, 8], log
