# cython: language_level=3
"""The cluster wire codec, compiled: msgpack for the types records are made of.

This is the Cython twin of ``timely.communication.codec``'s ``py_packb`` and
``PyDecoder``, which call the msgpack library. For every value both twins accept:

- ``packb(obj)`` returns exactly the bytes of ``msgpack.packb(obj, use_bin_type=True)``
  (the same minimal encodings), so either side of a connection may run either twin;
- ``Decoder().decode(data)`` returns what ``msgpack.unpackb(data, use_list=False,
  raw=False, strict_map_key=False)`` returns: arrays as tuples, maps as dicts.

The fast path covers None, bool, int in [-2**63, 2**64), float, str, bytes, tuple,
list and dict, as exact types. Anything else (a subclass, a set, an int outside that
range, an unpaired surrogate, nesting deeper than 500 levels; on decoding, extension
types) is handed to the msgpack library for the whole value, so results and errors
are the library's. Decoding malformed input (truncated, a reserved byte, invalid
UTF-8, trailing bytes) raises ``ValueError`` or ``UnicodeDecodeError``.

Why it is faster than the library for batches of records:

- the packer writes into one growing C buffer, with one exact-type test per value;
- a ``Decoder`` interns short ASCII strings: a direct-mapped table of recently decoded
  strings, looked up by the FNV-1a hash of the bytes. A key that arrives again (words,
  ids, field names: the common case for exchanged records) is the same ``str`` object,
  not a new one. That saves the allocation and the later free, and the receiving
  operator's dict lookups reuse the string's cached hash. Semantics are unchanged:
  strings are immutable. A ``Decoder`` is not thread-safe; keep one per receiving thread.

Costs: O(bytes) both ways; per string a copy (packing) or a hash of its bytes plus a
compare (decoding, on a hit); the table is 32,768 strings of at most 32 bytes.

>>> d = Decoder()
>>> packed = packb((3, ["a", "b", "a"]))
>>> packed == bytes([0x92, 0x03, 0x93, 0xa1, 0x61, 0xa1, 0x62, 0xa1, 0x61])
True
>>> d.decode(packed)
(3, ('a', 'b', 'a'))
"""

from libc.stdint cimport uint8_t, uint32_t, uint64_t, int8_t, int16_t, int32_t, int64_t
from libc.string cimport memcpy, memcmp
from libc.stdlib cimport malloc, realloc, free
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from cpython.long cimport PyLong_AsLongLongAndOverflow, PyLong_FromLongLong, PyLong_FromUnsignedLongLong
from cpython.float cimport PyFloat_AS_DOUBLE, PyFloat_FromDouble
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.list cimport PyList_GET_ITEM
from cpython.sequence cimport PySequence_Fast_GET_SIZE, PySequence_Fast_GET_ITEM
from cpython.dict cimport PyDict_Next, PyDict_Size, PyDict_GetItemWithError
from cpython.ref cimport PyObject, Py_INCREF

from _stable_hash cimport _sh_fnv1a64


cdef extern from "Python.h":
    unsigned long long _as_u64 "PyLong_AsUnsignedLongLong"(object pylong) noexcept
    object PyUnicode_New(Py_ssize_t size, Py_UCS4 maxchar)
    void *PyUnicode_DATA(object o)
    bint PyUnicode_IS_COMPACT_ASCII(object o)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)
    void PyErr_Clear()
    PyObject *PyErr_Occurred()

DEF MAX_DEPTH = 500
DEF INTERN_BITS = 15
DEF INTERN_SLOTS = 1 << INTERN_BITS
DEF INTERN_MAX = 32


class _Fallback(Exception):
    """The value needs the msgpack library (a type or range outside the fast path)."""


# ---- packing ---------------------------------------------------------------------------
cdef struct Buffer:
    char *data
    Py_ssize_t size
    Py_ssize_t used


cdef int _open(Buffer *b, Py_ssize_t size) except -1:
    """An empty buffer of ``size`` bytes (the caller frees ``b.data``)."""
    b.data = <char *>malloc(size)
    if b.data == NULL:
        raise MemoryError()
    b.size = size
    b.used = 0
    return 0


cdef int _grow(Buffer *b, Py_ssize_t more) except -1:
    cdef Py_ssize_t want = b.used + more
    cdef Py_ssize_t size = b.size
    cdef char *data
    if want <= size:
        return 0
    while size < want:
        size *= 2
    data = <char *>realloc(b.data, size)
    if data == NULL:
        raise MemoryError()
    b.data = data
    b.size = size
    return 0


cdef inline int _put1(Buffer *b, uint8_t x) except -1:
    if b.used + 1 > b.size:
        _grow(b, 1)
    b.data[b.used] = <char>x
    b.used += 1
    return 0


cdef inline int _put_be(Buffer *b, uint8_t head, uint64_t x, int n) except -1:
    """``head`` then the low ``n`` bytes of ``x``, big-endian."""
    cdef int i
    if b.used + 1 + n > b.size:
        _grow(b, 1 + n)
    b.data[b.used] = <char>head
    for i in range(n):
        b.data[b.used + 1 + i] = <char>(x >> (8 * (n - 1 - i)))
    b.used += 1 + n
    return 0


cdef inline int _put_bytes(Buffer *b, const char *p, Py_ssize_t n) except -1:
    if b.used + n > b.size:
        _grow(b, n)
    memcpy(b.data + b.used, p, n)
    b.used += n
    return 0


cdef int _pack_int(Buffer *b, object o) except -1:
    cdef int overflow = 0
    cdef long long v = PyLong_AsLongLongAndOverflow(o, &overflow)
    cdef unsigned long long u
    if overflow == 0:
        if v >= 0:
            u = <unsigned long long>v
        elif v >= -32:
            return _put1(b, <uint8_t>(<int8_t>v))
        elif v >= -128:
            return _put_be(b, 0xd0, <uint64_t>v, 1)
        elif v >= -32768:
            return _put_be(b, 0xd1, <uint64_t>v, 2)
        elif v >= -2147483648:
            return _put_be(b, 0xd2, <uint64_t>v, 4)
        else:
            return _put_be(b, 0xd3, <uint64_t>v, 8)
    elif overflow > 0:
        u = _as_u64(o)
        if u == <unsigned long long>-1 and PyErr_Occurred() != NULL:
            PyErr_Clear()
            raise _Fallback()
    else:
        raise _Fallback()
    if u < 0x80:
        return _put1(b, <uint8_t>u)
    if u < 0x100:
        return _put_be(b, 0xcc, u, 1)
    if u < 0x10000:
        return _put_be(b, 0xcd, u, 2)
    if u < 0x100000000:
        return _put_be(b, 0xce, u, 4)
    return _put_be(b, 0xcf, u, 8)


cdef int _pack_len(Buffer *b, Py_ssize_t n, uint8_t fix, Py_ssize_t fix_max,
                   int has8, uint8_t head8) except -1:
    """A str/bin/array/map length header: fix form below ``fix_max`` (fix != 0), then
    the 8- (``has8``), 16- and 32-bit forms, whose codes follow ``head8``."""
    if fix != 0 and n < fix_max:
        return _put1(b, <uint8_t>(fix | n))
    if has8 and n < 0x100:
        return _put_be(b, head8, <uint64_t>n, 1)
    if n < 0x10000:
        return _put_be(b, head8 + has8, <uint64_t>n, 2)
    if n <= 0xFFFFFFFF:
        return _put_be(b, head8 + has8 + 1, <uint64_t>n, 4)
    raise _Fallback()


cdef int _pack(Buffer *b, object o, int depth) except -1:
    cdef type t = type(o)
    cdef Py_ssize_t n = 0, i = 0
    cdef const char *p
    cdef double d
    cdef uint64_t bits
    cdef PyObject *k
    cdef PyObject *v
    if depth > MAX_DEPTH:
        raise _Fallback()
    if t is str:
        if PyUnicode_IS_COMPACT_ASCII(o):      # ASCII: the characters are the UTF-8 bytes
            p = <const char *>PyUnicode_DATA(o)
            n = PyUnicode_GET_LENGTH(o)
        else:
            p = PyUnicode_AsUTF8AndSize(o, &n)     # surrogates raise: the library's error
        _pack_len(b, n, 0xa0, 32, 1, 0xd9)
        return _put_bytes(b, p, n)
    if t is int:
        return _pack_int(b, o)
    if t is tuple or t is list:
        n = PySequence_Fast_GET_SIZE(o)
        _pack_len(b, n, 0x90, 16, 0, 0xdc)
        for i in range(n):
            _pack(b, <object>PySequence_Fast_GET_ITEM(o, i), depth + 1)
        return 0
    if o is None:
        return _put1(b, 0xc0)
    if t is bool:
        return _put1(b, 0xc3 if o is True else 0xc2)
    if t is float:
        d = PyFloat_AS_DOUBLE(o)
        memcpy(&bits, &d, 8)
        return _put_be(b, 0xcb, bits, 8)
    if t is bytes:
        n = PyBytes_GET_SIZE(o)
        _pack_len(b, n, 0, 0, 1, 0xc4)
        return _put_bytes(b, PyBytes_AS_STRING(o), n)
    if t is dict:
        n = PyDict_Size(o)
        _pack_len(b, n, 0x80, 16, 0, 0xde)
        while PyDict_Next(o, &i, &k, &v):
            _pack(b, <object>k, depth + 1)
            _pack(b, <object>v, depth + 1)
        return 0
    raise _Fallback()


cdef object _FALLBACK = object()
cdef object _pure = None


cdef object _pure_codec():
    """``timely.communication.codec``, the pure twin, for what the fast path hands on
    (imported on first use: that module imports this one)."""
    global _pure
    if _pure is None:
        from timely.communication import codec
        _pure = codec
    return _pure


def packb(obj: object) -> bytes:
    """``obj`` as msgpack: the bytes ``msgpack.packb(obj, use_bin_type=True)`` gives.

    >>> packb([1, -1, "é", b"x", None, True, 1.5]).hex()
    '9701ffa2c3a9c40178c0c3cb3ff8000000000000'
    >>> packb({1, 2}) == packb([1, 2])      # outside the fast path: the library's rules
    True
    """
    cdef Buffer b
    _open(&b, 256)
    try:
        _pack(&b, obj, 0)
        return PyBytes_FromStringAndSize(b.data, b.used)
    except (_Fallback, UnicodeEncodeError):
        pass
    finally:
        free(b.data)
    return _pure_codec().py_packb(obj)    # outside the handler: its errors are not chained to ours


#: a value ``pack_items`` takes for the key's absence (a TrackedDict's record of a deletion)
GONE = object()


def pack_items(state, keys=None):
    """``(packed, count, missing)``: the msgpack array of ``(key, state[key])`` pairs for
    each of ``keys`` the dict ``state`` holds (all its items, in its order, when ``keys``
    is None; a value ``GONE`` counts as missing), the number of pairs, and the keys it
    does not hold, in the order of ``keys``. ``packed`` is exactly
    ``packb(pairs)``. Reads go through dict's own lookup, so a ``TrackedDict`` marks
    nothing. One lookup and the packing of one pair per key, with no tuple or list
    built: a checkpoint delta's keys go straight from the bin to bytes.

    >>> packed, count, missing = pack_items({"a": 1, "b": (2, 3)}, ["b", "gone"])
    >>> Decoder().decode(packed), count, missing
    ((('b', (2, 3)),), 1, ['gone'])
    """
    if not isinstance(state, dict):
        raise TypeError(f"pack_items reads a dict, not {type(state).__name__}")
    cdef Buffer b
    cdef Buffer head
    cdef list missing = []
    cdef Py_ssize_t count = 0, i = 0
    cdef PyObject *k
    cdef PyObject *v
    cdef bytes out
    cdef bint fast
    cdef char header[8]             # an array header takes at most 5 bytes: never grown
    head.data = header
    head.size = 8
    head.used = 0
    _open(&b, 4096)
    try:
        try:
            if keys is None:
                while PyDict_Next(state, &i, &k, &v):
                    if <object>v is GONE:
                        missing.append(<object>k)
                        continue
                    _put1(&b, 0x92)
                    _pack(&b, <object>k, 1)
                    _pack(&b, <object>v, 1)
                    count += 1
            else:
                for key in keys:
                    v = PyDict_GetItemWithError(state, key)
                    if v is NULL or <object>v is GONE:    # (a failed lookup has raised already)
                        missing.append(key)
                        continue
                    _put1(&b, 0x92)
                    _pack(&b, key, 1)
                    _pack(&b, <object>v, 1)
                    count += 1
            _pack_len(&head, count, 0x90, 16, 0, 0xdc)
            fast = True
        except (_Fallback, UnicodeEncodeError):
            fast = False
        if fast:
            out = PyBytes_FromStringAndSize(NULL, head.used + b.used)
            memcpy(PyBytes_AS_STRING(out), head.data, head.used)
            memcpy(PyBytes_AS_STRING(out) + head.used, b.data, b.used)
            return out, count, missing
    finally:
        free(b.data)
    return _pure_codec().py_pack_items(state, keys)     # outside the fast path: the library's


# ---- unpacking -------------------------------------------------------------------------
cdef class Decoder:
    """Decodes msgpack payloads, interning short ASCII strings (see the module docstring).

    >>> d = Decoder()
    >>> a, b = d.decode(packb(("word", "word")))
    >>> a is b
    True
    """

    cdef list _table
    cdef const unsigned char *_p
    cdef Py_ssize_t _n
    cdef Py_ssize_t _at
    cdef readonly Py_ssize_t hits
    cdef readonly Py_ssize_t misses

    def __init__(self) -> None:
        self._table = [None] * INTERN_SLOTS
        self.hits = 0
        self.misses = 0

    def decode(self, data: object) -> object:
        """The value ``data`` (bytes-like) encodes, like ``msgpack.unpackb(data,
        use_list=False, raw=False, strict_map_key=False)``."""
        cdef const unsigned char[::1] view = data
        if view.shape[0] == 0:
            raise ValueError("Unpack failed: incomplete input")
        self._p = &view[0]
        self._n = view.shape[0]
        self._at = 0
        try:
            value = self._value(0)
        except _Fallback:
            value = _FALLBACK
        finally:
            self._p = NULL
        if value is _FALLBACK:
            return _pure_codec().PyDecoder().decode(data)
        if self._at != self._n:
            raise ValueError(f"{self._n - self._at} bytes of extra data after the value")
        return value

    cdef inline const unsigned char *_take(self, Py_ssize_t n) except NULL:
        cdef const unsigned char *p
        if n > self._n - self._at:
            raise ValueError("Unpack failed: incomplete input")
        p = self._p + self._at
        self._at += n
        return p

    cdef inline uint64_t _be(self, int n) except? 0xFFFFFFFFFFFFFFFFULL:
        cdef const unsigned char *p = self._take(n)
        cdef uint64_t x = 0
        cdef int i
        for i in range(n):
            x = (x << 8) | p[i]
        return x

    cdef object _str(self, Py_ssize_t n):
        cdef const unsigned char *p = self._take(n)
        cdef Py_ssize_t i, slot
        cdef object s
        cdef PyObject *cached
        if n > INTERN_MAX:
            return PyUnicode_DecodeUTF8(<const char *>p, n, NULL)
        for i in range(n):
            if p[i] >= 0x80:
                return PyUnicode_DecodeUTF8(<const char *>p, n, NULL)
        slot = <Py_ssize_t>(_sh_fnv1a64(p, n) & (INTERN_SLOTS - 1))
        cached = PyList_GET_ITEM(self._table, slot)
        if (<object>cached) is not None and PyUnicode_GET_LENGTH(<object>cached) == n \
                and memcmp(PyUnicode_DATA(<object>cached), p, n) == 0:
            self.hits += 1
            return <object>cached
        s = PyUnicode_New(n, 127)
        memcpy(PyUnicode_DATA(s), p, n)
        self._table[slot] = s
        self.misses += 1
        return s

    cdef object _array(self, Py_ssize_t n, int depth):
        cdef tuple t = PyTuple_New(n)
        cdef Py_ssize_t i
        cdef object item
        cdef uint8_t c
        for i in range(n):
            c = self._p[self._at] if self._at < self._n else 0
            if 0xa0 <= c <= 0xbf:       # a short str, the common record: no dispatch
                self._at += 1
                item = self._str(c & 0x1f)
            else:
                item = self._value(depth + 1)
            Py_INCREF(item)
            PyTuple_SET_ITEM(t, i, item)
        return t

    cdef object _map(self, Py_ssize_t n, int depth):
        cdef dict out = {}
        cdef Py_ssize_t i
        for i in range(n):
            key = self._value(depth + 1)
            out[key] = self._value(depth + 1)
        return out

    cdef object _value(self, int depth):
        cdef uint8_t c
        cdef uint64_t bits
        cdef uint32_t bits32
        cdef double d
        cdef float f
        cdef Py_ssize_t n
        if depth > MAX_DEPTH:
            raise _Fallback()
        c = self._take(1)[0]
        if c < 0x80:
            return <long>c
        if c >= 0xe0:
            return <long>(<int8_t>c)
        if c < 0x90:
            return self._map(c & 0x0f, depth)
        if c < 0xa0:
            return self._array(c & 0x0f, depth)
        if c < 0xc0:
            return self._str(c & 0x1f)
        if c == 0xc0:
            return None
        if c == 0xc2:
            return False
        if c == 0xc3:
            return True
        if c == 0xcc:
            return <long>self._be(1)
        if c == 0xcd:
            return <long>self._be(2)
        if c == 0xce:
            return PyLong_FromUnsignedLongLong(self._be(4))
        if c == 0xcf:
            return PyLong_FromUnsignedLongLong(self._be(8))
        if c == 0xd0:
            return <long>(<int8_t>self._be(1))
        if c == 0xd1:
            return <long>(<int16_t>self._be(2))
        if c == 0xd2:
            return <long>(<int32_t>self._be(4))
        if c == 0xd3:
            return PyLong_FromLongLong(<int64_t>self._be(8))
        if c == 0xcb:
            bits = self._be(8)
            memcpy(&d, &bits, 8)
            return PyFloat_FromDouble(d)
        if c == 0xca:
            bits32 = <uint32_t>self._be(4)
            memcpy(&f, &bits32, 4)
            return PyFloat_FromDouble(<double>f)
        if c == 0xd9:
            return self._str(<Py_ssize_t>self._be(1))
        if c == 0xda:
            return self._str(<Py_ssize_t>self._be(2))
        if c == 0xdb:
            return self._str(<Py_ssize_t>self._be(4))
        if 0xc4 <= c <= 0xc6:
            n = <Py_ssize_t>self._be(1 << (c - 0xc4))
            return PyBytes_FromStringAndSize(<const char *>self._take(n), n)
        if c == 0xdc:
            return self._array(<Py_ssize_t>self._be(2), depth)
        if c == 0xdd:
            return self._array(<Py_ssize_t>self._be(4), depth)
        if c == 0xde:
            return self._map(<Py_ssize_t>self._be(2), depth)
        if c == 0xdf:
            return self._map(<Py_ssize_t>self._be(4), depth)
        if c == 0xc1:
            raise ValueError("Unpack failed: byte 0xc1 is reserved, never msgpack")
        raise _Fallback()        # extension types (0xc7-0xc9, 0xd4-0xd8): the library's objects
