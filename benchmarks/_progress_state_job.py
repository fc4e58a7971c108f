"""The job of ``benchmarks/progress_state.py``: the progress state of one dataflow over many epochs.

``python benchmarks/_progress_state_job.py [options] [timely options]`` runs one
dataflow (``--dataflow chain|exchange|iterate``) fed ``--epochs`` epochs of
``--records`` records by every worker, one epoch at a time, each stepped until the probe
passes it; every ``--every`` epochs each worker samples ``progress_state_size()``.
Writes ``{"workers": [[[epoch, entries, recorded], ...], ...], "seconds"}`` to
``--output``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import timely  # noqa: E402


def _chain(scope, stream):
    """input -> 10 maps -> (probe)."""
    for i in range(10):
        stream = stream.map(lambda x: x + 1)
    return stream


def _exchange_heavy(scope, stream):
    """input -> exchange/map x3 -> per-epoch count (unary_notify, exchanged) -> (probe)."""
    for i in range(3):
        stream = stream.exchange(lambda x: x).map(lambda x: x * 7 + 3)
    counts: dict = {}

    def logic(input, output, notificator):
        for cap, batch in input:
            if cap.time not in counts:
                counts[cap.time] = 0
                notificator.notify_at(cap.retain())
            counts[cap.time] += len(batch)
        for cap in notificator:
            output.give_batch(cap, [counts.pop(cap.time)])
            cap.drop()
    return stream.unary_notify(timely.Exchange(lambda x: x), "CountPerEpoch", [], logic)


ROUNDS = 3


def _iterate(scope, stream):
    """input -> iterative scope: concat(entered, loop) -> map(+1) -> filter(< ROUNDS) ->
    loop; the concatenation leaves -> (probe)."""
    def body(inner):
        handle, looped = inner.loop_variable(1)
        current = stream.map(lambda x: 0).enter(inner).concat(looped)
        current.map(lambda x: x + 1).filter(lambda x: x < ROUNDS).connect_loop(handle)
        return current.leave()
    return scope.iterative(body)


DATAFLOWS = {"chain": _chain, "exchange": _exchange_heavy, "iterate": _iterate}


def progress_state(argv):
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--dataflow", choices=sorted(DATAFLOWS), default="chain")
    parser.add_argument("--epochs", type=int, default=100_000)
    parser.add_argument("--records", type=int, default=3, help="records per worker per epoch")
    parser.add_argument("--every", type=int, default=500, help="sample the state every N epochs")
    parser.add_argument("--output")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    shape = DATAFLOWS[args.dataflow]

    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            return source, shape(scope, stream).probe()
        source, probe = worker.dataflow(dataflow)
        samples = []
        started = time.perf_counter()
        base = worker.index * 1_000_003
        for epoch in range(args.epochs):
            source.send_batch(range(base + epoch, base + epoch + args.records))
            source.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
            if (epoch + 1) % args.every == 0:
                size = worker.progress_state_size()
                samples.append((epoch + 1, size["state_entries"], size["recorded_batches"]))
        seconds = time.perf_counter() - started
        source.close()
        return samples, seconds

    results = timely.execute(config, build)
    doc = {"dataflow": args.dataflow, "epochs": args.epochs, "workers": [r[0] for r in results],
           "seconds": max(r[1] for r in results), "accumulating": config.rescaling and config.cluster}
    if args.output:
        with open(args.output, "w") as f:
            json.dump(doc, f)


if __name__ == "__main__":
    progress_state(sys.argv[1:])
