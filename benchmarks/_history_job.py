"""A job for benchmarks/progress_modes.py: a long progress history, then a join.

Worker 0 advances its input ``--history`` epochs (a record and a step each), so every
progress log or accumulation has seen that many batches; it then keeps the dataflow
open until the marker file ``--go`` exists. A joining process bootstraps, steps until its
view of progress is current (its probe reaches ``--history``), and prints one line,
``joined {json}``, with both times and what it had to read: the records and snapshots
of each log (Kafka mode) or the state entries it received (peer-to-peer).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import timely  # noqa: E402


def main(argv):
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--go", required=True)
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)

    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            return source, stream.exchange(lambda x: x).probe()
        source, probe = worker.dataflow(dataflow)
        if worker.bootstrap():
            source.close()
            hub = worker.allocator.hub
            bootstrapped = time.time()
            # caught up: this worker's view of progress is current (worker 0's input
            # holds time `history` until the test lets it close)
            worker.step_while(lambda: probe.less_than(args.history))
            report = {"bootstrap_s": worker.bootstrap_seconds, "bootstrapped_at": bootstrapped,
                      "at": time.time()}
            if hub.kafka is not None:
                subscriber = hub.kafka.subscriber
                report["records_read"] = sum(subscriber.records_read.values())
                report["snapshots_read"] = sum(subscriber.snapshots_read.values())
                report["records_by_worker"] = {str(w): n for w, n in subscriber.records_read.items()}
                report["snapshots_by_worker"] = {str(w): n for w, n in subscriber.snapshots_read.items()}
            else:
                report["state_entries"] = worker.progress_state_size()["state_entries"]
            sys.stdout.write("joined " + json.dumps(report) + "\n")
            return
        if worker.index != 0:
            source.close()
            return
        for epoch in range(args.history):
            source.send(epoch)
            source.advance_to(epoch + 1)
            worker.step()
        worker.step_while(lambda: probe.less_than(args.history))
        sys.stdout.write(f"history {args.history} {json.dumps(worker.allocator.hub.progress_traffic())}\n")
        while not os.path.exists(args.go):
            worker.step_or_park(0.01)
        source.close()

    timely.execute(config, build)


if __name__ == "__main__":
    main(sys.argv[1:])
