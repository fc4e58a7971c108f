"""Concat: streams of one scope merged into one.

O(1) per batch: batches pass on unchanged, input by input.
"""
from __future__ import annotations

from ..channels import Pipeline
from ..stream import Stream
from .generic import drop_all


def concat(stream: Stream, *others: Stream) -> Stream:
    builder = stream.scope.operator("Concat")
    builder.set_notify(False)
    ports = [builder.new_input(s, Pipeline()) for s in (stream,) + others]
    out, result = builder.new_output()

    def constructor(caps):
        drop_all(caps)

        def logic():
            for port in ports:
                for time, records in port.batches():
                    out.give_unchecked(time, records)
        return logic
    builder.build(constructor)
    return result
