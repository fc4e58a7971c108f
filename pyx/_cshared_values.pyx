# cython: language_level=3, boundscheck=False, wraparound=False
"""Decoded events' field values shared, compiled: the Cython twin of ``timely.connectors.kafka.shared_values``.

Same results as the pure twin (``rows`` and ``row``): each str and int field value
(bools excluded) replaced by the equal object first seen in ``strs`` / ``ints``. Cost:
one dict lookup per such field and no Python call; a tuple that only the caller holds
(a decoder's fresh one) changes in place, any other is copied.

A result whose items are all atomic (str, int, float, bool, None) leaves the cyclic
collector's lists at once, as CPython's own collection would at its first pass over it:
such a tuple can never be part of a cycle. The collector then never visits the
decoded events (the pure twin cannot do this; collections untrack them one by one).

>>> strs, ints = {}, {}
>>> a, b = rows([("p1", 700, 1.5), ("p1", 700, True)], strs, ints, list)
>>> a == ("p1", 700, 1.5) and a[0] is b[0] and a[1] is b[1] and b[2] is True
True
"""

from cpython.list cimport PyList_Append
from cpython.ref cimport Py_DECREF, Py_INCREF, Py_REFCNT, PyObject
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_New, PyTuple_SET_ITEM


cdef extern from "Python.h":
    PyObject* PyDict_SetDefault(object d, object key, object default) except NULL
    void PyObject_GC_UnTrack(object op)


cdef inline object _shared(object v, dict strs, dict ints):
    cdef type t = type(v)
    if t is str:
        return <object>PyDict_SetDefault(strs, v, v)
    if t is int:
        return <object>PyDict_SetDefault(ints, v, v)
    return v


cdef inline bint _atomic(object v):
    """Whether ``v`` can hold no reference: a tuple of such values makes no cycle."""
    cdef type k = type(v)
    return k is str or k is int or k is float or k is bool or v is None


cdef tuple _row(tuple values, dict strs, dict ints):
    cdef Py_ssize_t i, n = len(values)
    cdef tuple out
    cdef object v, old
    cdef bint atomic = True
    if Py_REFCNT(values) == 1:
        # nobody else holds the tuple (a decoder's fresh one): its items change in place
        for i in range(n):
            old = <object>PyTuple_GET_ITEM(values, i)
            v = _shared(old, strs, ints)
            atomic = atomic and _atomic(v)
            if v is not old:
                Py_INCREF(v)
                Py_DECREF(old)          # the tuple's reference; ``old`` still holds one
                PyTuple_SET_ITEM(values, i, v)
        if atomic:
            PyObject_GC_UnTrack(values)     # (a no-op on a tuple already untracked)
        return values
    out = PyTuple_New(n)
    for i in range(n):
        v = _shared(values[i], strs, ints)
        atomic = atomic and _atomic(v)
        Py_INCREF(v)
        PyTuple_SET_ITEM(out, i, v)
    if atomic:
        PyObject_GC_UnTrack(out)
    return out


def row(tuple values, dict strs, dict ints) -> tuple:
    """``values`` with its str and int items shared (see the module)."""
    return _row(values, strs, ints)


def rows(values, dict strs, dict ints, kind):
    """A ``kind`` (list or a subclass) of ``row`` of each tuple in ``values``."""
    out = kind()
    for t in values:
        PyList_Append(out, _row(t, strs, ints))
    return out
