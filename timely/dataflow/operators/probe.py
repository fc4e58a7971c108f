"""Probe: what may still arrive at a point of the dataflow, as this worker sees it.

The operator passes batches on unchanged, O(1) per batch; a ``ProbeHandle`` question
costs O(probed streams x frontier size).
"""
from __future__ import annotations

from typing import Any, Callable

from ...progress import Antichain, MutableAntichain
from ..channels import Pipeline
from ..stream import Stream
from .generic import drop_all


class ProbeHandle:
    """What may still arrive at a probed point of the dataflow (this worker's view)."""

    def __init__(self) -> None:
        self._frontiers: list[MutableAntichain] = []

    def _attach(self, frontier: MutableAntichain) -> None:
        self._frontiers.append(frontier)

    def less_than(self, time: Any) -> bool:
        """Records at some time strictly before ``time`` may still arrive."""
        return any(f.less_than(time) for f in self._frontiers)

    def less_equal(self, time: Any) -> bool:
        """Records at some time at or before ``time`` may still arrive."""
        return any(f.less_equal(time) for f in self._frontiers)

    def done(self) -> bool:
        """Nothing more will arrive."""
        return all(f.is_empty() for f in self._frontiers)

    def frontier(self) -> list[Any]:
        """The least times that may still arrive, over every probed stream."""
        least = Antichain(t for f in self._frontiers for t in f.frontier())
        return sorted(least)

    def with_frontier(self, fn: Callable[[list], Any]) -> Any:
        return fn(self.frontier())


def probe_with(stream: Stream, handle: ProbeHandle) -> Stream:
    builder = stream.scope.operator("Probe")
    port = builder.new_input(stream, Pipeline())
    out, result = builder.new_output()
    handle._attach(port.frontier)

    def constructor(caps):
        drop_all(caps)

        def logic():
            for time, records in port.batches():
                out.give_unchecked(time, records)
        return logic
    builder.build(constructor)
    return result


def probe(stream: Stream) -> ProbeHandle:
    handle = ProbeHandle()
    probe_with(stream, handle)
    return handle
