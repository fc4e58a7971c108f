# cython: language_level=3
"""TrackedDict, compiled: the Cython twin of ``timely.checkpoint.tracked.TrackedDict``.

A ``dict`` that records in ``changed`` every key written, deleted, or read (``d[k]``,
``get`` of a value that is not a scalar or a tuple of scalars, ``setdefault``,
``pop``, ``popitem``), with the value object it holds for the
key after that access (``codec.GONE`` once none), and marks the whole bin (``changed
is None``) when ``values()``, ``items()`` or ``clear()`` hand out or drop every value;
iterating keys, ``len`` and ``in`` mark nothing. It behaves exactly as the pure twin
(the tests run both). Reads, writes and the record go straight to dict's C API
(calling ``dict.get`` and friends by name cost twice a plain dict's update).

>>> d = TrackedDict({"a": 1, "b": [2]})
>>> d["c"] = 3; d.get("b").append(4); "a" in d
True
>>> sorted(d.take_changed().items()), d.changed
([('b', [2, 4]), ('c', 3)], {})
>>> _ = list(d.items()); d.changed is None
True
"""

from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem, PyDict_DelItem
from cpython.ref cimport PyObject

from timely.communication.codec import GONE

cdef object _MISSING = object()
cdef object _GONE = GONE


cdef inline bint _scalar(object v):
    cdef type t = type(v)
    return t is int or t is str or t is float or t is bytes or t is bool or v is None


cdef inline bint _immutable(object v):
    """A value no logic can change in place: a scalar, or a tuple of scalars."""
    if _scalar(v):
        return True
    if type(v) is not tuple:
        return False
    for x in <tuple>v:
        if not _scalar(x):
            return False
    return True


cdef class TrackedDict(dict):
    """A dict that records the keys that may have changed, with their values now."""

    cdef public object changed

    def __init__(self, *args, **kwargs):
        dict.__init__(self, *args, **kwargs)
        self.changed = {}

    cdef inline object _mark(self, object key, object value):
        if self.changed is not None:
            PyDict_SetItem(self.changed, key, value)
        return value

    def mark_all(self):
        """Every key may have changed: the next checkpoint writes the bin whole."""
        self.changed = None

    def take_changed(self):
        """The keys marked since the last call with their values (GONE: none), or None
        (all of them); and start afresh."""
        changed = self.changed
        self.changed = {}
        return changed

    # The C API below is what dict's own methods do, without looking them up per call.
    def __setitem__(self, key, value):
        PyDict_SetItem(self, key, value)
        self._mark(key, value)

    def __delitem__(self, key):
        PyDict_DelItem(self, key)
        self._mark(key, _GONE)

    def __getitem__(self, key):
        cdef PyObject *found = PyDict_GetItemWithError(self, key)
        if found is NULL:           # (an error in the lookup has been raised already)
            return dict.__getitem__(self, key)      # KeyError, or __missing__ of a subclass
        if _immutable(<object>found):
            return <object>found
        return self._mark(key, <object>found)

    def get(self, key, default=None):
        cdef PyObject *found = PyDict_GetItemWithError(self, key)
        if found is NULL:
            return default
        if _immutable(<object>found):
            return <object>found
        return self._mark(key, <object>found)

    def setdefault(self, key, default=None):
        return self._mark(key, dict.setdefault(self, key, default))

    def pop(self, key, *default):
        value = dict.pop(self, key, _MISSING)
        if value is _MISSING:
            return dict.pop(self, key, *default)    # the default, or dict's KeyError
        self._mark(key, _GONE)
        return value

    def popitem(self):
        key, value = dict.popitem(self)
        self._mark(key, _GONE)
        return key, value

    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other):
        self.update(other)
        return self

    def clear(self):
        self.changed = None
        dict.clear(self)

    def values(self):
        self.changed = None
        return dict.values(self)

    def items(self):
        self.changed = None
        return dict.items(self)

    def copy(self):
        return dict(dict.items(self))

    def __reduce__(self):
        return (dict, (dict(dict.items(self)),))
