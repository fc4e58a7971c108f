"""EpochClock: when each epoch of a dataflow was complete, and how long it took, on one worker.

An epoch's latency here is the time from its *leading edge* (the first input fed by
the dataflow's sources whose frontier passed it: they have read all of it) to its
*trailing edge* (the inputs of the dataflow's last operators, those whose outputs go
nowhere (probes, sinks, commits), all passed it: the dataflow is done with it). The clock hears of every move of those frontiers (``OperatorCore.clock``), which
happens about once per epoch and input, never per record. (The trailing edge is not
every input: a Megaphone control input stays open at the first epoch while its
rebalancer may still move bins.)

Costs: ``moved`` O(inputs of the dataflow's root operators + epochs it completes).

>>> class Port:                                   # an input port's frontier
...     times = [0]
>>> a, b = Port(), Port()
>>> clock = EpochClock([a, b], [b], now=iter([1.0, 1.5, 4.0]).__next__, lowest=lambda p: min(p.times, default=None))
>>> a.times = [1]; clock.moved()                  # epoch 0 read at 1.0
>>> b.times = [1]; clock.moved()                  # ... and done at 1.5
>>> clock.completed, clock.recent[-1], clock.frontier
(1, (0, 0.5), 1)
>>> a.times, b.times = [], []; clock.moved()      # the inputs closed
>>> clock.completed, clock.frontier
(2, None)
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Optional, Sequence

#: the most epochs one frontier move completes that are each timed
MAX_JUMP = 10_000
#: latency buckets (seconds) of the epoch latency histogram
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, float("inf"))


def _lowest(port: Any) -> Optional[int]:
    """The least time in an input's frontier (None once it is closed)."""
    f = port.frontier.frontier()
    return min(f) if f else None


class EpochClock:
    """See the module docstring. ``ports``: the input ports fed by the dataflow's
    sources (int timestamps, from ``minimum``); ``last``: those of its last operators. Epochs the frontiers jump over at once each count, with the latency of
    the last one before them the clock saw start (a jump past ``MAX_JUMP`` epochs, as a
    timestamp in milliseconds makes, is counted but timed once)."""

    def __init__(self, ports: Sequence[Any], last: Sequence[Any], minimum: int = 0,
                 now: Callable[[], float] = time.monotonic,
                 lowest: Callable[[Any], Optional[int]] = _lowest) -> None:
        self.ports = list(ports)
        self.last = list(last)
        self._now = now
        self._lowest = lowest
        self._lead: Optional[int] = minimum if self.ports else None
        self._started: dict[int, float] = {}
        #: the least epoch not complete on this worker (None: the dataflow is done)
        self.frontier: Optional[int] = self._lead
        self.completed = 0
        self.recent: deque = deque(maxlen=300)          # (epoch, seconds)
        self.counts = [0] * len(BUCKETS)                # histogram: per bucket (not cumulative)
        self.total = 0.0

    def moved(self) -> None:
        lows = [self._lowest(p) for p in self.ports]
        open_ = [t for t in lows if t is not None]
        if any(type(t) is not int for t in open_):
            return                       # not epochs (a product timestamp): nothing to say
        now = self._now()
        lead = max(open_) if open_ else None
        open_ = [t for t in map(self._lowest, self.last) if t is not None]
        if self._lead is not None and (lead is None or lead > self._lead):
            self._started.setdefault(self._lead, now)      # some input passed it just now
        self._lead = lead
        trail = min(open_) if open_ else None
        done = self.frontier
        if done is not None and (trail is None or trail > done):
            upto = (self._lead if trail is None else trail) or done + 1
            started = now
            for t in range(done, upto if upto - done <= MAX_JUMP else done + 1):
                started = self._started.pop(t, started)     # else: read with the one before
                self._record(t, now - started)
            if upto - done > MAX_JUMP:
                self.completed += upto - done - 1
            for t in [t for t in self._started if trail is None or t < trail]:
                del self._started[t]
        self.frontier = trail

    def _record(self, epoch: int, seconds: float) -> None:
        self.completed += 1
        self.total += seconds
        self.recent.append((epoch, seconds))
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.counts[i] += 1
                return
