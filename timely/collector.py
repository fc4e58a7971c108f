"""Python's cyclic garbage collector while workers run: collections that follow the data.

CPython collects its youngest generation every 700 net allocations of container objects
(lists, tuples, dicts, ...), a figure made for small interactive programs. A worker
allocates batches of records that live for a step or two and then die by reference
count: at 700, collections come several times per batch, each walks every batch still
in flight, and what survives two of them is promoted and walked again by the older
generations' collections, up to full collections that walk all of a worker's keyed
state. Measured on ``benchmarks/recovery.py``'s job (2 processes, 1M keys, 3M events,
unthrottled): 17-25 full collections per worker took 3.2-3.9 s of an 11 s run; with
the first threshold at 20,000 one took 0.2 s, and the job ran at 329-405k events/s
instead of 256-295k (three runs each, alternating).

``young_threshold(n)`` sets the first threshold to ``n`` for as long as it is entered
(``execute`` enters it with ``Config.gc_threshold``, default ``GC_THRESHOLD``; ``0``
leaves the interpreter's settings alone), keeping the older generations' ratios, and
restores what it found on exit. Garbage in reference cycles still goes, a little
later. The setting is the process's: workers that are threads of one process share
it, and forked workers inherit it.

Costs: two ``gc`` calls on entry and exit.

>>> import gc
>>> before = gc.get_threshold()
>>> with young_threshold(20_000):
...     gc.get_threshold()[0]
20000
>>> gc.get_threshold() == before
True
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

__all__ = ["GC_THRESHOLD", "young_threshold"]

#: allocations between collections of the youngest generation while workers run
GC_THRESHOLD = 20_000


@contextmanager
def young_threshold(threshold: int) -> Iterator[None]:
    """The collector's first threshold at ``threshold`` inside (``0``: unchanged)."""
    if not threshold:
        yield
        return
    before = gc.get_threshold()
    gc.set_threshold(threshold, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
