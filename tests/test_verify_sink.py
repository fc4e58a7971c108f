"""timely.verify.sink: a Kafka sink partition changing writer, as random schedules.

Protects: the real ``KafkaSinkState`` (write, empty-epoch markers, reading the markers
before a first write) under Megaphone's hand-over of the partition's bin at epoch
boundaries and crashes anywhere, a writer's own included, keeps every epoch readable
once and whole, and never leaves a complete epoch without a writer; and the checker
is not vacuous: each mutant (a writer that trusts the bin's state, a bin that leaves
before its owner wrote every epoch before the hand-over) is caught.
"""
from __future__ import annotations

import pytest

from timely.verify import SINK_MUTANTS, explore_sink, run_sink_schedule


def test_every_schedule_keeps_each_epoch_once_and_whole():
    results = explore_sink(seeds=60, steps=300)
    assert [r.violation for r in results if r.violation] == []
    assert len(results) == 60 and all(r.transitions > 100 for r in results)
    kinds = {a[0] for r in results for a in r.trace}
    assert {"write", "write_crash", "through", "move", "ship", "arrive", "crash"} <= kinds, kinds


@pytest.mark.parametrize("mutant", SINK_MUTANTS)
def test_each_mutant_is_caught(mutant):
    results = explore_sink(seeds=60, steps=300, mutant=mutant)
    assert results[-1].violation is not None, f"{mutant} was not caught in 60 schedules"


def test_a_schedule_replays_from_its_seed():
    first, again = run_sink_schedule(7, 200), run_sink_schedule(7, 200)
    assert first.trace == again.trace and first.violation is None
