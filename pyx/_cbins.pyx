# cython: language_level=3
"""Megaphone's per-record work, compiled: F's ``group_by_bin`` / ``group_by_target``
and S's ``apply_fold`` / ``fold_bins`` / ``split_held``, in C.

These are the Cython twins of the hot functions of ``timely.megaphone.bins`` (F) and
``timely.megaphone.apply`` (S). They return what the pure-Python twins return, with the
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
``group_by_target`` (a counting sort, no object per bin): per record one hash and two
C array writes, per bin touched one table lookup. ``apply_fold``: per record one call
of the fold and one or two dict operations; ``fold_bins`` one list index per run of a
bin on top (and, with checkpoints on, one ``touch`` call per run); ``split_held`` one
list index per run.

>>> group_by_bin([("a", 1), ("a", 2)], None, 0)
{0: [('a', 1), ('a', 2)]}
"""

cimport cython
from libc.stdint cimport uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from cpython.sequence cimport PySequence_Fast, PySequence_Fast_GET_ITEM, PySequence_Fast_GET_SIZE
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


cdef inline void _put_u32(unsigned char *p, uint32_t x) noexcept:
    p[0] = x & 0xff
    p[1] = (x >> 8) & 0xff
    p[2] = (x >> 16) & 0xff
    p[3] = x >> 24


cdef inline uint32_t _get_u32(const unsigned char *p) noexcept:
    return p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef enum:
    _FAST_MAX_K = 16            # MAX_BINS = 2**16: a bin fits the runs' uint32 and a C index


# ``table[bin]`` must be checked (a table shorter than the bins raises IndexError, as
# in the pure twin), and so must ``record[0]``.
@cython.boundscheck(True)
@cython.wraparound(True)
def group_by_target(records: object, key: object, k: object, table: object) -> list:
    """``[(worker, runs, records), ...]`` (compiled twin of
    ``timely.megaphone.bins.group_by_target``): the same messages, the same bytes.

    How: a counting sort in C. One pass hashes every record to its bin and counts the
    bins in order of first appearance (an index by bin when there are few bins for
    the batch, else a small open-addressing table); one table lookup per distinct bin
    gives its worker; one more pass puts each record at its place in its worker's
    list. No Python object is made per bin but its int for the table lookup.

    >>> from timely.megaphone.bins import runs_of
    >>> [(w, runs_of(runs), rs) for w, runs, rs in group_by_target([("a", 1), ("a", 2)], None, 8, (3,) * 256)]
    [(3, [(2, 2)], [('a', 1), ('a', 2)])]
    """
    if type(k) is not int or not 0 < k <= _FAST_MAX_K:
        # k == 0 (one bin, no key computed) and any k the fast path does not cover:
        # bins' grouping, then the pure twin's packing, for the same result or error.
        from timely.megaphone.bins import py_group_by_target
        return py_group_by_target(records, key, k, table)
    cdef list seq = list(records)      # (a copy: a key function cannot change it under us)
    cdef Py_ssize_t n = len(seq)
    if n == 0:
        return []
    cdef int shift = 64 - <int>k
    cdef Py_ssize_t nbins = (<Py_ssize_t>1) << <int>k
    cdef Py_ssize_t m = 16
    while m < 2 * n:
        m <<= 1
    cdef bint direct = m >= nbins
    if direct:
        m = nbins
    # per record: its distinct bin; per slot: distinct index + 1 (0: empty) and its bin
    cdef uint32_t *rec_d = <uint32_t *>malloc(n * sizeof(uint32_t))
    cdef uint32_t *slot_d = <uint32_t *>calloc(m, sizeof(uint32_t))
    cdef uint32_t *slot_b = <uint32_t *>malloc(m * sizeof(uint32_t))
    cdef uint32_t *d_bin = <uint32_t *>malloc(n * sizeof(uint32_t))
    cdef uint32_t *d_count = <uint32_t *>malloc(n * sizeof(uint32_t))
    cdef uint32_t *d_target = <uint32_t *>malloc(n * sizeof(uint32_t))
    cdef uint32_t *d_next = <uint32_t *>malloc(n * sizeof(uint32_t))
    # per worker (at most one per distinct bin): records, runs, and the two fill cursors
    cdef uint32_t *t_count = <uint32_t *>calloc(n, sizeof(uint32_t))
    cdef uint32_t *t_runs = <uint32_t *>calloc(n, sizeof(uint32_t))
    cdef Py_ssize_t i, j, nd = 0, t, nt = 0
    cdef uint32_t b, s
    cdef uint64_t h
    cdef object record, w
    cdef PyObject *found
    cdef dict target_of = {}
    cdef list workers = [], lists = [], runs = [], out = []
    cdef unsigned char *p
    try:
        if not (rec_d and slot_d and slot_b and d_bin and d_count and d_target and d_next
                and t_count and t_runs):
            raise MemoryError()
        for i in range(n):
            record = <object>PyList_GET_ITEM(seq, i)
            if key is None:
                if type(record) is tuple and PyTuple_GET_SIZE(record) > 0:
                    h = _hash(<object>PyTuple_GET_ITEM(record, 0))
                else:
                    h = _hash(record[0])
            else:
                h = _hash(key(record))
            b = <uint32_t>(h >> shift)
            if direct:
                s = b
            else:
                s = b & (m - 1)
                while slot_d[s] and slot_b[s] != b:
                    s = (s + 1) & (m - 1)
            if not slot_d[s]:
                slot_d[s] = nd + 1
                slot_b[s] = b
                d_bin[nd] = b
                d_count[nd] = 0
                nd += 1
            j = slot_d[s] - 1
            d_count[j] += 1
            rec_d[i] = j
        # each distinct bin's worker; workers in order of first appearance
        for j in range(nd):
            w = table[d_bin[j]]
            found = PyDict_GetItemWithError(target_of, w)
            if found is NULL:
                t = nt
                nt += 1
                target_of[w] = t
                workers.append(w)
            else:
                t = <object>found
            d_target[j] = t
            t_count[t] += d_count[j]
            t_runs[t] += 1
        for t in range(nt):
            lists.append(PyList_New(t_count[t]))
            runs.append(PyBytes_FromStringAndSize(NULL, 8 * <Py_ssize_t>t_runs[t]))
            t_count[t] = 0          # from here: the next free place in the worker's list
            t_runs[t] = 0           # and in its runs
        # each distinct bin's first place in its worker's list, and its run
        for j in range(nd):
            t = d_target[j]
            d_next[j] = t_count[t]
            t_count[t] += d_count[j]
            p = <unsigned char *>PyBytes_AS_STRING(<object>PyList_GET_ITEM(runs, t)) + 8 * <Py_ssize_t>t_runs[t]
            _put_u32(p, d_bin[j])
            _put_u32(p + 4, d_count[j])
            t_runs[t] += 1
        for i in range(n):
            j = rec_d[i]
            record = <object>PyList_GET_ITEM(seq, i)
            Py_INCREF(record)
            PyList_SET_ITEM(<object>PyList_GET_ITEM(lists, d_target[j]), d_next[j], record)
            d_next[j] += 1
        for t in range(nt):
            out.append((workers[t], runs[t], lists[t]))
        return out
    finally:
        free(t_count)
        free(t_runs)
        free(rec_d)
        free(slot_d)
        free(slot_b)
        free(d_bin)
        free(d_count)
        free(d_target)
        free(d_next)


# A fold's result that is not a pair of a tuple is unpacked by CPython's own bytecode, so
# a wrong result fails with the message the pure twin gives (Cython words its own).
_unpack_pair = eval("lambda result: [(a, b) for a, b in (result,)][0]")


cdef int _fold_one(object fold, object state, bint plain, object get, object record,
                   object emit, object name, object time) except -1:
    cdef PyObject *found
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
        from timely.megaphone.apply import _fold_failed     # (imported by then: it imports us)
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


cdef int _fold(object fold, object state, object records, object emit, object name,
               object time) except -1:
    cdef bint plain = type(state) is dict
    get = None if plain else state.get
    for record in records:
        _fold_one(fold, state, plain, get, record, emit, name, time)
    return 0


def apply_fold(fold: object, state: object, records: object, emit: object, name: object,
               time: object) -> None:
    """Apply ``fold`` to each ``(key, value)`` of ``records`` against ``state`` (compiled
    twin of ``timely.megaphone.apply.apply_fold``)."""
    _fold(fold, state, records, emit, name, time)


_key_of = itemgetter(0)


cdef bytes _valid_runs(object runs, Py_ssize_t nrecords):
    """F's ``runs`` as bytes, refused (the pure twin's ``FrameError``, which names the
    problem) when ragged or when their counts do not add up to the ``nrecords``
    records of the message."""
    cdef bytes out = runs if type(runs) is bytes else bytes(runs)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(out), r, total = 0
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(out)
    if size % 8 == 0:
        for r in range(size // 8):
            total += _get_u32(p + 8 * r + 4)
        if total == nrecords:
            return out
    from timely.megaphone.apply import _checked_runs
    _checked_runs(out, nrecords)
    raise AssertionError("unreachable: the pure twin refuses these runs")


def fold_bins(fold: object, states: object, entries: object, emit: object, name: object,
              time: object) -> None:
    """``state_machine``'s S at one time (compiled twin of
    ``timely.megaphone.apply.fold_bins``): per run of each message, one bin lookup,
    then the fold over the run's records in place (no slice but for the log)."""
    cdef list slots = states.slots
    cdef Py_ssize_t nslots = len(slots)
    cdef uint32_t b
    cdef Py_ssize_t r, nruns, pos, end, j
    cdef const unsigned char *p
    cdef bint plain
    log = states.log
    for entry in entries:
        _, runs, records = entry
        seq = PySequence_Fast(records, "a Megaphone message's records must be a sequence")
        runs = _valid_runs(runs, PySequence_Fast_GET_SIZE(seq))
        nruns = PyBytes_GET_SIZE(runs) // 8
        p = <const unsigned char *>PyBytes_AS_STRING(runs)
        pos = 0
        for r in range(nruns):
            b = _get_u32(p + 8 * r)
            end = pos + _get_u32(p + 8 * r + 4)
            bin = <object>PyList_GET_ITEM(slots, b) if b < nslots else None
            if bin is None:
                from timely.megaphone.apply import _missing_bin
                raise _missing_bin(states, b)
            state = bin.state
            if log is not None:
                log.touch(b, map(_key_of, seq[pos:end]))
            plain = type(state) is dict
            get = None if plain else state.get
            for j in range(pos, end):
                _fold_one(fold, state, plain, get, <object>PySequence_Fast_GET_ITEM(seq, j),
                          emit, name, time)
            pos = end


def split_held(entries: list, states: object) -> tuple:
    """``(held, waiting)`` (compiled twin of ``timely.megaphone.apply.split_held``):
    ``(entries, [])`` after one look at ``states.slots`` per run in C when every bin is
    held; the split itself, needed only while bins are in flight, is the pure twin's."""
    cdef list slots = states.slots
    cdef Py_ssize_t nslots = len(slots)
    cdef Py_ssize_t r, nruns
    cdef uint32_t b
    cdef const unsigned char *p
    for entry in entries:
        _, runs, records = entry
        runs = _valid_runs(runs, len(records))
        nruns = PyBytes_GET_SIZE(runs) // 8
        p = <const unsigned char *>PyBytes_AS_STRING(runs)
        for r in range(nruns):
            b = _get_u32(p + 8 * r)
            if b >= nslots or <object>PyList_GET_ITEM(slots, b) is None:
                from timely.megaphone.apply import py_split_held
                return py_split_held(entries, states)
    return entries, []
