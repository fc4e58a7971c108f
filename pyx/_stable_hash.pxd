# cython: language_level=3
"""Megaphone's stable 64-bit key hash in C, for every compiled module that routes keys.

``hash64(key)`` computes exactly ``timely.hashing.stable_hash64(key)`` (the rules are
in that module's docstring): the cross-process contract by which every worker sends
a key to the same bin or worker. The functions are ``cdef inline``, compiled into each
module that cimports them (``_chash`` for the hash itself, ``_cbins`` for bins,
``_cexchange`` for ``Exchange``), so
there is no runtime import and no Python call per key.

How: the splitmix64 finalizer and FNV-1a run on C ``uint64_t`` (wrap-around
multiplication is the mod 2**64 of the definition); a ``str`` is hashed from its UTF-8
buffer (``PyUnicode_AsUTF8AndSize``: no bytes object; CPython keeps that UTF-8 copy in
the string for its lifetime when the string is not ASCII), ``bytes`` from its own
buffer, a ``float`` from its 8 bytes, an int that fits in 64 bits without leaving C.
Only an int outside ``[-2**63, 2**64)`` goes through its decimal string, as the pure
twin does. Cost: O(size of the key), no allocation (but that decimal string).

Every hash returns 2**64 - 1 on error: a value a key can hash to, so Cython checks
PyErr_Occurred() whenever one returns it (and only then).
"""

from libc.stdint cimport uint64_t, int64_t
from libc.string cimport memcpy
from libc.math cimport isfinite, floor
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromDouble
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.exc cimport PyErr_Occurred, PyErr_Clear

cdef extern from "Python.h":
    # Nonzero (not -1) when it raises RecursionError: see _sh_enter_recursion.
    int Py_EnterRecursiveCall(const char *where) noexcept
    void Py_LeaveRecursiveCall() noexcept
    # Declared without an exception clause: its OverflowError is expected, and cleared.
    unsigned long long _sh_as_u64 "PyLong_AsUnsignedLongLong"(object pylong) noexcept


cdef inline uint64_t _sh_mix(uint64_t x) noexcept nogil:
    """The splitmix64 finalizer."""
    x ^= x >> 30
    x *= 0xBF58476D1CE4E5B9ULL
    x ^= x >> 27
    x *= 0x94D049BB133111EBULL
    return x ^ (x >> 31)


cdef inline uint64_t _sh_fnv1a64(const unsigned char *data, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = 0xCBF29CE484222325ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ data[i]) * 0x100000001B3ULL
    return h


cdef inline str _sh_decimal(object n):
    """``str(n)`` for any int, whatever ``sys.set_int_max_str_digits`` says (the same
    algorithm as ``timely.megaphone.bins._decimal``; below 2**1990, fewer than 600
    digits, ``str`` is always allowed)."""
    if n.bit_length() <= 1990:
        return str(n)
    if n < 0:
        return "-" + _sh_decimal(-n)
    half = (n.bit_length() * 3 // 10) // 2
    high, low = divmod(n, 10 ** half)
    return _sh_decimal(high) + _sh_decimal(low).zfill(half)


cdef inline uint64_t _sh_hash_str(str s) except? 0xFFFFFFFFFFFFFFFFULL:
    cdef Py_ssize_t n = 0
    cdef const char *data = PyUnicode_AsUTF8AndSize(s, &n)
    return _sh_mix(_sh_fnv1a64(<const unsigned char *>data, n))


cdef inline uint64_t _sh_hash_big_int(object key) except? 0xFFFFFFFFFFFFFFFFULL:
    """An int outside [-2**63, 2**64): the hash of its decimal string."""
    return _sh_hash_str(_sh_decimal(key))


cdef inline uint64_t _sh_hash_int(object key) except? 0xFFFFFFFFFFFFFFFFULL:
    """An int or bool: ``mix(key mod 2**64)`` in [-2**63, 2**64), else the decimal rule."""
    cdef int overflow = 0
    cdef long long v = PyLong_AsLongLongAndOverflow(key, &overflow)
    cdef unsigned long long u
    if overflow == 0:
        return _sh_mix(<uint64_t>v)
    if overflow > 0:
        # Above 2**63 - 1: still in range if it fits in 64 unsigned bits.
        u = _sh_as_u64(key)
        if u == <unsigned long long>-1 and PyErr_Occurred() != NULL:
            PyErr_Clear()         # OverflowError: the int is >= 2**64
            return _sh_hash_big_int(key)
        return _sh_mix(<uint64_t>u)
    return _sh_hash_big_int(key)     # below -2**63


cdef inline uint64_t _sh_hash_float(object key) except? 0xFFFFFFFFFFFFFFFFULL:
    cdef double d = PyFloat_AS_DOUBLE(key)
    cdef uint64_t bits = 0
    cdef unsigned char buf[8]
    cdef int i
    if isfinite(d) and floor(d) == d:
        # An integral float hashes as the equal int.
        if -9223372036854775808.0 <= d < 9223372036854775808.0:
            return _sh_mix(<uint64_t><int64_t>d)
        if 0.0 < d < 18446744073709551616.0:
            return _sh_mix(<uint64_t>d)
        return _sh_hash_big_int(PyLong_FromDouble(d))
    # The 8 little-endian bytes of the IEEE double, as bytes (whatever the host order).
    memcpy(&bits, &d, 8)
    for i in range(8):
        buf[i] = <unsigned char>(bits >> (8 * i))
    return _sh_mix(_sh_fnv1a64(buf, 8))


cdef inline int _sh_enter_recursion() except -1:
    """Count one more nested tuple against the recursion limit: a key nested deeper
    than it raises RecursionError("maximum recursion depth exceeded"), as the pure
    twin does, instead of overflowing the C stack."""
    if Py_EnterRecursiveCall(""):
        return -1               # RecursionError is set
    return 0


cdef inline uint64_t _sh_hash_tuple(tuple key) except? 0xFFFFFFFFFFFFFFFFULL:
    cdef Py_ssize_t i, n = PyTuple_GET_SIZE(key)
    cdef uint64_t h = 0xCBF29CE484222325ULL ^ <uint64_t>n
    _sh_enter_recursion()
    try:
        for i in range(n):
            h = (h ^ hash64(<object>PyTuple_GET_ITEM(key, i))) * 0x100000001B3ULL
            h ^= h >> 32
    finally:
        Py_LeaveRecursiveCall()
    return _sh_mix(h)


cdef inline uint64_t hash64(object key) except? 0xFFFFFFFFFFFFFFFFULL:
    """The stable 64-bit hash of ``key`` (``timely.megaphone.bins.stable_hash64``)."""
    t = type(key)
    if t is int or t is bool:
        return _sh_hash_int(key)
    if t is str:
        return _sh_hash_str(<str>key)
    if t is bytes:
        return _sh_mix(_sh_fnv1a64(<const unsigned char *>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)))
    if t is tuple:
        return _sh_hash_tuple(<tuple>key)
    if t is float:
        return _sh_hash_float(key)
    if key is None:
        return _sh_mix(0x9E3779B97F4A7C15ULL)
    raise TypeError(f"cannot hash a {t.__name__} as a key: keys must be int, float, str, "
                    f"bytes, None or tuples of them")
