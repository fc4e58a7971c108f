"""Python's cyclic garbage collector while workers run: full collections made rare, and
none at all while a checkpoint is read.

CPython collects in three generations. Young collections (every 700 net allocations of
containers, and every 10th of those for the middle generation) walk only recent
objects, which are still in the CPU's caches; a full collection walks every object the
process holds, and a worker with keyed state holds millions of them. CPython considers
a full collection after every 10 middle-generation collections (70,000 allocations),
and makes one whenever the objects promoted since the last exceed a quarter of those
that survived it: while a worker's state grows (a load, a restore, a bin arriving)
that is again and again, each walk longer than the one before.

``full_collections_after(n)`` sets the third threshold to ``n`` for as long as it is
entered (``execute`` enters it with ``Config.gc_full_after``, default ``GC_FULL_AFTER``;
``0`` leaves the interpreter's settings alone) and restores what it found on exit. The
young generations keep Python's thresholds, so short-lived cycles go as soon as
before; only garbage cycles that outlived two young collections wait longer (at most
``n`` middle-generation collections). The setting is the process's: workers that are
threads of one process share it, and forked workers inherit it.

Measured on ``benchmarks/recovery.py``'s job (2 processes, 1M keys, 3M events,
unthrottled, checkpoints off; two alternating runs each): at Python's 10, full
collections took 6.0 s of the two workers' time per run and the job ran at 344-349k
events/s; at 1,000, 0.16-0.33 s and 375-473k. A larger first threshold (20,000) also
made full collections rare, but each young collection then walked objects no longer in
the caches: the pipeline's dataflow spent more in young collections than it saved.

``paused_gc()`` turns the collector off for as long as it is entered: reading a
checkpoint builds millions of objects that all stay alive, and every collection midway
would walk them all (``timely.checkpoint`` restores and reads inside it).

Costs: two ``gc`` calls on entry and exit, for either.

>>> import gc
>>> before = gc.get_threshold()
>>> with full_collections_after(1000):
...     gc.get_threshold()[2]
1000
>>> gc.get_threshold() == before
True
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

__all__ = ["GC_FULL_AFTER", "full_collections_after", "paused_gc"]

#: middle-generation collections before a full collection is considered, while workers run
GC_FULL_AFTER = 1000


@contextmanager
def full_collections_after(collections: int) -> Iterator[None]:
    """The collector's third threshold at ``collections`` inside (``0``: unchanged)."""
    if not collections:
        yield
        return
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], collections)
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic collector off inside (as it was on exit: on if it was on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
