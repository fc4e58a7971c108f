# cython: language_level=3
"""The stable 64-bit key hash, compiled: the Cython twin of ``timely.hashing.stable_hash64``.

It computes exactly the pure twin's values for every key (the hash is a cross-process
contract, defined in ``timely.hashing``) and raises the same ``TypeError`` for keys of
other types. The C is ``hash64`` of ``pyx/_stable_hash.pxd``, which the compiled bins
and ``Exchange`` partition inline too. Cost: O(size of the key), no allocation but the
returned int (and the decimal string of an int beyond 64 bits).

>>> stable_hash64(0), stable_hash64(True) == stable_hash64(1) == stable_hash64(1.0)
(0, True)
"""

from _stable_hash cimport hash64


def stable_hash64(key: object) -> int:
    """The key's 64-bit hash, the same in every process.

    >>> hex(stable_hash64(0)), stable_hash64(3) == stable_hash64(3.0)
    ('0x0', True)
    >>> stable_hash64([1])
    Traceback (most recent call last):
    ...
    TypeError: cannot hash a list as a key: keys must be int, float, str, bytes, None or tuples of them
    """
    return hash64(key)
