"""Progcaster: broadcasts one scope's progress batches to every worker, itself included.

Each call to ``send`` ships the (consolidated) pointstamp changes of one worker step as
ONE message — a progress batch is never split, which is what makes the exchange
protocol safe (seed 004) — tagged with the sender and a per-sender sequence number, to
every worker over FIFO channels. ``recv`` folds every batch that has arrived into a
ChangeBatch. The transport is whatever ``Allocator`` the worker has (threads now,
TCP between processes). Costs: ``send`` O(u + peers) for u updates, ``recv`` O(u).
"""
from __future__ import annotations

from typing import Any

from . import ChangeBatch


class Progcaster:
    """Progress broadcast for one scope of one worker."""

    __slots__ = ("source", "channel", "_pushers", "_puller", "seq", "counts_sent",
                 "counts_received", "last_seq")

    def __init__(self, allocator: Any, channel: int) -> None:
        self.source = allocator.index
        self.channel = channel
        self._pushers, self._puller = allocator.allocate(channel)
        self.seq = 0                       # sequence number of the next batch we send
        self.counts_sent = 0
        self.counts_received = 0
        self.last_seq: dict[int, int] = {}  # per sender: last sequence number applied

    def send(self, changes: ChangeBatch) -> None:
        """Broadcast ``changes`` (drained) as one batch, if it holds anything."""
        if changes.is_empty():
            return
        updates = changes.drain()
        message = (self.source, self.seq, updates)
        self.seq += 1
        self.counts_sent += 1
        for pusher in self._pushers:
            pusher.push(message)

    def recv(self, changes: ChangeBatch) -> None:
        """Add every batch received since last called to ``changes``."""
        last = self.last_seq
        for source, seq, updates in self._puller.drain():
            expected = last.get(source, -1) + 1
            if seq != expected:
                raise RuntimeError(f"progress channel {self.channel}: batch {seq} from worker "
                                   f"{source} arrived, expected {expected}: a batch was lost or "
                                   f"duplicated")
            last[source] = seq
            self.counts_received += 1
            changes.extend(updates)
