"""A job that rolls back after a crash and whose processes may also leave: the pipeline's
per-page aggregates (examples/pipeline/dataflow.py) without a sink, so no process is
pinned by the partitions it writes. Offsets commit with checkpoints (kafka_commit on
the aggregates); at the end each worker prints the running totals of the pages it
holds, ``state {"page": total_clicks, ...}``, which a test adds up across processes.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples", "pipeline"))

import timely  # noqa: E402
from dataflow import aggregate, epoch_pages  # noqa: E402


def main(argv):
    timely.config.log_to_stderr()
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--clicks", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--epochs", type=int, required=True)
    args, rest = parser.parse_known_args(argv)

    def run(worker):
        def dataflow(scope):
            events = scope.kafka_source(args.brokers, args.clicks, group_id=args.group, end_epoch=args.epochs)
            per_page = (events.map(lambda e: (e["page"], e["category"], e["user"]))
                        .stateful_unary(None, lambda r: r[0], "PageAggregates", aggregate, bins=16,
                                        combine=epoch_pages))
            per_page.kafka_commit(events)
        worker.dataflow(dataflow)
        worker.bootstrap()
        worker.run()
        held = worker.stateful_states[0].snapshot() if worker.stateful_states else {}
        # (the state's other keys are (page, user): the users seen on a page)
        return {page: value[0] for page, value in held.items() if isinstance(page, str)}

    for state in timely.execute(timely.Config.from_args(rest), run):
        print("state " + json.dumps(state), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
