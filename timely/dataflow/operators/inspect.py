"""Inspect: the user's function sees every record (``inspect``) or every batch with its
time (``inspect_batch``); the records pass on unchanged.

One call per record (per batch for ``inspect_batch``) plus O(1) per batch: the received
batch is passed on, not copied.
"""
from __future__ import annotations

from typing import Any, Callable

from ..stream import Stream
from .generic import pipeline_operator


def inspect(stream: Stream, fn: Callable[[Any], Any]) -> Stream:
    def transform(time, records, out):
        for r in records:
            fn(r)
        out.give_unchecked(time, records)
    return pipeline_operator(stream, "Inspect", transform)


def inspect_batch(stream: Stream, fn: Callable[[Any, list], Any]) -> Stream:
    def transform(time, records, out):
        fn(time, records)
        out.give_unchecked(time, records)
    return pipeline_operator(stream, "InspectBatch", transform)
