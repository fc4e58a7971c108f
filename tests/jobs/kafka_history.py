"""A job with a long progress history, for the compaction test.

Worker 0 advances its input ``--epochs`` times, stepping once per epoch, so its progress
log gets a record per epoch; then it waits for the marker file ``--go`` (created by the
test once a joiner has joined) and finishes. A joiner prints, per worker log, how many
snapshots and records its subscriber read to get going.
"""
import argparse
import logging
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import timely  # noqa: E402


def main(argv):
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("timely").setLevel(logging.INFO)
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--epochs", type=int, default=10000)
    parser.add_argument("--go")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)

    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            return source, stream.map(lambda x: x).probe()
        source, probe = worker.dataflow(dataflow)
        if worker.bootstrap():
            kafka = worker.allocator.hub.kafka
            worker.step_while(lambda: not probe.done())
            sys.stdout.write("joiner read " + json.dumps({
                "snapshots": kafka.subscriber.snapshots_read,
                "records": {str(w): n for w, n in kafka.subscriber.records_read.items()},
                "frontier_done": probe.done()}) + "\n")
            return
        if worker.index != 0:
            source.close()
            worker.step_while(lambda: not probe.done())
            return
        for epoch in range(args.epochs):
            source.send(epoch)
            source.advance_to(epoch + 1)
            worker.step()
        worker.step_while(lambda: probe.less_than(args.epochs))
        sys.stdout.write(f"history written: {args.epochs} epochs\n")
        while not os.path.exists(args.go):
            worker.step_or_park(0.01)
        source.close()
        worker.step_while(lambda: not probe.done())

    timely.execute(config, build)


if __name__ == "__main__":
    main(sys.argv[1:])
