"""A cluster job for the scale-in and joiner-capability tests (tests/test_scale.py).

Every worker counts words with ``state_machine`` (keyed state that moves between
workers). Worker ``--feeder`` feeds ``FEED`` words per epoch; with ``--joiner-feeds``
a joined worker feeds words of its own from the epoch its capability was granted at
(up to ``--epochs``, or for ``--joiner-epochs`` epochs);
with ``--notify`` every worker asks to be notified at every epoch (a generic operator
whose capabilities, on a joiner, start as pending ones). A process asked to leave
(SIGTERM) stops feeding and closes its input; it writes what it saw to ``--output``
(``{process}`` is replaced) when it exits, as every process does.

``--await-joins J`` / ``--await-leaves L`` make the feeder go on past ``--epochs``, with
epochs that carry no words, until it has seen J processes finish joining and L finish
leaving (their last bin moved out): a test then never races the end of the input
against a join or a leave, however slow the machine. ``--join-by E`` holds epoch E open
(the workers keep stepping) until the awaited joins are done, so a joiner is granted
capabilities no later than E + 1.

Every worker that feeds prints ``worker W fed epoch E`` once it has sent epoch E, so a
test can make a join or a leave land while epochs are still arriving. ``--ask-leave
P@E`` (repeatable): the workers of process P call ``worker.leave()`` (a program asking
its own process to leave) once epoch E is fed (the feeder) or complete (the others);
``P@end``: once the feeder has fed its last epoch (after the awaited joins and leaves).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import timely

FEED = 12


def feeder_words(epoch: int) -> list[str]:
    return [f"w{(epoch * 7 + i) % 40}" for i in range(FEED)]


def joiner_words(worker: int, epoch: int) -> list[str]:
    return [f"j{worker}-{epoch % 3}"] * 2


def count(key, value, state):
    total = (state or 0) + value
    return total, [(key, total)]


class Membership:
    """The processes the feeder has seen finish joining and finish leaving (a process is
    one worker index per ``-w``). It looks after every rescale event the worker applies
    (``worker.rescale_listeners``): a process that joins and leaves between two epochs
    is seen all the same."""

    def __init__(self, worker) -> None:
        self.worker = worker
        self.initial = self._processes(worker.routing_workers)
        self.joined: set[int] = set()
        self.reached = self._processes(worker.broadcast_workers)
        self.left: set[int] = set()
        worker.rescale_listeners.append(self.look)

    def _processes(self, workers) -> set[int]:
        return {w // self.worker.config.workers for w in workers}

    def look(self) -> None:
        reached = self._processes(self.worker.broadcast_workers)
        self.reached |= reached
        self.left = self.reached - reached
        self.joined |= self._processes(self.worker.routing_workers) - self.initial

    def awaiting(self, args) -> bool:
        self.look()
        return self.joining(args) or len(self.left) < args.await_leaves

    def joining(self, args) -> bool:
        self.look()
        return len(self.joined) < args.await_joins


def run(worker, args):
    def build(scope):
        source, stream = scope.new_input()
        counted = stream.map(lambda w: (w, 1)).state_machine(count, bins=args.bins)
        outputs = [counted.capture()]
        if args.notify:
            def logic(input, output, notificator):
                for _ in input.batches():
                    pass
                for cap in notificator:
                    if not worker.leaving:
                        output.give(cap, (worker.index, cap.time))
                if worker.leaving:           # a leaving worker gives up what it waits for
                    for cap in list(notificator._inner._pending):
                        cap.drop()
                    notificator._inner._pending.clear()
            notes = stream.unary_notify(None, "EveryEpoch", range(args.epochs), logic)
            outputs.append(notes.capture())
        return source, outputs, counted.probe()

    source, outputs, probe = worker.dataflow(build)
    joined = worker.bootstrap()
    start = source.time() if source._cap is not None and source._cap.valid else None
    feeds = worker.index == args.feeder or (joined and args.joiner_feeds)
    asks_leave, ask_at = False, None
    for ask in args.ask_leave:
        process, at = ask.split("@")
        if worker.index // worker.config.workers == int(process):
            asks_leave, ask_at = True, -1 if at == "end" else int(at)
    fed = []
    if feeds and start is not None:
        epoch = start
        events = Membership(worker)
        end = args.epochs
        if worker.index != args.feeder and args.joiner_epochs:
            end = start + args.joiner_epochs
        while not worker.leaving:
            awaiting = events.awaiting(args)      # every epoch, so that no change is missed
            if epoch >= end and not (awaiting and worker.index == args.feeder):
                break
            if epoch >= end:
                words = []
            elif worker.index == args.feeder:
                words = feeder_words(epoch)
            else:
                words = joiner_words(worker.index, epoch)
            source.send_batch(words)
            fed.append(epoch)
            sys.stdout.write(f"worker {worker.index} fed epoch {epoch}\n")
            sys.stdout.flush()
            if asks_leave and epoch == ask_at:
                worker.leave()
            if epoch == args.join_by and worker.index == args.feeder:
                worker.step_while(lambda: events.joining(args) and not worker.leaving)
            epoch += 1
            source.advance_to(epoch)
            deadline = time.monotonic() + args.epoch_delay
            worker.step_while(lambda: time.monotonic() < deadline and not worker.leaving)
    if asks_leave and feeds and ask_at == -1:
        worker.leave()
    source.close()
    if asks_leave and not feeds:
        worker.step_while(lambda: probe.less_than(ask_at + 1))
        worker.leave()
    return {"worker": worker.index, "joined": joined, "granted": start, "fed": fed,
            "counted": outputs[0], "notes": outputs[1] if args.notify else None}


def main(argv):
    timely.config.log_to_stderr()
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--epoch-delay", type=float, default=0.1)
    parser.add_argument("--feeder", type=int, default=0)
    parser.add_argument("--joiner-feeds", action="store_true")
    parser.add_argument("--notify", action="store_true")
    parser.add_argument("--bins", type=int, default=32)
    parser.add_argument("--await-joins", type=int, default=0)
    parser.add_argument("--await-leaves", type=int, default=0)
    parser.add_argument("--join-by", type=int, default=-1)
    parser.add_argument("--joiner-epochs", type=int, default=0)
    parser.add_argument("--ask-leave", action="append", default=[])
    parser.add_argument("--output", required=True)
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    results = timely.execute(config, lambda worker: run(worker, args))
    out = []
    for r in results:
        out.append({"worker": r["worker"], "joined": r["joined"], "granted": r["granted"],
                    "fed": r["fed"],
                    "counted": [(t, sorted(rs)) for t, rs in sorted(r["counted"].by_time().items())],
                    "notes": None if r["notes"] is None else sorted(
                        x for rs in r["notes"].by_time().values() for x in rs)})
    with open(args.output.replace("{process}", str(config.process)), "w") as f:
        json.dump(out, f)
    sys.stdout.write(f"process {config.process} done\n")


if __name__ == "__main__":
    main(sys.argv[1:])
