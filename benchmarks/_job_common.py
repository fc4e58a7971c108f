"""What the cluster jobs share: worker 0's paced injection loop and its options.

``paced_arguments`` and ``paced_epochs`` serve the jobs in which worker 0 injects one
line per epoch at ``--rate`` epochs per second and times every epoch: ``latency``
(``_rescaling_latency_job.py``) and ``migration`` (``_migration_job.py``, which
``_scalein_job.py`` runs too).
"""
from __future__ import annotations

import argparse
import time
from collections import deque


def paced_arguments(duration: float) -> argparse.ArgumentParser:
    """The options of a job that injects with ``paced_epochs``: ``--duration`` (seconds;
    default ``duration``), ``--rate``, ``--words`` per line, ``--keys``, ``--output``."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--duration", type=float, default=duration)
    parser.add_argument("--rate", type=float, default=100.0, help="epochs (lines) per second")
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--output")
    return parser


def paced_epochs(worker, source, probe, rate, next_line, running, on_inject=None, on_step=None,
                 scheduled=False):
    """Worker 0's injection loop: one line (``next_line()``) per epoch, ``rate`` epochs
    per second (``rate <= 0``: the next as soon as the probe passed the last; a callable:
    ``rate(now)`` epochs per second from ``now`` on, a schedule of rates, where 0 is a
    pause: nothing injected, and no backlog of due epochs kept after it), while
    ``running(now)``; then closes ``source`` and steps until the probe passed the epochs
    still in flight. ``on_inject(epoch, now)`` after each injection, ``on_step(now)``
    after each step. Returns ``([(epoch, injected, completed), ...], epochs injected)``
    with wall-clock times (epochs in flight at the close are not listed). ``scheduled``:
    an epoch's injection time is when it was due, not when the loop got to it (an open
    loop: a saturated worker falls behind schedule, and the lag counts as latency)."""
    schedule = rate if callable(rate) else None
    flat_out = schedule is None and rate <= 0
    period = 0.0 if flat_out or schedule is not None else 1.0 / rate
    pending: deque = deque()
    epochs = []
    epoch = source.time()
    next_at = time.time()
    while True:
        now = time.time()
        if not running(now):
            break
        paused = schedule is not None and schedule(now) <= 0
        if paused:
            next_at = now                   # a pause: nothing due, nothing owed after it
        elif (not pending) if flat_out else now >= next_at:
            source.send_batch([next_line()])
            epoch += 1
            source.advance_to(epoch)
            pending.append((epoch - 1, next_at if scheduled and not flat_out else now))
            if schedule is None:
                next_at += period
            else:                           # the rate of the phase the epoch was due in
                due = schedule(next_at)
                next_at += 1.0 / (due if due > 0 else schedule(now))
            if on_inject is not None:
                on_inject(epoch, now)
        worker.step_or_park(0.005 if flat_out or paused else max(0.0, min(0.005, next_at - time.time())))
        done = time.time()
        while pending and not probe.less_equal(pending[0][0]):
            e, injected = pending.popleft()
            epochs.append((e, injected, done))
        if on_step is not None:
            on_step(done)
    source.close()
    while pending and not probe.done():
        worker.step_or_park(0.005)
        if scheduled:       # an open loop counts the backlog at the close too
            done = time.time()
            while pending and not probe.less_equal(pending[0][0]):
                e, injected = pending.popleft()
                epochs.append((e, injected, done))
    return epochs, epoch
