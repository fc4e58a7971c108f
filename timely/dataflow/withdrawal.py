"""Withdrawals: a stream whose source hands records on before it knows they count, and
takes back those that do not.

A source that reads a log under the epoch contract learns that a record counts only
when its epoch's marker comes. ``kafka_source(early=True)`` does not wait: it hands
each record on as it is read, at its epoch, and holds its capability at that epoch
until the marker, as before. Records the marker does not count (a crashed writer's
orphans), and records a reader gives away with its partition (their new reader reads
them again), it sends again, at the same time, in a ``Withdrawal``: a batch that takes
one equal record back per record it holds.

Only an operator that applies records once their time is complete can honour that: it
subtracts a time's withdrawals from the time's records before it applies them (the
withdrawals arrive before the frontier passes the time, since the source holds it).
Megaphone's ``stateful_unary`` and ``stateful_binary`` do (``timely.megaphone.state``);
any other input refuses such a stream when the dataflow is built (``check_input``), so
a withdrawal can never be mistaken for data.

Costs: nothing per record while nothing is withdrawn (a type check per batch); a
withdrawal costs O(records at the time in the bins it touches) when its records hash,
times the records withdrawn when they do not (events as dicts).

>>> w = Withdrawal([("a", 1)])
>>> is_withdrawal(w), is_withdrawal([("a", 1)])
(True, False)
>>> subtract([("a", 1), ("b", 2), ("a", 1)], [("a", 1)])
[('b', 2), ('a', 1)]
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Optional


class Withdrawal(list):
    """Records handed on earlier at the same time that do not count after all."""

    __slots__ = ()


def is_withdrawal(batch: Any) -> bool:
    """Whether a batch received on an input takes records back."""
    return type(batch) is Withdrawal


class WithdrawalError(ValueError):
    """A stream that may withdraw records feeds an operator that cannot take them back."""


def check_input(stream: Any, operator: str, accepts: bool) -> None:
    """Refuse to connect ``stream`` to ``operator`` if the stream may withdraw records
    and the operator does not subtract them."""
    if getattr(stream, "withdraws", False) and not accepts:
        raise WithdrawalError(
            f"operator {operator!r} reads a stream that hands records on before they are known "
            f"to count and may withdraw some later (kafka_source(early=True)); only "
            f"stateful_unary and stateful_binary take withdrawals back. Read the source with "
            f"early=False, or put such an operator first")


def subtract(records: list, withdrawn: list) -> list:
    """``records`` without one equal record per record of ``withdrawn`` (the first
    equal ones), the others in their order. A withdrawn record that is not among
    ``records`` is an error: it was handed on at this time, so it must be here."""
    gone = Outstanding(withdrawn)
    kept = gone.take_from(records)
    gone.check()
    return kept


class Outstanding:
    """Records still to take back, from one batch after another (``take_from``); a
    multiset of hashable records, or a list compared one by one when they do not hash.

    >>> gone = Outstanding([("a", 1), ("a", 1)])
    >>> gone.take_from([("a", 1), ("b", 2)]), gone.take_from([("c", 3), ("a", 1)]), bool(gone)
    ([('b', 2)], [('c', 3)], False)
    """

    __slots__ = ("_counts", "_left")

    def __init__(self, withdrawn: list) -> None:
        self._counts: Optional[Counter] = None
        self._left: list = []
        try:
            self._counts = Counter(withdrawn)
        except TypeError:               # unhashable records (dicts): compare one by one
            self._left = list(withdrawn)

    def add(self, withdrawn: list) -> None:
        """Take back ``withdrawn`` too."""
        if self._counts is not None:
            try:
                more = Counter(withdrawn)       # (all or nothing: a Counter updated in place
            except TypeError:                   # would keep the records before an unhashable one)
                self._left = list(self._counts.elements())
                self._counts = None
            else:
                self._counts.update(more)
                return
        self._left.extend(withdrawn)

    def take_from(self, records: list) -> list:
        """``records`` without those still outstanding (each taken once)."""
        if not self:
            return records
        kept = []
        counts = self._counts
        if counts is not None:
            for r in records:
                n = counts.get(r)
                if n:
                    if n == 1:
                        del counts[r]
                    else:
                        counts[r] = n - 1
                else:
                    kept.append(r)
            return kept
        left = self._left
        for r in records:
            try:
                left.remove(r)
            except ValueError:
                kept.append(r)
        return kept

    def __bool__(self) -> bool:
        return bool(self._counts) or bool(self._left)

    def first(self) -> Any:
        return next(iter(self._counts)) if self._counts else self._left[0]

    def check(self) -> None:
        """Raise if some withdrawn record was not found."""
        if self:
            raise LookupError(f"a withdrawal takes back {self.first()!r}, which was not handed on at its time")
