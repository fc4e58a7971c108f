"""The jobs of ``benchmarks/migration.py``: ``python benchmarks/_migration_job.py JOB ...``.

``migration`` (also run by ``saturation.py``, through ``migration.run_migration``, and
by ``_scalein_job.py``): WordCount over ``state_machine`` while processes join and the
rebalancer moves bins to them (optionally after loading N keys); worker 0 records
per-epoch latency and the migrations' markers, every worker prints its final state
(see ``migration``). ``stateful_steady``: ``state_machine`` against the same running
counts behind a plain ``Exchange`` (``exchange_running_counts``), closed loop (see
``stateful_steady``). ``migration.py`` checks the final states with ``digest``.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import random
import re
import sys
import time
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

import timely  # noqa: E402
from _job_common import paced_arguments, paced_epochs  # noqa: E402
from timely import Exchange  # noqa: E402
from timely.megaphone.state import apply_fold  # noqa: E402
from wordcount import add, pairs, running_counts  # noqa: E402


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
            # The harness's own million-entry vocabulary and counter are still in the young
            # generation here (steady epochs allocate no net objects, so no collection runs
            # until a join does): the first two young collections after the join traversed
            # them, about 25 ms each, measured as the batched migration's worst epoch. They
            # are the benchmark's, not the dataflow's: collect them now, out of the way.
            gc.collect()
            gc.freeze()

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
    {"migration": migration, "stateful_steady": stateful_steady}[sys.argv[1]](sys.argv[2:])
