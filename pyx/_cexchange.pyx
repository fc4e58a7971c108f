# cython: language_level=3
"""The ``Exchange`` partition, compiled: a batch of records split into per-worker buckets.

This is the Cython twin of ``timely.dataflow.exchange.partition``: for every batch it
returns exactly what the pure-Python twin returns (the same buckets, the records in
input order), and raises the same exceptions (a bad ``peers``, a key function that
raises, a key ``stable_hash64`` refuses).

How: a non-negative int key that fits 64 bits is its own route, ``key % peers`` on a
C ``uint64_t`` (timely's rule, see ``timely.dataflow.exchange``); any other key is
hashed by ``timely.hashing.stable_hash64`` in C (``hash64`` of
``pyx/_stable_hash.pxd``) and reduced the same way. Each record is appended to its
bucket with ``PyList_Append``. No Python call per record but the key function, when
one is given.

Costs: O(records + peers); per record one route in C and one list append (and one key
call when ``key`` is not None). With ``peers == 1`` no key is computed.

>>> partition(["a", "b", "a"], None, 1)
[['a', 'b', 'a']]
>>> partition(list(range(10)), None, 3)
[[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
"""

from libc.stdint cimport uint64_t
from libc.math cimport floor, isinf
from cpython.list cimport PyList_Append, PyList_GET_ITEM
from cpython.long cimport PyLong_AsUnsignedLongLong

from _stable_hash cimport hash64

MAX_PEERS = 1 << 31
cdef double _TWO64 = 18446744073709551616.0


cdef inline Py_ssize_t _route(object key, uint64_t m) except -1:
    """``route(key, m)``: ``key % m`` for a non-negative int (bool, integral float) key,
    else ``hash64(key) % m``."""
    cdef double d
    if type(key) is int or type(key) is bool:
        if key >= 0:
            if key < 0x10000000000000000:
                return <Py_ssize_t>(PyLong_AsUnsignedLongLong(key) % m)
            return <Py_ssize_t>(key % <object>m)
    elif type(key) is float:
        d = key
        if d >= 0.0 and floor(d) == d and d < _TWO64:
            return <Py_ssize_t>((<uint64_t>d) % m)
        if d >= _TWO64 and not isinf(d):             # integral, beyond 64 bits
            return <Py_ssize_t>(int(key) % <object>m)
    return <Py_ssize_t>(hash64(key) % m)


def route(key: object, peers: object) -> int:
    """The worker of ``peers`` a record with this key goes to (compiled twin of
    ``timely.dataflow.exchange.route``).

    >>> route(8, 3), route(True, 3), route(8.0, 3)
    (2, 1, 2)
    """
    if type(peers) is not int or not 1 <= peers < MAX_PEERS:
        raise ValueError(f"peers must be an int between 1 and {MAX_PEERS - 1}, got {peers!r}")
    return _route(key, <uint64_t>peers)


def partition(records: object, key: object, peers: object) -> list:
    """``buckets[w]``: the records whose key routes to worker ``w``
    (``route(key(record), peers)``; the record itself is the key when ``key`` is None),
    in input order. Compiled twin of ``timely.dataflow.exchange.partition``.

    >>> partition([(3, "x"), (3, "y"), (1, "z")], lambda r: r[0], 3)[0]
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
                PyList_Append(<object>PyList_GET_ITEM(out, <Py_ssize_t>_route(record, m)), record)
        else:
            for record in records:
                PyList_Append(<object>PyList_GET_ITEM(out, <Py_ssize_t>_route(record, m)), record)
    else:
        for record in records:
            PyList_Append(<object>PyList_GET_ITEM(out, <Py_ssize_t>_route(key(record), m)), record)
    return out
