"""The bins one worker holds for one stateful operator: ``Bin`` and ``BinStates``.

A ``Bin`` is a bin on its current owner: its state (a dict, key -> value) and its
pending notifications (records its logic scheduled for later times), which travel
with it when it moves (``to_wire`` / ``from_wire``). ``BinStates`` holds a worker's
bins of one operator, shared by the F operators that route to it
(``timely.megaphone.routing``), which ``take`` a bin out when they ship it, and the S
operator (``timely.megaphone.state``), which ``put``s the bins shipped to it.

Costs: ``take`` and ``put`` O(1), keeping ``slots`` (bin index -> Bin) for S's
per-run lookup by index in C; ``keys`` and ``snapshot`` O(bins held) / O(keys held);
a bin's ``to_wire`` O(its keys and notifications), ``pending_wire`` O(notifications).
"""
from __future__ import annotations

from typing import Any, Iterable, Optional


class StatefulError(RuntimeError):
    """A stateful operator's logic failed; names the operator, the key and the time."""


class Bin:
    """One bin on its current owner: ``state`` (key -> value) and ``pending``
    (time -> ``[(input, record), ...]`` scheduled by the logic)."""

    __slots__ = ("state", "pending")

    def __init__(self, state: Optional[dict] = None, pending: Optional[dict] = None) -> None:
        self.state: dict = {} if state is None else state
        self.pending: dict = {} if pending is None else pending

    def to_wire(self) -> tuple:
        """``(state pairs, pending)`` as msgpack-able lists (keys may be tuples)."""
        return list(dict.items(self.state)), self.pending_wire()

    def pending_wire(self) -> list:
        """The pending notifications as msgpack-able lists: O(pending), not O(state)."""
        return [(t, [list(e) for e in entries]) for t, entries in sorted(self.pending.items())]

    @classmethod
    def from_wire(cls, items: Iterable, pending: Iterable) -> "Bin":
        return cls(dict((k, v) for k, v in items),
                   {t: [(i, r) for i, r in entries] for t, entries in pending})


class BinStates:
    """The bins one worker holds for one stateful operator (shared by its F and S)."""

    def __init__(self, name: str, worker_index: int, bins: Iterable[int]) -> None:
        self.name = name
        self.worker_index = worker_index
        self.bins: dict[int, Bin] = {b: Bin() for b in bins}
        #: ``slots[b] is bins.get(b)`` (None past its end): S's per-run lookup by index,
        #: without an int object or a hash per bin (kept by ``put`` and ``take``)
        self.slots: list[Optional[Bin]] = []
        for b, bin in self.bins.items():
            self._slot(b, bin)
        self.routers: list = []          # the F operators feeding this state
        self.rebalanced = False          # its commands come from the cluster's rebalancer
        self.shipped: list[tuple[Any, int, int]] = []    # (time, bins, keys) sent away
        self.received: list[tuple[Any, int, int]] = []   # (time, bins, keys) taken in
        #: its checkpoints (timely.checkpoint.BinLog), or None when they are off
        self.log: Any = None
        self.dataflow: int = 0           # the index of its dataflow
        #: notifications of restored bins, waiting for the S operator's capabilities
        self.restored: dict[int, dict] = {}

    def pending_wire(self, b: int) -> list:
        """Bin ``b``'s pending notifications as msgpack-able lists (for checkpoints)."""
        return self.bins[b].pending_wire()

    def restored_pending(self, b: int, pending: dict) -> None:
        """Bin ``b`` was restored from a checkpoint with these pending notifications."""
        if pending:
            self.restored[b] = pending

    def take(self, b: int) -> Bin:
        try:
            bin = self.bins.pop(b)
        except KeyError:
            raise StatefulError(f"{self.name}: worker {self.worker_index} was told to ship bin "
                                f"{b}, which it does not hold") from None
        self.slots[b] = None
        return bin

    def put(self, b: int, bin: Bin) -> None:
        if b in self.bins:
            raise StatefulError(f"{self.name}: worker {self.worker_index} received bin {b}, "
                                f"which it already holds")
        self.bins[b] = bin
        self._slot(b, bin)

    def _slot(self, b: int, bin: Optional[Bin]) -> None:
        slots = self.slots
        if b >= len(slots):
            slots.extend([None] * (b + 1 - len(slots)))
        slots[b] = bin

    def keys(self) -> int:
        """Keys held here, over every bin."""
        return sum(dict.__len__(b.state) for b in self.bins.values())

    def table(self) -> tuple:
        """The routing table in force here (the active configuration of the first F)."""
        return self.routers[0].configs[0][1]

    def snapshot(self) -> dict:
        """``{key: state}`` over every bin held (a copy, for checks)."""
        out: dict = {}
        for b in self.bins.values():
            out.update(dict.items(b.state))
        return out

