"""A fast sender and a slow receiving worker in another process, for exchange credit.

Worker 0 feeds ``--batches`` batches of ``--per-batch`` records, every one keyed to
worker 1, and steps while ``handle.held`` (``timely.communication.credit``) instead of
sending more; worker 1's map blocks on its first record until the file ``--release``
exists, which worker 0 creates once it has been held (or, if it never is, once it has
sent everything, so that the job ends and the test fails on what it prints). Each
worker prints ``result {json}``: the twins its exchange and codec use; worker 0 the
most bytes it had in flight and how many times it held; worker 1 the bytes delivered
to it when it was released, and the count and sum of the records its map saw.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import timely  # noqa: E402


def main(argv):
    parser = argparse.ArgumentParser(add_help=False)     # -h is the hostfile
    parser.add_argument("--release", required=True)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--per-batch", type=int, default=500)
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)

    def build(worker):
        hub = worker.allocator.hub
        seen = {"count": 0, "sum": 0, "delivered": None}

        def slow(record):
            if seen["delivered"] is None:          # the first record: wait to be released
                while not os.path.exists(args.release):
                    time.sleep(0.005)
                seen["delivered"] = sum(n for ledger in list(hub.ledgers.values()) for n in ledger.values())
            seen["count"] += 1
            seen["sum"] += record[1]
            return record

        def dataflow(scope):
            handle, stream = scope.new_input()
            return handle, stream.exchange(lambda r: r[0]).map(slow).probe()

        handle, probe = worker.dataflow(dataflow)
        from timely.communication import codec
        from timely.dataflow import exchange
        result = {"worker": worker.index, "twins": [exchange.IMPLEMENTATION, codec.IMPLEMENTATION]}
        if worker.index == 0:
            credit = worker.allocator.credit
            held = most = 0
            pad = "x" * 100
            for i in range(args.batches):
                if handle.held:
                    held += 1
                    if held == 1:
                        open(args.release, "w").close()
                    worker.step_while(lambda: handle.held)
                base = i * args.per_batch
                handle.send_batch([(1, base + j, pad) for j in range(args.per_batch)])
                most = max(most, credit.in_flight())
                worker.step()
            if not held:
                open(args.release, "w").close()
            result.update(held=held, most_in_flight=most, limit=credit.limit)
        handle.close()
        worker.run()
        if worker.index == 1:
            result.update(delivered=seen["delivered"], count=seen["count"], sum=seen["sum"])
        sys.stdout.write("result " + json.dumps(result) + "\n")

    timely.execute(config, build)


if __name__ == "__main__":
    main(sys.argv[1:])
