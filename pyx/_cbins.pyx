# cython: language_level=3
"""Megaphone bins, compiled: ``group_by_bin`` in C.

This is the Cython twin of the hot function of ``timely.megaphone.bins``. It returns
the same dict as the pure-Python twin, with the same bins (by the cross-process hash
defined in ``timely.hashing``), the records in the same order, and the same exceptions
from the key function, from ``record[0]`` or from a key the hash refuses.

How: the hash is ``hash64`` of ``pyx/_stable_hash.pxd`` (C ``uint64_t`` arithmetic on
the key's own buffers, shared with the compiled ``Exchange`` partition,
``timely.dataflow._cexchange``).

Costs: O(records): per record one hash in C, one dict lookup and one list append; the
key function, when given, is called once per record. With ``k == 0`` every record goes to bin 0 and no key is
computed (as in the pure twin).

>>> group_by_bin([("a", 1), ("a", 2)], None, 0)
{0: [('a', 1), ('a', 2)]}
"""

cimport cython
from libc.stdint cimport uint64_t
from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem
from cpython.list cimport PyList_Append
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.ref cimport PyObject

# The hash itself is shared with timely.dataflow's compiled exchange (pyx/_stable_hash.pxd).
from _stable_hash cimport hash64 as _hash


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
