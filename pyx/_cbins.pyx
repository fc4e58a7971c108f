# cython: language_level=3
"""Megaphone bins, compiled: ``stable_hash64`` and ``group_by_bin`` in C.

This is the Cython twin of the two hot functions of ``timely.megaphone.bins``. It
computes exactly the same values as the pure-Python twin for every key (the hash is a
cross-process contract, defined in that module's docstring), raises the same
``TypeError`` for keys of other types, and ``group_by_bin`` returns the same dict, with
the same bins, the records in the same order, and the same exceptions from the key
function or from ``record[0]``.

How: the splitmix64 finalizer and FNV-1a run on C ``uint64_t`` (wrap-around
multiplication is the mod 2**64 of the definition); a ``str`` is hashed from its UTF-8
buffer (``PyUnicode_AsUTF8AndSize``: no bytes object; CPython keeps that UTF-8 copy in
the string for its lifetime when the string is not ASCII), ``bytes`` from its own
buffer, a ``float`` from its 8 bytes, an int that fits in 64 bits without leaving C.
Only an int outside ``[-2**63, 2**64)`` goes through its decimal string, as the pure
twin does.

Costs: ``stable_hash64`` O(size of the key), no allocation but the returned int (and
the decimal string of an int beyond 64 bits). ``group_by_bin`` O(records): per record
one hash in C, one dict lookup and one list append; the key function, when given, is
called once per record. With ``k == 0`` every record goes to bin 0 and no key is
computed (as in the pure twin).

>>> stable_hash64(0), stable_hash64(True) == stable_hash64(1) == stable_hash64(1.0)
(0, True)
>>> group_by_bin([("a", 1), ("a", 2)], None, 0)
{0: [('a', 1), ('a', 2)]}
"""

cimport cython
from libc.stdint cimport uint64_t, int64_t
from libc.string cimport memcpy
from libc.math cimport isfinite, floor
from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem
from cpython.list cimport PyList_Append
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromDouble
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.float cimport PyFloat_AS_DOUBLE
from cpython.exc cimport PyErr_Occurred, PyErr_Clear
from cpython.ref cimport PyObject

cdef extern from "Python.h":
    # Nonzero (not -1) when it raises RecursionError: see _enter_recursion.
    int Py_EnterRecursiveCall(const char *where) noexcept
    void Py_LeaveRecursiveCall() noexcept
    # Declared without an exception clause: its OverflowError is expected, and cleared.
    unsigned long long _as_u64 "PyLong_AsUnsignedLongLong"(object pylong) noexcept

cdef uint64_t _FNV_OFFSET = 0xCBF29CE484222325ULL
cdef uint64_t _FNV_PRIME = 0x100000001B3ULL
cdef uint64_t _NONE = 0x9E3779B97F4A7C15ULL

_SMALL_DECIMAL = 10 ** 600     # below the smallest int -> str limit Python allows (640)


cdef inline uint64_t _mix(uint64_t x) noexcept nogil:
    """The splitmix64 finalizer."""
    x ^= x >> 30
    x *= 0xBF58476D1CE4E5B9ULL
    x ^= x >> 27
    x *= 0x94D049BB133111EBULL
    return x ^ (x >> 31)


cdef inline uint64_t _fnv1a64(const unsigned char *data, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = _FNV_OFFSET
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ data[i]) * _FNV_PRIME
    return h


cdef str _decimal(object n):
    """``str(n)`` for any int, whatever ``sys.set_int_max_str_digits`` says (the same
    algorithm as ``timely.megaphone.bins._decimal``)."""
    if -_SMALL_DECIMAL < n < _SMALL_DECIMAL:
        return str(n)
    if n < 0:
        return "-" + _decimal(-n)
    half = (n.bit_length() * 3 // 10) // 2
    high, low = divmod(n, 10 ** half)
    return _decimal(high) + _decimal(low).zfill(half)


cdef uint64_t _hash_str(str s) except? 0xFFFFFFFFFFFFFFFFULL:
    cdef Py_ssize_t n = 0
    cdef const char *data = PyUnicode_AsUTF8AndSize(s, &n)
    return _mix(_fnv1a64(<const unsigned char *>data, n))


cdef uint64_t _hash_big_int(object key) except? 0xFFFFFFFFFFFFFFFFULL:
    """An int outside [-2**63, 2**64): the hash of its decimal string."""
    return _hash_str(_decimal(key))


cdef uint64_t _hash_int(object key) except? 0xFFFFFFFFFFFFFFFFULL:
    """An int or bool: ``mix(key mod 2**64)`` in [-2**63, 2**64), else the decimal rule."""
    cdef int overflow = 0
    cdef long long v = PyLong_AsLongLongAndOverflow(key, &overflow)
    cdef unsigned long long u
    if overflow == 0:
        return _mix(<uint64_t>v)
    if overflow > 0:
        # Above 2**63 - 1: still in range if it fits in 64 unsigned bits.
        u = _as_u64(key)
        if u == <unsigned long long>-1 and PyErr_Occurred() != NULL:
            PyErr_Clear()         # OverflowError: the int is >= 2**64
            return _hash_big_int(key)
        return _mix(<uint64_t>u)
    return _hash_big_int(key)     # below -2**63


cdef uint64_t _hash_float(object key) except? 0xFFFFFFFFFFFFFFFFULL:
    cdef double d = PyFloat_AS_DOUBLE(key)
    cdef uint64_t bits = 0
    cdef unsigned char buf[8]
    cdef int i
    if isfinite(d) and floor(d) == d:
        # An integral float hashes as the equal int.
        if -9223372036854775808.0 <= d < 9223372036854775808.0:
            return _mix(<uint64_t><int64_t>d)
        if 0.0 < d < 18446744073709551616.0:
            return _mix(<uint64_t>d)
        return _hash_big_int(PyLong_FromDouble(d))
    # The 8 little-endian bytes of the IEEE double, as bytes (whatever the host order).
    memcpy(&bits, &d, 8)
    for i in range(8):
        buf[i] = <unsigned char>(bits >> (8 * i))
    return _mix(_fnv1a64(buf, 8))


cdef inline int _enter_recursion() except -1:
    """Count one more nested tuple against the recursion limit: a key nested deeper
    than it raises RecursionError("maximum recursion depth exceeded"), as the pure
    twin does, instead of overflowing the C stack."""
    if Py_EnterRecursiveCall(""):
        return -1               # RecursionError is set
    return 0


cdef uint64_t _hash_tuple(tuple key) except? 0xFFFFFFFFFFFFFFFFULL:
    cdef Py_ssize_t i, n = PyTuple_GET_SIZE(key)
    cdef uint64_t h = _FNV_OFFSET ^ <uint64_t>n
    _enter_recursion()
    try:
        for i in range(n):
            h = (h ^ _hash(<object>PyTuple_GET_ITEM(key, i))) * _FNV_PRIME
            h ^= h >> 32
    finally:
        Py_LeaveRecursiveCall()
    return _mix(h)


# The hashes return 2**64 - 1 on error: a value a key can hash to, so Cython checks
# PyErr_Occurred() whenever a hash returns it (and only then).
cdef uint64_t _hash(object key) except? 0xFFFFFFFFFFFFFFFFULL:
    """The stable 64-bit hash of ``key``, in C (see the module docstring)."""
    t = type(key)
    if t is int or t is bool:
        return _hash_int(key)
    if t is str:
        return _hash_str(<str>key)
    if t is bytes:
        return _mix(_fnv1a64(<const unsigned char *>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)))
    if t is tuple:
        return _hash_tuple(<tuple>key)
    if t is float:
        return _hash_float(key)
    if key is None:
        return _mix(_NONE)
    raise TypeError(f"cannot hash a {t.__name__} as a key: keys must be int, float, str, "
                    f"bytes, None or tuples of them")


def stable_hash64(key: object) -> int:
    """The key's 64-bit hash, the same in every process (compiled twin of
    ``timely.megaphone.bins.stable_hash64``).

    >>> hex(stable_hash64(0)), stable_hash64(3) == stable_hash64(3.0)
    ('0x0', True)
    >>> stable_hash64([1])
    Traceback (most recent call last):
    ...
    TypeError: cannot hash a list as a key: keys must be int, float, str, bytes, None or tuples of them
    """
    return _hash(key)


cdef inline int _append(dict out, uint64_t b, object record) except -1:
    """``out.setdefault(b, []).append(record)`` without the temporary list."""
    bin_ = b                    # the Python int of the bin: the dict's key
    cdef PyObject *group = PyDict_GetItemWithError(out, bin_)
    if group is NULL:           # (an error in the lookup has been raised already)
        PyDict_SetItem(out, bin_, [record])
    else:
        PyList_Append(<object>group, record)
    return 0


# ``record[0]`` must be checked (setup.py compiles with boundscheck/wraparound off,
# which would read past the end of an empty tuple record): the pure twin raises
# IndexError there, and so does this one.
@cython.boundscheck(True)
@cython.wraparound(True)
def group_by_bin(records: object, key: object, k: object) -> dict:
    """``{bin: [records...]}`` for a batch (compiled twin of
    ``timely.megaphone.bins.group_by_bin``); ``key=None`` keys a record by ``record[0]``.
    Order within a bin is kept.

    >>> group_by_bin([("a", 1), ("a", 2)], None, 0)
    {0: [('a', 1), ('a', 2)]}
    """
    shift_obj = 64 - k          # first, as the pure twin does (a bad k fails the same way)
    cdef dict out = {}
    cdef uint64_t h
    cdef int shift
    if not k:
        return {0: list(records)} if records else {}
    if type(shift_obj) is int and 0 <= shift_obj < 64:
        shift = shift_obj       # 1 <= k <= 64: a C shift by 0..63 is defined
        if key is None:
            for record in records:
                if type(record) is tuple and PyTuple_GET_SIZE(record) > 0:
                    h = _hash(<object>PyTuple_GET_ITEM(record, 0))
                else:
                    h = _hash(record[0])
                _append(out, h >> shift, record)
        else:
            for record in records:
                _append(out, _hash(key(record)) >> shift, record)
        return out
    # Any other k (negative, above 64, not an int): Python's >>, exactly as the pure twin.
    for record in records:
        b = _hash(record[0] if key is None else key(record)) >> shift_obj
        group = out.get(b)
        if group is None:
            out[b] = [record]
        else:
            group.append(record)
    return out
