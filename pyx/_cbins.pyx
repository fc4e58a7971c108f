# cython: language_level=3
"""Megaphone's per-record work, compiled: F's ``group_by_bin`` / ``group_by_target``
and S's ``apply_fold`` / ``fold_bins``, in C.

These are the Cython twins of the hot functions of ``timely.megaphone.bins`` (F) and
``timely.megaphone.state`` (S). They return what the pure-Python twins return, with the
same bins (by the cross-process hash defined in ``timely.hashing``), the records in the
same order, the same state after a fold, and the same exceptions (from the key
function, from ``record[0]``, from a key the hash refuses, from a fold: a
``StatefulError`` naming the operator, the key and the time). The user's key function
and fold stay Python calls; what is compiled is the loop around them.

How: the hash is ``hash64`` of ``pyx/_stable_hash.pxd`` (C ``uint64_t`` arithmetic on
the key's own buffers, shared with the compiled ``Exchange`` partition,
``timely.dataflow._cexchange``).

Costs: ``group_by_bin`` O(records): per record one hash in C, one dict lookup and one
list append; the key function, when given, is called once per record. With ``k == 0``
every record goes to bin 0 and no key is computed (as in the pure twin).
``group_by_target`` adds one table lookup per bin. ``apply_fold``: per record one call
of the fold and one or two dict operations; ``fold_bins`` one dict lookup per bin on
top (and, with checkpoints on, one ``touch`` call per bin).

>>> group_by_bin([("a", 1), ("a", 2)], None, 0)
{0: [('a', 1), ('a', 2)]}
"""

cimport cython
from libc.stdint cimport uint64_t
from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem
from cpython.list cimport PyList_Append
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.ref cimport PyObject
from operator import itemgetter

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


def group_by_target(records: object, key: object, k: object, table: object) -> list:
    """``[(worker, [(bin, [records...]), ...]), ...]``: ``group_by_bin``, then each bin
    to its worker by ``table`` (compiled twin of ``timely.megaphone.bins.group_by_target``).

    >>> group_by_target([("a", 1), ("a", 2)], None, 0, (3,))
    [(3, [(0, [('a', 1), ('a', 2)])])]
    """
    cdef dict groups = group_by_bin(records, key, k)
    cdef dict per_target = {}
    cdef PyObject *bucket
    for b, rs in groups.items():
        w = table[b]
        bucket = PyDict_GetItemWithError(per_target, w)
        if bucket is NULL:
            PyDict_SetItem(per_target, w, [(b, rs)])
        else:
            PyList_Append(<object>bucket, (b, rs))
    return list(per_target.items())


# A fold's result that is not a pair of a tuple is unpacked by CPython's own bytecode, so
# a wrong result fails with the message the pure twin gives (Cython words its own).
_unpack_pair = eval("lambda result: [(a, b) for a, b in (result,)][0]")


cdef int _fold(object fold, object state, object records, object emit, object name,
               object time) except -1:
    cdef PyObject *found
    cdef bint plain = type(state) is dict
    get = None if plain else state.get
    for record in records:
        key, value = record
        if plain:
            found = PyDict_GetItemWithError(<dict>state, key)
            old = None if found is NULL else <object>found
        else:
            old = get(key)
        try:
            result = fold(key, value, old)
            if type(result) is tuple and PyTuple_GET_SIZE(result) == 2:
                new = <object>PyTuple_GET_ITEM(result, 0)
                outputs = <object>PyTuple_GET_ITEM(result, 1)
            else:
                new, outputs = _unpack_pair(result)
        except Exception as e:
            from timely.megaphone.state import _fold_failed     # (imported by then: it imports us)
            raise _fold_failed(name, key, time, e) from e
        if new is None:
            state.pop(key, None)
        elif plain:
            PyDict_SetItem(<dict>state, key, new)
        else:
            state[key] = new
        if outputs:
            emit(outputs)
    return 0


def apply_fold(fold: object, state: object, records: object, emit: object, name: object,
               time: object) -> None:
    """Apply ``fold`` to each ``(key, value)`` of ``records`` against ``state`` (compiled
    twin of ``timely.megaphone.state.apply_fold``)."""
    _fold(fold, state, records, emit, name, time)


_key_of = itemgetter(0)


def fold_bins(fold: object, states: object, entries: object, emit: object, name: object,
              time: object) -> None:
    """``state_machine``'s S at one time (compiled twin of
    ``timely.megaphone.state.fold_bins``)."""
    cdef dict bins = states.bins
    cdef PyObject *found
    log = states.log
    for entry in entries:
        _, b, records = entry
        found = PyDict_GetItemWithError(bins, b)
        if found is NULL:
            from timely.megaphone.state import _missing_bin
            raise _missing_bin(states, b)
        if log is not None:
            log.touch(b, map(_key_of, records))
        _fold(fold, (<object>found).state, records, emit, name, time)
