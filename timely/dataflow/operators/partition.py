"""Partition: a stream split into ``parts`` streams by a routing function.

One ``route`` call per record plus O(parts) per batch for the buckets; an empty bucket
is not sent.
"""
from __future__ import annotations

from typing import Any, Callable

from ..channels import Pipeline
from ..stream import Stream
from .generic import drop_all


def partition(stream: Stream, parts: int, route: Callable[[Any], tuple[int, Any]]) -> list[Stream]:
    """``route(record) -> (part, value)`` sends ``value`` to output ``part``."""
    if parts < 1:
        raise ValueError(f"partition needs at least one part, got {parts}")
    builder = stream.scope.operator("Partition")
    builder.set_notify(False)
    port = builder.new_input(stream, Pipeline())
    outs = [builder.new_output() for _ in range(parts)]

    def constructor(caps):
        drop_all(caps)

        def logic():
            for time, records in port.batches():
                buckets: list[list] = [[] for _ in range(parts)]
                for r in records:
                    part, value = route(r)
                    if not 0 <= part < parts:
                        raise ValueError(f"partition route returned part {part}, not in 0..{parts - 1}")
                    buckets[part].append(value)
                for (out, _), bucket in zip(outs, buckets):
                    if bucket:
                        out.give_unchecked(time, bucket)
        return logic
    builder.build(constructor)
    return [s for _, s in outs]
