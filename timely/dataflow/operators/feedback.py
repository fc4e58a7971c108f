"""Feedback: the loop edge of an iterative scope (``scope.feedback``, then
``stream.connect_loop``).

A batch fed back moves forward by the loop's summary: one ``results_in`` per batch,
O(1); a batch past the largest time is dropped (it cannot loop again).
"""
from __future__ import annotations

from typing import Any

from ...progress.timestamp import results_in
from ..channels import Pipeline
from ..operator import OutputPort
from ..stream import Stream
from .generic import drop_all


class LoopHandle:
    """The far end of a feedback edge, waiting for ``connect_loop``."""

    def __init__(self, builder: Any, out: OutputPort, summary: Any) -> None:
        self._builder = builder
        self._out = out
        self._summary = summary
        self.connected = False

    def connect(self, stream: Stream) -> None:
        if self.connected:
            raise ValueError("this loop is already connected")
        self.connected = True
        summary, out = self._summary, self._out
        port = self._builder.new_input(stream, Pipeline(), connection=[[summary]])

        def constructor(caps):
            drop_all(caps)

            def logic():
                for time, records in port.batches():
                    later = results_in(summary, time)
                    if later is not None:       # past the largest time: cannot loop again
                        out.give_unchecked(later, records)
            return logic
        self._builder.build(constructor)


def feedback(scope: Any, summary: Any) -> tuple[LoopHandle, Stream]:
    builder = scope.operator("Feedback")
    builder.set_notify(False)
    out, stream = builder.new_output()
    return LoopHandle(builder, out, summary), stream
