"""Waiting for peers at start-up without a crash loop.

A process that starts (or is restarted by a supervisor) while its peers are not there
waits for them; exiting after a time-out only to be restarted into the same wait is a
crash loop. So a ``PeerWait``:

- backs off between attempts (50 ms, growing to 0.5 s: a peer that comes is met within
  half a second, one that does not costs two attempts a second);
- says every ``Config.timeout`` seconds whom it waits for, and for how long;
- gives up only after ``Config.connect_timeout`` seconds, if set (``--connect-timeout``),
  with a ``ClusterError`` naming the processes that did not come;
- does not wait for a process that never comes, once a majority is there: after
  ``Config.timeout`` seconds (10 at least) without an arrival, the lowest of a majority
  of the hostfile's processes starts the cluster without the rest, who join if they
  come later (``ClusterHub.connect_all``; a minority waits on: it cannot tell a crash
  from a cut network);
- asks the program's ``complete`` check (``timely.execute(..., complete=)``) every few
  seconds whether the job is already done, and raises ``JobComplete`` if so: a process
  restarted after its job ended exits at once, with status 0.

Costs: one clock read per attempt; the ``complete`` check at most every 2 s.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

from ..errors import ClusterError

log = logging.getLogger("timely.cluster")
#: seconds between two ``complete`` checks while waiting
CHECK_EVERY = 2.0


class JobComplete(Exception):
    """The job is already complete (the message says how the process knows)."""


class PeerWait:
    """One wait of process ``process`` for peers (see the module)."""

    def __init__(self, process: int, every: float, limit: float = 0.0,
                 complete: Optional[Callable[[], Optional[str]]] = None) -> None:
        self.process = process
        self.every = every
        self.limit = limit
        self.complete = complete
        self.started = time.monotonic()
        self._line = self.started + every
        self._check = self.started
        self._pause = 0.05
        self._complete_failed = False

    def tick(self, whom: Callable[[], str]) -> None:
        """Between two attempts: check completion, give up past the limit, say whom it
        waits for when it is time to."""
        now = time.monotonic()
        if self.complete is not None and now >= self._check:
            self._check = now + CHECK_EVERY
            reason = self._ask_complete()
            if reason:
                raise JobComplete(reason)
        waited = now - self.started
        if self.limit and waited > self.limit:
            raise ClusterError(f"process {self.process}: gave up waiting for {whom()} after "
                               f"{self.limit:g} s (--connect-timeout)")
        if now >= self._line:
            self._line = now + self.every
            log.warning("process %d: waiting for %s (%.0f s so far; it waits on%s)", self.process,
                        whom(), waited, f" for at most {self.limit:g} s" if self.limit else
                        " until they come: --connect-timeout S bounds it")

    def pause(self) -> None:
        """Sleep before the next attempt, a little longer each time (up to 0.5 s)."""
        time.sleep(self._pause)
        self._pause = min(0.5, self._pause * 1.25)

    def _ask_complete(self) -> Optional[str]:
        try:
            return self.complete()
        except Exception as exc:  # noqa: BLE001 - a check that fails says nothing
            if not self._complete_failed:
                self._complete_failed = True
                log.warning("process %d: cannot tell whether the job is complete: %s", self.process, exc)
            return None


def describe(config: Any, processes: list[int]) -> str:
    """``processes [1, 2] at 127.0.0.1:2102, 127.0.0.1:2103`` for ``PeerWait.tick``."""
    where = ", ".join("%s:%d" % config.address_of(p) for p in processes)
    return f"process{'es' if len(processes) != 1 else ''} {processes} at {where}"
