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

``migration``: WordCount over ``state_machine`` while processes join and the rebalancer
moves bins to them (optionally after loading N keys); worker 0 records per-epoch
latency and the migrations' markers, every worker prints its final state (see
``migration``). ``stateful_steady``: ``state_machine`` against the same running counts
behind a plain ``Exchange`` (``exchange_running_counts``), closed loop (see
``stateful_steady``).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import re
import sys
import time
from collections import Counter, deque

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

import timely  # noqa: E402
from timely import Exchange  # noqa: E402
from timely.megaphone.state import apply_fold  # noqa: E402
from wordcount import add, count_words, pairs, running_counts  # noqa: E402


def paced_arguments(duration: float) -> argparse.ArgumentParser:
    """The options of a job that injects with ``paced_epochs``: ``--duration`` (seconds;
    default ``duration``), ``--rate``, ``--words`` per line, ``--keys``, ``--output``."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--duration", type=float, default=duration)
    parser.add_argument("--rate", type=float, default=100.0, help="epochs (lines) per second")
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--output")
    return parser


def paced_epochs(worker, source, probe, rate, next_line, running, on_inject=None, on_step=None,
                 scheduled=False):
    """Worker 0's injection loop: one line (``next_line()``) per epoch, ``rate`` epochs
    per second (``rate <= 0``: the next as soon as the probe passed the last), while
    ``running(now)``; then closes ``source`` and steps until the probe passed the epochs
    still in flight. ``on_inject(epoch, now)`` after each injection, ``on_step(now)``
    after each step. Returns ``([(epoch, injected, completed), ...], epochs injected)``
    with wall-clock times (epochs in flight at the close are not listed). ``scheduled``:
    an epoch's injection time is when it was due, not when the loop got to it (an open
    loop: a saturated worker falls behind schedule, and the lag counts as latency)."""
    flat_out = rate <= 0
    period = 0.0 if flat_out else 1.0 / rate
    pending: deque = deque()
    epochs = []
    epoch = source.time()
    next_at = time.time()
    while True:
        now = time.time()
        if not running(now):
            break
        if (not pending) if flat_out else now >= next_at:
            source.send_batch([next_line()])
            epoch += 1
            source.advance_to(epoch)
            pending.append((epoch - 1, next_at if scheduled and not flat_out else now))
            next_at += period
            if on_inject is not None:
                on_inject(epoch, now)
        worker.step_or_park(0.005 if flat_out else max(0.0, min(0.005, next_at - time.time())))
        done = time.time()
        while pending and not probe.less_equal(pending[0][0]):
            e, injected = pending.popleft()
            epochs.append((e, injected, done))
        if on_step is not None:
            on_step(done)
    source.close()
    while pending and not probe.done():
        worker.step_or_park(0.005)
        if scheduled:       # an open loop counts the backlog at the close too
            done = time.time()
            while pending and not probe.less_equal(pending[0][0]):
                e, injected = pending.popleft()
                epochs.append((e, injected, done))
    return epochs, epoch


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
        joined = worker.bootstrap()
        source.close()
        if joined:
            sys.stdout.write(f"joined at {time.time():.6f} after {worker.bootstrap_seconds:.6f} s\n")
            return None
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



# ---- migration (Megaphone) --------------------------------------------------------------
def digest(counts: dict) -> list[int]:
    """``[keys, sum of counts, sum of count * (i + 1), sum of count**2]`` over keys
    ``"k<i>"``: for disjoint key sets (bins of different workers) the digest of the
    union is the sum of the digests, so the states of all workers must add up to the
    digest of what was injected."""
    total = weighted = squares = 0
    for key, n in counts.items():
        total += n
        weighted += n * (int(key[1:]) + 1)
        squares += n * n
    return [len(counts), total, weighted, squares]


class MigrationTracker:
    """Worker 0's markers, from its own F operator and cluster view: when a process
    joined or left (``worker.routing_workers`` changed; each entry of ``joins`` says
    which in ``kind``), each configuration its router compiled
    (time, wall clock seen, bins it moves), the rebalancer's issue time of each step
    (from its ``timely.megaphone`` log record, in this process), the first configuration
    that balances the table over the workers now present, and when the probe passed
    that configuration's time (every bin shipped has arrived and been applied): the
    migration's end."""

    STEP = re.compile(r"rebalancer: step (\d+) at (\d+) moves (\d+) bins")

    def __init__(self, worker, probe, start: float) -> None:
        self.worker = worker
        self.probe = probe
        self.start = start
        self.router = worker.stateful_states[0].routers[0]
        self.workers = tuple(worker.routing_workers)
        self.table = tuple(self.router.configs[-1][1])
        self.known = {c for c, _ in self.router.configs}
        self.joins: list[dict] = []
        self.issued: dict[int, float] = {}      # config time -> wall clock the step was issued
        tracker = self

        class Issued(logging.Handler):
            def emit(self, record):
                m = tracker.STEP.search(record.getMessage())
                if m:
                    tracker.issued[int(m.group(2))] = record.created

        self.handler = Issued(level=logging.INFO)
        logging.getLogger("timely.megaphone").addHandler(self.handler)

    def balanced(self, table) -> bool:
        load = dict.fromkeys(self.workers, 0)
        for w in table:
            if w in load:
                load[w] += 1
        return sum(load.values()) == len(table) and max(load.values()) - min(load.values()) <= 1

    def poll(self, now: float) -> None:
        workers = tuple(self.worker.routing_workers)
        if workers != self.workers:
            kind = "join" if len(workers) > len(self.workers) else "leave"
            self.workers = workers
            self.joins.append({"kind": kind, "seen": now - self.start, "workers": len(workers),
                               "configs": [], "balanced_at": None, "end": None})
        for c, table in self.router.configs:
            if c in self.known:
                continue
            self.known.add(c)
            moved = sum(a != b for a, b in zip(self.table, table))
            self.table = tuple(table)
            if not self.joins:
                raise SystemExit(f"configuration at {c} before any join or leave")
            join = self.joins[-1]
            join["configs"].append({"time": c, "seen": now - self.start, "moved": moved})
            if join["balanced_at"] is None and self.balanced(table):
                join["balanced_at"] = c
        for join in self.joins:
            if join["end"] is None and join["balanced_at"] is not None \
                    and not self.probe.less_equal(join["balanced_at"]):
                join["end"] = now - self.start

    def done(self, joins: int) -> bool:
        return len(self.joins) >= joins and all(j["end"] is not None for j in self.joins)

    def finish(self) -> list[dict]:
        logging.getLogger("timely.megaphone").removeHandler(self.handler)
        for join in self.joins:
            for config in join["configs"]:
                at = self.issued.get(config["time"])
                config["issued"] = None if at is None else at - self.start
            first = join["configs"][0] if join["configs"] else None
            join["start"] = None if first is None else \
                (first["issued"] if first["issued"] is not None else first["seen"])
            join["steps"] = len(join["configs"])
            join["bins_moved"] = sum(c["moved"] for c in join["configs"])
        return self.joins


def report_state(worker, label: str, counts: dict, states=None) -> None:
    """Print this worker's final state: ``final {json}`` (digest; with Megaphone the
    bins held, the table in force, the bins shipped and received)."""
    doc = {"label": label, "worker": worker.index, "digest": digest(counts)}
    if states is not None:
        doc.update(bins=sorted(states.bins), table=list(states.table()), shipped=states.shipped,
                   received=states.received)
    sys.stdout.write("final " + json.dumps(doc) + "\n")


def heavy_add(work: int):
    """``add`` (the running count) plus ``work`` steps of a per-key pseudo-random walk
    kept beside it: a stand-in for an expensive per-key update (a model or sketch), so
    that the stateful operator, not the routing, is what saturates a process. The count
    stays exact: the state is ``(count, walk)``."""
    def fold(word, n, state):
        total, x = state if state is not None else (0, len(word))
        for _ in range(work):
            x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        total += n
        return (total, x), ((word, total),)
    return fold


def migration(argv):
    """WordCount over ``state_machine`` (``running_counts``), the rebalancer moving bins
    to every process that joins. Worker 0 optionally first loads ``--load`` distinct
    keys (``--load-batch`` per epoch), prints ``steady at WALLTIME``, then injects one
    line of ``--words`` words over ``--keys`` keys per epoch at ``--rate`` epochs/s for
    at least ``--duration`` s, until ``--joins`` migrations have ended, then ``--tail``
    more seconds (at most ``--max-seconds`` in all). It writes the per-epoch latencies,
    the migration markers (``MigrationTracker``) and the digest of what it injected to
    ``--output``; every worker (joiners too) prints its final state (``report_state``)."""
    parser = paced_arguments(duration=0.0)
    parser.add_argument("--bins", type=int, default=256)
    parser.add_argument("--load", type=int, default=0, help="distinct keys loaded first")
    parser.add_argument("--load-batch", type=int, default=100_000)
    parser.add_argument("--joins", type=int, default=0, help="migrations to wait for")
    parser.add_argument("--tail", type=float, default=0.0)
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--work", type=int, default=0,
                        help="extra per-record work in the fold (see heavy_add), for saturation runs")
    parser.add_argument("--open-loop", action="store_true",
                        help="latency from when each epoch was due (see paced_epochs' scheduled)")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    logging.basicConfig(level=logging.WARNING, format="%(created).6f %(name)s: %(message)s")
    logging.getLogger("timely.megaphone").setLevel(logging.INFO)

    def build(worker):
        def dataflow(scope):
            source, lines = scope.new_input()
            if args.work:
                counted = lines.map_batch(pairs).state_machine(heavy_add(args.work), bins=args.bins)
            else:
                counted = running_counts(lines, bins=args.bins)
            return source, counted.probe()
        source, probe = worker.dataflow(dataflow)
        states = worker.stateful_states[0]
        if worker.bootstrap():
            sys.stdout.write(f"joined at {time.time():.6f} after {worker.bootstrap_seconds:.4f} s\n")
            source.close()
        elif worker.index != 0:
            source.close()
        else:
            expected: Counter = Counter()
            loaded = time.perf_counter()
            for lo in range(0, args.load, args.load_batch):
                words = [f"k{i}" for i in range(lo, min(args.load, lo + args.load_batch))]
                expected.update(words)
                source.send_batch([" ".join(words)])
                source.advance_to(source.time() + 1)
                worker.step()
            worker.step_while(lambda: probe.less_than(source.time()))
            load_seconds = time.perf_counter() - loaded
            rng = random.Random(11)
            vocabulary = [f"k{i}" for i in range(args.keys)]

            def line():
                words = rng.choices(vocabulary, k=args.words)
                expected.update(words)
                return " ".join(words)

            start = time.time()
            tracker = MigrationTracker(worker, probe, start)
            ended = [None]

            def running(now):
                if now - start >= args.max_seconds:
                    return False
                if now - start < args.duration or not tracker.done(args.joins):
                    return True
                ended[0] = ended[0] or now
                return now - ended[0] < args.tail

            sys.stdout.write(f"steady at {start:.6f} after loading {args.load} keys in {load_seconds:.3f} s\n")
            timed, injected = paced_epochs(worker, source, probe, args.rate, line, running,
                                           on_step=tracker.poll, scheduled=args.open_loop)
            worker.run()
            tracker.poll(time.time())
            result = {"start": start, "epochs": [(e, t - start, d - t) for e, t, d in timed],
                      "injected": injected, "load_seconds": load_seconds, "joins": tracker.finish(),
                      "expected": digest(expected), "timed_out": time.time() - start >= args.max_seconds}
            if args.output:
                with open(args.output, "w") as f:
                    json.dump(result, f)
        worker.run()
        held = states.snapshot()
        if args.work:
            held = {key: state[0] for key, state in held.items()}
        report_state(worker, "megaphone", held, states)
        return None

    timely.execute(config, build)


def _first(record):
    return record[0]


def exchange_running_counts(lines, name="ExchangeCount"):
    """The same running counts as ``running_counts`` without Megaphone: ``pairs`` per
    batch, a plain ``Exchange`` by word, and per worker one dict folded with ``add``
    record by record at each time once the input frontier passed it (the same per-record
    work as ``state_machine``'s S operator: look up, fold, store, collect outputs; no
    bins, no F, no control stream). Returns ``(stream, state)``."""
    state: dict = {}
    stash: dict = {}

    def logic(input, output, notificator):
        for cap, batch in input:
            waiting = stash.get(cap.time)
            if waiting is None:
                waiting = stash[cap.time] = []
                notificator.notify_at(cap.retain())
            waiting.append(batch)
        for cap in notificator:
            emitted: list = []
            for batch in stash.pop(cap.time, ()):
                apply_fold(add, state, batch, emitted.extend, name, cap.time)
            if emitted:
                output.give_batch(cap, emitted)
            cap.drop()
    return lines.map_batch(pairs).unary_notify(Exchange(_first), name, [], logic), state


def stateful_steady(argv):
    """The steady-state cost of ``state_machine``: one dataflow per variant in the same
    workers, ``exchange`` (``exchange_running_counts``) and ``megaphone-B``
    (``running_counts`` with B bins, for each of ``--bins``). Every worker injects, per
    epoch, ``--lines`` lines of ``--words`` words over ``--keys`` keys and steps until
    the probe passed the epoch (closed loop). ``--blocks`` rounds (after one warm-up
    round) of ``--epochs`` epochs per variant, the same lines for every variant in a
    round, variants in rotating order. Worker 0 writes per variant and round the block's
    seconds and the epochs' latencies to ``--output``; every worker prints
    ``injected {counts}`` and, per variant, its final state (``report_state``)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--bins", default="256,4096")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--lines", type=int, default=10)
    parser.add_argument("--words", type=int, default=100)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--output")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    bins = [int(b) for b in args.bins.split(",")]
    variants = ["exchange"] + [f"megaphone-{b}" for b in bins]

    def build(worker):
        flows = {}
        for v, b in zip(variants, [None] + bins):
            def dataflow(scope, b=b):
                source, lines = scope.new_input()
                if b is None:
                    counted, state = exchange_running_counts(lines)
                else:
                    counted, state = running_counts(lines, bins=b), worker.stateful_states[-1]
                return source, counted.probe(), state
            flows[v] = worker.dataflow(dataflow)
        rng = random.Random(1000 + worker.index)
        vocabulary = [f"k{i}" for i in range(args.keys)]
        injected: Counter = Counter()
        blocks = {v: [] for v in variants}
        for round_ in range(args.blocks + 1):
            block = [[" ".join(rng.choices(vocabulary, k=args.words)) for _ in range(args.lines)]
                     for _ in range(args.epochs)]
            for chunk in block:
                for text in chunk:
                    injected.update(text.split())
            k = round_ % len(variants)
            for v in variants[k:] + variants[:k]:
                source, probe, _ = flows[v]
                latencies = []
                started = time.perf_counter()
                for chunk in block:
                    sent = time.perf_counter()
                    source.send_batch(chunk)
                    source.advance_to(source.time() + 1)
                    worker.step_while(lambda: probe.less_than(source.time()))
                    latencies.append(time.perf_counter() - sent)
                seconds = time.perf_counter() - started
                if round_:
                    blocks[v].append({"round": round_, "seconds": seconds, "latencies": latencies})
        for source, _, _ in flows.values():
            source.close()
        worker.run()
        sys.stdout.write("injected " + json.dumps(injected) + "\n")
        for v, (_, _, state) in flows.items():
            if v == "exchange":
                report_state(worker, v, state)
            else:
                report_state(worker, v, state.snapshot(), state)
        if worker.index == 0 and args.output:
            with open(args.output, "w") as f:
                json.dump({"variants": variants, "blocks": blocks, "words_per_epoch":
                           args.lines * args.words * worker.peers, "workers": worker.peers}, f)
        return None

    timely.execute(config, build)

if __name__ == "__main__":
    {"latency": latency, "progress_state": progress_state, "bootstrap_state": bootstrap_state,
     "migration": migration, "stateful_steady": stateful_steady}[sys.argv[1]](sys.argv[2:])
