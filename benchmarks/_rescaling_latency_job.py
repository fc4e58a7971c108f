"""The job of ``benchmarks/rescaling_latency.py`` (so of ``overhead.py`` and ``progress_modes.py`` too).

``python benchmarks/_rescaling_latency_job.py [options] [timely options]``, started by
``rescaling_latency.run``.

Seed 003 §5's WordCount. Worker 0 injects ``--rate`` epochs per second, each one line of
``--words`` words over ``--keys`` distinct words; words are exchanged by value (current
routing, so joined workers take a share) and counted per epoch (``--dataflow
exchange``: only exchanged, then probed). For every epoch worker 0
records when it was injected and when the probe passed it. The other original workers
close their inputs at once; a joining worker bootstraps and steps along. Worker 0 writes
``{"start", "epochs": [[inject_offset, latency], ...], "progress": {...}}`` to
``--output`` (and prints ``injecting from WALLTIME`` as it starts); a joiner prints
``joined at WALLTIME``. With ``--rate 0`` worker 0 injects
as fast as it can: the next epoch as soon as the probe passed the previous one (a
throughput run). Every process prints ``cpu SECONDS s after building`` (its CPU time
since its dataflow was built) when it is done.

``--phases RATE:SECONDS,...`` (``progress_scale.py``) replaces ``--rate`` and
``--duration`` with a schedule of rates, one after the other. ``--traffic-every S``
makes every process sample, every S seconds, its progress traffic and CPU time
(``traffic_sample``) and print them when it is done as ``traffic {json}``: what it
sent (messages and bytes, per peer process in peer-to-peer mode), what it read from
the logs (Kafka mode), its connections and log subscriptions.
"""
from __future__ import annotations

import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

import timely  # noqa: E402
from _job_common import paced_arguments, paced_epochs  # noqa: E402
from timely.dataflow.channels import Pipeline  # noqa: E402
from wordcount import count_words  # noqa: E402


def tally(acc, words):
    """The per-epoch fold of a bin's words (``stateful_unary``'s ``combine``)."""
    acc = {} if acc is None else acc
    for w in words:
        acc[w] = acc.get(w, 0) + 1
    return acc


def totals(time, counts, state, notificator, output):
    """A bin's running totals, emitted once its epoch is complete."""
    for w, n in counts.items():
        state[w] = state.get(w, 0) + n
        output.append((w, state[w]))


def pipeline_shape(words):
    """examples/pipeline's operators without Kafka: the words keyed through Megaphone
    (its F routes by the configuration at the epoch, its S folds each epoch and emits
    once the epoch is complete, as PageAggregates does), then a stand-in for
    ``kafka_sink`` that holds an epoch's results until its input frontier passes the
    epoch and only then releases them (the sink writes at that point, and its output
    frontier passes the epoch once written)."""
    held: dict = {}

    def sink(input, output, notificator):
        for cap, batch in input:
            if cap.time not in held:
                held[cap.time] = []
                notificator.notify_at(cap.retain())
            held[cap.time].extend(batch)
        for cap in notificator:
            output.give_batch(cap, held.pop(cap.time))
            cap.drop()
    return (words.stateful_unary(None, lambda w: w, "Totals", totals, combine=tally)
            .unary_notify(Pipeline(), "SinkStandIn", [], sink))


def parse_phases(text):
    """``"20:10,50:3"`` -> ``[(20.0, 10.0), (50.0, 3.0)]``: (epochs per second, seconds).

    >>> parse_phases("20:10,50:2.5")
    [(20.0, 10.0), (50.0, 2.5)]
    """
    return [(float(r), float(d)) for r, d in (part.split(":") for part in text.split(","))]


def traffic_sample(hub, seen):
    """This process's progress traffic so far: ``[wall time, CPU seconds, messages sent,
    bytes sent, {peer process: [messages, bytes]} sent to each (peer-to-peer), records
    read, bytes read (Kafka), TCP connections, logs tailed]``. ``seen``: the
    connections met so far, by peer (their counts outlive the connection)."""
    now, cpu = time.time(), time.process_time()
    live = dict(hub.connections)
    seen.update(live)
    kafka = hub.kafka
    if kafka is not None:
        log, sub = kafka.log, kafka.subscriber
        return [now, cpu, log.records, log.bytes, {}, sum(sub.records_read.values()), sub.bytes_read,
                len(live), len(sub.positions)]
    per_peer = {str(p): [c.progress_frames, c.progress_bytes] for p, c in seen.items()}
    return [now, cpu, sum(v[0] for v in per_peer.values()), sum(v[1] for v in per_peer.values()),
            per_peer, 0, 0, len(live), 0]


def sample_traffic(hub, every, samples, stop):
    """Append a ``traffic_sample`` of ``hub`` to ``samples`` every ``every`` seconds until
    ``stop`` is set, and one more then."""
    seen: dict = {}
    samples.append(traffic_sample(hub, seen))
    while not stop.wait(every):
        samples.append(traffic_sample(hub, seen))
    samples.append(traffic_sample(hub, seen))


def latency(argv):
    parser = paced_arguments(duration=40.0)
    parser.add_argument("--phases", type=parse_phases, default=None, metavar="RATE:SECONDS,...")
    parser.add_argument("--traffic-every", type=float, default=0.0, metavar="SECONDS")
    parser.add_argument("--dataflow", choices=("wordcount", "exchange", "pipeline"), default="wordcount",
                        help="exchange: the words exchanged and probed, no per-epoch count; pipeline: "
                             "the pipeline's shape (see pipeline_shape)")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    rng = random.Random(11)
    vocabulary = [f"k{i}" for i in range(args.keys)]
    built = [None]     # process CPU time once the first worker built its dataflow
    hubs = []          # this process's hub, for the traffic samples
    if args.phases:
        bounds, at = [], 0.0
        for rate, seconds in args.phases:
            at += seconds
            bounds.append((at, rate))
        args.duration = at

        def rate_at(start):
            return lambda now: next((r for end, r in bounds if now - start < end), bounds[-1][1])

    def build(worker):
        def dataflow(scope):
            source, lines = scope.new_input()
            words = lines.flat_map(str.split)
            counted = (count_words(words) if args.dataflow == "wordcount" else pipeline_shape(words)
                       if args.dataflow == "pipeline" else words.exchange(lambda w: w))
            return source, counted.probe()
        source, probe = worker.dataflow(dataflow)
        if built[0] is None:
            built[0] = time.process_time()
            hubs.append(worker.allocator.hub)
        if worker.bootstrap():
            sys.stdout.write(f"joined at {time.time():.6f} after {worker.bootstrap_seconds:.4f} s\n")
            source.close()
            return None
        if worker.index != 0:
            source.close()
            return None
        start = time.time()
        sys.stdout.write(f"injecting from {start:.6f}\n")
        state_sizes = []

        def sample(epoch, now):
            if epoch % 100 == 0:
                state_sizes.append((now - start, worker.progress_state_size()["state_entries"]))
        timed, epoch = paced_epochs(worker, source, probe, rate_at(start) if args.phases else args.rate,
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

    samples, stop = [], threading.Event()
    sampler = None
    if args.traffic_every:
        def start_sampling():
            while not hubs and not stop.wait(0.01):
                pass
            if hubs:
                sample_traffic(hubs[0], args.traffic_every, samples, stop)
        sampler = threading.Thread(target=start_sampling, daemon=True, name="traffic-sampler")
        sampler.start()
    timely.execute(config, build)
    # every process: its CPU time (all threads), which load from other programs barely
    # moves, since the dataflow was built (start-up excluded)
    sys.stdout.write(f"cpu {time.process_time() - built[0]:.4f} s after building\n")
    if sampler is not None:
        stop.set()
        sampler.join()
        sys.stdout.write("traffic " + json.dumps({"process": config.process, "samples": samples,
                                                  "progress_mode": config.progress_mode}) + "\n")


if __name__ == "__main__":
    latency(sys.argv[1:])
