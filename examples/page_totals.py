"""A pipeline in a few lines: clicks in from Kafka, a running total per page (keyed state
that moves when the cluster grows), totals out to Kafka, offsets committed behind them.

    python examples/page_totals.py --brokers 127.0.0.1:9092 -n 2 -p 0 -h hosts &
    python examples/page_totals.py --brokers 127.0.0.1:9092 -n 2 -p 1 -h hosts

Reads ``clicks`` (JSON events with a ``page``, one epoch per time window, each followed
by its epoch-end markers: see README, "Spark, Kafka and dataflows") and writes
``{"page", "clicks"}`` per page and epoch to ``page-totals``. ``--epochs N`` stops after
N epochs; without it the job runs until stopped.
"""
import argparse
import sys

import timely


def add_click(page, n, total):                      # per page, in epoch order
    total = n if total is None else total + n
    return total, [{"page": page, "clicks": total}]  # (new state, outputs)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--epochs", type=int, default=None)
    args, timely_args = parser.parse_known_args(argv)

    def build(worker):
        def dataflow(scope):
            clicks = scope.kafka_source(args.brokers, "clicks", group_id="page-totals",
                                        end_epoch=args.epochs)
            totals = clicks.map(lambda e: (e["page"], 1)).state_machine(add_click)
            written = totals.kafka_sink(args.brokers, "page-totals", key=lambda r: r["page"])
            written.kafka_commit(clicks)            # commit offsets once totals are in Kafka
        worker.dataflow(dataflow)
        worker.bootstrap()                          # a no-op unless this process joins (-j)

    timely.execute_from_args(timely_args, build)


if __name__ == "__main__":
    main(sys.argv[1:])
