"""A pipeline in a few lines: clicks in from Kafka, a running total per page (keyed state
that moves when the cluster grows), totals out to Kafka, offsets committed behind them.

    python -m broker serve --port 9092                       # a broker, in memory
    python -m timely.connectors.kafka demo-clicks --brokers 127.0.0.1:9092 --epochs 5
    python examples/page_totals.py --brokers 127.0.0.1:9092 --epochs 5 -n 2 -p 0 -h hosts &
    python examples/page_totals.py --brokers 127.0.0.1:9092 --epochs 5 -n 2 -p 1 -h hosts

Reads ``clicks`` (JSON events with a ``page``, one epoch per time window, each followed
by its epoch-end markers: see README, "Spark, Kafka and dataflows") and writes
``{"page", "clicks"}`` per click to ``page-totals`` (created if missing). Each process
prints, for each batch of totals it computes, the latest total of each page in it
(``epoch E: PAGE N, ...``). ``--epochs N`` stops after epochs 0 .. N-1; without it the
job runs until stopped. The code below is the README's first listing, word for word
(tests/test_readme.py checks it).
"""
import argparse
import sys

import timely
from timely.connectors.client import create_topics

options = argparse.ArgumentParser(add_help=False)   # the program's flags; timely takes the rest
options.add_argument("--brokers", default="127.0.0.1:9092")
options.add_argument("--epochs", type=int)          # read epochs 0 .. N-1, then stop
args, timely_args = options.parse_known_args(sys.argv[1:])

def add_click(page, n, total):                      # per page, in epoch order
    total = n if total is None else total + n
    return total, [{"page": page, "clicks": total}]  # (new state, outputs)

def show(epoch, totals):                            # a batch of totals this process computed
    latest = dict(sorted((t["page"], t["clicks"]) for t in totals))
    print(f"epoch {epoch}: " + ", ".join(f"{page} {n}" for page, n in latest.items()), flush=True)

def build(worker):
    def dataflow(scope):
        clicks = scope.kafka_source(args.brokers, "clicks", group_id="page-totals", end_epoch=args.epochs)
        totals = clicks.map(lambda e: (e["page"], 1)).state_machine(add_click)
        totals.inspect_batch(show)
        written = totals.kafka_sink(args.brokers, "page-totals", key=lambda r: r["page"])
        written.kafka_commit(clicks)                # commit offsets once totals are in Kafka
    worker.dataflow(dataflow)
    worker.bootstrap()                              # a no-op unless this process joins (-j)

create_topics(args.brokers, {"page-totals": 2})     # the output topic, unless it exists
timely.execute_from_args(timely_args, build)
