"""ToStream: the records of an iterable as a stream, at the scope's minimum time
(``scope.to_stream``).

The operator runs once: O(records), handed on in batches of 4096; then it drops its
capability. A dataflow restored from a checkpoint after the minimum time already holds
them: then it sends nothing.
"""
from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Iterable

from ..stream import Stream


def to_stream(scope: Any, records: Iterable[Any]) -> Stream:
    builder = scope.operator("ToStream")
    builder.set_notify(False)
    out, stream = builder.new_output()

    def constructor(caps):
        state = {"cap": caps[0], "records": iter(records)}

        def restart_at(time: Any) -> None:
            if time > scope.minimum:
                state["records"] = iter(())
        scope.worker.checkpoint_context.add_input(SimpleNamespace(restart_at=restart_at))

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
