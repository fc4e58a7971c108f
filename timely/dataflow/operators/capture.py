"""Capture: the batches that reach a point of the dataflow, kept on this worker with its
input frontier.

O(1) per batch to keep it; ``records``, ``by_time`` and ``complete_times`` cost
O(records kept). A ``Captured`` pickles as its batches and its frontier at that moment
(what a worker process returns to ``execute``), and unpickles as a frozen copy.
"""
from __future__ import annotations

from typing import Any

from ...progress import MutableAntichain
from ..channels import Pipeline
from ..stream import Stream


class Captured:
    """Batches that reached a capture point on this worker, and its input frontier."""

    def __init__(self, frontier: MutableAntichain) -> None:
        self.batches: list[tuple[Any, list]] = []
        self._frontier = frontier

    def __getstate__(self) -> dict:
        return {"batches": self.batches, "frontier": self._frontier.frontier()}

    def __setstate__(self, state: dict) -> None:
        self.batches = state["batches"]
        self._frontier = MutableAntichain()
        self._frontier.update_iter([(t, 1) for t in state["frontier"]])

    def done(self) -> bool:
        return self._frontier.is_empty()

    def frontier(self) -> list[Any]:
        return self._frontier.frontier()

    def records(self) -> list[Any]:
        return [r for _, rs in self.batches for r in rs]

    def by_time(self) -> dict[Any, list]:
        out: dict[Any, list] = {}
        for t, rs in self.batches:
            out.setdefault(t, []).extend(rs)
        return out

    def complete_times(self) -> dict[Any, list]:
        """``by_time``, restricted to times the frontier has passed."""
        return {t: rs for t, rs in self.by_time().items() if not self._frontier.less_equal(t)}


def capture(stream: Stream) -> Captured:
    builder = stream.scope.operator("Capture")
    port = builder.new_input(stream, Pipeline())
    captured = Captured(port.frontier)
    append = captured.batches.append

    def constructor(caps):
        def logic():
            for batch in port.batches():
                append(batch)
        return logic
    builder.build(constructor)
    return captured
