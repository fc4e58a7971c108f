"""Map: records transformed one by one (``map``, ``flat_map``) or a batch at a time
(``map_batch``).

One call of the user's function per record (per batch for ``map_batch``) plus O(1) per
batch; the output is a new list, the received batch is left as it is.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from ..stream import Stream
from .generic import pipeline_operator


def map(stream: Stream, fn: Callable[[Any], Any]) -> Stream:
    return pipeline_operator(stream, "Map",
                             lambda t, rs, out: out.give_unchecked(t, [fn(r) for r in rs]))


def flat_map(stream: Stream, fn: Callable[[Any], Iterable[Any]]) -> Stream:
    def transform(time, records, out):
        result: list = []
        extend = result.extend
        for r in records:
            extend(fn(r))
        if result:
            out.give_unchecked(time, result)
    return pipeline_operator(stream, "FlatMap", transform)


def map_batch(stream: Stream, fn: Callable[[list], list]) -> Stream:
    return pipeline_operator(stream, "MapBatch", lambda t, rs, out: out.give_unchecked(t, fn(rs)))
