"""The stable 64-bit key hash: how every process sends a key to the same worker or bin.

``Exchange`` routes a record to a worker by it, and Megaphone (``timely.megaphone.bins``)
maps a key to a bin by its top bits, so it sits below both. The hash must be the same
in every process and on every platform (Python's ``hash`` of a ``str`` is salted per
process). ``stable_hash64`` is defined as follows, and the compiled twin
(``timely._chash``; its C, ``pyx/_stable_hash.pxd``, is shared by every compiled module
that routes keys) computes exactly the same values:

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

Costs: O(size of the key); the compiled twin allocates nothing but the returned int.
``TIMELY_PURE_PYTHON=1`` forces the pure twin (``py_stable_hash64`` is always it).

>>> stable_hash64("word") == stable_hash64("word"), stable_hash64(3) == stable_hash64(3.0)
(True, True)
"""
from __future__ import annotations

import struct
from typing import Any

from ._twin import compiled

MASK = (1 << 64) - 1
_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_NONE = 0x9E3779B97F4A7C15


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


# The pure twin stays importable as ``py_stable_hash64``; the compiled one replaces the
# public name when it is built (see timely._twin).
py_stable_hash64 = stable_hash64
_compiled = compiled("timely._chash")
IMPLEMENTATION = "python" if _compiled is None else "cython"
if _compiled is not None:
    stable_hash64 = _compiled.stable_hash64

__all__ = ["MASK", "stable_hash64", "py_stable_hash64", "IMPLEMENTATION"]
