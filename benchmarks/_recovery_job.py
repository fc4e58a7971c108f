"""The cluster job of ``benchmarks/recovery.py``: the pipeline's shape over keyed running totals.

``python benchmarks/_recovery_job.py --brokers B --clicks T --results R --group G
--epochs E [--bins 64] [--rows 500] [timely options]`` runs on every process:

    kafka_source(T, msgpack [key, value] events, end_epoch=E)
      -> stateful_unary per key: state[key] = (count, total)   ("Totals", --bins bins)
      -> kafka_sink(R, msgpack, --rows rows per Kafka record, partition = key % partitions)
      -> kafka_commit

Each event ``[key, value]`` adds one to its key's count and ``value`` to its total; every
key seen in an epoch gets one result ``[epoch, key, count, total]`` (running figures, so
a result is right only if the state before the epoch was), as the pipeline's per-page
aggregates do. Checkpoints follow the timely options (``--checkpoint off`` turns them
off; on by default for this shape).

Per worker it records the wall-clock time its probe (on the sink's durable stream)
passed each epoch, and prints one line ``RESULT {json}`` at the end: the epochs' times,
events read, keys held, its process id at start and at the end, how often it built the
dataflow, the full collections of Python's cyclic GC (wall-clock start, seconds; from
``gc.callbacks``), and per stateful operator the BinLog's instruments: ``stats``,
per crossing ``[x, label, seconds encoding and handing over, keys, bytes, seconds until
durable]``.

Log lines carry their wall-clock time (``%(created)``): ``timely.cluster``,
``timely.recovery`` and ``timely.checkpoint`` at INFO, whose lines mark the phases of a
rollback (the benchmark reads them; nothing of the engine is wrapped here).
``--profile PATH``: cProfile the worker for 4 s after a rebuild.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import timely  # noqa: E402


def totals(epoch, records, state, notificator, output):
    """Per bin and epoch: the epoch's events of each key are summed, then folded into the
    key's running (count, total), and the key gets one result."""
    seen: dict = {}
    for key, value in records:
        found = seen.get(key)
        if found is None:
            seen[key] = [1, value]
        else:
            found[0] += 1
            found[1] += value
    get = state.get
    for key, (n, added) in seen.items():
        found = get(key)
        if found is None:
            count, total = n, added
        else:
            count, total = found[0] + n, found[1] + added
        state[key] = (count, total)
        output.append((epoch, key, count, total))


def record_full_collections() -> list:
    """``[wall-clock start, seconds]`` of every full collection of the cyclic GC from now
    on (they walk every live object, so they grow with the state held)."""
    found: list = []
    started = [0.0, 0.0]

    def on_gc(phase, info):
        if info.get("generation") != 2:
            return
        if phase == "start":
            started[:] = [time.time(), time.perf_counter()]
        else:
            found.append([started[0], time.perf_counter() - started[1]])
    gc.callbacks.append(on_gc)
    return found


def _finite(x):
    return None if x is None or x == float("inf") else x


def main(argv):
    logging.basicConfig(level=logging.WARNING, format="%(created).6f %(name)s: %(message)s")
    for name in ("timely.cluster", "timely.recovery", "timely.checkpoint"):
        logging.getLogger(name).setLevel(logging.INFO)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--brokers", required=True)
    parser.add_argument("--clicks", required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--epochs", type=int, required=True)
    parser.add_argument("--bins", type=int, default=64)
    parser.add_argument("--rows", type=int, default=500, help="results per Kafka record")
    parser.add_argument("--profile", help="after a rebuild, cProfile the worker for 4 s into this file")
    args, rest = parser.parse_known_args(argv)
    config = timely.Config.from_args(rest)
    pid = os.getpid()
    print(f"PID {pid} process {config.process} started at {time.time():.6f}", flush=True)
    collections = record_full_collections()

    def run(worker):
        held = {"builds": 0}

        def dataflow(scope):
            events = scope.kafka_source(args.brokers, args.clicks, group_id=args.group, end_epoch=args.epochs,
                                        value_format="msgpack")
            results = events.stateful_unary(None, lambda e: e[0], "Totals", totals, bins=args.bins)
            durable = results.kafka_sink(args.brokers, args.results, value_format="msgpack",
                                         partition=lambda r: r[1], rows_per_message=args.rows)
            durable.kafka_commit(events)
            held["probe"] = durable.probe()
            held["builds"] += 1
            held["built_at"] = time.time()
            if args.profile and held["builds"] == 2:
                import cProfile
                held["profile"] = cProfile.Profile()
                held["profile"].enable()

        worker.dataflow(dataflow)
        stepping = time.time()        # built, checkpoints decided (and restored)
        done_at: dict[int, float] = {}
        following = 0
        while True:
            frontier = held["probe"].frontier()
            upto = frontier[0] if frontier else args.epochs
            if upto > following:
                now = time.time()
                for e in range(following, upto):
                    done_at[e] = now
                following = upto
            if not frontier or not worker.step_or_park(0.01):
                break
            if held.get("profile") is not None and time.time() > held["built_at"] + 4:
                held["profile"].disable()
                held["profile"].dump_stats(f"{args.profile}.{worker.index}")
                held["profile"] = None
        while worker.step_or_park(0.01):    # the final commit (execute's worker.run() then
            pass                            # returns at once and tells the membership)
        ended = time.time()
        sources = list(getattr(worker, "kafka_sources", {}).values())
        logs = []
        for s in worker.stateful_states:
            log = s.log
            if log is None:
                continue
            logs.append({"op": log.op, "crossings": log.crossings, "entries": log.entries_written,
                         "keys": log.keys_written, "bytes": getattr(log.writer, "bytes", None),
                         "stats": [[_finite(x), label, enc, keys, nbytes, _finite(dur)]
                                   for x, label, enc, keys, nbytes, dur in log.stats]})
        held_keys = sum(s.keys() for s in worker.stateful_states)
        return {"worker": worker.index, "pid": pid, "pid_end": os.getpid(), "builds": held["builds"],
                "built_at": held["built_at"], "stepping": stepping, "ended": ended,
                "done_at": {str(e): t for e, t in done_at.items()},
                "events": sum(s.records for s in sources), "keys": held_keys,
                "bins": sum(len(s.bins) for s in worker.stateful_states),
                "gc_full": list(collections), "logs": logs}

    for result in timely.execute(config, run):
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
