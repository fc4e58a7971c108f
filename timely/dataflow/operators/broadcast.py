"""Broadcast: every record to every worker of the current cluster.

Two pipeline operators around a ``Direct`` channel: O(records x workers) per batch, one
copy of each record per worker, each counted where it is produced and where it is
consumed.
"""
from __future__ import annotations

from ..channels import Direct
from ..stream import Stream
from .generic import pipeline_operator


def broadcast(stream: Stream) -> Stream:
    """Every record to every worker (of the current cluster).

    As in timely, each copy is a record of its own: replicated with its destination,
    exchanged to it, and unwrapped, so every copy is counted where it is produced and
    where it is consumed."""
    worker = stream.scope.worker

    def replicate(time, records, out):
        copies = []
        for target in worker.broadcast_workers:
            copies.extend((target, r) for r in records)
        out.give_unchecked(time, copies)
    tagged = pipeline_operator(stream, "BroadcastReplicate", replicate)
    return pipeline_operator(tagged, "Broadcast",
                             lambda t, rs, out: out.give_unchecked(t, [r for _, r in rs]),
                             Direct(_destination))


def _destination(tagged: tuple) -> int:
    return tagged[0]
