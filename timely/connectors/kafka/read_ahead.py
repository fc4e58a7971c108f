"""A Kafka source's read-ahead: how far past what its dataflow has finished it may read.

A source that reads whatever Kafka holds buffers a backlog in the dataflow: decoded
events, per-epoch partial state, results waiting for their epoch. ``ReadAhead`` bounds
what one worker's source has read and the dataflow has not finished: the bytes of the
record values it read, by epoch, less those of the epochs the dataflow's completion
frontier (``timely.dataflow.completion``) has passed. Credit returns as epochs
complete, not as records are handed on.

Each step the source asks ``plan`` what to read. Under the bound it reads one step's
worth (``step`` bytes, turned into a record count by the running average of a record's
size). Over it, it reads on only while some partition must still read for the
frontier's own epoch to complete (its next unfinished epoch is at or before it), and
holds otherwise. Partitions usually lag each other by a fraction of an epoch, so the
others are paused in the client (``Consumer.pause``: librdkafka stops fetching them and
drops what it had prefetched of them, to fetch it again on ``resume``) only once half
the bound more has gone by, and resumed when credit returns or the frontier reaches
them. So a dataflow always completes its frontier's epoch, whatever the bound, and
what it reads past that stays under 1.5 x ``limit`` plus one step's read.

``client_settings`` are the librdkafka properties that keep the client's own prefetch
in proportion (``queued.max.messages.kbytes``, ``fetch.max.bytes``,
``max.partition.fetch.bytes``), with a short ``fetch.queue.backoff.ms``: librdkafka
waits that long before fetching again for a partition whose queue was full (1 s by
default, which halved a reader with a 4 MiB queue against Tansu: 110k against 380k
events/s).

Costs: O(1) per record read (a dict update by epoch), O(epochs held) when the frontier
moves, O(partitions) per step over the bound.

>>> flow = ReadAhead(limit=1000, step=100)
>>> flow.read(10, 1000)                                         # records of 100 bytes: 1 a step
>>> flow.count(4, 600); flow.count(5, 500); flow.buffered
1100
>>> flow.plan({"a": 6, "b": 4}, frontier=4, batch_size=50)     # over, but b must finish epoch 4
([], [], 1)
>>> flow.count(5, 500); flow.plan({"a": 6, "b": 4}, frontier=4, batch_size=50)  # half more: a waits
(['a'], [], 1)
>>> flow.plan({"a": 6, "b": 6}, frontier=4, batch_size=50)     # nobody must read: hold
([], [], 0)
>>> flow.plan({"a": 6, "b": 6}, frontier=6, batch_size=50)     # epochs 4 and 5 done: credit
([], ['a'], 1)
>>> flow.buffered, flow.peak, flow.held
(0, 1600, 1)
"""
from __future__ import annotations

from typing import Any, Hashable, Mapping, Optional

#: the bytes a step reads at most when not given: an eighth of the bound, within these
MIN_STEP = 64 << 10
MAX_STEP = 8 << 20


def default_step(limit: int) -> int:
    """One step's read for a bound of ``limit`` bytes: small enough that a step seldom
    takes a source past the bound's slack (and into pausing partitions), large enough
    that a step's fixed costs stay small against its records.

    >>> default_step(16 << 20), default_step(1 << 20), default_step(1 << 30)
    (2097152, 131072, 8388608)
    """
    return max(MIN_STEP, min(MAX_STEP, limit // 8))


def client_settings(limit: int) -> dict[str, Any]:
    """librdkafka consumer properties for a source bounded to ``limit`` bytes: its own
    prefetch (half the bound, at least 256 KiB) and fetch sizes in proportion, and a
    10 ms backoff when its queue is full (the queue lasts longer than that).

    >>> client_settings(16 << 20)["queued.max.messages.kbytes"], client_settings(16 << 20)["fetch.max.bytes"]
    (8192, 8388608)
    """
    queued = max(256 << 10, limit // 2)
    # a fetch brings up to this much of a partition, and the client hands the records
    # on partition by partition: small chunks keep the partitions' reading close together
    partition = max(16 << 10, min(16 << 20, limit // 16))
    return {"queued.max.messages.kbytes": queued >> 10,
            "max.partition.fetch.bytes": partition,
            # (librdkafka wants at least its message.max.bytes, 1,000,000 by default)
            "fetch.max.bytes": max(1 << 20, partition, min(64 << 20, limit // 2)),
            "fetch.queue.backoff.ms": 10}


class ReadAhead:
    """One worker's source's bytes read and not finished by the dataflow (see the module)."""

    __slots__ = ("limit", "step", "by_epoch", "buffered", "peak", "held", "holding", "frontier",
                 "paused", "_per_record")

    def __init__(self, limit: int, step: Optional[int] = None) -> None:
        if type(limit) is not int or limit < 1:
            raise ValueError(f"read-ahead must be a positive number of bytes, got {limit!r}")
        self.limit = limit
        self.step = default_step(limit) if step is None else step
        #: epoch -> bytes of record values read at that epoch and not yet finished
        self.by_epoch: dict[Any, int] = {}
        self.buffered = 0
        #: the most ever buffered, and the steps the source held for want of credit
        self.peak = 0
        self.held = 0
        #: the last step held (what the stall detector says of a source waiting for credit)
        self.holding = False
        #: the completion frontier last seen (None: nothing downstream holds anything)
        self.frontier: Optional[Any] = None
        #: partitions paused in the client, waiting for credit
        self.paused: set = set()
        self._per_record = 0.0

    def count(self, epoch: Any, nbytes: int) -> None:
        """``nbytes`` of record values read at ``epoch``."""
        self.by_epoch[epoch] = self.by_epoch.get(epoch, 0) + nbytes
        self.buffered += nbytes
        if self.buffered > self.peak:
            self.peak = self.buffered

    def read(self, records: int, nbytes: int) -> None:
        """A step read ``records`` records of ``nbytes`` (their average sizes the next
        steps' reads)."""
        if records:
            size = nbytes / records
            self._per_record = size if not self._per_record else 0.8 * self._per_record + 0.2 * size

    def complete(self, frontier: Optional[Any]) -> None:
        """The dataflow finished every epoch before ``frontier`` (None: every one)."""
        self.frontier = frontier
        by_epoch = self.by_epoch
        if not by_epoch:
            return
        done = list(by_epoch) if frontier is None else [e for e in by_epoch if e < frontier]
        for e in done:
            self.buffered -= by_epoch.pop(e)

    def records(self, batch_size: int) -> int:
        """How many records one step reads: ``step`` bytes' worth, at most ``batch_size``."""
        if not self._per_record:
            return min(batch_size, 100)
        return max(1, min(batch_size, int(self.step / self._per_record)))

    def plan(self, next_epochs: Mapping[Hashable, Optional[Any]], frontier: Optional[Any],
             batch_size: int) -> tuple[list, list, int]:
        """``(pause, resume, records)`` for this step, given each partition's next
        unfinished epoch (None: nothing read yet) and the completion frontier: the
        partitions to pause and to resume in the client, and how many records to read
        (0: hold)."""
        self.complete(frontier)
        self.holding = False
        if self.buffered < self.limit:
            resume = list(self.paused)
            self.paused.clear()
            return [], resume, self.records(batch_size)
        behind = [tp for tp, e in next_epochs.items() if e is None or frontier is None or e <= frontier]
        if not behind:
            self.held += 1
            self.holding = True
            return [], [], 0
        # a paused partition the frontier has caught up with must read again
        resume = [tp for tp in behind if tp in self.paused]
        self.paused.difference_update(resume)
        pause = []
        if self.buffered >= self.limit + self.limit // 2:
            # the others wait: pausing drops what the client prefetched of them, so only
            # once a partition lagging behind the rest has let half the bound more go by
            pause = [tp for tp in next_epochs if tp not in self.paused and tp not in behind]
            self.paused.update(pause)
        return pause, resume, self.records(batch_size)

    def reset(self) -> None:
        """Everything is read again (a rollback, a restart from a checkpoint): nothing is
        buffered or paused."""
        self.by_epoch.clear()
        self.buffered = 0
        self.paused.clear()
        self.holding = False

    def forget(self, tp: Hashable) -> None:
        """``tp`` is no longer read here (handed to another worker, or reassigned)."""
        self.paused.discard(tp)
