"""A cluster job for the test of Kafka source partitions that follow the workers
(tests/test_scale.py): every worker reads its partitions of ``--topic`` with
``kafka_source`` (bounded by ``--end-epoch``), captures the events it read, counts them
per user in Megaphone state, and commits the group's offsets once the counts pass an
epoch. Each process writes, when it exits (also after a leave), what its workers read,
how many partitions they handed on or took, and their final per-user counts, to
``--output`` (``{process}`` is replaced).
"""
from __future__ import annotations

import argparse
import json
import sys

import timely


def count(user, n, total):
    total = (total or 0) + n
    return total, [(user, total)]


def run(worker, args):
    def build(scope):
        events = scope.kafka_source(args.brokers, args.topic, group_id=args.group,
                                    end_epoch=args.end_epoch)
        counts = events.map(lambda ev: (ev["user"], 1)).state_machine(count, bins=16)
        counts.kafka_commit(events)
        return events.capture(), counts.capture()

    read, counted = worker.dataflow(build)
    worker.bootstrap()
    worker.run()
    state = next(iter(worker.kafka_sources.values()))
    return {"worker": worker.index,
            "read": sorted((t, ev["p"], ev["i"]) for t, evs in read.by_time().items() for ev in evs),
            "handed_off": state.handed_off, "taken": state.taken,
            "counts": [pair for pairs in counted.by_time().values() for pair in pairs]}


def main(argv):
    timely.config.log_to_stderr()
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--end-epoch", type=int, required=True)
    parser.add_argument("--output", required=True)
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    results = timely.execute(config, lambda worker: run(worker, args))
    with open(args.output.replace("{process}", str(config.process)), "w") as f:
        json.dump(results, f)
    sys.stdout.write(f"process {config.process} done\n")


if __name__ == "__main__":
    main(sys.argv[1:])
