"""The ``Exchange`` partition: a batch of records split into one bucket per worker.

Timely's exchange pact (``dataflow/channels/pact``) sends a record to worker
``hash(key(record)) % peers``. Here the hash is ``timely.hashing.stable_hash64``
(Megaphone's), the same in every process, every run and every platform,
so a key goes to the same worker whether the workers are threads of one process or
processes of a cluster (Python's own ``hash`` of a ``str`` is salted per process). Keys
must therefore be what ``stable_hash64`` accepts: int, float, str, bytes, None, or
tuples of them; anything else raises ``TypeError``.

``partition(records, key, peers)`` returns ``peers`` lists; records keep their input
order within a bucket. The compiled twin (``timely.dataflow._cexchange``) is used when
it is importable and ``TIMELY_PURE_PYTHON`` does not forbid it; ``py_partition`` is
always the pure one, and the test suite checks that both return the same buckets.

Costs: O(records + peers). Pure twin: one Python hash call and one append per record
(about 1 us); compiled: the hash in C, about 20x faster. With ``peers == 1`` no key is
computed.

>>> partition(["a", "b", "a"], None, 1)
[['a', 'b', 'a']]
>>> buckets = partition(list(range(100)), None, 4)
>>> sorted(x for b in buckets for x in b) == list(range(100)), [len(b) for b in buckets]
(True, [28, 30, 17, 25])
>>> all(stable_hash64(x) % 4 == w for w, b in enumerate(buckets) for x in b)
True
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from ..hashing import py_stable_hash64, stable_hash64
from .._twin import compiled

MAX_PEERS = 1 << 31


def partition(records: Iterable[Any], key: Optional[Callable[[Any], Any]], peers: int) -> list[list]:
    """``buckets[w]``: the records whose key hashes to worker ``w``
    (``stable_hash64(key(record)) % peers``; the record itself is the key when ``key``
    is None), in input order.

    >>> partition([(3, "x"), (3, "y"), (1, "z")], lambda r: r[0], 3)[2]
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
    h = py_stable_hash64
    if key is None:
        for record in records:
            appends[h(record) % peers](record)
    else:
        for record in records:
            appends[h(key(record)) % peers](record)
    return out


# The pure twin stays importable as ``py_partition``; the compiled one replaces the
# public name when it is built (see timely._twin).
py_partition = partition
_compiled = compiled("timely.dataflow._cexchange")
IMPLEMENTATION = "python" if _compiled is None else "cython"
if _compiled is not None:
    partition = _compiled.partition

__all__ = ["partition", "py_partition", "stable_hash64", "IMPLEMENTATION"]
