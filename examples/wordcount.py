"""WordCount: lines in, per-epoch word counts out, words exchanged by their value.

Worker 0 (or every worker, with --all-workers) reads synthetic lines epoch by epoch;
words are routed to the worker that owns them, counted there with a C-implemented
Counter per epoch, and each epoch's counts are emitted once the frontier passes it.

    python examples/wordcount.py -w 2 [--lines 200000 --words-per-line 10 --vocabulary 10000]
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import time as clock
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import timely  # noqa: E402
from timely import Exchange  # noqa: E402


def count_words(words):
    """Per epoch: (word, count) for every word seen, once the epoch is complete."""
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


def synthetic_lines(lines, words_per_line, vocabulary, seed=7):
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(vocabulary)]
    return [" ".join(rng.choices(vocab, k=words_per_line)) for _ in range(lines)]


def run(worker, lines, epochs, all_workers=False):
    """Feed ``lines`` over ``epochs`` epochs; returns this worker's captured counts."""
    def build(scope):
        source, stream = scope.new_input()
        counted = count_words(stream.flat_map(str.split))
        return source, counted.capture(), counted.probe()

    source, captured, probe = worker.dataflow(build)
    if all_workers:
        lines = lines[worker.index::worker.peers]
    elif worker.index != 0:
        lines = []
    per_epoch = max(1, -(-len(lines) // epochs)) if lines else 0
    for epoch in range(epochs):
        chunk = lines[epoch * per_epoch:(epoch + 1) * per_epoch] if per_epoch else []
        for i in range(0, len(chunk), 1024):
            source.send_batch(chunk[i:i + 1024])
            worker.step()
        source.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(source.time()))
    source.close()
    return captured


def merge(captures):
    total: dict = {}
    for captured in captures:
        for epoch, pairs in captured.by_time().items():
            counter = total.setdefault(epoch, Counter())
            for word, n in pairs:
                counter[word] += n
    return total


def main(argv):
    timely.config.log_to_stderr()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)  # -h is the hostfile
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--words-per-line", type=int, default=10)
    parser.add_argument("--vocabulary", type=int, default=10_000)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--all-workers", action="store_true", help="every worker reads a share")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    lines = synthetic_lines(args.lines, args.words_per_line, args.vocabulary)
    start = clock.perf_counter()
    totals = merge(timely.execute(config, lambda w: run(w, lines, args.epochs, args.all_workers)))
    elapsed = clock.perf_counter() - start
    words = args.lines * args.words_per_line
    for epoch in sorted(totals):
        top = totals[epoch].most_common(3)
        print(f"epoch {epoch}: {sum(totals[epoch].values())} words, {len(totals[epoch])} distinct; top {top}")
    print(f"wordcount: {config.workers} workers, {words:,} words in {elapsed:.2f} s "
          f"({words / elapsed:,.0f} words/s)")


if __name__ == "__main__":
    main(sys.argv[1:])
