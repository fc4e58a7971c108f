# cython: language_level=3
"""The ``Exchange`` partition, compiled: a batch of records split into per-worker buckets.

This is the Cython twin of ``timely.dataflow.exchange.partition``: for every batch it
returns exactly what the pure-Python twin returns (the same buckets, the records in
input order), and raises the same exceptions (a bad ``peers``, a key function that
raises, a key ``stable_hash64`` refuses).

How: the key hash is ``timely.hashing.stable_hash64`` in C (``hash64`` of
``pyx/_stable_hash.pxd``), reduced ``% peers`` on a C ``uint64_t``; each record is
appended to its bucket with ``PyList_Append``. No Python call per record but the key
function, when one is given.

Costs: O(records + peers); per record one hash in C and one list append (and one key
call when ``key`` is not None). With ``peers == 1`` no key is computed.

>>> partition(["a", "b", "a"], None, 1)
[['a', 'b', 'a']]
>>> [len(b) for b in partition(list(range(100)), None, 4)]
[28, 30, 17, 25]
"""

from libc.stdint cimport uint64_t
from cpython.list cimport PyList_Append, PyList_GET_ITEM

from _stable_hash cimport hash64

MAX_PEERS = 1 << 31


def partition(records: object, key: object, peers: object) -> list:
    """``buckets[w]``: the records whose key hashes to worker ``w``
    (``stable_hash64(key(record)) % peers``; the record itself is the key when ``key``
    is None), in input order. Compiled twin of ``timely.dataflow.exchange.partition``.

    >>> partition([(3, "x"), (3, "y"), (1, "z")], lambda r: r[0], 3)[2]
    [(3, 'x'), (3, 'y')]
    """
    if type(peers) is not int or not 1 <= peers < MAX_PEERS:
        raise ValueError(f"peers must be an int between 1 and {MAX_PEERS - 1}, got {peers!r}")
    if peers == 1:
        return [list(records)]
    cdef Py_ssize_t n = peers
    cdef uint64_t m = <uint64_t>n
    cdef list out = [[] for _ in range(n)]
    if key is None:
        if type(records) is list:
            for record in <list>records:
                PyList_Append(<object>PyList_GET_ITEM(out, <Py_ssize_t>(hash64(record) % m)), record)
        else:
            for record in records:
                PyList_Append(<object>PyList_GET_ITEM(out, <Py_ssize_t>(hash64(record) % m)), record)
    else:
        for record in records:
            PyList_Append(<object>PyList_GET_ITEM(out, <Py_ssize_t>(hash64(key(record)) % m)), record)
    return out
