"""Weakly connected components by label propagation (seed 002's running example).

Each epoch brings a batch of new edges. Inside an iterative scope every vertex starts
labelled by its own id and repeatedly sends its label to its neighbours; a vertex that
hears a smaller label adopts it and passes it on, one loop round per inner time
(epoch, round). When the loop has drained for an epoch (the outer frontier passes it),
the smallest label each vertex reached is its component: the least vertex id in it.

    python examples/wcc.py -w 2 [--vertices 200 --edges 150 --epochs 4 --seed 1]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time as clock
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import timely  # noqa: E402
from timely import Exchange  # noqa: E402
from timely.dataflow.operator import FrontierNotificator  # noqa: E402


def propagate(edges_in, ticks_in, loop_scope):
    """The loop body: returns the label improvements to report.

    ``ticks_in`` carries one record per epoch from every worker to itself, so that
    every worker recomputes every epoch, whether or not new edges reached it."""
    handle, labels_in = loop_scope.loop_variable(1)
    builder = loop_scope.operator("LabelPropagation")
    tick_port = builder.new_input(ticks_in)
    edge_port = builder.new_input(edges_in, Exchange(lambda e: e[0], pinned=True))
    label_port = builder.new_input(labels_in, Exchange(lambda m: m[0], pinned=True))
    to_loop, loop_stream = builder.new_output()
    to_report, report_stream = builder.new_output()

    def constructor(caps):
        for cap in caps:
            cap.drop()
        pending_edges = defaultdict(list)   # epoch -> edges not yet in the graph
        adjacency = defaultdict(list)       # this worker's vertices -> neighbours
        labels = {}                         # (epoch) -> {vertex: label}
        best = defaultdict(dict)            # inner time -> {vertex: smallest label heard}
        notificator = FrontierNotificator()
        frontiers = [tick_port.frontier, edge_port.frontier, label_port.frontier]

        def logic():
            for cap, _ in tick_port:
                notificator.notify_at(cap.retain())
            for cap, edges in edge_port:
                pending_edges[cap.time[0]].extend(edges)
            for cap, messages in label_port:
                heard = best[cap.time]
                if not heard:
                    notificator.notify_at(cap.retain())
                for vertex, label in messages:
                    if label < heard.get(vertex, label + 1):
                        heard[vertex] = label
            for cap in notificator.drain(frontiers):
                epoch, round_ = cap.time
                sends, improved = [], []
                if round_ == 0:
                    for e in sorted(t for t in pending_edges if t <= epoch):
                        for src, dst in pending_edges.pop(e):
                            adjacency[src].append(dst)
                    # every epoch recomputes from scratch over all edges seen so far
                    current = labels[epoch] = {v: v for v in adjacency}
                    improved = list(current.items())
                    for v in adjacency:
                        sends.extend((n, v) for n in adjacency[v])
                heard = best.pop(cap.time, {})
                current = labels.setdefault(epoch, {})
                for vertex, label in heard.items():
                    if label < current.get(vertex, label + 1):
                        current[vertex] = label
                        improved.append((vertex, label))
                        sends.extend((n, label) for n in adjacency.get(vertex, ()))
                if sends:
                    to_loop.give_batch(cap, sends)
                if improved:
                    to_report.give_batch(cap, improved)
                cap.drop()
                labels.pop(epoch - 1, None)
        return logic

    builder.build(constructor)
    loop_stream.connect_loop(handle)
    return report_stream


def components_per_epoch(stream):
    """Outside the loop: per epoch, each vertex's smallest label, once the epoch is done."""
    def logic(input, output, notificator):
        for cap, updates in input:
            state = pending.setdefault(cap.time, {})
            if len(state) == 0:
                notificator.notify_at(cap.retain())
            for vertex, label in updates:
                if label < state.get(vertex, label + 1):
                    state[vertex] = label
        for cap in notificator:
            output.give_batch(cap, sorted(pending.pop(cap.time).items()))
            cap.drop()
    pending: dict = {}
    return stream.unary_notify(Exchange(lambda u: u[0], pinned=True), "Components", [], logic)


class MemberWatch:
    """The processes seen joining and leaving since it was made: it looks after every
    rescale event the worker applies, so a join and a leave that both land before the
    program waits for them (or in one step) count all the same."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.first = set(worker.broadcast_workers)
        self.seen = set(self.first)
        worker.rescale_listeners.append(self.look)

    def look(self) -> None:
        self.seen.update(self.worker.broadcast_workers)

    def wait(self, joins: int, leaves: int) -> None:
        """Step until ``joins`` processes have joined the cluster and ``leaves`` have left
        it (what a test of a join or a leave during WCC holds an epoch open for)."""
        per = self.worker.config.workers

        def pending() -> bool:
            self.look()
            now = set(self.worker.broadcast_workers)
            return len(self.seen - self.first) < joins * per or len(self.seen - now) < leaves * per
        self.worker.step_while(pending)


def run(worker, batches, epoch_delay=0.0, hold_at=None, joins=0, leaves=0):
    """Feed ``batches`` (a list of edge lists, one per epoch) and return captured labels.
    Worker 0 prints ``worker 0 fed epoch E`` as it feeds; with ``hold_at`` it holds that
    epoch open until ``joins`` processes joined and ``leaves`` left (``MemberWatch``)."""
    def build(scope):
        edges, stream = scope.new_input()
        ticks, tick_stream = scope.new_input()
        undirected = stream.flat_map(lambda e: (e, (e[1], e[0])))
        reports = scope.iterative(lambda inner: propagate(
            undirected.enter(inner), tick_stream.enter(inner), inner).leave())
        labels = components_per_epoch(reports)
        return edges, ticks, labels.capture(), labels.probe()

    edges, ticks, captured, probe = worker.dataflow(build)
    watch = MemberWatch(worker) if hold_at is not None else None
    # Labels and adjacency are per-vertex state: they are routed over the workers the
    # dataflow started with (pinned), so a worker that joins later owns no vertex and
    # has nothing to feed: it bootstraps its progress state, gives up its inputs and
    # steps along.
    if worker.bootstrap():
        edges.close()
        ticks.close()
        return captured
    for epoch, batch in enumerate(batches):
        if epoch_delay:
            clock.sleep(epoch_delay)
        if worker.index == 0:
            edges.send_batch(batch)
            if epoch_delay:
                print(f"worker 0 fed epoch {epoch}", flush=True)
            if epoch == hold_at:
                watch.wait(joins, leaves)
        ticks.send(epoch)
        edges.advance_to(epoch + 1)
        ticks.advance_to(epoch + 1)
        worker.step_while(lambda: probe.less_than(edges.time()))
    edges.close()
    ticks.close()
    return captured


def random_batches(vertices, edges, epochs, seed):
    rng = random.Random(seed)
    return [[(rng.randrange(vertices), rng.randrange(vertices)) for _ in range(edges)]
            for _ in range(epochs)]


def merge(captures):
    """Per epoch: {vertex: component label} over every worker's capture."""
    result: dict = defaultdict(dict)
    for captured in captures:
        for epoch, labels in captured.by_time().items():
            result[epoch].update(labels)
    return dict(result)


def main(argv):
    timely.config.log_to_stderr()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)  # -h is the hostfile
    parser.add_argument("--vertices", type=int, default=200)
    parser.add_argument("--edges", type=int, default=150)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epoch-delay", type=float, default=0.0, help="seconds before each epoch")
    parser.add_argument("--hold-at", type=int, help="worker 0 holds this epoch open until --await-joins "
                                                    "processes joined and --await-leaves left")
    parser.add_argument("--await-joins", type=int, default=0)
    parser.add_argument("--await-leaves", type=int, default=0)
    parser.add_argument("--output", help="write this process's labels per epoch here (JSON; "
                                         "{process} is replaced by the process index)")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    batches = random_batches(args.vertices, args.edges, args.epochs, args.seed)
    start = clock.perf_counter()
    per_epoch = merge(timely.execute(config, lambda w: run(w, batches, args.epoch_delay, args.hold_at, args.await_joins,
                                                                args.await_leaves)))
    elapsed = clock.perf_counter() - start
    if args.output:
        with open(args.output.format(process=config.process), "w") as f:
            json.dump({str(e): sorted(labels.items()) for e, labels in per_epoch.items()}, f)
    for epoch in sorted(per_epoch):
        labels = per_epoch[epoch]
        sizes = sorted((sum(1 for v in labels.values() if v == c) for c in set(labels.values())),
                       reverse=True)
        print(f"epoch {epoch}: {len(labels)} vertices in {len(sizes)} components; "
              f"largest {sizes[:5]}")
    total = args.edges * args.epochs
    print(f"wcc: {config.workers} workers, {total} edges over {args.epochs} epochs in "
          f"{elapsed:.3f} s ({total / elapsed:,.0f} edges/s)")


if __name__ == "__main__":
    main(sys.argv[1:])
