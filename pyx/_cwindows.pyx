# cython: language_level=3
"""Fixed windows' fold, compiled: the Cython twin of ``timely.windows.open.absorb_fixed``.

For each record of a bin at one complete epoch: its key and event time (the user's
functions), the index of the last window holding it, and back through its windows
(starts ``origin + i * every``); each window still open gets the record folded in
(``state[key][start] = fold(acc, record)``), a new one its ``init()`` and a
notification at its closing epoch; each closed one is noted for the late report.

It behaves exactly as the pure twin (the tests run both). The window arithmetic runs
in C when it can give Python's own results: in 64-bit ints when the event time and
the windower's ``origin``, ``every`` and ``length`` are ints (floor division as
Python's), in doubles when one of them is a float and every int among them is exact
as a double (Python's float floor division, step by step as CPython does it), and with
Python's arithmetic otherwise. Starts are boxed once per window, as the state key
needs them. The user's functions are called as often as in the pure twin.

>>> state, changed, closing, scheduled = {}, [], [], []
>>> late = absorb_fixed(state, [[("a", 3), ("a", 12)]], 5, lambda r: r[0], lambda r: r[1],
...                     lambda n, r: n + 1, lambda: 0, 10, 5, 0, {}, lambda start: start + 9,
...                     lambda c, sk, i: scheduled.append((c, sk)), changed, closing, None, None)
>>> sorted(state["a"].items())
[(0, 1), (5, 1), (10, 1)]
>>> sorted(scheduled), late          # [-5, 5) closed with epoch 4: 3 is late for it
([(9, ('a', 0)), (14, ('a', 5)), (19, ('a', 10))], [('a', 3, ('a', 3), [(-5, 4)])])
"""

from libc.math cimport copysign, floor, fmod, isfinite
from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem
from cpython.ref cimport PyObject

from timely.megaphone.bin_states import StatefulError

cdef long long INT_LIMIT = 1LL << 60        # ints beyond this take Python's arithmetic
cdef long long EXACT_DOUBLE = 1LL << 53     # ints a double holds exactly


cdef inline long long _floor_div(long long a, long long b) noexcept nogil:
    """Python's ``a // b`` for ``b > 0``."""
    cdef long long q = a / b
    if a % b != 0 and a < 0:
        q -= 1
    return q


cdef inline double _float_floor_div(double vx, double wx) noexcept nogil:
    """Python's ``vx // wx`` for floats (CPython's ``_float_div_mod``), ``wx > 0``."""
    cdef double mod = fmod(vx, wx)
    cdef double div = (vx - mod) / wx
    cdef double q
    if mod:
        if (wx < 0) != (mod < 0):
            mod += wx
            div -= 1.0
    if div:
        q = floor(div)
        if div - q > 0.5:
            q += 1.0
        return q
    return copysign(0.0, vx / wx)


cdef inline bint _small_int(object v, long long limit, long long* out):
    """Whether ``v`` is an int (not a bool) with ``|v| < limit``; its value in ``out``."""
    cdef int overflow = 0
    cdef long long value = 0
    if type(v) is not int:
        return False
    value = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow or value >= limit or value <= -limit:
        return False
    out[0] = value
    return True


cdef inline bint _as_double(object v, double* out):
    """Whether ``v`` is a float, or an int a double holds exactly; its value in ``out``."""
    cdef long long value = 0
    if type(v) is float:
        out[0] = <double>v
        return True
    if _small_int(v, EXACT_DOUBLE, &value):
        out[0] = <double>value
        return True
    return False


cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object, int*) except? -1


cdef class _Fold:
    """One bin's fold at one epoch: what every window of every record needs."""

    cdef dict state, closes, windows
    cdef object t, fold, init, close_of, schedule, failed, key
    cdef list changed, closing, missed

    cdef inline void start(self, object k):
        """A record of key ``k`` comes: its open windows are looked up on its first fold."""
        self.key = k
        self.windows = None
        self.missed = None

    cdef inline void done(self):
        if self.windows is not None:
            self.changed.append(self.key)

    cdef int window(self, object s, object r) except -1:
        """Fold ``r`` into window ``s`` of the current key if it is open, else note
        ``(s, its closing epoch)`` in ``missed``."""
        cdef PyObject* found = PyDict_GetItemWithError(self.closes, s)
        cdef object c, acc
        cdef dict windows
        if found is NULL:
            c = self.close_of(s)
        else:
            c = <object>found
        if c < self.t:
            if self.missed is None:
                self.missed = []
            self.missed.append((s, c))
            return 0
        windows = self.windows
        if windows is None:
            found = PyDict_GetItemWithError(self.state, self.key)
            if found is NULL:
                windows = {}
                PyDict_SetItem(self.state, self.key, windows)
            else:
                windows = <dict>found
            self.windows = windows
        found = PyDict_GetItemWithError(windows, s)
        try:
            if found is NULL:
                acc = self.init()
                if c > self.t:
                    self.schedule(c, (self.key, s), 0)
                else:
                    self.closing.append((self.key, s))
            else:
                acc = <object>found
            PyDict_SetItem(windows, s, self.fold(acc, r))
        except StatefulError:
            raise
        except Exception as e:
            raise self.failed("fold", self.key, self.t, e) from e
        return 0


def absorb_fixed(dict state, list runs, object t, object key_of, object time_of, object fold, object init,
                 object length, object every, object origin, dict closes, object close_of, object schedule,
                 list changed, list closing, object checked_time, object failed):
    """See ``timely.windows.open.absorb_fixed`` (the pure twin)."""
    cdef list late = []
    cdef object r, k, x, i, s
    cdef type tx
    cdef long long xi = 0, oi = 0, ei = 1, li = 0, ii, si
    cdef double xd = 0, od = 0, ed = 1, ld = 0, id_, sd
    cdef bint ints = (_small_int(origin, INT_LIMIT, &oi) and _small_int(every, INT_LIMIT, &ei)
                      and _small_int(length, INT_LIMIT, &li))
    cdef bint doubles = _as_double(origin, &od) and _as_double(every, &ed) and _as_double(length, &ld)
    cdef _Fold w = _Fold.__new__(_Fold)
    w.state, w.closes, w.t, w.fold, w.init = state, closes, t, fold, init
    w.close_of, w.schedule, w.failed, w.changed, w.closing = close_of, schedule, failed, changed, closing
    for run in runs:
        for r in run:
            k = key_of(r)
            x = time_of(r)
            tx = type(x)
            if tx is float:
                if not isfinite(<double>x):
                    x = checked_time(x, r)      # (raises)
            elif tx is not int:
                x = checked_time(x, r)
            w.start(k)
            if ints and _small_int(x, INT_LIMIT, &xi):
                ii = _floor_div(xi - oi, ei)
                si = oi + ii * ei
                while si + li > xi:
                    w.window(si, r)
                    ii -= 1
                    si = oi + ii * ei
            elif doubles and _as_double(x, &xd):
                id_ = _float_floor_div(xd - od, ed)
                sd = od + id_ * ed
                while sd + ld > xd:
                    w.window(sd, r)
                    id_ = id_ - 1
                    sd = od + id_ * ed
            else:                               # Python's arithmetic (other number types, huge ints)
                i = (x - origin) // every
                s = origin + i * every
                while s + length > x:
                    w.window(s, r)
                    i = i - 1
                    s = origin + i * every
            w.done()
            if w.missed is not None:
                late.append((k, x, r, w.missed))
    return late
