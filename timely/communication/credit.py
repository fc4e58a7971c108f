"""Credit: how many bytes a worker may have in flight to a worker of another process.

Without it a worker that falls behind buffers whatever its senders push: frames pile up
in its queues (``ClusterHub.deliver``) for as long as it is slow, and one slow worker
can exhaust its process's memory. With it, every data channel from a worker to a
worker of another process is a ``Window``: the bytes of the frames sent on it
(``sent``), and the bytes the receiver has acknowledged as consumed (``acked``). A
window more than ``limit`` bytes in flight is *over*; the dataflow's sources (a Kafka
source; a program feeding an input handle that looks at ``InputHandle.held``) hold
back while a channel of their dataflow is over, and read on once acknowledgements
bring it back under. Operators between them and the channel finish what they were
given, so what crosses stays within the limit plus what one step of the dataflow
sends.

The receiver acknowledges what its operators consumed. A data frame whose sender
counts it carries ``CREDITED`` in the header's sequence field; the receiving hub adds
its size to a ``Ledger`` (bytes delivered, per sender, for one channel and local
worker). A worker's input pulls from a queue that every sender appends to, so bytes
are known consumed when the queue is seen empty: a ``CreditedPuller`` reads the ledger
just before it finds its queue empty, and everything counted there was appended
before, so has been pulled. At the end of each step (``acknowledgements``) a worker
sends, per process, one control frame ``("credit", [(channel, sender, receiver,
total), ...])`` for the senders it consumed ``ACK_EVERY`` bytes more of; the sender's
receive thread sets ``acked`` (totals, so duplicates and reordering do no harm).

Workers of one process share its memory and hand each other objects through deques;
their channels carry no credit.

Costs: a credited push adds two integer updates and, once a window is over, one set
insertion; a delivery one dict update; an input that empties its queue copies its
ledger (one entry per remote sender); ``exhausted`` is O(windows over), none in the
common case; acknowledgements are one small frame per process and step at most, and
none while less than ``ACK_EVERY`` bytes were consumed.

>>> credit = Credit(limit=MIN_LIMIT)
>>> w = credit.window(channel=5, source=0, target=3)
>>> credit.sent(w, MIN_LIMIT); credit.exhausted(lambda ch: True)
False
>>> credit.sent(w, 100); w.in_flight - MIN_LIMIT, credit.exhausted(lambda ch: True)
(100, True)
>>> w.acknowledge(ACK_EVERY); credit.exhausted(lambda ch: True), credit.over
(False, set())
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Optional

from .thread import QueuePuller

#: the header's sequence field on a data frame whose bytes the receiver acknowledges
CREDITED = 1
#: a receiver acknowledges a sender's bytes once this many more were consumed (a limit
#: must be larger: ``MIN_LIMIT``)
ACK_EVERY = 64 << 10
MIN_LIMIT = 4 * ACK_EVERY


class Window:
    """One credited channel from ``source`` to ``target``: bytes sent and acknowledged."""

    __slots__ = ("channel", "source", "target", "sent", "acked")

    def __init__(self, channel: int, source: int, target: int) -> None:
        self.channel, self.source, self.target = channel, source, target
        self.sent = 0       # written by the sending worker only
        self.acked = 0      # written by the receive thread of the connection only

    @property
    def in_flight(self) -> int:
        return self.sent - self.acked

    def acknowledge(self, total: int) -> None:
        """The receiver consumed ``total`` bytes of this window in all."""
        if total > self.acked:
            self.acked = total


class Credit:
    """The sending side of one worker: its windows, and those over ``limit``."""

    def __init__(self, limit: int, windows: Optional[dict] = None) -> None:
        if limit < MIN_LIMIT:
            raise ValueError(f"exchange credit must be at least {MIN_LIMIT} bytes, got {limit}")
        self.limit = limit
        #: (channel, source, target) -> Window, shared with the process's receive
        #: threads, which apply acknowledgements (``ClusterHub.windows``)
        self.windows: dict = {} if windows is None else windows
        self.over: set = set()
        #: pushes that found their window over (instruments)
        self.overruns = 0

    def window(self, channel: int, source: int, target: int) -> Window:
        """A new window (a channel allocated, or a process come back)."""
        key = (channel, source, target)
        old = self.windows.get(key)
        if old is not None:
            self.over.discard(old)
        found = self.windows[key] = Window(channel, source, target)
        return found

    def sent(self, window: Window, nbytes: int) -> None:
        window.sent += nbytes
        if window.sent - window.acked > self.limit:
            self.over.add(window)
            self.overruns += 1

    def exhausted(self, in_dataflow: Callable[[int], Optional[bool]]) -> bool:
        """Whether a window of the dataflow is over its limit: ``in_dataflow(channel)``
        says whether a channel is the dataflow's (None: a channel no longer in use,
        forgotten here)."""
        for w in list(self.over):
            if w.sent - w.acked <= self.limit:
                self.over.discard(w)
                continue
            mine = in_dataflow(w.channel)
            if mine is None:
                self.over.discard(w)
                self.windows.pop((w.channel, w.source, w.target), None)
            elif mine:
                return True
        return False

    def forget(self, gone: Callable[[Window], bool]) -> None:
        """Drop the windows ``gone`` says so of (to a process that left or died)."""
        for key, w in list(self.windows.items()):
            if gone(w):
                self.over.discard(w)
                if self.windows.get(key) is w:
                    del self.windows[key]

    def in_flight(self) -> int:
        """Bytes in flight on every window of this worker (instruments)."""
        return sum(w.sent - w.acked for w in list(self.windows.values()))


class CreditedPuller(QueuePuller):
    """A worker's puller for a channel that remote workers send to with credit: when it
    finds its queue empty it notes what its ``ledger`` says was delivered (per sender),
    which is then all consumed, and puts itself on ``dirty`` to be acknowledged."""

    __slots__ = ("channel", "ledger", "consumed", "acked", "_dirty", "_listed")

    def __init__(self, queue: deque, channel: int, ledger: dict, dirty: list) -> None:
        super().__init__(queue)
        self.channel = channel
        self.ledger = ledger            # sender -> bytes delivered (the receive threads add)
        self.consumed: dict = {}        # sender -> bytes consumed, as of the last empty queue
        self.acked: dict = {}           # sender -> bytes acknowledged to it
        self._dirty = dirty
        self._listed = False

    def pull(self) -> Any:
        queue = self._queue
        if queue:
            return queue.popleft()
        self._empty()
        return queue.popleft() if queue else None

    def drain(self) -> list[Any]:
        out = super().drain()
        self._empty()
        return out + super().drain()

    def _empty(self) -> None:
        # Read the ledger, then look at the queue: a frame the ledger counts was
        # appended before it was counted, so if the queue is empty after, it was pulled.
        seen = dict(self.ledger)
        if not self._queue and seen != self.consumed:
            self.consumed = seen
            if not self._listed:
                self._listed = True
                self._dirty.append(self)

    def acknowledgements(self) -> list[tuple[int, int]]:
        """``[(sender, total consumed)]`` to acknowledge now (``ACK_EVERY`` more since the
        last), taken off ``dirty``."""
        self._listed = False
        out = []
        for source, total in self.consumed.items():
            if total - self.acked.get(source, 0) >= ACK_EVERY:
                self.acked[source] = total
                out.append((source, total))
        return out


def acknowledgements(dirty: list, receiver: int, workers_per_process: int) -> dict[int, list]:
    """``{process: [(channel, sender, receiver, total), ...]}``: what worker ``receiver``
    acknowledges to each process at the end of its step (``dirty`` is emptied)."""
    out: dict[int, list] = {}
    for puller in dirty:
        for source, total in puller.acknowledgements():
            out.setdefault(source // workers_per_process, []).append((puller.channel, source, receiver, total))
    dirty.clear()
    return out
