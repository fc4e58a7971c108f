"""Bins: the stable 64-bit key hash, the bin of a key, and the routing table.

Megaphone does not route keys to workers directly: keys hash to one of ``2**k`` bins
(fixed when the dataflow is built) and a routing table maps bins to workers. Moving a
bin moves every key in it, so a migration costs O(bins moved), not O(keys).

The hash must be the same in every process and on every platform (Python's ``hash``
of a ``str`` is salted per process). ``stable_hash64`` is defined as follows, and the
compiled twin (``timely.megaphone._cbins``) computes exactly the same values:

- ``mix(x)``: the splitmix64 finalizer (``x ^= x >> 30; x *= 0xbf58476d1ce4e5b9;
  x ^= x >> 27; x *= 0x94d049bb133111eb; x ^= x >> 31``, all mod 2**64);
- ``int`` (and ``bool``) in ``[-2**63, 2**64)``: ``mix(k mod 2**64)``; a larger int
  hashes as the ``str`` of its decimal digits (all of them, whatever
  ``sys.set_int_max_str_digits`` says);
- ``float``: an integral finite float as the equal int; otherwise the 8 little-endian
  bytes of the IEEE double, as ``bytes``;
- ``str``: its UTF-8 bytes, as ``bytes``; ``bytes``: ``mix(fnv1a64(data))``;
- ``None``: ``mix(0x9e3779b97f4a7c15)``;
- ``tuple``: ``h = 0xcbf29ce484222325 ^ len``; for each item
  ``h = ((h ^ stable_hash64(item)) * 0x100000001b3) mod 2**64; h ^= h >> 32``;
  then ``mix(h)``.

Anything else raises ``TypeError``: a hash of ``repr`` would differ between processes
for objects whose repr holds an address, and route one key to two workers.

A key's bin is the top ``k`` bits of its hash. Costs: ``stable_hash64`` O(size of
the key); ``group_by_bin`` O(records); a ``RoutingTable`` lookup O(1).

>>> stable_hash64("word") == stable_hash64("word"), stable_hash64(3) == stable_hash64(3.0)
(True, True)
>>> bin_of(stable_hash64("word"), 8) < 256
True
>>> RoutingTable.round_robin(8, 3).table
(0, 1, 2, 0, 1, 2, 0, 1)
"""
from __future__ import annotations

import struct
from typing import Any, Callable, Iterable, Optional, Sequence
from .._twin import compiled

MASK = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_NONE = 0x9E3779B97F4A7C15
DEFAULT_BINS = 256
MAX_BINS = 65536


def _mix(x: int) -> int:
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def _fnv1a64(data: bytes) -> int:
    h = _FNV_OFFSET
    for b in data:
        h = ((h ^ b) * _FNV_PRIME) & MASK
    return h


_SMALL_DECIMAL = 10 ** 600     # below the smallest int -> str limit Python allows (640)


def _decimal(n: int) -> str:
    """``str(n)`` for any int, however long: Python refuses ``str`` of an int with more
    digits than ``sys.get_int_max_str_digits()`` (4300 by default, set per process by
    ``PYTHONINTMAXSTRDIGITS``), and a key's hash must not depend on that setting.
    Splits the number in halves by a power of ten, so each ``str`` stays short.

    >>> _decimal(-10 ** 5000) == "-1" + "0" * 5000
    True
    """
    if -_SMALL_DECIMAL < n < _SMALL_DECIMAL:
        return str(n)
    if n < 0:
        return "-" + _decimal(-n)
    half = (n.bit_length() * 3 // 10) // 2      # about half the digits (log10 2 > 0.3)
    high, low = divmod(n, 10 ** half)
    return _decimal(high) + _decimal(low).zfill(half)


def stable_hash64(key: Any) -> int:
    """The key's 64-bit hash, the same in every process (see the module docstring).

    >>> hex(stable_hash64(0)), stable_hash64(True) == stable_hash64(1)
    ('0x0', True)
    >>> stable_hash64([1])
    Traceback (most recent call last):
    ...
    TypeError: cannot hash a list as a key: keys must be int, float, str, bytes, None or tuples of them
    """
    # The recursive calls below go through ``py_stable_hash64``: the name
    # ``stable_hash64`` is rebound to the compiled twin at the bottom of the module.
    t = type(key)
    if t is int or t is bool:
        if -(1 << 63) <= key <= MASK:
            return _mix(key & MASK)
        return _mix(_fnv1a64(_decimal(key).encode()))
    if t is str:
        return _mix(_fnv1a64(key.encode()))
    if t is bytes:
        return _mix(_fnv1a64(key))
    if t is tuple:
        h = _FNV_OFFSET ^ len(key)
        for item in key:
            h = ((h ^ py_stable_hash64(item)) * _FNV_PRIME) & MASK
            h ^= h >> 32
        return _mix(h)
    if t is float:
        if key.is_integer():
            return py_stable_hash64(int(key))
        return _mix(_fnv1a64(struct.pack("<d", key)))
    if key is None:
        return _mix(_NONE)
    raise TypeError(f"cannot hash a {t.__name__} as a key: keys must be int, float, str, "
                    f"bytes, None or tuples of them")


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


class RoutingTable:
    """bin -> worker, immutable (a configuration installs a new one)."""

    __slots__ = ("table",)

    def __init__(self, table: Iterable[int]) -> None:
        self.table = tuple(table)
        bin_shift(len(self.table))
        if any(type(w) is not int or w < 0 for w in self.table):
            raise ValueError("a routing table maps every bin to a worker index (an int >= 0)")

    @classmethod
    def round_robin(cls, bins: int, workers: int) -> "RoutingTable":
        """Bin b to worker ``b % workers``: the table every worker builds at start."""
        return cls(b % workers for b in range(bins))

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


# The pure-Python twins stay importable under these names; the compiled twins replace
# the public names when they are built (see timely._twin).
py_stable_hash64, py_group_by_bin = stable_hash64, group_by_bin
_compiled = compiled("timely.megaphone._cbins")
IMPLEMENTATION = "python" if _compiled is None else "cython"
if _compiled is not None:
    stable_hash64, group_by_bin = _compiled.stable_hash64, _compiled.group_by_bin
