"""Bins: the bin of a key, and the routing table.

Megaphone does not route keys to workers directly: keys hash to one of ``2**k`` bins
(fixed when the dataflow is built) and a routing table maps bins to workers. Moving a
bin moves every key in it, so a migration costs O(bins moved), not O(keys).

A key's bin is the top ``k`` bits of its ``timely.hashing.stable_hash64`` (the same in
every process). Costs: ``group_by_bin`` O(records), one hash per record, and ``group_by_target``
(F's routing) one table lookup per bin on top (both in C with the compiled twin,
``timely.megaphone._cbins``); a ``RoutingTable`` lookup O(1).

>>> bin_of(stable_hash64("word"), 8) < 256
True
>>> RoutingTable.round_robin(8, 3).table
(0, 1, 2, 0, 1, 2, 0, 1)
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Iterable, Optional, Sequence

from .._twin import compiled
from ..communication.codec import FrameError
from ..hashing import MASK, py_stable_hash64, stable_hash64  # noqa: F401 - bins' key hash, public here too

DEFAULT_BINS = 256
MAX_BINS = 65536


def bin_shift(bins: int) -> int:
    """``k`` for ``2**k == bins``; refuses counts that are not a power of two in range.

    >>> bin_shift(256)
    8
    >>> bin_shift(100)
    Traceback (most recent call last):
    ...
    ValueError: bins must be a power of two between 1 and 65536, got 100
    """
    if type(bins) is not int or bins < 1 or bins > MAX_BINS or bins & (bins - 1):
        raise ValueError(f"bins must be a power of two between 1 and {MAX_BINS}, got {bins}")
    return bins.bit_length() - 1


def bin_of(hash64: int, k: int) -> int:
    """The bin of a hash among ``2**k`` bins: its top ``k`` bits."""
    return hash64 >> (64 - k) if k else 0


def group_by_bin(records: Sequence[Any], key: Optional[Callable[[Any], Any]], k: int) -> dict:
    """``{bin: [records...]}`` for a batch; ``key=None`` keys a record by ``record[0]``
    (the ``(key, value)`` shape of ``state_machine``). Order within a bin is kept.

    >>> group_by_bin([("a", 1), ("a", 2)], None, 0)
    {0: [('a', 1), ('a', 2)]}
    """
    shift = 64 - k              # (hashes with py_stable_hash64: this is the pure twin)
    out: dict = {}
    if not k:
        return {0: list(records)} if records else {}
    for record in records:
        b = py_stable_hash64(record[0] if key is None else key(record)) >> shift
        group = out.get(b)
        if group is None:
            out[b] = [record]
        else:
            group.append(record)
    return out


def group_by_target(records: Sequence[Any], key: Optional[Callable[[Any], Any]], k: int,
                    table: Sequence[int]) -> list:
    """F's routing of a batch: one message ``(worker, runs, records)`` per worker that
    ``table`` (bin -> worker) gives some record to, in order of first appearance.

    ``records`` holds that worker's records bin after bin, in order within a bin;
    ``runs`` says which bin each stretch of them belongs to: ``(bin, count)`` pairs,
    bins in order of first appearance, packed as little-endian uint32 (``pack_runs``).
    A bin costs 8 bytes and no object of its own, on either side of the wire: at 4,096
    bins a batch of 1,000 records touches most bins once, and a list and a tuple per
    bin cost more than the records themselves.

    >>> group_by_target([("a", 1), ("a", 2)], None, 0, (3,))
    [(3, b'\\x00\\x00\\x00\\x00\\x02\\x00\\x00\\x00', [('a', 1), ('a', 2)])]
    >>> [(w, runs_of(runs), rs) for w, runs, rs in group_by_target([(1, "x"), (2, "y"), (1, "z")], None, 1, (5, 6))]
    [(5, [(0, 2)], [(1, 'x'), (1, 'z')]), (6, [(1, 1)], [(2, 'y')])]
    """
    per_target: dict = {}
    for b, rs in py_group_by_bin(records, key, k).items():
        w = table[b]
        bucket = per_target.get(w)
        if bucket is None:
            bucket = per_target[w] = ([], [])
        bucket[0].extend((b, len(rs)))
        bucket[1].extend(rs)
    return [(w, pack_runs(runs), rs) for w, (runs, rs) in per_target.items()]


def pack_runs(flat: Sequence[int]) -> bytes:
    """``[bin, count, bin, count, ...]`` as F's ``runs``: little-endian uint32s.

    >>> runs_of(pack_runs([7, 2, 3, 1]))
    [(7, 2), (3, 1)]
    """
    return struct.pack(f"<{len(flat)}I", *flat)


def runs_of(runs: bytes) -> list[tuple[int, int]]:
    """The ``(bin, count)`` pairs of F's ``runs``; malformed bytes raise ``FrameError``."""
    if len(runs) % 8:
        raise FrameError(f"a Megaphone message's runs are {len(runs)} bytes, not a whole "
                         f"number of (bin, count) pairs of 8 bytes")
    return list(struct.iter_unpack("<II", runs))


class RoutingTable:
    """bin -> worker, immutable (a configuration installs a new one)."""

    __slots__ = ("table",)

    def __init__(self, table: Iterable[int]) -> None:
        self.table = tuple(table)
        bin_shift(len(self.table))
        if any(type(w) is not int or w < 0 for w in self.table):
            raise ValueError("a routing table maps every bin to a worker index (an int >= 0)")

    @classmethod
    def round_robin(cls, bins: int, workers: Any) -> "RoutingTable":
        """Bin b to ``workers[b % len(workers)]`` (``workers``: a list, or a count n for
        0..n-1): the table every worker builds at start.

        >>> RoutingTable.round_robin(4, [0, 2]).table
        (0, 2, 0, 2)
        """
        if isinstance(workers, int):
            workers = range(workers)
        return cls(workers[b % len(workers)] for b in range(bins))

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, b: int) -> int:
        return self.table[b]

    def with_moves(self, moves: Iterable[tuple[int, int]]) -> "RoutingTable":
        """A copy with each ``(bin, worker)`` applied in order."""
        table = list(self.table)
        for b, w in moves:
            if not 0 <= b < len(table):
                raise ValueError(f"bin {b} is not in 0..{len(table) - 1}")
            table[b] = w
        return RoutingTable(table)

    def bins_of(self, worker: int) -> list[int]:
        """The bins ``worker`` owns."""
        return [b for b, w in enumerate(self.table) if w == worker]

    def load(self, workers: int) -> list[int]:
        """Bins per worker, for workers ``0..workers-1``."""
        counts = [0] * workers
        for w in self.table:
            if w < workers:
                counts[w] += 1
        return counts

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RoutingTable) and other.table == self.table

    def __hash__(self) -> int:
        return hash(self.table)

    def __repr__(self) -> str:
        return f"RoutingTable({len(self.table)} bins, load {self.load(max(self.table) + 1)})"


# The pure-Python twin stays importable as ``py_group_by_bin``; the compiled twin
# replaces the public name when it is built (see timely._twin).
py_group_by_bin = group_by_bin
py_group_by_target = group_by_target
_compiled = compiled("timely.megaphone._cbins")
IMPLEMENTATION = "python" if _compiled is None else "cython"
if _compiled is not None:
    group_by_bin = _compiled.group_by_bin
    group_by_target = _compiled.group_by_target
