"""Withdrawals: records handed on before they are known to count, taken back at their time.

Protects what ``kafka_source(early=True)`` relies on downstream:
- ``stateful_unary`` / ``stateful_binary`` apply, at each time, the records handed on
  less those withdrawn (one equal record per record withdrawn, per input and bin), on
  one worker and across two (threads, and processes whose messages cross the wire
  codec), whatever order the batches come in and however the
  records of a bin are split between messages; records that do not hash (events as
  dicts) too;
- the same when the records are combined as they arrive (``combine``): a time with
  withdrawals is combined again from what is left;
- a withdrawal of a record that was never handed on at that time is an error naming it;
- an operator that cannot take records back (``map``, ``state_machine``, which applies
  records as they arrive) refuses a stream that may withdraw when the dataflow is built,
  naming the operator and what to do.
"""
from __future__ import annotations

from collections import Counter

import pytest

import timely
from bounded import execute_bounded
from timely.dataflow.withdrawal import (Outstanding, Withdrawal, WithdrawalError, is_withdrawal,
                                        subtract)
from timely.megaphone.state import StatefulError


def scripted(scope, script):
    """A source that sends ``script`` [(time, batch)] in one go (each batch as it is,
    a ``Withdrawal`` included), then finishes; its stream is marked as withdrawing."""
    builder = scope.operator("Scripted")
    out, stream = builder.new_output()

    def constructor(caps):
        held = [caps[0]]

        def logic():
            if held:
                cap = held.pop()
                for t, batch in script:
                    out.give_batch(cap, batch, t)
                cap.drop()
        scope.worker.activations.activate(builder.path)
        return logic
    builder.build(constructor)
    stream.withdraws = True
    return stream


def gathered(acc, records):
    """A ``combine`` that keeps every record it is given (as a list, in order)."""
    return (acc or []) + list(records)


def run_keyed(workers, scripts, records_as=tuple, combine=None):
    """Each worker sends its script into a ``stateful_unary`` keyed by the record's
    first field; returns {time: Counter of the records its logic was given} (with
    ``combine``: of the records in the accumulator it was given)."""
    def logic(time, records, state, notificator, output):
        output.extend(records)

    def build(worker):
        script = scripts[worker.index]
        captured = worker.dataflow(
            lambda scope: scripted(scope, script).stateful_unary(None, lambda r: r[0], "Keyed", logic, bins=8,
                                                                  combine=combine)
            .capture())
        worker.run()
        return captured.by_time()

    got: dict = {}
    config = timely.Config.from_args(["-w", "2", "--worker-mode", "processes"]) if workers == "processes" else workers
    for by_time in execute_bounded(config, build, timeout=60):
        for t, records in by_time.items():
            got.setdefault(t, Counter()).update(records_as(r) if records_as is tuple else r for r in records)
    return got


def test_subtract_takes_one_equal_record_per_record_withdrawn():
    assert subtract([("a", 1), ("b", 2), ("a", 1), ("a", 1)], [("a", 1), ("a", 1)]) == [("b", 2), ("a", 1)]
    assert subtract([{"k": 1}, {"k": 2}, {"k": 1}], [{"k": 1}]) == [{"k": 2}, {"k": 1}]
    with pytest.raises(LookupError, match=r"takes back \('c', 3\), which was not handed on"):
        subtract([("a", 1)], [("c", 3)])
    gone = Outstanding([("a", 1)])
    gone.add([("c", 3), {"unhashable": True}])
    assert gone.take_from([("a", 1), {"unhashable": True}, ("b", 2)]) == [("b", 2)]
    assert gone.take_from([("c", 3), ("c", 3)]) == [("c", 3)] and not gone
    assert is_withdrawal(Withdrawal([1])) and not is_withdrawal([1])


@pytest.mark.parametrize("combine", [None, gathered], ids=["records", "combined"])
@pytest.mark.parametrize("workers", [1, 2, "processes"])
def test_stateful_unary_applies_what_was_handed_on_less_what_was_withdrawn(workers, combine):
    """(``processes``: two forked worker processes, so F's messages, withdrawn ones
    included, cross the wire codec. ``combined``: the records were folded into an
    accumulator as they came, and a time with withdrawals is combined again from what
    is left.)"""
    n = 2 if workers == "processes" else workers
    handed = {w: [(t, [(f"k{(i * 7 + w) % 11}", t, i % 3) for i in range(40)]) for t in range(3)]
              for w in range(n)}
    scripts = {}
    expected: dict = {}
    for w, batches in handed.items():
        script = []
        for t, records in batches:
            # handed on in two batches; a withdrawal between them, and one after
            script += [(t, records[:25]), (t, Withdrawal(records[3:9])), (t, records[25:]),
                       (t, Withdrawal(records[30:32] + records[0:1]))]
            expected.setdefault(t, Counter()).update(records)
            expected[t].subtract(records[3:9] + records[30:32] + records[0:1])
        scripts[w] = script
    got = run_keyed(workers, scripts, combine=combine)
    assert got == {t: +c for t, c in expected.items()}


def test_an_equal_record_handed_on_twice_and_withdrawn_once_counts_once():
    record = ("k", 1, 2)
    got = run_keyed(1, {0: [(0, [record, ("j", 0, 0)]), (0, [record]), (0, Withdrawal([record]))]})
    assert got == {0: Counter({record: 1, ("j", 0, 0): 1})}


def test_records_that_do_not_hash_are_withdrawn_too():
    def logic(time, records, state, notificator, output):
        output.extend(r["n"] for r in records)

    def build(worker):
        script = [(0, [{"k": "a", "n": 1}, {"k": "a", "n": 2}, {"k": "b", "n": 3}]),
                  (0, Withdrawal([{"k": "a", "n": 2}]))]
        captured = worker.dataflow(
            lambda scope: scripted(scope, script).stateful_unary(None, lambda r: r["k"], "Dicts", logic)
            .capture())
        worker.run()
        return captured.by_time()

    assert {t: sorted(ns) for t, ns in timely.execute(1, build)[0].items()} == {0: [1, 3]}


def test_a_withdrawal_of_a_record_never_handed_on_is_named():
    with pytest.raises(Exception) as info:
        run_keyed(1, {0: [(0, [("a", 0, 0)]), (0, Withdrawal([("a", 9, 9)]))]})
    found = info.value
    while not isinstance(found, StatefulError) and found.__cause__ is not None:
        found = found.__cause__
    assert isinstance(found, StatefulError), repr(info.value)
    assert "('a', 9, 9)" in str(found) and "not handed on at their time" in str(found)


@pytest.mark.parametrize("what, operator", [
    (lambda s: s.map(lambda r: r), "Map"),
    (lambda s: s.state_machine(lambda k, v, st: (v, [])), "StateMachine F"),
])
def test_an_operator_that_cannot_take_records_back_refuses_a_withdrawing_stream(what, operator):
    def build(worker):
        worker.dataflow(lambda scope: what(scripted(scope, [(0, [("a", 1)])])))

    with pytest.raises(Exception) as info:
        timely.execute(1, build)
    found = info.value
    while not isinstance(found, WithdrawalError) and found.__cause__ is not None:
        found = found.__cause__
    assert isinstance(found, WithdrawalError), repr(info.value)
    assert operator in str(found) and "early=False" in str(found)
