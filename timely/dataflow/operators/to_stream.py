"""ToStream: the records of an iterable as a stream, at the scope's minimum time
(``scope.to_stream``).

The operator runs once: O(records), handed on in batches of 4096; then it drops its
capability.
"""
from __future__ import annotations

from typing import Any, Iterable

from ..stream import Stream


def to_stream(scope: Any, records: Iterable[Any]) -> Stream:
    builder = scope.operator("ToStream")
    builder.set_notify(False)
    out, stream = builder.new_output()

    def constructor(caps):
        state = {"cap": caps[0], "records": iter(records)}

        def logic():
            cap = state["cap"]
            if cap is None:
                return
            chunk = []
            for record in state["records"]:
                chunk.append(record)
                if len(chunk) >= 4096:
                    out.give_batch(cap, chunk)
                    chunk = []
            if chunk:
                out.give_batch(cap, chunk)
            cap.drop()
            state["cap"] = None
        return logic
    builder.build(constructor)
    return stream
