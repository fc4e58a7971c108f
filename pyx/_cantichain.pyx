# cython: language_level=3
"""MutableAntichain, compiled: signed counts per timestamp and their frontier.

This is the Cython twin of ``timely.progress.antichain.MutableAntichain`` with the same
methods and results. It holds Python objects as timestamps: ``int``, ``tuple`` of ints
(ordered by the product partial order) or any object implementing the timestamp
protocol of ``timely.progress.timestamp`` (``less_equal``/``less_than`` methods, a
total ``__lt__`` extending the partial order, hashing). Comparisons of ints and of
tuples of ints are done in C (machine integers, falling back to Python comparison for
values beyond 64 bits); any other object is asked through its own methods.

The frontier is the list of minimal timestamps with a positive count, in sorted
(``<``) order. ``update_iter`` applies a batch of count changes and returns the frontier
changes, removed elements (-1) first, then added ones (+1). It rebuilds the frontier only
when an update is neither strictly beyond the frontier nor a decrement of a time the
frontier does not cover (those cannot move it).

Costs, for f frontier elements, k distinct timestamps held and d coordinates:

* ``update_iter``: O(f d) comparisons per update, plus one rebuild when needed:
  O(k log k) to sort the positive times and O(k f d) comparisons.
* ``count_for``: O(d) (a dict lookup). ``less_than``/``less_equal``: O(f d).
* ``frontier``, ``counts``: O(f), O(k) copies. ``is_empty``: O(1).

>>> m = MutableAntichain()
>>> sorted(m.update_iter([((1, 3), 1), ((3, 1), 1), ((4, 4), 1)]))
[((1, 3), 1), ((3, 1), 1)]
>>> sorted(m.update_iter([((1, 3), -1)]))
[((1, 3), -1)]
>>> m.frontier(), m.count_for((4, 4))
([(3, 1)], 1)
"""

from cpython.long cimport PyLong_CheckExact
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_SIZE, PyTuple_GET_ITEM
from cpython.object cimport PyObject_RichCompareBool, Py_LE, Py_LT, Py_EQ, Py_GT, Py_NE
from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem, PyDict_DelItem, PyDict_Next
from cpython.list cimport PyList_GET_SIZE, PyList_GET_ITEM
from cpython.ref cimport PyObject


cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object, int*) except? -1


# ---- C-level comparisons (the product partial order of timestamp.py) ------------------

cdef inline int _int_cmp(object x, object y, int op) except -1:
    """``x op y`` for two exact Python ints, in machine arithmetic when both fit."""
    cdef int ofx = 0, ofy = 0
    cdef long long a = PyLong_AsLongLongAndOverflow(x, &ofx)
    cdef long long b = PyLong_AsLongLongAndOverflow(y, &ofy)
    if ofx == 0 and ofy == 0:
        if op == Py_LE:
            return a <= b
        if op == Py_LT:
            return a < b
        if op == Py_GT:
            return a > b
        if op == Py_EQ:
            return a == b
        return a != b
    return PyObject_RichCompareBool(x, y, op)


cdef inline int _le(object a, object b) except -1:
    """timestamp.less_equal(a, b)."""
    cdef Py_ssize_t i, n
    cdef object x, y
    if PyLong_CheckExact(a):
        if PyLong_CheckExact(b):
            return _int_cmp(a, b, Py_LE)
        return PyObject_RichCompareBool(a, b, Py_LE)
    if PyTuple_CheckExact(a):
        if PyTuple_CheckExact(b):
            n = PyTuple_GET_SIZE(a)
            if PyTuple_GET_SIZE(b) < n:
                n = PyTuple_GET_SIZE(b)
            for i in range(n):
                x = <object>PyTuple_GET_ITEM(a, i)
                y = <object>PyTuple_GET_ITEM(b, i)
                if PyLong_CheckExact(x) and PyLong_CheckExact(y):
                    if _int_cmp(x, y, Py_GT):
                        return 0
                elif PyObject_RichCompareBool(x, y, Py_GT):
                    return 0
            return 1
        for x, y in zip(a, b):
            if x > y:
                return 0
        return 1
    return 1 if a.less_equal(b) else 0


cdef inline int _ne(object a, object b) except -1:
    """``a != b``, in C for ints and tuples of ints."""
    cdef Py_ssize_t i, n
    cdef object x, y
    if PyLong_CheckExact(a) and PyLong_CheckExact(b):
        return _int_cmp(a, b, Py_NE)
    if PyTuple_CheckExact(a) and PyTuple_CheckExact(b):
        n = PyTuple_GET_SIZE(a)
        if PyTuple_GET_SIZE(b) != n:
            return 1
        for i in range(n):
            x = <object>PyTuple_GET_ITEM(a, i)
            y = <object>PyTuple_GET_ITEM(b, i)
            if PyLong_CheckExact(x) and PyLong_CheckExact(y):
                if _int_cmp(x, y, Py_NE):
                    return 1
            elif not PyObject_RichCompareBool(x, y, Py_EQ):
                return 1
        return 0
    return 1 if a != b else 0


cdef inline int _lt(object a, object b) except -1:
    """timestamp.less_than(a, b)."""
    if PyLong_CheckExact(a):
        if PyLong_CheckExact(b):
            return _int_cmp(a, b, Py_LT)
        return PyObject_RichCompareBool(a, b, Py_LT)
    if PyTuple_CheckExact(a):
        if not _ne(a, b):
            return 0
        return _le(a, b)
    return 1 if a.less_than(b) else 0


def less_equal(a, b):
    """timestamp.less_equal, with the C fast paths (exposed for testing)."""
    return bool(_le(a, b))


def less_than(a, b):
    """timestamp.less_than, with the C fast paths (exposed for testing)."""
    return bool(_lt(a, b))


cdef class MutableAntichain:
    """Signed counts per timestamp, and the frontier of those with positive count."""

    cdef dict _counts       # time -> non-zero count
    cdef list _frontier     # minimal times with positive count, sorted

    def __cinit__(self, *args, **kwargs):
        self._counts = {}
        self._frontier = []

    def __init__(self):
        self._counts = {}
        self._frontier = []

    @classmethod
    def new_bottom(cls, time):
        """A MutableAntichain holding ``time`` once."""
        m = cls()
        m.update_iter([(time, 1)])
        return m

    def update_iter(self, updates):
        """Apply count changes; return the frontier changes they cause."""
        cdef dict counts = self._counts
        cdef list frontier = self._frontier
        cdef bint rebuild = False
        cdef bint beyond, covered
        cdef Py_ssize_t i, nf
        cdef PyObject* old
        cdef object f
        for time, delta in updates:
            if not delta:
                continue
            if not rebuild:
                beyond = False
                covered = False
                nf = PyList_GET_SIZE(frontier)
                for i in range(nf):
                    f = <object>PyList_GET_ITEM(frontier, i)
                    if _le(f, time):
                        covered = True
                        if _ne(f, time):
                            beyond = True
                            break
                # Strictly beyond the frontier, or a decrement of a time no frontier
                # element covers (its count was not positive): the frontier stays.
                rebuild = not (beyond or (delta < 0 and not covered))
            old = PyDict_GetItemWithError(counts, time)
            if old == NULL:
                c = 0 + delta
            else:
                c = <object>old + delta
            if c:
                PyDict_SetItem(counts, time, c)
            elif old != NULL:
                PyDict_DelItem(counts, time)
        if not rebuild:
            return []
        return self._rebuild()

    cdef list _rebuild(self):
        cdef list old = self._frontier
        cdef list new = []
        cdef list times = []
        cdef Py_ssize_t pos = 0, i, j, nn
        cdef PyObject* k
        cdef PyObject* v
        cdef bint dominated
        while PyDict_Next(self._counts, &pos, &k, &v):
            if <object>v > 0:
                times.append(<object>k)
        times.sort()
        # sorted order extends the partial order: nothing later is < anything earlier
        for i in range(PyList_GET_SIZE(times)):
            time = <object>PyList_GET_ITEM(times, i)
            dominated = False
            nn = PyList_GET_SIZE(new)
            for j in range(nn):
                if _le(<object>PyList_GET_ITEM(new, j), time):
                    dominated = True
                    break
            if not dominated:
                new.append(time)
        self._frontier = new
        if new == old:
            return []
        olds = set(old)
        news = set(new)
        return [(t, -1) for t in old if t not in news] + [(t, 1) for t in new if t not in olds]

    def frontier(self):
        """The minimal timestamps with a positive count (sorted)."""
        return list(self._frontier)

    def count_for(self, time):
        """The accumulated count of ``time``."""
        return self._counts.get(time, 0)

    def less_than(self, time):
        """Some frontier element is strictly < ``time``."""
        for f in self._frontier:
            if _lt(f, time):
                return True
        return False

    def less_equal(self, time):
        """Some frontier element is <= ``time``."""
        for f in self._frontier:
            if _le(f, time):
                return True
        return False

    def is_empty(self):
        """The frontier is empty (no positive count)."""
        return PyList_GET_SIZE(self._frontier) == 0

    def counts(self):
        """Every timestamp with a non-zero count, and its count."""
        return list(self._counts.items())

    def __repr__(self):
        return f"MutableAntichain(frontier={self._frontier!r})"

    def __reduce__(self):
        return (type(self), (), (dict(self._counts), list(self._frontier)))

    def __setstate__(self, state):
        counts, frontier = state
        self._counts = dict(counts)
        self._frontier = list(frontier)
