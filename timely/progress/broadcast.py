"""Progcaster: broadcasts one scope's progress batches to every worker, itself included.

Each call to ``send`` ships the (consolidated) pointstamp changes of one worker step as
ONE message — a progress batch is never split, which is what makes the exchange
protocol safe (seed 004) — tagged with the sender and a per-sender sequence number, to
every worker over FIFO channels (once per remote process in cluster mode). ``recv``
folds every batch that has arrived into a ChangeBatch, checking sequence numbers: a
batch already applied is skipped, a missing one is an error.

For rescaling (seed 003 §3.4) a Progcaster also keeps its *progress state*: the
accumulation of every batch applied, and the last sequence number applied per sender.
Batches cancel out (+1 / -1), so the accumulation stays small however long the
computation runs; ``state_size()`` measures it. Records crossing a scope boundary are
kept in the parent scope's state only (the parent sees both their production and, from
the nested scope, their consumption), so those cancel too. The first message a Progcaster sends
on a link to a joining process is a bootstrap marker carrying its next sequence
number; ``recorders`` keep the batches a bootstrap server must be able to replay.

Costs: ``send`` O(u + links) for u updates; ``recv`` O(u) (+ O(u) to accumulate, + O(1)
per active recorder).
"""
from __future__ import annotations

from typing import Any, Optional

from . import ChangeBatch

MARKER = "bootstrap"


class ProgressSequenceError(RuntimeError):
    """A progress batch was lost or arrived out of order: frontiers would be wrong."""


class Progcaster:
    """Progress broadcast for one scope of one worker."""

    __slots__ = ("source", "channel", "_pushers", "_puller", "seq", "batches_sent",
                 "batches_received", "updates_sent", "last_seq", "accumulated", "recorders",
                 "markers", "hold", "nested", "trace")

    def __init__(self, allocator: Any, channel: int, accumulate: bool = False) -> None:
        self.source = allocator.index
        self.channel = channel
        self._pushers, self._puller = allocator.allocate_broadcast(channel)
        self.seq = 0                        # sequence number of the next batch we send
        self.batches_sent = 0
        self.batches_received = 0
        self.updates_sent = 0
        self.last_seq: dict[int, int] = {}  # per sender: last sequence number applied
        self.accumulated: Optional[ChangeBatch] = ChangeBatch() if accumulate else None
        self.recorders: list[dict] = []     # bootstrap servers: sender -> {seq: updates}
        self.markers: dict[int, int] = {}   # joiner: sender -> first seq it sends us directly
        self.hold: Optional[list] = None    # joiner, while bootstrapping: batches kept aside
        self.nested = False                 # the scope is nested: it has child-0 ports
        #: a ProgressTrace (``--progress-trace``) that times each batch sent and applied
        self.trace: Any = None

    def send(self, changes: ChangeBatch) -> None:
        """Broadcast ``changes`` (drained) as one batch, if it holds anything."""
        if changes.is_empty():
            return
        updates = changes.drain()
        message = (self.source, self.seq, updates)
        if self.trace is not None:
            self.trace.mark("send", self.source, self.source, self.channel, self.seq)
        self.seq += 1
        self.batches_sent += 1
        self.updates_sent += len(updates)
        for pusher in self._pushers:
            pusher.push(message)

    def send_marker(self, pushers: list) -> None:
        """Tell a joining process, as our first message to it, our next sequence number."""
        for pusher in pushers:
            pusher.push((self.source, MARKER, self.seq))

    def recv(self, changes: ChangeBatch) -> None:
        """Add every batch received since last called to ``changes``."""
        messages = self._puller.drain()
        if not messages:
            return
        if self.hold is not None:
            self.hold.extend(messages)
            return
        self.apply(messages, changes)

    def apply(self, messages: list, changes: ChangeBatch) -> None:
        last = self.last_seq
        trace = self.trace
        for source, seq, updates in messages:
            if seq == MARKER:
                self.markers[source] = updates
                continue
            expected = last.get(source, -1) + 1
            if seq < expected:
                continue                    # already part of the bootstrap state
            if seq != expected:
                raise ProgressSequenceError(
                    f"progress channel {self.channel}: batch {seq} from worker {source} arrived, "
                    f"expected {expected}: a batch was lost")
            last[source] = seq
            if trace is not None:
                trace.mark("apply", self.source, source, self.channel, seq)
            self.batches_received += 1
            changes.extend(updates)
            if self.accumulated is not None:
                self._accumulate(updates)
            for recorder in self.recorders:
                recorder.setdefault(source, {})[seq] = updates

    def _accumulate(self, updates: Any) -> None:
        # Statements at child 0 (records entering / leaving a nested scope) are reported
        # to the parent scope, whose own state keeps them (see Subgraph.activate_child):
        # keeping them here too would leave halves that never cancel. A root scope has
        # no child-0 ports, so its batches go in whole (no per-update Python work).
        if self.nested:
            self.accumulated.extend([u for u in updates if u[0][0][0] != 0])
        else:
            self.accumulated.extend(updates)

    def install(self, updates: list, last_seq: dict, changes: ChangeBatch) -> None:
        """A joiner takes a bootstrap state: the accumulation, and where it stands."""
        changes.extend(updates)
        if self.accumulated is not None:
            self._accumulate(updates)
        for source, seq in last_seq.items():
            self.last_seq[int(source)] = seq

    def state(self) -> tuple[list, dict]:
        """The progress state: accumulated updates and last sequence number per sender."""
        if self.accumulated is None:
            raise RuntimeError("this Progcaster does not accumulate (rescaling is off)")
        return list(self.accumulated), dict(self.last_seq)

    def state_size(self) -> int:
        """Distinct (location, time) entries in the accumulated state."""
        return 0 if self.accumulated is None else len(self.accumulated)

    def recorded(self) -> int:
        """Batches held by bootstrap-server recorders."""
        return sum(len(seqs) for recorder in self.recorders for seqs in recorder.values())
