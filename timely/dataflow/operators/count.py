"""Accumulate: one value per time and worker, folded from that time's batches and given
when the time is complete (timely's ``Accumulate``: ``accumulate`` and ``count``).

``accumulate(default, logic)`` keeps, for every time a batch arrives at, an accumulator
made by ``default()`` (timely clones its default value; a Python factory such as
``int``, ``list`` or ``Counter`` gives each time a fresh one), replaces it with
``logic(acc, batch)`` for every batch of that time (a ``logic`` that returns None, as an
in-place update does, is an error that says so), and gives it as the single output
record of that time once the input frontier has passed it. No record changes worker:
each worker accumulates what it holds. Followed by an ``exchange`` and a second
``accumulate``, it is the partial (map-side) aggregation of Naiad and DryadLINQ: a
worker sends one partial result per key and time instead of every record, which is what
lets ``-w`` add throughput to a job such as WordCount (``examples/wordcount.py
--combine``).

Costs: one call of ``logic`` per batch (not per record) plus a dict lookup per batch;
one notification per time; memory O(times in flight) accumulators. ``count`` is
``accumulate(int, lambda n, batch: n + len(batch))``.

>>> import timely
>>> def build(worker):
...     def dataflow(scope):
...         source, stream = scope.new_input()
...         return source, stream.count().capture()
...     source, out = worker.dataflow(dataflow)
...     source.send_batch(["a", "b"]); source.send_batch(["c"]); source.advance_to(1)
...     source.send_batch(["d"]); source.close()
...     worker.step_while(lambda: not out.done())
...     return out.by_time()
>>> timely.execute(1, build)
[{0: [3], 1: [1]}]
"""
from __future__ import annotations

from typing import Callable, TypeVar

from ..stream import Stream
from .generic import unary_notify

A = TypeVar("A")


def accumulate(stream: Stream, default: Callable[[], A], logic: Callable[[A, list], A],
               name: str = "Accumulate") -> Stream:
    """Each time's batches folded by ``logic(acc, batch) -> acc`` from ``default()``,
    given as one record when the time is complete (per worker)."""
    if not callable(default):
        raise TypeError(f"accumulate: default must be a factory such as int or list (called once "
                        f"per time), got {type(default).__name__} {default!r}")
    if not callable(logic):
        raise TypeError(f"accumulate: logic must be callable as logic(acc, batch) -> acc, got {logic!r}")
    held: dict = {}

    def fold(input, output, notificator):
        for cap, batch in input:
            time = cap.time
            if time in held:
                acc = logic(held[time], batch)
            else:
                notificator.notify_at(cap.retain())
                acc = logic(default(), batch)
            if acc is None:
                raise TypeError(f"accumulate {name!r}: logic returned None; it must return the "
                                f"accumulator (after counter.update(batch), return counter)")
            held[time] = acc
        for cap in notificator:
            output.give(cap, held.pop(cap.time))
            cap.drop()

    return unary_notify(stream, None, name, [], fold)


def count(stream: Stream) -> Stream:
    """The number of records of each time this worker saw, given when the time is complete."""
    return accumulate(stream, int, lambda n, batch: n + len(batch), name="Count")
