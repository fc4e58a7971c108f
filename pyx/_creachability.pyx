# cython: language_level=3
"""Tracker, compiled: pointstamps and their implications at every port of a scope.

This is the Cython twin of ``timely.progress.reachability.Tracker``, built by the shared
``Builder`` (``Builder.build()`` picks it when the scope's ``minimum`` timestamp is an
int or a tuple of ints). It has the same constructor, methods, attributes and results:
after ``propagate_all`` every port's implications, ``pushed_changes`` and
``output_changes`` hold the same contents as the pure twin's (as dicts; the order of
entries inside a batch may differ).

Everything that propagation touches lives in C:

* a timestamp is ``d`` int64 coordinates (d = 1 for ints, ``len(minimum)`` for tuples)
  ordered by the product partial order, with lexicographic order as its linear
  extension; a path summary is ``d`` int64 increments, and applying one whose result
  would pass ``TIME_MAX = 2**63 - 1`` yields no timestamp;
* a location (port) is a dense index, numbered in the order of the pure twin's
  ``Location(node, port, is_source)`` tuples; per location there are CSR tables of
  successors (with the operator summary to apply) and of scope-output summaries;
* per location, ``pointstamps`` and ``implications`` are C mutable antichains: rows of
  (time, count) kept sorted lexicographically, plus the frontier (minimal times with a
  positive count, in that order), rebuilt under the same rule as the pure twin;
* the worklist is a binary heap of records (time, location, diff) ordered by
  (time lexicographically, location); equal (time, location) records are merged when
  popped;
* recorded changes and output changes are C batches that consolidate (sum equal keys,
  drop zeros, keep first-seen order) through an open-addressing hash table, with the
  ChangeBatch compaction policy;
* pushed changes need no consolidation: over one ``propagate_all`` the net change of a
  location's implication frontier is its frontier at the end minus its frontier at the
  start, so a location's frontier is saved when it is first touched, and the two sorted
  lists are diffed at the end.

Python objects appear only at the boundary: recording an update converts its time into
int64s; at the end of ``propagate_all`` the consolidated pushed and output changes become
``((Location, time), diff)`` / ``(time, diff)`` entries of ChangeBatches (ints or tuples
of ints, as the pure twin yields), appended in place to an empty batch's list; accessors
convert on demand. The tuples made there hold only immutable ints and Locations, so they
are untracked by the cyclic GC (as CPython does itself for tuples of atoms).

Differences from the pure twin, none visible through the API: ``pointstamps()`` and
``implications()`` return live read-only views rather than MutableAntichain objects;
``counts()`` lists times in sorted order; ``target_changes``/``source_changes`` are
properties that materialise the C-held recorded changes (what is written into them is
still applied); times must fit in int64 (OverflowError otherwise); the Tracker cannot
be pickled.

Costs (d coordinates; f, k: frontier size and distinct times held at one location):

* ``update_source``/``update_target``/``update``: O(d) amortised.
* ``propagate_all``: O(r d) to consolidate r recorded changes, then one C antichain
  update per distinct change and per merged worklist record: O(f d + log k d) to find
  the row, plus moving the rows on the nearer side of it when a time comes or goes
  (O(1) at either end), plus O(k f d) when the frontier must be rebuilt (for ints, O(1)
  past the leading rows whose count is not positive: the first positive row is the
  frontier); O(w log w d) for the heap of w records; O(p d) to convert the p net
  pushed/output changes to Python. A worker dropping K capabilities at K times at once
  thus costs O(K log K), not O(K^2) (measured by ``benchmarks/bootstrap.py``'s
  release).
* ``pointstamps``/``implications``: O(1) views; their ``frontier()`` O(f d),
  ``count_for`` O(d log k), ``less_than``/``less_equal`` O(f d), ``is_empty`` O(1).
* ``is_global``: O(f d + d log k). ``tracking_anything``: O(1) amortised.

>>> from timely.progress.reachability import Builder
>>> from timely.progress.location import Location, Source, Target
>>> b = Builder()
>>> b.add_node(0, 1, 1, [[[]]])          # scope boundary
>>> b.add_node(1, 1, 1, [[[0]]])         # an operator passing times unchanged
>>> b.add_edge(Source(0, 0), Target(1, 0)); b.add_edge(Source(1, 0), Target(0, 0))
>>> t = b.build(Tracker)
>>> t.update_source(Source(1, 0), 5, 1); t.propagate_all()
>>> t.implications(Location.target(0, 0)).frontier(), t.output_changes[0].drain()
([5], [(5, 1)])
"""

from libc.stdlib cimport malloc, realloc, free, calloc
from libc.string cimport memcpy, memmove, memset
from libc.stdint cimport int64_t, uint64_t, INT64_MAX, INT64_MIN
from cpython.long cimport PyLong_Check, PyLong_FromLongLong
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM, PyTuple_GET_SIZE, PyTuple_GET_ITEM, PyTuple_Check
from cpython.ref cimport Py_INCREF
from cpython.pycapsule cimport PyCapsule_GetPointer

from timely.progress.location import Location, Source, Target
from timely.progress import timestamp as _timestamp
from timely.progress.antichain import Antichain
from timely.progress._cchange_batch import ChangeBatch, _C_API

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object, int*) except? -1
    void PyObject_GC_UnTrack(object)

# ChangeBatch's C entry points (see _cchange_batch._fill_target/_fill_done): fill an
# empty batch's own list with consolidated updates, making no list per round
ctypedef struct _TrackerAPI:
    object (*fill_target)(object)
    int (*fill_done)(object) except -1

cdef _TrackerAPI* _cb_api = <_TrackerAPI*>PyCapsule_GetPointer(
    _C_API, b"timely.progress._cchange_batch._C_API")


cdef inline object _untracked(object tup):
    """Untrack a fresh tuple from the cyclic GC: the tuples made at the boundary hold only
    ints, tuples of ints and Locations (immutable, no references back), so they cannot be
    part of a cycle, and untracking them keeps garbage collections short."""
    PyObject_GC_UnTrack(tup)
    return tup


cdef inline object _elements(object chain):
    """The summaries of an antichain without copying them (any iterable is accepted)."""
    if type(chain) is Antichain:
        return (<object>chain)._elements
    if type(chain) is list or type(chain) is tuple:
        return chain
    return list(chain)


# ---- small C helpers on int64 records -------------------------------------------------

cdef inline int lex_cmp(const int64_t* a, const int64_t* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if a[i] != b[i]:
            return -1 if a[i] < b[i] else 1
    return 0


cdef inline bint lex_lt(const int64_t* a, const int64_t* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if a[i] != b[i]:
            return a[i] < b[i]
    return 0


cdef inline void copy_rec(int64_t* dst, const int64_t* src, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        dst[i] = src[i]


cdef inline bint prod_le(const int64_t* a, const int64_t* b, Py_ssize_t d) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(d):
        if a[i] > b[i]:
            return 0
    return 1


cdef inline bint apply_summary(const int64_t* s, const int64_t* t, int64_t* out,
                               Py_ssize_t d) noexcept nogil:
    """out = t + s coordinate-wise; 0 (no result) when a coordinate would overflow."""
    cdef Py_ssize_t i
    cdef int64_t si, ti
    for i in range(d):
        si = s[i]
        ti = t[i]
        if si >= 0:
            if ti > INT64_MAX - si:
                return 0
        elif ti < INT64_MIN - si:
            return 0
        out[i] = ti + si
    return 1


cdef inline uint64_t hash_rec(const int64_t* r, Py_ssize_t n) noexcept nogil:
    cdef uint64_t h = 0x9E3779B97F4A7C15ULL
    cdef Py_ssize_t i
    for i in range(n):
        h = (h ^ <uint64_t>r[i]) * 0xFF51AFD7ED558CCDULL
        h ^= h >> 29
    h ^= h >> 32
    return h


cdef int grow(int64_t** p, Py_ssize_t* cap, Py_ssize_t need) except -1:
    """Make ``*p`` hold at least ``need`` int64s (doubling)."""
    cdef Py_ssize_t n
    cdef int64_t* q
    if need <= cap[0] and p[0] != NULL:
        return 0
    n = cap[0] * 2
    if n < need:
        n = need
    if n < 8:
        n = 8
    q = <int64_t*>realloc(p[0], n * sizeof(int64_t))
    if q == NULL:
        raise MemoryError()
    p[0] = q
    cap[0] = n
    return 0


# A C mutable antichain: ``rows`` holds nrows records (time[d], count), sorted
# lexicographically by time, no zero counts; ``front`` holds nfront times (d each), the
# minimal times with a positive count, in the same order. Capacities count int64s.
# ``rows`` starts ``off`` int64s into its allocation: removing one of the first half of
# the rows moves the rows before it up instead of those after it down, so a location
# whose times leave from the front (epochs closing, a worker dropping many
# capabilities at once) pays O(1) per removal, not O(rows).
ctypedef struct MA:
    int64_t* rows
    Py_ssize_t nrows
    Py_ssize_t rcap
    Py_ssize_t off
    int64_t* front
    Py_ssize_t nfront
    Py_ssize_t fcap


# A C change batch: ``len`` records (key, time[d], diff); [0, clean) is consolidated.
ctypedef struct CBatch:
    int64_t* data
    Py_ssize_t len
    Py_ssize_t cap
    Py_ssize_t clean


cdef inline void free_ma(MA* m) noexcept nogil:
    if m.rows != NULL:
        free(m.rows - m.off)
    free(m.front)
    m.rows = NULL
    m.front = NULL
    m.nrows = m.rcap = m.nfront = m.fcap = m.off = 0


cdef class _PortView:
    """A read-only view of one port's pointstamps or implications (live).

    Offers the reading methods of MutableAntichain: ``frontier()``, ``count_for(t)``,
    ``less_than(t)``, ``less_equal(t)``, ``is_empty()``, ``counts()``.
    """

    cdef Tracker tracker
    cdef Py_ssize_t loc
    cdef bint implications

    def __init__(self, *args, **kwargs):
        raise TypeError("port views come from Tracker.pointstamps() and Tracker.implications()")

    cdef MA* _m(self) except NULL:
        if self.tracker is None:
            raise TypeError("this port view belongs to no Tracker")
        return self.tracker._ma(self.loc, self.implications)

    def frontier(self):
        """The minimal timestamps with a positive count (sorted). O(f d)."""
        return self.tracker._frontier_list(self._m())

    def count_for(self, time):
        """The accumulated count of ``time``. O(d log k)."""
        return self.tracker._count_for(self._m(), time)

    def less_than(self, time):
        """Some frontier element is strictly < ``time``. O(f d)."""
        return self.tracker._front_cmp(self._m(), time, True)

    def less_equal(self, time):
        """Some frontier element is <= ``time``. O(f d)."""
        return self.tracker._front_cmp(self._m(), time, False)

    def is_empty(self):
        """The frontier is empty (no positive count). O(1)."""
        return self._m().nfront == 0

    def counts(self):
        """Every timestamp with a non-zero count, and its count (sorted by time)."""
        return self.tracker._counts_list(self._m())

    def __repr__(self):
        return f"MutableAntichain(frontier={self.frontier()!r})"


cdef class Tracker:
    """Pointstamps and their implications at every port of one scope (compiled)."""

    # ---- public attributes (as in the pure twin) ---------------------------------------
    cdef public object minimum
    cdef public object shape
    cdef public object output_changes   # list of ChangeBatch, one per scope output
    cdef object _pushed                 # ChangeBatch of ((Location, time), diff)
    cdef object _tc, _sc                # ChangeBatches behind target_changes/source_changes
    cdef int64_t _total                 # total_counts

    # ---- shape of timestamps -----------------------------------------------------------
    cdef Py_ssize_t d                   # coordinates per timestamp
    cdef bint tuple_mode                # timestamps are tuples (else ints, d == 1)
    cdef bint ready

    # ---- locations ---------------------------------------------------------------------
    cdef Py_ssize_t nlocs
    cdef Py_ssize_t nnodes
    cdef Py_ssize_t* tbase              # node -> offset into tloc (nnodes + 1)
    cdef Py_ssize_t* sbase              # node -> offset into sloc (nnodes + 1)
    cdef Py_ssize_t* tloc               # (node, input) -> location index
    cdef Py_ssize_t* sloc               # (node, output) -> location index
    cdef unsigned char* is_src          # location -> 1 for an output port
    cdef list _locs                     # location index -> Location
    cdef dict _summaries                # key -> (chains, [(output, chain)] non-empty, empty type)

    # successors: for location l, records [succ_off[l], succ_off[l+1]) of
    # (destination location, summary[d]); summaries are zero (unused) after a Source
    cdef Py_ssize_t* succ_off
    cdef int64_t* succ
    # summaries to scope outputs: records (output, summary[d])
    cdef Py_ssize_t* outs_off
    cdef int64_t* outs
    cdef Py_ssize_t nscope_outputs

    # ---- state -------------------------------------------------------------------------
    cdef MA* pts                        # location -> pointstamps
    cdef MA* imp                        # location -> implications
    cdef CBatch pend_t, pend_s          # recorded target/source changes (key: location)
    # pushed changes: the net change of a location's implications over one
    # propagate_all is its frontier at the end minus its frontier at the start, so the
    # first time a location is touched its frontier is saved, and the end diffs the two
    cdef uint64_t round                 # propagate_all calls so far
    cdef uint64_t* touched_at           # location -> round it was last first-touched
    cdef Py_ssize_t* touched            # locations touched this round, in order
    cdef Py_ssize_t ntouched
    cdef Py_ssize_t* saved_off          # touched index -> offset of its saved frontier
    cdef Py_ssize_t* saved_n            # touched index -> elements in it
    cdef int64_t* saved                 # saved frontiers (d each)
    cdef Py_ssize_t saved_len, saved_cap
    cdef CBatch outb                    # output changes (key: scope output)
    cdef int64_t* heap                  # worklist records (time[d], location, diff)
    cdef Py_ssize_t hlen, hcap

    # ---- scratch -----------------------------------------------------------------------
    cdef int64_t* chg                   # frontier changes (time[d], diff)
    cdef Py_ssize_t chg_cap
    cdef int64_t* nf                    # a frontier being rebuilt (time[d] each)
    cdef Py_ssize_t nf_cap
    cdef Py_ssize_t* htab               # hash table for batch consolidation
    cdef Py_ssize_t htab_size
    cdef int64_t* rec                   # one record (d + 2)
    cdef int64_t* cur                   # one record (d + 2)
    cdef int64_t* tmp                   # one record (d + 2)

    def __init__(self, nodes, edges, shape, output_summaries, minimum=0):
        cdef Py_ssize_t n, p, i, ins, outs, loc, k, d, ss, pos, o
        if self.ready:
            raise RuntimeError("Tracker.__init__ called twice")
        if type(minimum) is int:
            self.tuple_mode = False
            d = 1
        elif type(minimum) is tuple and all(type(x) is int for x in minimum):
            self.tuple_mode = True
            d = len(minimum)
        else:
            raise TypeError(
                f"the compiled Tracker needs the scope's minimum timestamp to be an int or a "
                f"tuple of ints, got {minimum!r} ({type(minimum).__name__}); use "
                f"timely.progress.reachability.Tracker for other timestamp types")
        self.d = d
        self.minimum = minimum
        self.shape = list(shape)
        self.nnodes = len(self.shape)
        self.nscope_outputs = self.shape[0][0] if self.shape else 0
        self.output_changes = [ChangeBatch() for _ in range(self.nscope_outputs)]
        self._pushed = ChangeBatch()
        self._tc = ChangeBatch()
        self._sc = ChangeBatch()
        self._total = 0

        # locations, numbered in (node, port, is_source) order
        self._locs = []
        self.tbase = <Py_ssize_t*>calloc(self.nnodes + 1, sizeof(Py_ssize_t))
        self.sbase = <Py_ssize_t*>calloc(self.nnodes + 1, sizeof(Py_ssize_t))
        if self.tbase == NULL or self.sbase == NULL:
            raise MemoryError()
        shapes = []
        for n in range(self.nnodes):
            ins, outs = self.shape[n]
            if ins < 0 or outs < 0:
                raise ValueError(f"node {n} has a negative port count: {self.shape[n]!r}")
            shapes.append((ins, outs))
            self.tbase[n + 1] = self.tbase[n] + ins
            self.sbase[n + 1] = self.sbase[n] + outs
        self.nlocs = self.tbase[self.nnodes] + self.sbase[self.nnodes]
        cdef Py_ssize_t nl = self.nlocs if self.nlocs > 0 else 1
        self.tloc = <Py_ssize_t*>malloc((self.tbase[self.nnodes] + 1) * sizeof(Py_ssize_t))
        self.sloc = <Py_ssize_t*>malloc((self.sbase[self.nnodes] + 1) * sizeof(Py_ssize_t))
        self.is_src = <unsigned char*>calloc(nl, 1)
        self.pts = <MA*>calloc(nl, sizeof(MA))
        self.imp = <MA*>calloc(nl, sizeof(MA))
        self.touched_at = <uint64_t*>calloc(nl, sizeof(uint64_t))
        self.touched = <Py_ssize_t*>calloc(nl, sizeof(Py_ssize_t))
        self.saved_off = <Py_ssize_t*>calloc(nl, sizeof(Py_ssize_t))
        self.saved_n = <Py_ssize_t*>calloc(nl, sizeof(Py_ssize_t))
        self.succ_off = <Py_ssize_t*>calloc(nl + 1, sizeof(Py_ssize_t))
        self.outs_off = <Py_ssize_t*>calloc(nl + 1, sizeof(Py_ssize_t))
        if (self.tloc == NULL or self.sloc == NULL or self.is_src == NULL or self.pts == NULL
                or self.imp == NULL or self.touched_at == NULL or self.touched == NULL
                or self.saved_off == NULL or self.saved_n == NULL or self.succ_off == NULL
                or self.outs_off == NULL):
            raise MemoryError()
        tuple_new = tuple.__new__
        loc = 0
        for n in range(self.nnodes):
            ins, outs = shapes[n]
            for p in range(max(ins, outs)):
                if p < ins:
                    self.tloc[self.tbase[n] + p] = loc
                    self._locs.append(_untracked(tuple_new(Location, (n, p, False))))
                    loc += 1
                if p < outs:
                    self.sloc[self.sbase[n] + p] = loc
                    self.is_src[loc] = 1
                    self._locs.append(_untracked(tuple_new(Location, (n, p, True))))
                    loc += 1

        # successors of every location (CSR, filled in location order): from an input,
        # the node's outputs with each internal summary; from an output, its channels
        ss = d + 1
        cdef Py_ssize_t cap = 0
        pos = 0
        loc = 0
        for n in range(self.nnodes):
            ins, outs = shapes[n]
            node_rows = nodes[n] if n < len(nodes) else ()
            node_edges = edges[n] if n < len(edges) else ()
            for p in range(max(ins, outs)):
                if p < ins:
                    self.succ_off[loc] = pos
                    if p < len(node_rows):
                        o = 0
                        for chain in node_rows[p]:
                            summaries = _elements(chain)
                            if len(summaries) and o >= outs:
                                raise ValueError(f"node {n}: a summary from input {p} names "
                                                 f"output {o}, but the node has {outs} outputs")
                            for summary in summaries:
                                grow(&self.succ, &cap, (pos + 1) * ss)
                                self.succ[pos * ss] = self.sloc[self.sbase[n] + o]
                                self._summary_into(summary, self.succ + pos * ss + 1)
                                pos += 1
                            o += 1
                    loc += 1
                if p < outs:
                    self.succ_off[loc] = pos
                    if p < len(node_edges):
                        for target in node_edges[p]:
                            grow(&self.succ, &cap, (pos + 1) * ss)
                            self.succ[pos * ss] = self._target_index(target[0], target[1])
                            for k in range(d):
                                self.succ[pos * ss + 1 + k] = 0
                            pos += 1
                    loc += 1
        self.succ_off[self.nlocs] = pos
        grow(&self.succ, &cap, ss)

        # ``output_summaries`` is dense (a chain per scope output for every location);
        # keep only its non-empty chains, so a wide scope does not keep millions of empty
        # antichains alive (and in every garbage collection) for the tracker's lifetime.
        self._summaries = {}
        all_empty = {}
        for key, chains in output_summaries.items():
            nonempty = []
            empty_type = Antichain
            o = 0
            for chain in chains:
                if len(_elements(chain)):
                    nonempty.append((o, chain))
                else:
                    empty_type = type(chain)
                o += 1
            if nonempty:
                self._summaries[key] = (o, nonempty, empty_type)
            else:
                entry = all_empty.get((o, empty_type))
                if entry is None:
                    entry = all_empty[(o, empty_type)] = (o, (), empty_type)
                self._summaries[key] = entry

        # summaries from every location to the scope outputs (CSR). Pointstamps at node 0
        # stand for the scope's own inputs and outputs: the parent accounts for them
        # through the scope summary, so (as in the pure twin) they are not applied to
        # output_changes.
        cap = 0
        pos = 0
        for loc in range(self.nlocs):
            self.outs_off[loc] = pos
            key = self._locs[loc]
            if key[0] == 0:
                continue
            entry = self._summaries.get(key)
            if entry is None:
                continue
            for o, chain in entry[1]:
                if o >= self.nscope_outputs:
                    raise ValueError(f"output summaries of {key} name scope output {o}, "
                                     f"but the scope has {self.nscope_outputs} outputs")
                for summary in _elements(chain):
                    grow(&self.outs, &cap, (pos + 1) * ss)
                    self.outs[pos * ss] = o
                    self._summary_into(summary, self.outs + pos * ss + 1)
                    pos += 1
        self.outs_off[self.nlocs] = pos
        grow(&self.outs, &cap, ss)

        self.rec = <int64_t*>calloc(d + 2, sizeof(int64_t))
        self.cur = <int64_t*>calloc(d + 2, sizeof(int64_t))
        self.tmp = <int64_t*>calloc(d + 2, sizeof(int64_t))
        if self.rec == NULL or self.cur == NULL or self.tmp == NULL:
            raise MemoryError()
        self.ready = True

    def __reduce__(self):
        raise TypeError("the compiled Tracker holds its state in C and cannot be pickled or "
                        "copied; rebuild it from its Builder (or use "
                        "timely.progress.reachability.Tracker)")

    def __dealloc__(self):
        cdef Py_ssize_t i
        if self.pts != NULL:
            for i in range(self.nlocs):
                free_ma(&self.pts[i])
        if self.imp != NULL:
            for i in range(self.nlocs):
                free_ma(&self.imp[i])
        free(self.pts); free(self.imp)
        free(self.tbase); free(self.sbase); free(self.tloc); free(self.sloc)
        free(self.is_src); free(self.succ_off); free(self.succ)
        free(self.outs_off); free(self.outs)
        free(self.touched_at); free(self.touched); free(self.saved_off); free(self.saved_n)
        free(self.saved)
        free(self.pend_t.data); free(self.pend_s.data)
        free(self.outb.data); free(self.heap); free(self.chg); free(self.nf)
        free(self.htab); free(self.rec); free(self.cur); free(self.tmp)

    # ---- conversions at the boundary ---------------------------------------------------
    cdef int _summary_into(self, object s, int64_t* out) except -1:
        """Store path summary ``s`` as d int64s, checked against the timestamp shape."""
        return self._ints_into(s, out, "path summary")

    cdef Py_ssize_t _target_index(self, object node, object port) except -1:
        cdef Py_ssize_t n = node, p = port
        if n < 0 or n >= self.nnodes or p < 0 or p >= self.tbase[n + 1] - self.tbase[n]:
            raise IndexError(f"no input port {port!r} at operator {node!r}")
        return self.tloc[self.tbase[n] + p]

    cdef Py_ssize_t _source_index(self, object node, object port) except -1:
        cdef Py_ssize_t n = node, p = port
        if n < 0 or n >= self.nnodes or p < 0 or p >= self.sbase[n + 1] - self.sbase[n]:
            raise IndexError(f"no output port {port!r} at operator {node!r}")
        return self.sloc[self.sbase[n] + p]

    cdef Py_ssize_t _location_index(self, object location) except -1:
        node, port, is_source = location
        if is_source:
            return self._source_index(node, port)
        return self._target_index(node, port)

    cdef int _time_in(self, object time, int64_t* out) except -1:
        """Store ``time`` as d int64s, raising TypeError/OverflowError when it cannot be."""
        return self._ints_into(time, out, "timestamp")

    cdef int _ints_into(self, object value, int64_t* out, str what) except -1:
        """Store an int (or a tuple of d ints) as d int64s; ``what`` names it in errors."""
        cdef Py_ssize_t i
        cdef int of = 0
        cdef object x
        if not self.tuple_mode:
            if not PyLong_Check(value):
                raise TypeError(f"{what} {value!r} is not an int, as the scope's timestamps are")
            out[0] = PyLong_AsLongLongAndOverflow(value, &of)
        else:
            if not PyTuple_Check(value) or PyTuple_GET_SIZE(value) != self.d:
                raise TypeError(f"{what} {value!r} is not a tuple of {self.d} ints, as the "
                                f"scope's timestamps are")
            for i in range(self.d):
                x = <object>PyTuple_GET_ITEM(value, i)
                if not PyLong_Check(x):
                    raise TypeError(f"{what} {value!r} is not a tuple of {self.d} ints, as the "
                                    f"scope's timestamps are")
                out[i] = PyLong_AsLongLongAndOverflow(x, &of)
                if of:
                    break
        if of:
            raise OverflowError(f"{what} {value!r} does not fit the compiled Tracker's "
                                f"64-bit coordinates (-2**63 .. TIME_MAX)")
        return 0

    cdef bint _time_try(self, object time, int64_t* out):
        """Like _time_in, but answer False (no exception) when ``time`` cannot be stored."""
        cdef Py_ssize_t i
        cdef int of = 0
        cdef object x
        if not self.tuple_mode:
            if not PyLong_Check(time):
                return False
            out[0] = PyLong_AsLongLongAndOverflow(time, &of)
            return of == 0
        if not PyTuple_Check(time) or PyTuple_GET_SIZE(time) != self.d:
            return False
        for i in range(self.d):
            x = <object>PyTuple_GET_ITEM(time, i)
            if not PyLong_Check(x):
                return False
            out[i] = PyLong_AsLongLongAndOverflow(x, &of)
            if of:
                return False
        return True

    cdef object _time_out(self, const int64_t* t):
        """A Python int (or tuple of ints) for the d int64s at ``t``."""
        cdef Py_ssize_t i
        cdef object x
        if not self.tuple_mode:
            return PyLong_FromLongLong(t[0])
        tup = PyTuple_New(self.d)
        for i in range(self.d):
            x = PyLong_FromLongLong(t[i])
            Py_INCREF(x)
            PyTuple_SET_ITEM(tup, i, x)
        PyObject_GC_UnTrack(tup)      # only ints inside: as CPython's GC would do later
        return tup

    # ---- C batches -----------------------------------------------------------------------
    cdef int _cb_push(self, CBatch* cb, int64_t key, const int64_t* time, int64_t diff) except -1:
        cdef Py_ssize_t bs = self.d + 2
        cdef int64_t* r
        grow(&cb.data, &cb.cap, (cb.len + 1) * bs)
        r = cb.data + cb.len * bs
        r[0] = key
        memcpy(r + 1, time, self.d * sizeof(int64_t))
        r[self.d + 1] = diff
        cb.len += 1
        if cb.len > 32 and (cb.len >> 1) >= cb.clean:
            self._cb_compact(cb)
        return 0

    cdef int _cb_compact(self, CBatch* cb) except -1:
        """Consolidate: sum records with equal (key, time), drop zeros, keep first-seen order."""
        cdef Py_ssize_t bs = self.d + 2, kf = self.d + 1
        cdef Py_ssize_t n = cb.len, size, mask, r, w, idx, w2
        cdef uint64_t h
        cdef int64_t* data = cb.data
        cdef int64_t* src
        cdef Py_ssize_t* tab
        if cb.clean >= n:
            cb.clean = n
            return 0
        size = 16
        while size < 2 * n:
            size <<= 1
        if size > self.htab_size:
            free(self.htab)
            self.htab = <Py_ssize_t*>malloc(size * sizeof(Py_ssize_t))
            if self.htab == NULL:
                self.htab_size = 0
                raise MemoryError()
            self.htab_size = size
        tab = self.htab
        memset(tab, 0xFF, size * sizeof(Py_ssize_t))
        mask = size - 1
        w = 0
        for r in range(n):
            src = data + r * bs
            h = hash_rec(src, kf) & mask
            while True:
                idx = tab[h]
                if idx < 0:
                    tab[h] = w
                    if w != r:
                        memcpy(data + w * bs, src, bs * sizeof(int64_t))
                    w += 1
                    break
                if lex_cmp(data + idx * bs, src, kf) == 0:
                    data[idx * bs + kf] += src[kf]
                    break
                h = (h + 1) & mask
        w2 = 0
        for r in range(w):
            if data[r * bs + kf] != 0:
                if w2 != r:
                    memcpy(data + w2 * bs, data + r * bs, bs * sizeof(int64_t))
                w2 += 1
        cb.len = w2
        cb.clean = w2
        return 0

    cdef bint _cb_is_empty(self, CBatch* cb) except -1:
        # a tail shorter than the consolidated prefix cannot cancel all of its keys
        if cb.len - cb.clean < cb.clean:
            return False
        if cb.len == 0:
            return True
        self._cb_compact(cb)
        return cb.len == 0

    cdef int _materialize(self, bint sources) except -1:
        """Move the recorded C changes of one kind into the Python ChangeBatch exposed as
        ``source_changes``/``target_changes`` (keys ``(Source|Target, time)``)."""
        cdef CBatch* cb = &self.pend_s if sources else &self.pend_t
        cdef Py_ssize_t bs = self.d + 2, r
        cdef int64_t* rec
        if cb.len == 0:
            return 0
        self._cb_compact(cb)
        items = []
        for r in range(cb.len):
            rec = cb.data + r * bs
            loc_obj = self._locs[rec[0]]
            port = (Source if sources else Target)(loc_obj[0], loc_obj[1])
            items.append(((port, self._time_out(rec + 1)), rec[self.d + 1]))
        cb.len = 0
        cb.clean = 0
        (self._sc if sources else self._tc).extend(items)
        return 0

    cdef int _absorb_python(self, bint sources) except -1:
        """Bring changes written into the exposed Python batch back into the C batch."""
        cdef CBatch* cb = &self.pend_s if sources else &self.pend_t
        cdef Py_ssize_t loc
        batch = self._sc if sources else self._tc
        if batch.is_empty():
            return 0
        for (port, time), diff in batch.drain():
            if sources:
                loc = self._source_index(port[0], port[1])
            else:
                loc = self._target_index(port[0], port[1])
            self._time_in(time, self.rec)
            self._cb_push(cb, loc, self.rec, diff)
        return 0

    # ---- C mutable antichains ------------------------------------------------------------
    cdef inline MA* _ma(self, Py_ssize_t loc, bint implications):
        return &self.imp[loc] if implications else &self.pts[loc]

    cdef inline bint _ma_find(self, MA* m, const int64_t* t, Py_ssize_t* pos) noexcept:
        cdef Py_ssize_t lo = 0, hi = m.nrows, mid, rs = self.d + 1
        cdef int c
        while lo < hi:
            mid = (lo + hi) >> 1
            c = lex_cmp(m.rows + mid * rs, t, self.d)
            if c < 0:
                lo = mid + 1
            elif c > 0:
                hi = mid
            else:
                pos[0] = mid
                return True
        pos[0] = lo
        return False

    cdef Py_ssize_t _ma_update(self, MA* m, const int64_t* t, int64_t delta) except -1:
        """Add ``delta`` to the count of ``t``; write the frontier changes (time, ±1) to
        ``self.chg`` and return how many there are."""
        cdef Py_ssize_t d = self.d, rs = d + 1, i, pos
        cdef bint beyond = False, covered = False, rebuild
        cdef int64_t* f
        cdef int64_t* row
        for i in range(m.nfront):
            f = m.front + i * d
            if prod_le(f, t, d):
                covered = True
                if lex_cmp(f, t, d) != 0:
                    beyond = True
                    break
        # Strictly beyond the frontier, or a decrement of a time no frontier element
        # covers (its count was not positive): the frontier cannot move.
        rebuild = not (beyond or (delta < 0 and not covered))
        if self._ma_find(m, t, &pos):
            row = m.rows + pos * rs
            row[d] += delta
            if row[d] == 0:
                if pos < m.nrows // 2:
                    memmove(m.rows + rs, m.rows, pos * rs * sizeof(int64_t))
                    m.rows += rs
                    m.off += rs
                else:
                    memmove(row, row + rs, (m.nrows - pos - 1) * rs * sizeof(int64_t))
                m.nrows -= 1
        else:
            if m.off and m.off + (m.nrows + 1) * rs > m.rcap:
                # full at the end: move the rows back to the allocation's start
                memmove(m.rows - m.off, m.rows, m.nrows * rs * sizeof(int64_t))
                m.rows -= m.off
                m.off = 0
            if m.off == 0:
                grow(&m.rows, &m.rcap, (m.nrows + 1) * rs)
            row = m.rows + pos * rs
            memmove(row + rs, row, (m.nrows - pos) * rs * sizeof(int64_t))
            memcpy(row, t, d * sizeof(int64_t))
            row[d] = delta
            m.nrows += 1
        if not rebuild:
            return 0
        return self._ma_rebuild(m)

    cdef Py_ssize_t _ma_rebuild(self, MA* m) except -1:
        cdef Py_ssize_t d = self.d, rs = d + 1, r, j, nn = 0, i, nch = 0, nold
        cdef int64_t* row
        cdef int64_t* old
        cdef bint dominated
        cdef int c
        # the new frontier: positive rows, in (sorted) row order, not above an earlier one
        for r in range(m.nrows):
            row = m.rows + r * rs
            if row[d] <= 0:
                continue
            if d == 1 and nn:
                break           # ints are totally ordered: every later row is above it
            dominated = False
            for j in range(nn):
                if prod_le(self.nf + j * d, row, d):
                    dominated = True
                    break
            if not dominated:
                grow(&self.nf, &self.nf_cap, (nn + 1) * d)
                memcpy(self.nf + nn * d, row, d * sizeof(int64_t))
                nn += 1
        # the changes: old elements not in the new frontier (-1), then new ones not in
        # the old (+1); both lists are sorted, so merge them
        old = m.front
        nold = m.nfront
        grow(&self.chg, &self.chg_cap, (nold + nn + 1) * rs)
        i = 0
        j = 0
        while i < nold:
            c = lex_cmp(old + i * d, self.nf + j * d, d) if j < nn else -1
            if c == 0:
                i += 1
                j += 1
            elif c < 0:
                memcpy(self.chg + nch * rs, old + i * d, d * sizeof(int64_t))
                self.chg[nch * rs + d] = -1
                nch += 1
                i += 1
            else:
                j += 1
        i = 0
        j = 0
        while j < nn:
            c = lex_cmp(old + i * d, self.nf + j * d, d) if i < nold else 1
            if c == 0:
                i += 1
                j += 1
            elif c > 0:
                memcpy(self.chg + nch * rs, self.nf + j * d, d * sizeof(int64_t))
                self.chg[nch * rs + d] = 1
                nch += 1
                j += 1
            else:
                i += 1
        if nch:
            grow(&m.front, &m.fcap, nn * d)
            if nn:
                memcpy(m.front, self.nf, nn * d * sizeof(int64_t))
            m.nfront = nn
        return nch

    # ---- the worklist --------------------------------------------------------------------
    # Records are ordered by (time, location) only: records equal there are merged when
    # popped, so the order among them (by diff, in the pure twin) cannot matter.
    cdef int _heap_push(self, const int64_t* rec) except -1:
        cdef Py_ssize_t hs = self.d + 2, ks = self.d + 1, i, p
        cdef int64_t* heap
        if self.hlen >= self.hcap // hs:
            grow(&self.heap, &self.hcap, (self.hlen + 1) * hs)
        heap = self.heap
        i = self.hlen
        self.hlen += 1
        while i > 0:
            p = (i - 1) >> 1
            if not lex_lt(rec, heap + p * hs, ks):
                break
            copy_rec(heap + i * hs, heap + p * hs, hs)
            i = p
        copy_rec(heap + i * hs, rec, hs)
        return 0

    cdef void _heap_pop(self, int64_t* out) noexcept:
        """Remove the least record, copying it to ``out`` unless it is NULL."""
        cdef Py_ssize_t hs = self.d + 2, ks = self.d + 1, i, c, n
        cdef int64_t* heap = self.heap
        cdef int64_t* last
        if out != NULL:
            copy_rec(out, heap, hs)
        self.hlen -= 1
        n = self.hlen
        if n == 0:
            return
        last = heap + n * hs
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and lex_lt(heap + (c + 1) * hs, heap + c * hs, ks):
                c += 1
            if not lex_lt(heap + c * hs, last, ks):
                break
            copy_rec(heap + i * hs, heap + c * hs, hs)
            i = c
        copy_rec(heap + i * hs, last, hs)

    # ---- recording changes ---------------------------------------------------------------
    cdef int _record(self, bint source, object node, object port, object time,
                     object delta) except -1:
        cdef Py_ssize_t loc
        if not delta:
            return 0
        if not self.ready:
            raise RuntimeError("Tracker was not initialised")
        if source:
            loc = self._source_index(node, port)
        else:
            loc = self._target_index(node, port)
        self._time_in(time, self.rec)
        self._cb_push(&self.pend_s if source else &self.pend_t, loc, self.rec, delta)
        return 0

    def update_target(self, target, time, delta):
        """Record ``delta`` messages at input ``target`` with timestamp ``time``. O(d)."""
        self._record(False, target[0], target[1], time, delta)

    def update_source(self, source, time, delta):
        """Record ``delta`` capabilities at output ``source`` for timestamp ``time``. O(d)."""
        self._record(True, source[0], source[1], time, delta)

    def update(self, location, time, delta):
        """Record a pointstamp change at either kind of location. O(d)."""
        self._record(bool(location[2]), location[0], location[1], time, delta)

    @property
    def target_changes(self):
        """Recorded, not yet propagated changes at inputs: ((Target, time), diff)."""
        self._materialize(False)
        return self._tc

    @property
    def source_changes(self):
        """Recorded, not yet propagated changes at outputs: ((Source, time), diff)."""
        self._materialize(True)
        return self._sc

    # ---- propagation ---------------------------------------------------------------------
    cdef int _seed(self, CBatch* cb) except -1:
        """Fold consolidated recorded changes into pointstamps; seed the worklist and the
        output changes with the pointstamp frontier changes."""
        cdef Py_ssize_t d = self.d, bs = d + 2, rs = d + 1, ss = d + 1
        cdef Py_ssize_t r, c, k, nch, loc
        cdef int64_t* rec
        cdef int64_t* ch
        cdef int64_t dd
        self._cb_compact(cb)
        for r in range(cb.len):
            rec = cb.data + r * bs
            loc = rec[0]
            nch = self._ma_update(&self.pts[loc], rec + 1, rec[d + 1])
            for c in range(nch):
                ch = self.chg + c * rs
                dd = ch[d]
                self._total += dd
                for k in range(self.outs_off[loc], self.outs_off[loc + 1]):
                    if apply_summary(self.outs + k * ss + 1, ch, self.tmp + 1, d):
                        self._cb_push(&self.outb, self.outs[k * ss], self.tmp + 1, dd)
                memcpy(self.tmp, ch, d * sizeof(int64_t))
                self.tmp[d] = loc
                self.tmp[d + 1] = dd
                self._heap_push(self.tmp)
        cb.len = 0
        cb.clean = 0
        return 0

    cdef int _drain_worklist(self) except -1:
        cdef Py_ssize_t d = self.d, hs = d + 2, rs = d + 1, ss = d + 1
        cdef Py_ssize_t c, k, k0, k1, nch, loc
        cdef int64_t* cur = self.cur
        cdef int64_t* rec = self.rec
        cdef int64_t* ch
        cdef int64_t diff, dd
        while self.hlen > 0:
            self._heap_pop(cur)
            while self.hlen > 0 and lex_cmp(self.heap, cur, d + 1) == 0:
                cur[d + 1] += self.heap[d + 1]
                self._heap_pop(NULL)
            diff = cur[d + 1]
            if diff == 0:
                continue
            loc = cur[d]
            if self.touched_at[loc] != self.round:
                self._save_frontier(loc)
            nch = self._ma_update(&self.imp[loc], cur, diff)
            if nch == 0:
                continue
            k0 = self.succ_off[loc]
            k1 = self.succ_off[loc + 1]
            for c in range(nch):
                ch = self.chg + c * rs
                dd = ch[d]
                if self.is_src[loc]:
                    # along channels, times arrive unchanged
                    memcpy(rec, ch, d * sizeof(int64_t))
                    rec[d + 1] = dd
                    for k in range(k0, k1):
                        rec[d] = self.succ[k * ss]
                        self._heap_push(rec)
                else:
                    # through the operator, times advance by each internal summary
                    rec[d + 1] = dd
                    for k in range(k0, k1):
                        if apply_summary(self.succ + k * ss + 1, ch, rec, d):
                            rec[d] = self.succ[k * ss]
                            self._heap_push(rec)
        return 0

    cdef int _save_frontier(self, Py_ssize_t loc) except -1:
        cdef MA* m = &self.imp[loc]
        cdef Py_ssize_t n = m.nfront * self.d
        self.touched_at[loc] = self.round
        grow(&self.saved, &self.saved_cap, self.saved_len + n)
        if n:
            memcpy(self.saved + self.saved_len, m.front, n * sizeof(int64_t))
        self.touched[self.ntouched] = loc
        self.saved_off[self.ntouched] = self.saved_len
        self.saved_n[self.ntouched] = m.nfront
        self.ntouched += 1
        self.saved_len += n
        return 0

    def propagate_all(self):
        """Fold recorded changes into pointstamps and propagate their implications."""
        if not self.ready:
            raise RuntimeError("Tracker was not initialised")
        self._absorb_python(False)
        self._absorb_python(True)
        self.round += 1
        self.ntouched = 0
        self.saved_len = 0
        self._seed(&self.pend_t)
        self._seed(&self.pend_s)
        self._drain_worklist()

        # hand the consolidated output and pushed changes to their ChangeBatches
        self._flush_outputs()
        self._flush_pushed()

    cdef int _flush_outputs(self) except -1:
        """Output changes, consolidated in C, appended to each output's ChangeBatch."""
        cdef Py_ssize_t d = self.d, bs = d + 2, r, n, o
        cdef int64_t* rec
        cdef list targets, direct, changes
        self._cb_compact(&self.outb)
        n = self.outb.len
        if n == 0:
            return 0
        if type(self.output_changes) is not list or len(self.output_changes) < self.nscope_outputs:
            raise TypeError(f"Tracker.output_changes must be a list of {self.nscope_outputs} "
                            f"ChangeBatches")
        changes = self.output_changes
        targets = [None] * self.nscope_outputs     # output -> list being filled
        direct = [None] * self.nscope_outputs      # output -> True: the batch's own list
        for r in range(n):
            rec = self.outb.data + r * bs
            o = rec[0]
            target = targets[o]
            if target is None:
                target = _cb_api.fill_target(changes[o])
                direct[o] = target is not None
                if target is None:
                    target = []
                targets[o] = target
            (<list>target).append(_untracked((self._time_out(rec + 1), rec[d + 1])))
        self.outb.len = 0
        self.outb.clean = 0
        for o in range(self.nscope_outputs):
            target = targets[o]
            if target is not None:
                if direct[o]:
                    _cb_api.fill_done(changes[o])
                else:
                    changes[o].extend(target)
        return 0

    cdef int _flush_pushed(self) except -1:
        """Pushed changes: per touched location, saved frontier elements no longer in it
        (-1), then elements new to it (+1); both are sorted, so merge them."""
        cdef Py_ssize_t d = self.d, t, loc, i, j, nold, nnew
        cdef int64_t* old
        cdef int64_t* new
        cdef int c
        cdef list locs = self._locs
        cdef MA* m
        cdef object items = _cb_api.fill_target(self._pushed)
        cdef bint direct = items is not None
        if not direct:
            items = []
        for t in range(self.ntouched):
            loc = self.touched[t]
            m = &self.imp[loc]
            old = self.saved + self.saved_off[t]
            nold = self.saved_n[t]
            new = m.front
            nnew = m.nfront
            i = 0
            j = 0
            while i < nold:
                c = lex_cmp(old + i * d, new + j * d, d) if j < nnew else -1
                if c == 0:
                    i += 1
                    j += 1
                elif c < 0:
                    (<list>items).append(_untracked((_untracked((locs[loc], self._time_out(old + i * d))), -1)))
                    i += 1
                else:
                    j += 1
            i = 0
            j = 0
            while j < nnew:
                c = lex_cmp(old + i * d, new + j * d, d) if i < nold else 1
                if c == 0:
                    i += 1
                    j += 1
                elif c > 0:
                    (<list>items).append(_untracked((_untracked((locs[loc], self._time_out(new + j * d))), 1)))
                    j += 1
                else:
                    i += 1
        self.ntouched = 0
        self.saved_len = 0
        if direct:
            _cb_api.fill_done(self._pushed)
        elif items:
            self._pushed.extend(items)
        return 0

    # ---- reading -------------------------------------------------------------------------
    def pushed_changes(self):
        """Changes to implication frontiers since last drained: ((Location, time), diff)."""
        return self._pushed

    def pointstamps(self, location):
        """The accumulated pointstamps at ``location`` (a live, read-only view)."""
        return self._view(location, False)

    def implications(self, location):
        """What could still arrive at ``location`` (a live, read-only view)."""
        return self._view(location, True)

    cdef _PortView _view(self, object location, bint implications):
        cdef _PortView v = _PortView.__new__(_PortView)
        v.loc = self._location_index(location)
        v.tracker = self
        v.implications = implications
        return v

    def output_summaries(self, location):
        """Per scope output, the summaries of the paths from ``location`` to it.

        O(scope outputs): the list is rebuilt from the non-empty chains kept."""
        entry = self._summaries.get(Location(*location))
        if entry is None:
            return [Antichain() for _ in range(len(self.output_changes))]
        n, nonempty, empty_type = entry
        chains = [None] * n
        for o, chain in nonempty:
            chains[o] = chain
        for o in range(n):
            if chains[o] is None:
                chains[o] = empty_type()
        return chains

    def scope_summary(self):
        """``[scope input][scope output]``: summaries through the scope (from node 0's outputs)."""
        return [self.output_summaries(Location.source(0, i)) for i in range(self.shape[0][1])] \
            if self.shape else []

    def is_global(self, location, time):
        """True when one pointstamp, (location, time) itself, is all that holds back
        ``time`` at ``location``: removing it would move the frontier."""
        cdef MA* m = self._ma(self._location_index(location), True)
        return (not self._front_cmp(m, time, True)) and self._count_for(m, time) <= 1

    def tracking_anything(self):
        """Some pointstamp or unapplied change is still held."""
        if not self._sc.is_empty():
            self._materialize(True)
            if not self._sc.is_empty():
                return True
        elif not self._cb_is_empty(&self.pend_s):
            return True
        if not self._tc.is_empty():
            self._materialize(False)
            if not self._tc.is_empty():
                return True
        elif not self._cb_is_empty(&self.pend_t):
            return True
        return self._total > 0

    def node_count(self):
        return len(self.shape)

    @property
    def total_counts(self):
        """The number of elements in all pointstamp frontiers together."""
        return self._total

    @total_counts.setter
    def total_counts(self, value):
        self._total = value

    @property
    def worklist(self):
        """Worklist records (time, Location, diff) not yet applied (empty between calls)."""
        cdef Py_ssize_t hs = self.d + 2, i
        cdef int64_t* r
        out = []
        for i in range(self.hlen):
            r = self.heap + i * hs
            out.append((self._time_out(r), self._locs[r[self.d]], r[self.d + 1]))
        return out

    # ---- helpers for the views -----------------------------------------------------------
    cdef list _frontier_list(self, MA* m):
        return [self._time_out(m.front + i * self.d) for i in range(m.nfront)]

    cdef list _counts_list(self, MA* m):
        cdef Py_ssize_t rs = self.d + 1
        return [(self._time_out(m.rows + i * rs), m.rows[i * rs + self.d])
                for i in range(m.nrows)]

    cdef object _count_for(self, MA* m, object time):
        cdef Py_ssize_t pos
        if not self._time_try(time, self.tmp):
            return 0
        if self._ma_find(m, self.tmp, &pos):
            return m.rows[pos * (self.d + 1) + self.d]
        return 0

    cdef bint _front_cmp(self, MA* m, object time, bint strict) except -1:
        """Some frontier element is <= ``time`` (< when ``strict``)."""
        cdef Py_ssize_t i, d = self.d
        cdef int64_t* f
        if self._time_try(time, self.tmp):
            for i in range(m.nfront):
                f = m.front + i * d
                if prod_le(f, self.tmp, d) and (not strict or lex_cmp(f, self.tmp, d) != 0):
                    return True
            return False
        # not a time of this scope's shape (or beyond 64 bits): compare as Python objects
        compare = _timestamp.less_than if strict else _timestamp.less_equal
        for f_obj in self._frontier_list(m):
            if compare(f_obj, time):
                return True
        return False

