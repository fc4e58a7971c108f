"""The ``Exchange`` partition: a batch of records split into one bucket per worker.

Timely's exchange pact (``dataflow/channels/pact``) sends a record to worker
``key(record) % peers``: the key function returns an integer, and that integer is the
route (``exchange(|x| *x)`` sends 8 to worker 2 of 3). Here the same holds for a key
that is a non-negative ``int`` (or ``bool``, or a float equal to one, so that equal keys
meet): ``route(key, peers) == key % peers``. Every other key is hashed with
``timely.hashing.stable_hash64`` (Megaphone's), the same in every process, every run and
every platform, so a key goes to the same worker whether the workers are threads of one
process or processes of a cluster (Python's own ``hash`` of a ``str`` is salted per
process). Keys must therefore be what ``stable_hash64`` accepts: int, float, str, bytes,
None, or tuples of them; anything else raises ``TypeError``. (Megaphone's bins always
hash: a bin is the top bits of the key's hash, see ``timely.megaphone.bins``.)

``partition(records, key, peers)`` returns ``peers`` lists; records keep their input
order within a bucket. The compiled twin (``timely.dataflow._cexchange``) is used when
it is importable and ``TIMELY_PURE_PYTHON`` does not forbid it; ``py_partition`` is
always the pure one, and the test suite checks that both return the same buckets.

Costs: O(records + peers). Pure twin: one Python route call and one append per record
(about 1 us); compiled: the route in C, about 20x faster. With ``peers == 1`` no key is
computed.

>>> partition(["a", "b", "a"], None, 1)
[['a', 'b', 'a']]
>>> partition(list(range(10)), None, 3)
[[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
>>> buckets = partition(["a", "b", "c", "d", -1, -2], None, 2)
>>> buckets
[['a', 'c', -2], ['b', 'd', -1]]
>>> all(stable_hash64(x) % 2 == w for w, b in enumerate(buckets) for x in b)
True
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from ..hashing import py_stable_hash64, stable_hash64
from .._twin import compiled

MAX_PEERS = 1 << 31


def route(key: Any, peers: int) -> int:
    """The worker of ``peers`` a record with this key goes to: ``key % peers`` for a
    non-negative int key (bools and integral floats count as the int they equal),
    ``stable_hash64(key) % peers`` for any other key.

    >>> route(8, 3), route(True, 3), route(8.0, 3), route(-8, 3) == stable_hash64(-8) % 3
    (2, 1, 2, True)
    >>> route("word", 3) == stable_hash64("word") % 3
    True
    """
    t = type(key)
    if (t is int or t is bool) and key >= 0:
        return key % peers
    if t is float and key >= 0 and key.is_integer():
        return int(key) % peers
    return py_stable_hash64(key) % peers


def partition(records: Iterable[Any], key: Optional[Callable[[Any], Any]], peers: int) -> list[list]:
    """``buckets[w]``: the records whose key routes to worker ``w``
    (``route(key(record), peers)``; the record itself is the key when ``key`` is None),
    in input order.

    >>> partition([(3, "x"), (3, "y"), (1, "z")], lambda r: r[0], 3)[0]
    [(3, 'x'), (3, 'y')]
    >>> partition([[1]], None, 2)
    Traceback (most recent call last):
    ...
    TypeError: cannot hash a list as a key: keys must be int, float, str, bytes, None or tuples of them
    """
    if type(peers) is not int or not 1 <= peers < MAX_PEERS:
        raise ValueError(f"peers must be an int between 1 and {MAX_PEERS - 1}, got {peers!r}")
    if peers == 1:
        return [list(records)]
    out: list[list] = [[] for _ in range(peers)]
    appends = [bucket.append for bucket in out]
    r = route
    if key is None:
        for record in records:
            appends[r(record, peers)](record)
    else:
        for record in records:
            appends[r(key(record), peers)](record)
    return out


# The pure twin stays importable as ``py_partition``; the compiled one replaces the
# public name when it is built (see timely._twin).
py_partition = partition
py_route = route
_compiled = compiled("timely.dataflow._cexchange")
IMPLEMENTATION = "python" if _compiled is None else "cython"
if _compiled is not None:
    partition = _compiled.partition
    route = _compiled.route

__all__ = ["route", "py_route", "partition", "py_partition", "stable_hash64", "IMPLEMENTATION"]
