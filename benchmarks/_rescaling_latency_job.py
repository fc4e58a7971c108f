"""The job of ``benchmarks/rescaling_latency.py`` (so of ``overhead.py`` and ``progress_modes.py`` too).

``python benchmarks/_rescaling_latency_job.py [options] [timely options]``, started by
``rescaling_latency.run``.

Seed 003 §5's WordCount. Worker 0 injects ``--rate`` epochs per second, each one line of
``--words`` words over ``--keys`` distinct words; words are exchanged by value (current
routing, so joined workers take a share) and counted per epoch. For every epoch worker 0
records when it was injected and when the probe passed it. The other original workers
close their inputs at once; a joining worker bootstraps and steps along. Worker 0 writes
``{"start", "epochs": [[inject_offset, latency], ...], "progress": {...}}`` to
``--output``; a joiner prints ``joined at WALLTIME``. With ``--rate 0`` worker 0 injects
as fast as it can: the next epoch as soon as the probe passed the previous one (a
throughput run). Every process prints ``cpu SECONDS s after building`` (its CPU time
since its dataflow was built) when it is done.
"""
from __future__ import annotations

import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

import timely  # noqa: E402
from _job_common import paced_arguments, paced_epochs  # noqa: E402
from wordcount import count_words  # noqa: E402


def latency(argv):
    parser = paced_arguments(duration=40.0)
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
            source.close()
            return None
        if worker.index != 0:
            source.close()
            return None
        start = time.time()
        state_sizes = []

        def sample(epoch, now):
            if epoch % 100 == 0:
                state_sizes.append((now - start, worker.progress_state_size()["state_entries"]))
        timed, epoch = paced_epochs(worker, source, probe, args.rate,
                                    lambda: " ".join(rng.choices(vocabulary, k=args.words)),
                                    lambda now: now - start < args.duration, on_inject=sample)
        epochs = [(injected - start, done - injected) for _, injected, done in timed]
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


if __name__ == "__main__":
    latency(sys.argv[1:])
