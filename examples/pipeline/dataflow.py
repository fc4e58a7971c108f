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

    python examples/pipeline/dataflow.py -n 2 -p 0 -h hosts --brokers 127.0.0.1:9092 \\
        --clicks clicks --results results --epochs 10
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from operator import itemgetter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import timely  # noqa: E402
from timely.connectors.kafka import job_complete  # noqa: E402


def epoch_pages(pages, records):
    """Fold clicks of one bin and epoch as they arrive (``stateful_unary``'s ``combine``):
    per page ``[category, clicks, {users}]``."""
    if pages is None:
        pages = {}
    for page, category, user in records:
        found = pages.get(page)
        if found is None:
            pages[page] = [category, 1, {user}]
        else:
            found[1] += 1
            found[2].add(user)
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


def build(worker, brokers: str, clicks: str, results: str, epochs: int, group: str, bins: int = 64):
    """The dataflow; returns ``(source stream's state, probe)`` for reporting."""
    def dataflow(scope):
        # each click as the tuple (page, category, user), taken from its JSON as it is
        # read, and sent on to its page's worker at once (early): the epoch's marker then
        # only completes the epoch, and withdraws any click it does not count
        events = scope.kafka_source(brokers, clicks, group_id=group, end_epoch=epochs,
                                    fields=("page", "category", "user"), early=True)
        # the clicks folded per page as they arrive, the epoch's results once it is complete
        per_page = events.stateful_unary(None, itemgetter(0), "PageAggregates", aggregate, bins=bins,
                                         combine=epoch_pages)
        durable = per_page.kafka_sink(brokers, results, key=lambda r: r["page"])
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
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    start = time.perf_counter()

    def run(worker):
        build(worker, args.brokers, args.clicks, args.results, args.epochs, args.group, args.bins)
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
