"""BinLog: one stateful operator's checkpoints on one worker, incremental, per bin.

The S operator applies records in time order. Whenever every record before some time X
has been applied and none at X or later (it is about to apply a later time, its input
frontier reached X, or F is about to ship bins at X), it calls ``cross(X)``. If a
checkpoint boundary (a multiple of the interval) lies in ``(last applied time, X]``,
the bins' state right now is their state as of every such boundary, and ``cross``
writes, for each bin changed since its last entry, a delta labelled with the least time
it is valid for (``last applied + 1``): the keys that may have changed (with their
values now) and those deleted, plus the bin's pending notifications. A bin whose
deltas since its last base name more than ``BASE_AFTER`` times the keys it holds is written whole (a base)
instead (``BASE_AFTER``), so a restore reads at most about three times a bin's size and a
checkpoint costs what changed, never the state's size. A bin that arrived from another worker at time c
is written whole at ``max(label, c)``; a bin shipped away is forgotten (its new owner
writes it whole).

``durable()`` is the time X of the latest crossing whose records (and all before) are
durable: the S operator holds its acknowledgement capability there, so the commit
operator's frontier passes a boundary only once every worker's state for it is durable.

Costs: ``touch`` O(records) set insertions (state_machine: keys of a batch); ``settle``
(a TrackedDict bin, once its logic returned) the packing of the keys it marked, while
their values are still in the CPU's caches; ``cross`` O(keys written): one lookup and
the packing of one pair per key, straight from the bin to bytes (``codec.pack_items``;
no pair or list is built), or nothing more than the hand-over for a bin settled and not
changed since, nothing for bins that did not change; ``durable`` O(crossings pending).

>>> from types import SimpleNamespace as Bin
>>> written = []
>>> from contextlib import nullcontext
>>> class W:
...     def write(self, r): written.append(r); return len(written)
...     def durable(self, t): return True
...     def hold(self): return nullcontext()
>>> bins = {0: Bin(state={}), 1: Bin(state={})}
>>> log = BinLog("Count@(0, 5)", bins, 2, W(), "inc", 0, 0)
>>> log.start(0); [(e.bin, e.kind, e.label) for e in written]
[(0, 'base', 0), (1, 'base', 0)]
>>> bins[0].state["a"] = 1; log.touch(0, ["a"]); log.applied(2)
>>> written.clear(); log.cross(3), log.cross(4)
(False, True)
>>> [(e.bin, e.kind, e.label, list(e.items)) for e in written], log.durable()
([(0, 'delta', 3, [('a', 1)])], 4)
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Optional

from ..communication.codec import GONE, pack_items
from .records import Entry, PackedItems
from .tracked import TrackedDict

#: keys per entry record: a large bin is cut into parts (Kafka caps a record's size)
PART_KEYS = 4096
#: the time of the final crossing, once the operator's input is exhausted
END = float("inf")

#: how often (s) an operator waiting for writes to become durable looks again: it asks
#: to be scheduled this much later (``activate_after``) rather than at once, so its
#: worker parks and the store's delivery thread gets the interpreter lock meanwhile (a
#: worker that re-activated itself held it, and the store heard of its acknowledgements
#: up to a switch interval, 5 ms, late)
DURABLE_POLL = 0.001
#: a bin is written whole once its deltas since its last base name this many times its
#: keys: a restore reads at most about 1 + BASE_AFTER times the state, and a checkpoint
#: writes about 1 + 1 / BASE_AFTER times the keys that changed
BASE_AFTER = 2


class BinLog:
    """See the module docstring. ``bins``: the operator's bins on this worker (bin ->
    an object whose ``state`` is the bin's dict), shared with it; ``interval``:
    checkpoint boundaries are its multiples; ``pending_of(bin)``: the bin's pending
    notifications as msgpack-able lists."""

    def __init__(self, op: str, bins: dict, interval: int, writer: Any, inc: str, worker: int,
                 minimum: int, pending_of: Any = None, tracked: bool = False) -> None:
        self.op = op
        self.tracked = tracked
        self.bins = bins
        self.interval = interval
        self.writer = writer
        self.inc = inc
        self.worker = worker
        self._pending_of = pending_of or (lambda b: [])
        self.applied_max: Optional[int] = None
        self.minimum = minimum
        self.dirty: dict[int, Optional[set]] = {}        # bin -> keys (None: whole bin)
        self.arrived: dict[int, int] = {}                 # bin -> time it arrived here
        self.since_base: dict[int, int] = {}              # bin -> keys written as deltas since its base
        self.settled: dict[int, tuple] = {}               # bin -> (marked, packed, count, missing): see settle
        self._waiting: list[tuple] = []                   # (X, ticket, started, stats row) not yet durable
        self._durable: Optional[float] = None
        self._seq = 0
        self._ticket = 0                                  # the writer's ticket of our latest record
        self._last_crossing: Any = ()                     # (x, applied_max) of the latest crossing
        self.crossings = 0
        self.entries_written = 0
        self.keys_written = 0
        #: instruments, per crossing that wrote (the latest 10,000): (time crossed at,
        #: label, seconds spent encoding and handing over, keys, bytes, seconds until
        #: durable or None)
        self.stats: deque = deque(maxlen=10_000)

    # ---- what the S and F operators tell it -------------------------------------------
    def touch(self, b: int, keys: Any) -> None:
        """Keys of bin ``b`` that may have changed (an iterable), or None for all."""
        found = self.dirty.get(b, ())
        if found is None:
            return
        if keys is None:
            self.dirty[b] = None
        elif found == ():
            self.dirty[b] = set(keys)
        else:
            found.update(keys)

    def touch_bin(self, b: int) -> None:
        """Bin ``b`` changed in a way its keys do not say (its pending notifications)."""
        if b not in self.dirty:
            self.dirty[b] = set()

    def settle(self, b: int) -> None:
        """The logic has just returned from its call for tracked bin ``b``: pack what it
        marked now, while the values are still in the CPU's caches (packing them at the
        crossing, after every other bin's logic ran, cost about four times as much per
        key, measured in the recovery job). Only the first call per bin and crossing
        packs; later changes stay marked and the crossing merges them (and packs again).
        A value the logic changes in place later, outside a call for its bin and
        without reading it through the bin, is not seen (nor is it today by a crossing
        that has already passed)."""
        if b in self.settled:
            return
        found = self.bins.get(b)
        take = getattr(found.state, "take_changed", None) if found is not None else None
        if take is None:
            return
        marked = take()
        if marked is None or len(marked) > PART_KEYS:   # whole, or cut into parts: at the crossing
            found.state.changed = marked
            return
        self.settled[b] = (marked, *pack_items(marked))

    def applied(self, time: int) -> None:
        """Records at ``time`` were applied."""
        if self.applied_max is None or time > self.applied_max:
            self.applied_max = time

    def adopt(self, state: dict) -> dict:
        """A bin's state as this operator keeps it: a TrackedDict if its logic mutates it."""
        return TrackedDict(state) if self.tracked and not isinstance(state, TrackedDict) else state

    def arrive(self, b: int, time: int) -> None:
        """Bin ``b`` arrived from another worker at ``time`` (its state as of then)."""
        self.arrived[b] = time
        self.dirty.pop(b, None)
        self.settled.pop(b, None)

    def leave(self, b: int) -> None:
        """Bin ``b`` was shipped to another worker, which writes it from now on."""
        self.dirty.pop(b, None)
        self.arrived.pop(b, None)
        self.since_base.pop(b, None)
        self.settled.pop(b, None)

    # ---- writing -----------------------------------------------------------------------
    def start(self, label: int) -> None:
        """A new life of the job: write every bin held whole at ``label`` (the restored
        state, or the empty bins of a fresh start)."""
        self.applied_max = label - 1
        with self.writer.hold():
            for b in sorted(self.bins):
                self._write(b, label, "base")
        self._waiting.append((label, self._ticket, time.perf_counter(), None))

    def due(self, x: Any) -> bool:
        """Whether ``cross(x)`` would write: a boundary lies after the last applied time
        and at or before ``x``, and this is not the crossing just made again."""
        if (x, self.applied_max) == self._last_crossing:
            return False
        low = self.minimum if self.applied_max is None else self.applied_max + 1
        first = -(-low // self.interval) * self.interval
        return x is None or first <= x

    def cross(self, x: Any) -> bool:
        """Every record before ``x`` is applied and none at ``x`` or later (None: the
        input is exhausted); write what a checkpoint at the boundaries up to ``x`` needs.
        Returns whether it wrote a checkpoint."""
        if not self.due(x):
            return False
        started = time.perf_counter()
        keys, written = self.keys_written, getattr(self.writer, "bytes", 0)
        label = self.minimum if self.applied_max is None else self.applied_max + 1
        with self.writer.hold():
            for b, since in sorted(self.arrived.items()):
                if x is None or since <= x:
                    self._write(b, max(label, since), "base")
                    del self.arrived[b]
            for b in sorted(self.dirty):
                if b in self.bins:
                    self._write(b, label, "delta", self.dirty[b])
        self.dirty.clear()
        self._last_crossing = (x, self.applied_max)
        self.crossings += 1
        row = [END if x is None else x, label, time.perf_counter() - started,
               self.keys_written - keys, getattr(self.writer, "bytes", 0) - written, None]
        self.stats.append(row)
        self._waiting.append((END if x is None else x, self._ticket, started, row))
        return True

    def _write(self, b: int, label: int, kind: str, keys: Optional[Any] = None) -> None:
        state = self.bins[b].state
        source: dict = state             # what the entry's items are packed from
        changed = getattr(state, "take_changed", None)
        settled = self.settled.pop(b, None)
        packed = None                    # the delta's pack_items result, when settle made it
        if changed is not None:          # a TrackedDict: what its logic may have changed, to what
            marked = changed()
            if settled is not None and marked is not None:
                if marked:               # the later marks win (the same key: its value now)
                    settled[0].update(marked)
                else:                    # nothing since settle: its bytes are the delta
                    packed = settled[1:]
                marked = settled[0]
            if kind == "delta":
                if marked is None or keys is None:
                    keys = packed = None
                else:                    # keys touched that it did not see: their values now
                    for k in keys:
                        if k not in marked:
                            marked[k] = dict.get(state, k, GONE)
                            packed = None
                    keys = source = marked          # packed as they are, GONE for a deletion
        if kind == "delta" and keys is not None:
            if self.since_base.get(b, 0) + len(keys) >= BASE_AFTER * max(len(state), 64):
                kind = "base"
        if kind == "base" or keys is None:
            kind, source, keys, packed = "base", state, state, None
            self.since_base[b] = 0
        else:
            self.since_base[b] = self.since_base.get(b, 0) + len(keys)
        if packed is not None:
            self._write_parts(b, label, kind, [packed])
            return
        # every key of a dict: packed from it in its order, without a lookup each
        whole = keys is source
        if len(keys) <= PART_KEYS:
            parts = [None if whole else keys]
        else:
            ordered = list(dict.keys(keys) if whole else keys)
            parts = [ordered[i:i + PART_KEYS] for i in range(0, len(ordered), PART_KEYS)]
        self._write_parts(b, label, kind, [pack_items(source, chunk) for chunk in parts])  # None: all

    def _write_parts(self, b: int, label: int, kind: str, parts: list) -> None:
        """Write one entry of bin ``b`` in ``parts`` (``pack_items`` results)."""
        pending = self._pending_of(b)
        self._seq += 1
        for part, (packed, count, deleted) in enumerate(parts):
            entry = Entry(self.inc, self.op, b, label, kind, self.worker, self._seq, part, len(parts),
                          PackedItems(packed, count), deleted, pending if part == 0 else [])
            self._ticket = self.writer.write(entry)
            self.keys_written += count + len(deleted)
        self.entries_written += 1

    # ---- durability ----------------------------------------------------------------------
    def durable(self) -> Optional[float]:
        """The time of the latest crossing whose records are all durable (None: none
        yet; ``END`` once the final crossing, at None, is)."""
        waiting = self._waiting
        while waiting and self.writer.durable(waiting[0][1]):
            x, _, started, row = waiting.pop(0)
            self._durable = x
            if row is not None:
                row[5] = time.perf_counter() - started
        return self._durable

    @property
    def waiting(self) -> bool:
        return bool(self._waiting)
