"""Filter: the records a predicate keeps.

One predicate call per record plus O(1) per batch; a batch that keeps nothing is not
sent on.
"""
from __future__ import annotations

from typing import Any, Callable

from ..stream import Stream
from .generic import pipeline_operator


def filter(stream: Stream, predicate: Callable[[Any], bool]) -> Stream:
    def transform(time, records, out):
        kept = [r for r in records if predicate(r)]
        if kept:
            out.give_unchecked(time, kept)
    return pipeline_operator(stream, "Filter", transform)
