# cython: language_level=3
"""ChangeBatch, compiled: ``(key, delta)`` updates consolidated lazily.

This is the Cython twin of ``timely.progress.change_batch.ChangeBatch`` and behaves the
same way, method for method. Keys are arbitrary hashable Python objects and deltas
Python numbers (ints in practice). The batch appends each update and only consolidates
(sums equal keys and drops zero counts) when it is read, or when the unconsolidated tail
reaches the length of the consolidated prefix (more than 32 entries held and
``len >> 1 >= clean``). Consolidation goes through a dict, so it keeps first-seen key
order and needs no ordering on keys.

Costs, for n entries held (consolidated or not):

* ``update``, ``extend`` (per update): O(1) amortised; each update is consolidated O(1)
  times before memory is bounded by a constant factor of the distinct keys.
* ``compact``, ``__len__``, ``__iter__``, ``drain``, ``into_inner``, ``__repr__``:
  O(n) when something is unconsolidated, else O(1) (plus the copy ``__repr__`` makes).
* ``is_empty``: O(1) when the unconsolidated tail is shorter than the consolidated
  prefix (it cannot cancel every key), else O(n) to compact: O(1) amortised.
* ``clear``, ``unstable_len``: O(1). ``__eq__``: O(n + m).

The gain over the pure twin is the removal of interpreter overhead in the per-update
paths (the dict-based consolidation costs the same). The compiled Tracker fills an empty
batch's list directly with updates it has already consolidated (``_fill_target`` and
``_fill_done``, reached through the ``_C_API`` capsule).

>>> batch = ChangeBatch()
>>> batch.update("a", 3); batch.update("b", 1); batch.update("a", -3)
>>> batch.is_empty(), list(batch)
(False, [('b', 1)])
>>> batch.drain(), batch.is_empty()
([('b', 1)], True)
"""

from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem, PyDict_Next
from cpython.list cimport PyList_GET_SIZE, PyList_GetSlice
from cpython.ref cimport PyObject
from cpython.pycapsule cimport PyCapsule_New


cdef class ChangeBatch:
    """Signed counts per key, compacted lazily (see the module docstring)."""

    cdef list _updates      # (key, delta) entries; [0, _clean) is consolidated
    cdef Py_ssize_t _clean

    def __cinit__(self, *args, **kwargs):
        self._updates = []
        self._clean = 0

    def __init__(self, updates=None):
        self._updates = []
        self._clean = 0
        if updates is not None:
            self.extend(updates)

    @classmethod
    def new_from(cls, key, delta):
        """A batch holding the single update ``(key, delta)``."""
        batch = cls()
        batch.update(key, delta)
        return batch

    cdef inline int _maybe_compact(self) except -1:
        cdef Py_ssize_t n = PyList_GET_SIZE(self._updates)
        if n > 32 and (n >> 1) >= self._clean:
            self._compact()
        return 0

    def update(self, key, delta):
        """Add ``delta`` to ``key``'s count. O(1) amortised."""
        if delta:
            self._updates.append((key, delta))
            self._maybe_compact()

    def extend(self, updates):
        """Add every ``(key, delta)`` of ``updates``. O(1) amortised per update."""
        cdef list own = self._updates
        for u in updates:
            if u[1]:
                own.append(u)
        self._maybe_compact()

    cdef int _compact(self) except -1:
        cdef dict acc
        cdef PyObject* old
        cdef Py_ssize_t pos = 0
        cdef PyObject* k
        cdef PyObject* v
        cdef list out
        if self._clean < PyList_GET_SIZE(self._updates):
            acc = {}
            for key, delta in self._updates:
                old = PyDict_GetItemWithError(acc, key)
                if old == NULL:
                    if type(delta) is int:
                        PyDict_SetItem(acc, key, delta)
                    else:
                        PyDict_SetItem(acc, key, 0 + delta)
                else:
                    PyDict_SetItem(acc, key, <object>old + delta)
            out = []
            while PyDict_Next(acc, &pos, &k, &v):
                if <object>v:
                    out.append((<object>k, <object>v))
            self._updates = out
        self._clean = PyList_GET_SIZE(self._updates)
        return 0

    def compact(self):
        """Consolidate: one entry per key, no zero counts. O(n) in the entries held."""
        self._compact()

    def is_empty(self):
        """True when every key's count is zero. O(1) amortised; compacts if it must.

        A tail of unconsolidated updates shorter than the consolidated prefix cannot
        cancel all of its keys (each holds a non-zero count), so the batch is then known
        to be non-empty; otherwise it compacts and looks.
        """
        cdef Py_ssize_t n = PyList_GET_SIZE(self._updates)
        if n - self._clean < self._clean:
            return False
        if n == 0:
            return True
        self._compact()
        return PyList_GET_SIZE(self._updates) == 0

    def __len__(self):
        """The number of keys with a non-zero count. Compacts."""
        self._compact()
        return PyList_GET_SIZE(self._updates)

    def __iter__(self):
        self._compact()
        return iter(self._updates)

    def __eq__(self, other):
        if not isinstance(other, ChangeBatch) and not hasattr(other, "drain"):
            return NotImplemented
        return dict(iter(self)) == dict(iter(other))

    def __ne__(self, other):
        result = self.__eq__(other)
        if result is NotImplemented:
            return result
        return not result

    __hash__ = None

    def __repr__(self):
        return f"ChangeBatch({list(self)!r})"

    def drain(self):
        """Return the consolidated updates (a list) and empty the batch. O(n)."""
        cdef list out, result
        cdef Py_ssize_t n
        self._compact()
        out = self._updates
        n = PyList_GET_SIZE(out)
        self._clean = 0
        if n <= 64:
            # Copy and clear in place: the batch keeps its (long-lived) list, so a batch
            # drained every round does not promote a new list through the GC generations
            # each time (which makes full collections frequent); the copy dies young.
            result = PyList_GetSlice(out, 0, n)
            del out[:]
            return result
        self._updates = []
        return out

    def into_inner(self):
        """The consolidated updates, leaving the batch empty (timely's name)."""
        return self.drain()

    def drain_into(self, other):
        """Move every update into ``other``."""
        other.extend(self.drain())

    def clear(self):
        """Forget every update. O(1)."""
        self._updates = []
        self._clean = 0

    def unstable_len(self):
        """Entries held, consolidated or not (an instrument, not a count of keys)."""
        return PyList_GET_SIZE(self._updates)

    def __reduce__(self):
        # (pickle, copy) the entries as held, consolidated or not, like the pure twin
        return (type(self), (), (list(self._updates), self._clean))

    def __setstate__(self, state):
        updates, clean = state
        self._updates = list(updates)
        self._clean = clean


cdef object _fill_target(object batch):
    """For the compiled Tracker: when ``batch`` is an empty ChangeBatch, its (empty)
    list of updates, into which the caller appends distinct-key, non-zero updates and
    then calls ``_fill_done``; otherwise None (the caller then uses ``extend``)."""
    if type(batch) is ChangeBatch and PyList_GET_SIZE((<ChangeBatch>batch)._updates) == 0:
        return (<ChangeBatch>batch)._updates
    return None


cdef int _fill_done(object batch) except -1:
    """The updates appended after ``_fill_target`` are consolidated: mark them so."""
    (<ChangeBatch>batch)._clean = PyList_GET_SIZE((<ChangeBatch>batch)._updates)
    return 0


ctypedef struct _TrackerAPI:
    object (*fill_target)(object)
    int (*fill_done)(object) except -1


cdef _TrackerAPI _api
_api.fill_target = _fill_target
_api.fill_done = _fill_done

# The compiled Tracker finds these C functions through a capsule (which keeps the
# extension modules independent of each other's build-time paths: no cimport).
_C_API = PyCapsule_New(<void*>&_api, b"timely.progress._cchange_batch._C_API", NULL)
