"""Jobs that the cluster benchmarks launch as processes: ``python benchmarks/_jobs.py JOB ...``.

``latency``: seed 003 §5's WordCount. Worker 0 injects ``--rate`` epochs per second,
each one line of ``--words`` words over ``--keys`` distinct words; words are exchanged
by value (current routing, so joined workers take a share) and counted per epoch. For
every epoch worker 0 records when it was injected and when the probe passed it. The
other original workers close their inputs at once; a joining worker bootstraps and
steps along. Worker 0 writes ``{"start", "epochs": [[inject_offset, latency], ...],
"progress": {...}}`` to ``--output``; a joiner prints ``joined at WALLTIME``. With
``--rate 0`` worker 0 injects as fast as it can: the next epoch as soon as the probe
passed the previous one (a throughput run). Every process prints ``cpu SECONDS s after
building`` (its CPU time since its dataflow was built) when it is done.

``progress_state``: one dataflow (``--dataflow chain|exchange|iterate``) fed ``--epochs``
epochs of ``--records`` records by every worker, one epoch at a time, each stepped until
the probe passes it; every ``--every`` epochs each worker samples
``progress_state_size()``. Writes ``{"workers": [[[epoch, entries, recorded], ...], ...],
"seconds"}`` to ``--output``.

``bootstrap_state``: worker 0 holds ``--caps`` capabilities at ``--caps`` distinct
future times (so the progress state has about that many entries) and prints ``ready``
once its state holds them; after a process joined (``-j 0``) and finished bootstrapping
it prints the server's pause and entries sent, releases the capabilities and closes its
input, so every process completes. A joiner prints ``joined at WALLTIME after S s``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from collections import deque

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

import timely  # noqa: E402
from wordcount import count_words  # noqa: E402


def latency(argv):
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--duration", type=float, default=40.0)
    parser.add_argument("--rate", type=float, default=100.0, help="epochs (lines) per second")
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--output")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    rng = random.Random(11)
    vocabulary = [f"k{i}" for i in range(args.keys)]
    built = [None]     # process CPU time once the first worker built its dataflow

    def build(worker):
        def dataflow(scope):
            source, lines = scope.new_input()
            counted = count_words(lines.flat_map(str.split))
            return source, counted.probe()
        source, probe = worker.dataflow(dataflow)
        if built[0] is None:
            built[0] = time.process_time()
        if worker.bootstrap():
            sys.stdout.write(f"joined at {time.time():.6f} after {worker.bootstrap_seconds:.4f} s\n")
            return None
        if worker.index != 0:
            source.close()
            return None
        start = time.time()
        flat_out = args.rate <= 0     # as fast as possible: the next epoch once the last completed
        period = 0.0 if flat_out else 1.0 / args.rate
        pending: deque = deque()
        epochs = []
        epoch = 0
        next_at = start
        state_sizes = []
        while True:
            now = time.time()
            if now - start >= args.duration:
                break
            if (not pending) if flat_out else now >= next_at:
                source.send_batch([" ".join(rng.choices(vocabulary, k=args.words))])
                epoch += 1
                source.advance_to(epoch)
                pending.append((epoch - 1, now))
                next_at += period
                if epoch % 100 == 0:
                    state_sizes.append((now - start, worker.progress_state_size()["state_entries"]))
            worker.step_or_park(0.005 if flat_out else max(0.0, min(0.005, next_at - time.time())))
            done = time.time()
            while pending and not probe.less_equal(pending[0][0]):
                e, injected = pending.popleft()
                epochs.append((injected - start, done - injected))
        source.close()
        worker.step_while(lambda: pending and not probe.done())
        result = {"start": start, "epochs": epochs, "state_sizes": state_sizes, "injected": epoch,
                  "duration": args.duration, "words": args.words, "rescaling": worker.config.rescaling,
                  "progress": {"batches_sent": sum(p.batches_sent for p in worker.progcasters.values()),
                               "updates_sent": sum(p.updates_sent for p in worker.progcasters.values())},
                  "bootstrap_pauses": worker.bootstrap_pauses}
        if args.output:
            with open(args.output, "w") as f:
                json.dump(result, f)
        return None

    timely.execute(config, build)
    # every process: its CPU time (all threads), which load from other programs barely
    # moves, since the dataflow was built (start-up excluded)
    sys.stdout.write(f"cpu {time.process_time() - built[0]:.4f} s after building\n")


# ---- progress_state ---------------------------------------------------------------------
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


# ---- bootstrap_state --------------------------------------------------------------------
def bootstrap_state(argv):
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--caps", type=int, default=1000, help="capabilities worker 0 holds")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s", stream=sys.stdout)
    logging.getLogger("timely.rescaling").setLevel(logging.INFO)   # the server's "sent N entries"

    def build(worker):
        held: list = []
        release = [False]
        activate: list = []

        def dataflow(scope):
            source, stream = scope.new_input()

            def constructor(cap, info):
                if info.worker_index == 0 and not worker.is_joiner:
                    held.extend(cap.delayed(t) for t in range(1, args.caps + 1))
                cap.drop()
                activate.append(info.activator(worker))

                def logic(input, output):
                    for _ in input:
                        pass
                    if release[0] and held:
                        for c in held:
                            c.drop()
                        held.clear()
                return logic
            return source, stream.unary(None, "Hold", constructor).probe()

        source, probe = worker.dataflow(dataflow)
        if worker.bootstrap():
            sys.stdout.write(f"joined at {time.time():.6f} after {worker.bootstrap_seconds:.6f} s\n")
            return None
        source.close()
        if worker.index != 0:
            return None
        built = time.perf_counter()
        worker.step_while(lambda: worker.progress_state_size()["state_entries"] < args.caps)
        sys.stdout.write(f"ready entries {worker.progress_state_size()['state_entries']} "
                         f"after {time.perf_counter() - built:.6f} s\n")
        # wait for a process to join and finish bootstrapping (its "joined" reaches us)
        worker.step_while(lambda: not (worker.bootstrap_pauses and worker.routing_peers > worker.initial_peers))
        sys.stdout.write(f"served pause {worker.bootstrap_pauses[0]:.6f} s, state entries now "
                         f"{worker.progress_state_size()['state_entries']}\n")
        released = time.perf_counter()
        release[0] = True
        activate[0]()
        worker.step_while(lambda: not probe.done())
        sys.stdout.write(f"released in {time.perf_counter() - released:.6f} s\n")
        return None

    timely.execute(config, build)


if __name__ == "__main__":
    {"latency": latency, "progress_state": progress_state,
     "bootstrap_state": bootstrap_state}[sys.argv[1]](sys.argv[2:])
