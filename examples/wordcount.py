"""WordCount: lines in, running word counts out, kept exact while the cluster grows.

Worker 0 (or every worker, with --all-workers) reads synthetic lines epoch by epoch.
Each batch of lines becomes ``(word, n)`` pairs, and ``state_machine`` keeps each word's
running count in Megaphone bins: a process that joins mid-run gets bins moved to it
(``--rebalance auto``, by ``--migration batched|fluid|all-at-once``) and every count
stays exact. The end of the run checks the counts against a plain ``Counter``.

    python examples/wordcount.py -w 2 [--lines 200000 --words-per-line 10 --vocabulary 10000]
    python examples/wordcount.py -n 2 -p 0 -h hosts --epoch-delay 0.2 --output out-{process}.json
    python examples/wordcount.py -n 2 -p 2 -h hosts -j 0 --nn 3 --output out-{process}.json

``--exchange`` counts per epoch behind a plain ``Exchange`` instead (no migration:
state splits when a process joins): every word crosses to the worker that counts it,
as in timely's WordCount. ``--combine`` counts per epoch too, but each worker first
counts its own words (``accumulate``), and only those partial counts cross: one record
per word, worker and epoch rather than one per occurrence (Naiad's partial aggregation),
which is what lets ``-w 2`` add throughput (``benchmarks/wordcount.py``).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time as clock
from collections import Counter
from operator import itemgetter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import timely  # noqa: E402
from timely import Exchange  # noqa: E402


def count_words(words):
    """Per epoch: (word, count) for every word seen, once the epoch is complete; words
    routed by a plain Exchange (state does not follow a join)."""
    counts: dict = {}

    def logic(input, output, notificator):
        for cap, batch in input:
            counter = counts.get(cap.time)
            if counter is None:
                counter = counts[cap.time] = Counter()
                notificator.notify_at(cap.retain())
            counter.update(batch)
        for cap in notificator:
            output.give_batch(cap, list(counts.pop(cap.time).items()))
            cap.drop()
    return words.unary_notify(Exchange(None), "Count", [], logic)


def count_lines(counts, lines):
    """The partial count: a batch of lines' words added to this worker's counts (in C)."""
    counts.update(" ".join(lines).split())
    return counts


def add_pairs(totals, pairs):
    """The merge: partial ``(word, n)`` counts from every worker added up."""
    for word, n in pairs:
        totals[word] += n
    return totals


def count_words_combined(lines):
    """Per epoch: (word, count) for every word seen, from per-worker partial counts that
    are exchanged by word and summed (one record per word and worker crosses, not one
    per occurrence)."""
    return (lines.accumulate(Counter, count_lines, name="PartialCount")
            .flat_map(Counter.items)
            .exchange(itemgetter(0))
            .accumulate(Counter, add_pairs, name="Count")
            .flat_map(Counter.items))


def add(word, n, total):
    """The fold: a word's running count, emitted each time it changes."""
    total = n if total is None else total + n
    return total, ((word, total),)


def pairs(lines):
    """A batch of lines as ``(word, n)`` pairs, counted within the batch (in C)."""
    return list(Counter(w for line in lines for w in line.split()).items())


def running_counts(lines, name="WordCount", bins=256):
    """Running ``(word, count)`` updates over ``state_machine`` (migrates on joins)."""
    return lines.map_batch(pairs).state_machine(add, name=name, bins=bins)


def synthetic_lines(lines, words_per_line, vocabulary, seed=7):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(vocabulary)]
    return [" ".join(rng.choices(vocab, k=words_per_line)) for _ in range(lines)]


def run(worker, lines, epochs, all_workers=False, exchange=False, epoch_delay=0.0, bins=256,
        combine=False):
    """Feed ``lines`` over ``epochs`` epochs; returns this worker's captured output."""
    def build(scope):
        source, stream = scope.new_input()
        if combine:
            counted = count_words_combined(stream)
        elif exchange:
            counted = count_words(stream.flat_map(str.split))
        else:
            counted = running_counts(stream, bins=bins)
        return source, counted.capture(), counted.probe()

    source, captured, probe = worker.dataflow(build)
    if worker.bootstrap():      # a joined worker: no input of its own, it steps along
        source.close()
        return captured
    if all_workers:
        lines = lines[worker.index::worker.initial_peers]
    elif worker.index != 0:
        lines = []
    per_epoch = max(1, -(-len(lines) // epochs)) if lines else 0
    for epoch in range(epochs):
        chunk = lines[epoch * per_epoch:(epoch + 1) * per_epoch] if per_epoch else []
        for i in range(0, len(chunk), 1024):
            source.send_batch(chunk[i:i + 1024])
            worker.step()
        source.advance_to(epoch + 1)
        if epoch_delay:
            deadline = clock.monotonic() + epoch_delay
            worker.step_while(lambda: clock.monotonic() < deadline)
        worker.step_while(lambda: probe.less_than(source.time()))
    source.close()
    return captured


def merge(captures):
    """``{epoch: Counter}`` summed over the workers' captured per-epoch counts
    (the ``--exchange`` and ``--combine`` output)."""
    total: dict = {}
    for captured in captures:
        for epoch, pairs in captured.by_time().items():
            counter = total.setdefault(epoch, Counter())
            for word, n in pairs:
                counter[word] += n
    return total


def latest(batches, exchange=False):
    """``{epoch: {word: count}}`` from captured batches: with running counts, the
    largest total seen at each epoch; with per-epoch counts, their sum."""
    out: dict = {}
    for epoch, records in batches:
        counts = out.setdefault(epoch, {})
        for word, n in records:
            if exchange:
                counts[word] = counts.get(word, 0) + n
            else:
                counts[word] = max(counts.get(word, 0), n)
    return out


def expected_running(lines, epochs):
    """``{epoch: {word: running count}}`` for the words seen in each epoch, from a
    plain Counter (what the dataflow must produce, whatever the cluster did)."""
    total: Counter = Counter()
    out = {}
    for epoch, seen in expected_per_epoch(lines, epochs).items():
        total.update(seen)
        out[epoch] = {w: total[w] for w in seen}
    return out


def expected_per_epoch(lines, epochs):
    """``{epoch: {word: count in that epoch}}`` from a plain Counter (the ``--exchange`` /
    ``--combine`` output)."""
    per_epoch = max(1, -(-len(lines) // epochs)) if lines else 0
    out = {}
    for epoch in range(epochs):
        seen = Counter(w for line in lines[epoch * per_epoch:(epoch + 1) * per_epoch] for w in line.split())
        if seen:
            out[epoch] = dict(seen)
    return out


def main(argv):
    timely.config.log_to_stderr()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)  # -h is the hostfile
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--words-per-line", type=int, default=10)
    parser.add_argument("--vocabulary", type=int, default=10_000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--bins", type=int, default=256)
    parser.add_argument("--epoch-delay", type=float, default=0.0, help="seconds each epoch stays open")
    parser.add_argument("--all-workers", action="store_true", help="every worker reads a share")
    parser.add_argument("--exchange", action="store_true", help="per-epoch counts behind a plain Exchange")
    parser.add_argument("--combine", action="store_true",
                        help="per-epoch counts from per-worker partial counts (implies per-epoch output)")
    parser.add_argument("--output", help="write this process's results (JSON); {process} is replaced")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    lines = synthetic_lines(args.lines, args.words_per_line, args.vocabulary)
    start = clock.perf_counter()
    def work(worker):
        captured = run(worker, lines, args.epochs, args.all_workers, args.exchange, args.epoch_delay, args.bins,
                       args.combine)
        worker.run()                        # to the end: the bins held are final
        if not worker.stateful_states:
            return captured, None
        s = worker.stateful_states[0]       # what the worker holds, as plain values (-w forks)
        return captured, {"index": worker.index, "bins": len(s.bins), "words": s.keys(),
                          "shipped": sum(n for _, n, _ in s.shipped),
                          "received": sum(n for _, n, _ in s.received),
                          "state": sorted(s.snapshot().items()) if args.output else None}

    results = timely.execute(config, work)
    elapsed = clock.perf_counter() - start
    batches = [b for captured, _ in results for b in captured.batches]
    held = {h["index"]: h for _, h in results if h is not None}
    if args.output:
        with open(args.output.replace("{process}", str(config.process)), "w") as f:
            json.dump({"batches": batches, "state": {i: h["state"] for i, h in held.items()}}, f)
    if config.cluster:
        for i, h in sorted(held.items()):
            print(f"worker {i}: holds {h['bins']} bins, {h['words']} words; shipped "
                  f"{h['shipped']} bins, received {h['received']}")
        print(f"process {config.process}: {sum(len(rs) for _, rs in batches)} updates in {elapsed:.2f} s")
        return
    per_epoch = args.exchange or args.combine
    got = latest(batches, per_epoch)
    for epoch in sorted(got):
        top = sorted(got[epoch].items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        print(f"epoch {epoch}: {len(got[epoch])} words updated; top {top}")
    words = args.lines * args.words_per_line
    print(f"wordcount: {config.workers} workers, {words:,} words in {elapsed:.2f} s "
          f"({words / elapsed:,.0f} words/s)")
    if per_epoch:
        exact = got == expected_per_epoch(lines, args.epochs)
        print(f"per-epoch counts exact: {exact}")
    else:
        exact = got == expected_running(lines, args.epochs)
        print(f"running counts exact: {exact}")
    if not exact:
        raise SystemExit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
