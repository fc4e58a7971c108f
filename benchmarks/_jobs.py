"""Jobs that the cluster benchmarks launch as processes: ``python benchmarks/_jobs.py JOB ...``.

``latency``: seed 003 §5's WordCount. Worker 0 injects ``--rate`` epochs per second,
each one line of ``--words`` words over ``--keys`` distinct words; words are exchanged
by value (current routing, so joined workers take a share) and counted per epoch. For
every epoch worker 0 records when it was injected and when the probe passed it. The
other original workers close their inputs at once; a joining worker bootstraps and
steps along. Worker 0 writes ``{"start", "epochs": [[inject_offset, latency], ...],
"progress": {...}}`` to ``--output``; a joiner prints ``joined at WALLTIME``.
"""
from __future__ import annotations

import argparse
import json
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

    def build(worker):
        def dataflow(scope):
            source, lines = scope.new_input()
            counted = count_words(lines.flat_map(str.split))
            return source, counted.probe()
        source, probe = worker.dataflow(dataflow)
        if worker.bootstrap():
            sys.stdout.write(f"joined at {time.time():.6f} after {worker.bootstrap_seconds:.4f} s\n")
            return None
        if worker.index != 0:
            source.close()
            return None
        start = time.time()
        period = 1.0 / args.rate
        pending: deque = deque()
        epochs = []
        epoch = 0
        next_at = start
        state_sizes = []
        while True:
            now = time.time()
            if now - start >= args.duration:
                break
            if now >= next_at:
                source.send_batch([" ".join(rng.choices(vocabulary, k=args.words))])
                epoch += 1
                source.advance_to(epoch)
                pending.append((epoch - 1, now))
                next_at += period
                if epoch % 100 == 0:
                    state_sizes.append((now - start, worker.progress_state_size()["state_entries"]))
            worker.step_or_park(max(0.0, min(0.005, next_at - time.time())))
            done = time.time()
            while pending and not probe.less_equal(pending[0][0]):
                e, injected = pending.popleft()
                epochs.append((injected - start, done - injected))
        source.close()
        worker.step_while(lambda: pending and not probe.done())
        result = {"start": start, "epochs": epochs, "state_sizes": state_sizes,
                  "progress": {"batches_sent": sum(p.batches_sent for p in worker.progcasters.values()),
                               "updates_sent": sum(p.updates_sent for p in worker.progcasters.values())},
                  "bootstrap_pauses": worker.bootstrap_pauses}
        if args.output:
            with open(args.output, "w") as f:
                json.dump(result, f)
        return None

    timely.execute(config, build)


if __name__ == "__main__":
    {"latency": latency}[sys.argv[1]](sys.argv[2:])
