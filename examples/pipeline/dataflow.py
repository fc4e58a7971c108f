"""The pipeline's dataflow: clicks in from Kafka, per-page aggregates out to Kafka.

Each process of a pytimely cluster runs this program. It reads the ``clicks`` topic
(events ``{"user", "page", "category", "ts"}``, one epoch per time window, written by
Spark under the epoch contract) with ``kafka_source``, and keeps per-page state on
Megaphone's ``stateful_unary``, so the state stays exact when a process joins and bins
move to it. Once an epoch is complete, every page seen in it gets one result:

    {"epoch", "page", "category", "clicks", "users", "total_clicks", "total_users"}

(``clicks``/``users``: this epoch's clicks and distinct users; ``total_*``: running,
over every epoch so far). Results go to the ``results`` topic with ``kafka_sink``, and
the consumer group's offsets are committed once an epoch's results are acknowledged,
so a restarted cluster resumes at the first epoch without results.

With ``--windows TOPIC``, it also counts each page's clicks and distinct users per
event-time window of ``--window-seconds W`` (sliding every ``--slide-seconds S``;
default: tumbling) over the clicks' ``ts`` (seconds, or UTC text ``yyyy-MM-dd
HH:mm:ss``), windows aligned to second 0, and writes one row per page and window,

    {"page", "start", "end", "clicks", "users"}       (start, end: seconds)

to TOPIC under the epoch contract, in the epoch whose completion closes the window: a
click at ``ts`` belongs to epoch ``(ts - T) // E`` (``--epoch-seconds E``, default 60;
``--epoch-origin T``, default 0), as Spark gives clicks their epochs, so a window
``[start, end)`` closes once the epoch holding ``end - 1`` is complete
(``timely.windows``). Offsets are committed once both topics have the epoch.

    python examples/pipeline/dataflow.py -n 2 -p 0 -h hosts --brokers 127.0.0.1:9092 \\
        --clicks clicks --results results --epochs 10 [--windows windows --window-seconds 60 \\
        --slide-seconds 30 --epoch-origin 1767225600]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from operator import itemgetter
from typing import Any, Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import timely  # noqa: E402
from timely.connectors.kafka import job_complete  # noqa: E402
from timely.windows import Epochs, Sliding, Tumbling  # noqa: E402


def epoch_pages(pages, records):
    """Fold clicks of one bin and epoch as they arrive (``stateful_unary``'s ``combine``):
    per page ``[category, clicks, {users}]``."""
    if pages is None:
        pages = {}
    for click in records:               # (page, category, user[, ts])
        page = click[0]
        found = pages.get(page)
        if found is None:
            pages[page] = [click[1], 1, {click[2]}]
        else:
            found[1] += 1
            found[2].add(click[2])
    return pages


def aggregate(time, pages, state, notificator, output):
    """Per bin, once its epoch is complete: fold the epoch's pages (``epoch_pages``) into
    each page's running state and emit the page's per-epoch and running figures. A bin's
    state holds, per page, its running ``(clicks, distinct users)``, and a key ``(page,
    user)`` for every user seen on the page: an epoch changes its pages and their new
    users only, so that is all a checkpoint writes (one set of users per page would be
    written whole, and copied, every epoch the page is clicked)."""
    for page, (category, clicks, users) in pages.items():
        total, distinct = state.get(page, (0, 0))
        for user in users:
            seen = (page, user)
            if seen not in state:
                state[seen] = True
                distinct += 1
        total += clicks
        state[page] = (total, distinct)
        output.append({"epoch": time, "page": page, "category": category, "clicks": clicks,
                       "users": len(users), "total_clicks": total, "total_users": distinct})


_SECONDS: dict = {}


def seconds(ts: Any) -> Any:
    """A click's ``ts`` in seconds: a number as it is, UTC text ``yyyy-MM-dd HH:mm:ss``
    parsed (once per distinct text: clicks share their seconds).

    >>> seconds("2026-01-01 00:01:00"), seconds(90)
    (1767225660, 90)
    """
    if ts.__class__ is not str:
        return ts
    found = _SECONDS.get(ts)
    if found is None:
        if len(_SECONDS) >= 100_000:
            _SECONDS.clear()
        found = _SECONDS[ts] = int(datetime.fromisoformat(ts).replace(tzinfo=timezone.utc).timestamp())
    return found


def count_click(acc: Optional[tuple], click: tuple) -> tuple:
    """A page's window: ``(clicks, {user: True})`` (a dict, which survives msgpack when
    the window's bin moves; a set would come back as a tuple)."""
    if acc is None:
        return 1, {click[2]: True}
    users = acc[1]
    users[click[2]] = True
    return acc[0] + 1, users


def window_row(result: tuple) -> dict:
    page, window, (clicks, users) = result
    return {"page": page, "start": window.start, "end": window.end, "clicks": clicks, "users": len(users)}


def page_windows(events: Any, brokers: str, topic: str, length: int, every: Optional[int], epoch_seconds: int,
                 origin: int, bins: int) -> Any:
    """Per page and event-time window, clicks and distinct users, written to ``topic``;
    returns the sink's stream (its frontier passes an epoch once it is durable)."""
    windower = Tumbling(length) if every is None or every == length else Sliding(length, every)
    counts = events.window(windower, key=itemgetter(0), event_time=lambda click: seconds(click[3]),
                           fold=count_click, init=None, epoch_of=Epochs(epoch_seconds, origin),
                           name="PageWindows", bins=bins)
    return counts.map(window_row).kafka_sink(brokers, topic, key=lambda r: r["page"])


def build(worker, brokers: str, clicks: str, results: str, epochs: int, group: str, bins: int = 64,
          windows: Optional[dict] = None):
    """The dataflow; returns ``(source stream's state, probe)`` for reporting.
    ``windows``: ``page_windows``' arguments after ``events`` and ``brokers`` (None: no windows)."""
    def dataflow(scope):
        # each click as the tuple (page, category, user[, ts]), taken from its JSON as it
        # is read, and sent on to its page's worker at once (early): the epoch's marker
        # then only completes the epoch, and withdraws any click it does not count
        fields = ("page", "category", "user") + (("ts",) if windows else ())
        events = scope.kafka_source(brokers, clicks, group_id=group, end_epoch=epochs, fields=fields, early=True)
        # the clicks folded per page as they arrive, the epoch's results once it is complete
        per_page = events.stateful_unary(None, itemgetter(0), "PageAggregates", aggregate, bins=bins,
                                         combine=epoch_pages)
        durable = per_page.kafka_sink(brokers, results, key=lambda r: r["page"])
        if windows:
            durable = durable.concat(page_windows(events, brokers, bins=bins, **windows))
        durable.kafka_commit(events)
        return durable.probe()
    probe = worker.dataflow(dataflow)
    worker.bootstrap()
    return probe


def main(argv):
    timely.config.log_to_stderr()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--clicks", default="clicks")
    parser.add_argument("--results", default="results")
    parser.add_argument("--epochs", type=int, required=True, help="finish after this many epochs")
    parser.add_argument("--group", default="pipeline")
    parser.add_argument("--bins", type=int, default=64)
    parser.add_argument("--windows", metavar="TOPIC", help="also write per-page event-time windows to TOPIC")
    parser.add_argument("--window-seconds", type=int, default=60)
    parser.add_argument("--slide-seconds", type=int, default=None, help="default: tumbling windows")
    parser.add_argument("--epoch-seconds", type=int, default=60, help="a click at ts is in epoch (ts - T) // E")
    parser.add_argument("--epoch-origin", type=int, default=0, help="T of --epoch-seconds")
    args, rest = parser.parse_known_args(argv)
    windows = None
    if args.windows:
        try:
            Sliding(args.window_seconds, args.slide_seconds or args.window_seconds)
            Epochs(args.epoch_seconds, args.epoch_origin)
        except (TypeError, ValueError) as e:
            parser.error(f"--window-seconds / --slide-seconds / --epoch-seconds: {e}")
        windows = {"topic": args.windows, "length": args.window_seconds, "every": args.slide_seconds,
                   "epoch_seconds": args.epoch_seconds, "origin": args.epoch_origin}
    config = timely.Config.from_args(rest)
    start = time.perf_counter()

    def run(worker):
        build(worker, args.brokers, args.clicks, args.results, args.epochs, args.group, args.bins, windows)
        worker.run()
        sources = list(getattr(worker, "kafka_sources", {}).values())
        held = worker.stateful_states[0] if worker.stateful_states else None
        return (worker.index, sum(s.records for s in sources), sum(len(s.parts) for s in sources),
                held.keys() if held is not None else 0, len(held.bins) if held is not None else 0)

    # a process restarted after the job ended (its group committed every epoch) exits at once
    done = job_complete(args.brokers, args.clicks, args.group, args.epochs)
    for index, records, partitions, keys, bins in timely.execute(config, run, complete=done):
        print(f"worker {index}: read {records} events from {partitions} partitions; "
              f"holds {bins} bins, {keys} keys (its pages, and their users)", flush=True)
    print(f"process {config.process}: done in {time.perf_counter() - start:.2f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
