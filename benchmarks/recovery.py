"""Checkpoints and crash recovery: what checkpoints cost, and how fast the survivors of a SIGKILL go on.

Every run is real processes on 127.0.0.1 (``timely.launch.LocalCluster``, 2 processes x
1 worker) against a Tansu broker started for that run alone, running
``_recovery_job.py``: the pipeline's shape (``kafka_source`` -> ``stateful_unary`` per
key, 64 bins -> ``kafka_sink`` -> ``kafka_commit``) over running totals: each event
``[key, value]`` adds one to its key's count and ``value`` to its total, and every key
seen in an epoch gets one result ``[epoch, key, count, total]``. The input topic (4
partitions) is written here under the epoch contract, 1,000 events per Kafka record
(msgpack, header ``rows``), each epoch followed by its markers: epoch 0 loads N
distinct keys (the state), every later epoch changes K distinct keys drawn at random
(seeded), R events each. Results go 500 per record.

1. Overhead: unthrottled (every epoch written before the job starts), N = 100k (200
   epochs) and 1M (20 epochs) keys (``--quick``: 10k, 100k; 20 epochs), events per
   epoch 10% of N, as K = 10% of N keys once each (every event changes a key: the
   worst case) and as K = 1% of N keys 10 times each; checkpoints on (``--checkpoint
   kafka``, the default for this shape, every epoch) vs off (``--checkpoint off``).
   Throughput = every event (the load's included) / (the first step -> the slower
   worker's probe on the sink's durable stream passing the last epoch). Median of
   ``--repeats`` runs (3; quick 1), on and off alternating. Goal: on/off >= 0.90.
   Also the CPU seconds of the job's processes and of the broker in each run: the job
   is CPU-bound on 2 cores, so on/off follows the CPU off/on, and the broker's added
   CPU alone bounds on/off (``overhead_bound_by_broker_cpu``).
2. Checkpoint cost, from the BinLog's instruments each worker prints at the end (per
   crossing: seconds encoding + handing over, keys, bytes, seconds until durable), over
   the steady epochs (labels 2..E, the deltas of epochs 1..E-1; the load's full write at
   label 1 left out), paced (epoch 0 written and its results out, then min(10, 100k / K)
   epochs per second, so each epoch's checkpoint stands alone): (a) against state size,
   N = 10k / 100k / 1M (quick 10k / 100k), K = 1,000, 40 epochs; (b) against keys
   changed, N = 100k (quick 10k), K = 1% / 10% / 100% of N, 20 epochs. Times are per
   worker and epoch (its crossings of one label summed), keys and bytes per epoch summed
   over the workers. A bin whose deltas since its last base add up to as many keys as it
   holds is written whole, so the mean includes those bases and the median is the plain
   delta.
3. Recovery: epoch 0 (the load) is written and the job started; once epoch 0's results
   are out, epochs come at ``--rate`` per second (5), K = 2,000 each; 3 s later process
   1 is SIGKILLed; 8 s of epochs follow. N = 10k / 100k / 1M (quick 10k / 100k).
   Recovery time = SIGKILL -> the first epoch that was not complete before the kill is
   complete in the results topic (``examples/pipeline/run.py``'s EpochWatcher reads its
   markers). Epochs recomputed = the last epoch complete before the kill - the restore
   label (the coordinator's ``rollback`` line) + 1. The survivor is not restarted: the
   PID it prints at start and at its end is its Popen's, it exits 0, it built its
   dataflow exactly twice, and it restored every key (the engine's restore line). Phases,
   from the engine's log lines (wall-clock stamped): detect (SIGKILL -> "the survivors
   roll back"), drop (-> "dropped dataflows"), decide (-> the coordinator's "rollback":
   its read of the store's incarnations and commits, a new incarnation), then inside
   rebuild (-> "rebuilt dataflows") the restore line's store read, fold and new life's
   bases, and the rest of the rebuild (the dataflow, the source's and sink's start),
   catch-up (-> the first new epoch readable: recomputing from the restore label, the
   sink's first write, the checkpoints); and the full collections of Python's cyclic GC
   in that window (the job's ``gc.callbacks``).

Every run is exact or the benchmark fails: the results topic, read by its markers,
holds every epoch once, every key of it once, with count and total equal to a numpy
replay of the input; every process exits 0 (the victim -9); an unthrottled job read
every event written. Failed checks are listed in the summary's ``failed_checks`` and
make the program exit 1 after writing the report. The report goes to
``benchmarks/results/recovery.json`` (``--quick``: the temporary directory, unless
``--json`` says where); the plots next to it: ``*_checkpoint_size.png`` (2a),
``*_checkpoint_changed.png`` (2b), ``*_time.png`` (recovery time against state size,
by phase), ``*_latency.png`` (epoch written -> results readable around the kill).
"""
from __future__ import annotations

import json
import os
import re
import resource
import signal
import statistics
import sys
import tempfile
import time
import uuid
from typing import Optional

import msgpack
import numpy as np
from _common import ROOT, conclude, cpu_seconds, figure, parse_args, percentiles, stacked_bars, style, table, write_report
from tqdm import tqdm

sys.path.insert(0, os.path.join(ROOT, "examples", "pipeline"))

from broker.tansu import TansuBroker  # noqa: E402
from run import EpochWatcher  # noqa: E402
from timely.connectors.client import consumer_config, create_topics, producer_config, scan  # noqa: E402
from timely.connectors.epochs import PartitionEpochs, data_headers, marker_headers  # noqa: E402
from timely.launch import LocalCluster  # noqa: E402

JOB = os.path.join(ROOT, "benchmarks", "_recovery_job.py")
PARTITIONS = 4
ROWS_IN = 1000          # events per input record
ROWS_OUT = 500          # results per output record
BINS = 64
SEED = 20240611


class RunFailed(Exception):
    """A run whose processes failed or hung (the message holds a log excerpt)."""


def excerpt(log, lines=40):
    fd, path = tempfile.mkstemp(prefix="recovery-", suffix=".log")
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(log) + "\n")
    return "\n".join(line[:300] for line in log[-lines:]) + f"\n(the whole log: {path})"


# ---- the input ---------------------------------------------------------------------------
class Workload:
    """Epoch 0: every key of ``range(keys)`` once (the load); epoch e >= 1: ``changed``
    distinct keys drawn at random (seeded by e), ``repeat`` events each, shuffled;
    values 1..99."""

    def __init__(self, keys: int, changed: int, epochs: int, repeat: int = 1, seed: int = SEED) -> None:
        self.keys, self.changed, self.epochs, self.repeat, self.seed = keys, min(changed, keys), epochs, repeat, seed

    @property
    def per_epoch(self) -> int:
        return self.changed * self.repeat

    def epoch(self, e: int) -> tuple[np.ndarray, np.ndarray]:
        """Epoch ``e``'s events: (keys, values)."""
        rng = np.random.default_rng([self.seed, e])
        if e == 0:
            keys = np.arange(self.keys, dtype=np.int64)
            return keys, rng.integers(1, 100, self.keys, dtype=np.int64)
        if self.changed >= self.keys:
            keys = rng.permutation(self.keys).astype(np.int64)
        else:
            keys = rng.choice(self.keys, self.changed, replace=False).astype(np.int64)
        if self.repeat > 1:
            keys = rng.permutation(np.repeat(keys, self.repeat))
        return keys, rng.integers(1, 100, keys.size, dtype=np.int64)

    def events(self, lo: int, hi: int) -> int:
        """Events of epochs lo..hi-1."""
        return sum(self.keys if e == 0 else self.per_epoch for e in range(lo, hi))

    def describe(self) -> str:
        each = f", {self.repeat} events each" if self.repeat > 1 else ""
        return f"{self.keys:,} keys, {self.changed:,} changed per epoch{each}"

class PackedWriter:
    """Writes epochs under the epoch contract: an epoch's records (``ROWS_IN`` events
    each, msgpack, header ``rows``), a flush, then one marker per partition naming the
    records' offsets, a flush. ``written_at[e]``: wall clock once e's markers are acknowledged."""

    def __init__(self, brokers: str, topic: str) -> None:
        from confluent_kafka import Producer
        self.topic = topic
        self.producer = Producer(producer_config(brokers, None))
        self.written_at: dict[int, float] = {}
        self._offsets: dict[int, list[int]] = {}
        self.errors: list = []

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.errors.append(str(error))
            return
        found = self._offsets.setdefault(message.partition(), [message.offset(), message.offset() + 1])
        found[0] = min(found[0], message.offset())
        found[1] = max(found[1], message.offset() + 1)

    def _produce(self, value: bytes, partition: int, headers: list) -> None:
        while True:
            try:
                self.producer.produce(self.topic, value, partition=partition, headers=headers,
                                      on_delivery=self._delivered)
                return
            except BufferError:
                self.producer.poll(0.01)

    def _flush(self) -> None:
        if self.producer.flush(30) or self.errors:
            raise RuntimeError(f"writing {self.topic}: {self.errors[:3] or 'not acknowledged in 30 s'}")

    def epoch(self, e: int, keys: np.ndarray, values: np.ndarray) -> None:
        self._offsets = {}
        part = keys % PARTITIONS
        for p in range(PARTITIONS):
            sel = part == p
            pairs = np.stack([keys[sel], values[sel]], axis=1).tolist()
            for i in range(0, len(pairs), ROWS_IN):
                chunk = pairs[i:i + ROWS_IN]
                self._produce(msgpack.packb(chunk), p, data_headers(e, rows=len(chunk)))
        self._flush()
        ranges = self._offsets
        for p in range(PARTITIONS):
            first, end = ranges.get(p, (0, 0))
            self._produce(b"", p, marker_headers(e, first, end))
        self._flush()
        self.written_at[e] = time.time()


# ---- exactness -------------------------------------------------------------------------------
def read_results(brokers: str, topic: str) -> tuple[dict, list]:
    """Every complete epoch of the results topic as ``{epoch: int64 array (rows, 4)}``,
    read by its markers; and problems (an epoch complete in some partitions only)."""
    from confluent_kafka import Consumer
    consumer = Consumer(consumer_config(brokers, None, None))
    states = {p: PartitionEpochs(topic, p) for p in range(PARTITIONS)}
    parts: dict[int, list] = {}
    try:
        for messages in scan(consumer, {(topic, p): 0 for p in range(PARTITIONS)}, timeout=30):
            for m in messages:
                for epoch, records in states[m.partition()].record(m.offset(), m.headers(), m.value()):
                    for _, value, rows in records:
                        got = msgpack.unpackb(value)
                        if rows is not None and len(got) != rows:
                            raise RuntimeError(f"{topic}[{m.partition()}]: a record of {len(got)} rows, "
                                               f"header says {rows}")
                        parts.setdefault(epoch, []).append(np.asarray(got, dtype=np.int64).reshape(-1, 4))
    finally:
        consumer.close()
    done = [s.completed for s in states.values()]
    problems = []
    if len(set(done)) > 1:
        problems.append(f"{topic}: partitions complete up to different epochs {done}")
    return {e: np.concatenate(arrays) for e, arrays in parts.items()}, problems


def check_results(workload: Workload, got: dict, what: str) -> list[str]:
    """Compare the results with a replay of the input: every epoch once, each key of it
    once, with its running count and total."""
    problems = []
    count = np.zeros(workload.keys, dtype=np.int64)
    total = np.zeros(workload.keys, dtype=np.int64)
    extra = sorted(set(got) - set(range(workload.epochs)))
    if extra:
        problems.append(f"{what}: results of epochs {extra[:5]} that were never written")
    for e in range(workload.epochs):
        keys, values = workload.epoch(e)
        np.add.at(count, keys, 1)
        np.add.at(total, keys, values)
        changed = np.unique(keys)
        rows = got.get(e)
        if rows is None:
            problems.append(f"{what}: no results of epoch {e}")
            continue
        if rows.shape[0] != changed.size:
            problems.append(f"{what}: epoch {e} has {rows.shape[0]} results, {changed.size} keys changed")
            continue
        rows = rows[np.argsort(rows[:, 1], kind="stable")]
        if not (np.all(rows[:, 0] == e) and np.array_equal(rows[:, 1], changed)):
            problems.append(f"{what}: epoch {e}: wrong keys or epochs in its results (a key twice?)")
        elif not (np.array_equal(rows[:, 2], count[changed]) and np.array_equal(rows[:, 3], total[changed])):
            bad = int(np.sum((rows[:, 2] != count[changed]) | (rows[:, 3] != total[changed])))
            problems.append(f"{what}: epoch {e}: {bad} keys with a wrong count or total")
    return problems


# ---- one run ------------------------------------------------------------------------------
def results_of(cluster) -> list[dict]:
    """The ``RESULT`` line of every worker that finished, with its process and Popen PID."""
    out = []
    for p in cluster.processes:
        for _, line in p.lines:
            if line.startswith("RESULT "):
                r = json.loads(line[len("RESULT "):])
                r["process"] = p.index
                r["popen_pid"] = p.pid
                out.append(r)
    return sorted(out, key=lambda r: r["worker"])


def job_args(brokers: str, names: dict, epochs: int, checkpoint: str) -> list[str]:
    extra = ["--brokers", brokers, "--clicks", names["clicks"], "--results", names["results"],
             "--group", names["group"], "--epochs", str(epochs), "--bins", str(BINS), "--rows", str(ROWS_OUT),
             "--timeout", "60"]
    if checkpoint == "off":
        extra += ["--checkpoint", "off"]
    return extra


def new_names() -> dict:
    run = uuid.uuid4().hex[:8]
    return {"clicks": f"clicks-{run}", "results": f"results-{run}", "group": f"g-{run}"}


def done_times(workers: list[dict]) -> dict[int, float]:
    """Per epoch, when the slower worker's probe passed it."""
    out: dict[int, float] = {}
    for r in workers:
        for e, t in r["done_at"].items():
            out[int(e)] = max(out.get(int(e), 0.0), t)
    return out


def encode_seconds(workers: list[dict]) -> list[float]:
    """Per worker, the seconds its crossings spent encoding and handing over."""
    return [sum(s[2] for log in r["logs"] for s in log["stats"]) for r in workers]


def run_unthrottled(workload: Workload, checkpoint: str, processes: int = 2, timeout: float = 900) -> dict:
    """Write every epoch, then run the job to its end on a fresh broker; checks exactness.
    Throughput: every event / (the first step -> the slower probe passing the last epoch)."""
    what = f"unthrottled, checkpoints {checkpoint}, {workload.describe()}"
    with TansuBroker() as broker:
        brokers = broker.bootstrap
        names = new_names()
        create_topics(brokers, {names["clicks"]: PARTITIONS, names["results"]: PARTITIONS})
        writer = PackedWriter(brokers, names["clicks"])
        t = time.perf_counter()
        for e in range(workload.epochs):
            writer.epoch(e, *workload.epoch(e))
        write_s = time.perf_counter() - t
        extra = job_args(brokers, names, workload.epochs, checkpoint)
        with LocalCluster(JOB, slots=processes, extra=extra) as cluster:
            # CPU of the job's processes (children, counted once reaped) and of the broker
            children0, broker0 = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds(broker.proc.pid)
            started = time.time()
            cluster.start(processes)
            try:
                codes = cluster.wait(timeout)
            except Exception as exc:  # noqa: BLE001 - a hung run
                raise RunFailed(f"{what}: no exit within {timeout:g} s ({exc}):\n{excerpt(cluster.interleaved())}")
            ended = time.time()
            children1, broker_cpu = resource.getrusage(resource.RUSAGE_CHILDREN), cpu_seconds(broker.proc.pid) - broker0
            job_cpu = (children1.ru_utime + children1.ru_stime) - (children0.ru_utime + children0.ru_stime)
            log = cluster.interleaved()
            workers = results_of(cluster)
        if any(codes) or len(workers) != processes:
            raise RunFailed(f"{what}: exit codes {codes}, {len(workers)} results:\n{excerpt(log)}")
        got, problems = read_results(brokers, names["results"])
    problems += check_results(workload, got, what)
    read = sum(r["events"] for r in workers)
    if read != workload.events(0, workload.epochs):
        problems.append(f"{what}: the job read {read} events, {workload.events(0, workload.epochs)} were written")
    done = done_times(workers)
    first = min(r["stepping"] for r in workers)
    run_s = done[workload.epochs - 1] - first
    return {"checkpoint": checkpoint, "keys": workload.keys, "changed": workload.changed, "repeat": workload.repeat,
            "epochs": workload.epochs, "processes": processes, "write_s": write_s, "start_s": first - started,
            "run_s": run_s, "events": workload.events(0, workload.epochs),
            "events_per_s": workload.events(0, workload.epochs) / run_s, "job_s": ended - started,
            "encode_s": encode_seconds(workers), "job_cpu_s": job_cpu, "broker_cpu_s": broker_cpu,
            "workers": workers, "problems": problems}


def run_paced(workload: Workload, rate: float, kill_epoch: Optional[int] = None, processes: int = 2,
              victim: int = 1, timeout: float = 600) -> dict:
    """Epoch 0 is written and the job started on a fresh broker; once epoch 0's results
    are out, epochs 1.. are written at ``rate`` per second while a watcher records when
    each epoch's results are complete. ``kill_epoch``: SIGKILL process ``victim`` half
    a period after that epoch was written. Checks exactness and exit codes."""
    what = f"paced {rate:g}/s, {workload.describe()}" + ("" if kill_epoch is None else ", a SIGKILL")
    with TansuBroker() as broker:
        brokers = broker.bootstrap
        names = new_names()
        create_topics(brokers, {names["clicks"]: PARTITIONS, names["results"]: PARTITIONS})
        writer = PackedWriter(brokers, names["clicks"])
        writer.epoch(0, *workload.epoch(0))
        watcher = EpochWatcher(brokers, names["results"], PARTITIONS)
        extra = job_args(brokers, names, workload.epochs, "kafka")
        try:
            with LocalCluster(JOB, slots=processes, extra=extra) as cluster:
                started = time.time()
                procs = cluster.start(processes)
                pids = [p.pid for p in procs]
                deadline = time.monotonic() + timeout
                while 0 not in watcher.completed_at:
                    if time.monotonic() > deadline or any(p.popen.poll() is not None for p in procs):
                        raise RunFailed(f"{what}: epoch 0 not complete:\n{excerpt(cluster.interleaved())}")
                    time.sleep(0.02)
                loaded = time.time()
                kill_at = None
                for e in range(1, workload.epochs):
                    time.sleep(max(0.0, loaded + (e - 1) / rate - time.time()))
                    writer.epoch(e, *workload.epoch(e))
                    if e == kill_epoch:
                        time.sleep(max(0.0, loaded + (e - 0.5) / rate - time.time()))
                        kill_at = time.time()
                        cluster.events.append((time.monotonic() - cluster.start_time, f"SIGKILL to process {victim}"))
                        cluster.kill(procs[victim], signal.SIGKILL)
                wrote_all = time.time()
                try:
                    codes = [p.wait(max(1.0, deadline - time.monotonic())) for p in procs]
                except Exception as exc:  # noqa: BLE001 - a hung run
                    raise RunFailed(f"{what}: no exit ({exc}):\n{excerpt(cluster.interleaved())}")
                ended = time.time()
                log = cluster.interleaved()
                workers = results_of(cluster)
            until = time.monotonic() + 30
            while len(watcher.completed_at) < workload.epochs and time.monotonic() < until:
                time.sleep(0.05)
        finally:
            watcher.stop()
        got, problems = read_results(brokers, names["results"])
    problems += check_results(workload, got, what)
    expected = [0] * processes
    if kill_epoch is not None:
        expected[victim] = -signal.SIGKILL
    if codes != expected:
        problems.append(f"{what}: exit codes {codes}, expected {expected}:\n{excerpt(log)}")
    completed = dict(watcher.completed_at)         # wall clock, as kill_at and written_at
    latency = {e: completed[e] - writer.written_at[e] for e in writer.written_at if e in completed and e > 0}
    return {"workload": workload, "what": what, "rate": rate, "started": started, "loaded": loaded,
            "kill_at": kill_at, "kill_epoch": kill_epoch, "victim": victim, "wrote_all": wrote_all, "ended": ended,
            "codes": codes, "pids": pids, "workers": workers, "log": log, "completed": completed,
            "written_at": dict(writer.written_at), "latency": latency, "problems": problems}


# ---- checkpoint costs from the instruments ---------------------------------------------------
def dist(xs) -> dict:
    p = percentiles(xs)
    p["mean"] = float(np.mean(xs)) if xs else None
    return p


def checkpoint_costs(workers: list[dict]) -> dict:
    """The steady epochs' checkpoints (labels >= 2): per worker and label the ms encoding
    + handing over (its crossings of the label summed: one each, as ``repeated`` counts
    the worker-labels crossed more than once) and (the longest) until durable; per label,
    over the workers, keys and bytes."""
    per: dict[tuple, list] = {}
    for r in workers:
        for log in r["logs"]:
            for x, label, enc, keys, nbytes, dur in log["stats"]:
                if label < 2:
                    continue
                found = per.setdefault((r["worker"], label), [0.0, None, 0, 0, 0])
                found[0] += enc
                if dur is not None:
                    found[1] = dur if found[1] is None else max(found[1], dur)
                found[2] += keys
                found[3] += nbytes
                found[4] += 1
    encode = [v[0] * 1e3 for v in per.values()]
    durable = [v[1] * 1e3 for v in per.values() if v[1] is not None]
    by_label: dict[int, list] = {}
    for (_, label), v in per.items():
        found = by_label.setdefault(label, [0, 0])
        found[0] += v[2]
        found[1] += v[3]
    labels = sorted(by_label)
    keys = [by_label[b][0] for b in labels]
    nbytes = [by_label[b][1] for b in labels]
    crossings = sum(len(log["stats"]) for r in workers for log in r["logs"])
    return {"epochs": len(labels), "crossings": crossings, "repeated": sum(1 for v in per.values() if v[4] > 1),
            "encode_ms": dist(encode), "durable_ms": dist(durable),
            "keys_per_epoch": dist(keys), "bytes_per_epoch": dist(nbytes),
            "bytes_per_key": (sum(nbytes) / sum(keys)) if sum(keys) else None}


# ---- recovery -------------------------------------------------------------------------------
STAMP = r"^\[\s*[0-9.]+s p(\d+)\] ([0-9]{9,}\.[0-9]+) "
MARKS = {
    "detected": re.compile(STAMP + r"timely\.cluster: .*the survivors roll back"),
    "dropped": re.compile(STAMP + r"timely\.recovery: worker \d+ dropped dataflows"),
    "decided": re.compile(STAMP + r"timely\.cluster: process \d+: rollback \d+: processes"),
    "restored": re.compile(STAMP + r"timely\.checkpoint: worker \d+: checkpoints of .* restored at"),
    "rebuilt": re.compile(STAMP + r"timely\.recovery: worker \d+ rebuilt dataflows"),
}
ROLLBACK = re.compile(r"rollback (\d+): processes \[([0-9, ]*)\] go on, from \{'[^']*': \('([^']*)', (\d+)\)\}")
RESTORED = re.compile(STAMP + r"timely\.checkpoint: worker (\d+): checkpoints of .* restored at (\d+) from "
                      r"incarnation \S+ \((\d+) keys: store read ([0-9.]+) s, fold ([0-9.]+) s, "
                      r"bases written ([0-9.]+) s\)")


def recovery_metrics(run: dict) -> dict:
    """Recovery time, epochs recomputed, the survivors' checks and the phases of a crash run
    (from the engine's log lines)."""
    workload, kill_at, log, what = run["workload"], run["kill_at"], run["log"], run["what"]
    completed, victim = run["completed"], run["victim"]
    problems = []
    survivors = [i for i in range(len(run["codes"])) if i != victim]
    mine = {r["process"]: r for r in run["workers"]}
    for i in survivors:
        r = mine.get(i)
        if r is None:
            problems.append(f"{what}: no result from survivor {i}")
            continue
        if not (r["pid"] == r["pid_end"] == run["pids"][i] == r["popen_pid"]):
            problems.append(f"{what}: survivor {i} changed PID: {run['pids'][i]} -> {r['pid']} / {r['pid_end']}")
        if r["builds"] != 2:
            problems.append(f"{what}: survivor {i} built its dataflow {r['builds']} times, not twice")
    rollback = [m for line in log if (m := ROLLBACK.search(line))]
    label = int(rollback[0].group(4)) if rollback else None
    if len(rollback) != 1:
        problems.append(f"{what}: {len(rollback)} rollback lines in the log, not 1")
    marks = {}
    for name, pattern in MARKS.items():
        found = [float(m.group(2)) for line in log if (m := pattern.search(line)) and float(m.group(2)) >= kill_at]
        marks[name] = min(found) - kill_at if found else None
        if not found:
            problems.append(f"{what}: no {name!r} line after the kill")
    # the survivors' restores: (worker, label, keys, store read, fold, bases)
    restores = [(int(m.group(3)), int(m.group(4)), int(m.group(5)), float(m.group(6)), float(m.group(7)),
                 float(m.group(8))) for line in log if (m := RESTORED.search(line)) and float(m.group(2)) >= kill_at]
    keys_restored = sum(r[2] for r in restores)
    if restores and any(r[1] != label for r in restores):
        problems.append(f"{what}: restored at {sorted({r[1] for r in restores})}, the rollback said {label}")
    if label is not None and label >= 1 and keys_restored != workload.keys:
        problems.append(f"{what}: the survivors restored {keys_restored} keys at label {label}, "
                        f"not the {workload.keys} epoch 0 loaded")
    before = [e for e, t in completed.items() if t <= kill_at]
    last_before = max(before) if before else None
    first_new = (last_before + 1) if last_before is not None else 0
    recovery_s = completed[first_new] - kill_at if first_new in completed else None
    if recovery_s is None:
        problems.append(f"{what}: epoch {first_new} never completed")
    elif not 0 <= recovery_s <= run["ended"] + 30 - kill_at:
        problems.append(f"{what}: epoch {first_new} readable {recovery_s:.1f} s after the kill, outside the run: "
                        f"the watcher's clock is not the kill's")
    probe = max((float(r["done_at"][str(first_new)]) for r in run["workers"] if str(first_new) in r["done_at"]),
                default=None)
    marks["first_new_at_probe"] = None if probe is None else probe - kill_at
    marks["first_new_in_kafka"] = recovery_s
    if recovery_s is not None and marks["rebuilt"] is not None and recovery_s < marks["rebuilt"]:
        problems.append(f"{what}: epoch {first_new} was complete before the survivors rebuilt: not a recovery")
    recomputed = None if label is None or last_before is None else max(0, last_before - label + 1)

    def gap(a, b):
        return None if marks.get(a) is None or marks.get(b) is None else marks[b] - marks[a]

    def slowest(i):
        return max((r[i] for r in restores), default=None)
    store_read, fold, bases = slowest(3), slowest(4), slowest(5)
    rebuild = gap("decided", "rebuilt")
    # the survivors' new life: its crossings up to the first new epoch's checkpoint
    catch_up_crossings = sum(s[2] for r in run["workers"] if r["process"] in survivors for lg in r["logs"]
                             for s in lg["stats"] if s[1] <= first_new + 1)
    # full collections of the cyclic GC in a survivor, from a mark to another (s after the kill)
    collections = sorted({(t - kill_at, d) for r in run["workers"] if r["process"] in survivors
                          for t, d in r["gc_full"]})

    def gc_between(lo, hi):
        if lo is None or hi is None:
            return None
        return sum(d for t, d in collections if lo <= t and t + d <= hi)
    phases = {
        "detect_s": marks["detected"], "drop_s": gap("detected", "dropped"), "decide_s": gap("dropped", "decided"),
        "rebuild_s": rebuild, "catch_up_s": gap("rebuilt", "first_new_in_kafka"),
        # inside rebuild: the engine's restore line (the slowest survivor)
        "store_read_s": store_read, "fold_s": fold, "bases_s": bases,
        "rebuild_other_s": None if None in (rebuild, store_read, fold, bases) else rebuild - store_read - fold - bases,
        "keys_restored": keys_restored,
        # inside catch-up: the new life's checkpoints up to the first new epoch's
        "catch_up_checkpoints_s": catch_up_crossings,
        # the survivors' full collections of the cyclic GC: kill -> first new epoch, and in catch-up
        "gc_s": gc_between(0.0, recovery_s),
        "gc_collections": sum(1 for t, d in collections if recovery_s is not None and 0.0 <= t and t + d <= recovery_s),
        "gc_catch_up_s": gc_between(marks["rebuilt"], recovery_s),
    }
    lat = run["latency"]
    t_written = {e: run["written_at"][e] - kill_at for e in lat}
    return {"keys": workload.keys, "changed": workload.changed, "rate": run["rate"], "epochs": workload.epochs,
            "processes": len(run["codes"]), "victim": victim, "kill_epoch": run["kill_epoch"],
            "load_s": run["loaded"] - run["started"], "codes": run["codes"], "pids": run["pids"],
            "label": label, "last_before": last_before, "first_new": first_new, "recovery_s": recovery_s,
            "recomputed": recomputed, "marks": marks, "phases": phases, "gc_full_s": collections,
            "latency_before_ms": percentiles([lat[e] * 1e3 for e in lat if run["written_at"][e] < kill_at - 0.5]),
            "latency_after_ms": percentiles([lat[e] * 1e3 for e in lat
                                             if recovery_s is not None and t_written[e] > recovery_s + 1.0]),
            "epoch_written_s": t_written, "epoch_latency_s": lat, "problems": problems}


# ---- the parts --------------------------------------------------------------------------------
def attempt(problems, failed, fn, *args, **kw):
    try:
        r = fn(*args, **kw)
    except RunFailed as e:
        tqdm.write(f"RUN FAILED: {e}")
        problems.append(str(e))
        failed.append(str(e).splitlines()[0])
        return None
    for p in r["problems"]:
        tqdm.write(f"CHECK FAILED: {p}")
    problems += r["problems"]
    return r


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def pace_for(changed: int) -> float:
    """Epochs per second for a paced run: at most 10, and 100k changed keys per second."""
    return min(10.0, 100_000 / changed)


def part_overhead(cfg, bar, problems, failed) -> list[dict]:
    out = []
    for keys, epochs in cfg["overhead"]:
        for fraction, repeat in cfg["variants"]:
            workload = Workload(keys, int(keys * fraction), epochs, repeat)
            runs = {"kafka": [], "off": []}
            for rep in range(cfg["repeats"]):
                for mode in (("kafka", "off") if rep % 2 == 0 else ("off", "kafka")):
                    bar.set_description(f"overhead {keys:,} {fraction:.0%}x{repeat} {mode} #{rep + 1}")
                    r = attempt(problems, failed, run_unthrottled, workload, mode)
                    bar.update()
                    if r is not None:
                        runs[mode].append(r)
            on = median([r["events_per_s"] for r in runs["kafka"]])
            off = median([r["events_per_s"] for r in runs["off"]])
            out.append({"keys": keys, "changed": workload.changed, "events_per_key": repeat, "epochs": epochs,
                        "events": workload.events(0, epochs), "on_events_per_s": on, "off_events_per_s": off,
                        "ratio": None if not on or not off else on / off,
                        "on_runs": [r["events_per_s"] for r in runs["kafka"]],
                        "off_runs": [r["events_per_s"] for r in runs["off"]],
                        "on_run_s": median([r["run_s"] for r in runs["kafka"]]),
                        "off_run_s": median([r["run_s"] for r in runs["off"]]),
                        "on_encode_s_per_worker": median([max(r["encode_s"]) for r in runs["kafka"]]),
                        **{f"{side}_{what}_cpu_s": median([r[f"{what}_cpu_s"] for r in runs[mode]])
                           for side, mode in (("on", "kafka"), ("off", "off")) for what in ("job", "broker")},
                        "on_checkpoints": checkpoint_costs(runs["kafka"][0]["workers"]) if runs["kafka"] else None})
    rows = [[f"{o['keys']:,}", f"{o['changed']:,}", o["events_per_key"], o["epochs"] - 1, f"{o['events']:,}",
             fmt(o["off_events_per_s"], ",.0f"), fmt(o["on_events_per_s"], ",.0f"), fmt(o["ratio"], ".3f"),
             fmt(None if o["on_run_s"] is None or o["off_run_s"] is None else o["on_run_s"] - o["off_run_s"]),
             fmt(o["on_encode_s_per_worker"]), fmt(o["off_job_cpu_s"]), fmt(o["on_job_cpu_s"]),
             fmt(o["off_broker_cpu_s"]), fmt(o["on_broker_cpu_s"])] for o in out]
    tqdm.write("\n1. overhead: 2 processes, unthrottled, checkpoints every epoch (on) vs --checkpoint off; "
               "events/s over the whole run (the load epoch included), median of the runs")
    tqdm.write(table(rows, ["keys", "changed/epoch", "events/key", "epochs", "events", "off events/s",
                            "on events/s", "on/off", "on-off s", "encode s/worker", "job cpu s off",
                            "on", "broker cpu s off", "on"]))
    return out


def cpu_ratio(o: dict) -> Optional[float]:
    """CPU seconds (job + broker) with checkpoints off over on."""
    parts = [o[f"{side}_{what}_cpu_s"] for side in ("off", "on") for what in ("job", "broker")]
    return None if None in parts else (parts[0] + parts[1]) / (parts[2] + parts[3])


def broker_bound(o: dict) -> Optional[float]:
    """on/off if checkpointing cost the workers nothing and only the broker's added CPU
    slowed the run (all CPU-bound)."""
    parts = [o["off_job_cpu_s"], o["off_broker_cpu_s"], o["on_broker_cpu_s"]]
    return None if None in parts else (parts[0] + parts[1]) / (parts[0] + parts[2])


def cost_row(run, workers) -> dict:
    return {**checkpoint_costs(workers),
            "epoch_latency_ms": percentiles([v * 1e3 for v in run["latency"].values()])}


def part_costs(cfg, bar, problems, failed):
    sizes, changed = {}, {}
    k = cfg["cost_changed"]
    for keys in cfg["cost_sizes"]:
        bar.set_description(f"cost {keys:,} keys, {k:,} changed")
        r = attempt(problems, failed, run_paced, Workload(keys, k, cfg["cost_epochs"]), pace_for(k))
        bar.update()
        if r is not None:
            sizes[keys] = {"keys": keys, "changed": k, "rate": r["rate"], **cost_row(r, r["workers"])}
    n = cfg["changed_keys"]
    for fraction in (0.01, 0.10, 1.0):
        c = int(n * fraction)
        bar.set_description(f"cost {n:,} keys, {fraction:.0%} changed")
        r = attempt(problems, failed, run_paced, Workload(n, c, cfg["changed_epochs"]), pace_for(c))
        bar.update()
        if r is not None:
            changed[fraction] = {"keys": n, "fraction": fraction, "changed": c, "rate": r["rate"],
                                 **cost_row(r, r["workers"])}

    def row(label, c):
        return [label, f"{c['rate']:g}", c["epochs"], fmt(c["encode_ms"]["p50"]), fmt(c["encode_ms"]["p99"]),
                fmt(c["durable_ms"]["p50"]), fmt(c["durable_ms"]["p99"]), f"{c['keys_per_epoch']['p50']:,.0f}",
                f"{c['bytes_per_epoch']['p50']:,.0f}", f"{c['bytes_per_epoch']['mean']:,.0f}",
                fmt(c["bytes_per_key"], ".1f"), fmt(c["epoch_latency_ms"]["p50"], ".0f")]
    head = ["run", "epochs/s", "epochs", "encode p50 ms", "p99", "durable p50 ms", "p99", "keys/epoch p50",
            "bytes/epoch p50", "mean", "bytes/key", "latency p50 ms"]
    tqdm.write(f"\n2a. checkpoint cost against state size ({k:,} keys changed per epoch, paced; times per worker "
               f"and checkpoint, keys and bytes per epoch over both workers)")
    tqdm.write(table([row(f"{keys:,} keys", c) for keys, c in sizes.items()], head))
    tqdm.write(f"\n2b. checkpoint cost against keys changed per epoch ({n:,} keys, paced)")
    tqdm.write(table([row(f"{f:.0%} = {c['changed']:,}", c) for f, c in changed.items()], head))
    return sizes, changed


def one_recovery(cfg, keys, problems, failed):
    k, rate = cfg["recovery_changed"], cfg["rate"]
    pre, post = int(round(cfg["before"] * rate)), int(round(cfg["after"] * rate))
    run = attempt(problems, failed, run_paced, Workload(keys, k, 1 + pre + post), rate, kill_epoch=pre)
    if run is None:
        return None
    m = recovery_metrics(run)
    for p in m["problems"]:
        tqdm.write(f"CHECK FAILED: {p}")
    problems += m["problems"]
    m["survivor_results"] = [{kk: v for kk, v in w.items() if kk not in ("logs", "gc_full")} for w in run["workers"]]
    return m


def recovery_tables(out: dict, title: str) -> None:
    rows = []
    for keys, r in out.items():
        ph = r["phases"]
        rows.append([f"{keys:,}", fmt(r["recovery_s"], ".3f"), r["last_before"], r["label"], r["recomputed"],
                     fmt(ph["detect_s"], ".3f"), fmt(ph["drop_s"], ".3f"), fmt(ph["decide_s"], ".3f"),
                     fmt(ph["rebuild_s"], ".3f"), fmt(ph["catch_up_s"], ".3f"),
                     fmt(r["latency_before_ms"]["p50"], ".0f"), fmt(r["latency_after_ms"]["p50"], ".0f")])
    tqdm.write(title)
    tqdm.write(table(rows, ["keys", "recovery s", "last done", "restore label", "recomputed", "detect", "drop",
                            "decide", "rebuild", "catch-up", "lat p50 before ms", "after ms"]))
    rows = []
    for keys, r in out.items():
        ph = r["phases"]
        rows.append([f"{keys:,}", f"{ph['keys_restored']:,}", fmt(ph["store_read_s"], ".3f"), fmt(ph["fold_s"], ".3f"),
                     fmt(ph["bases_s"], ".3f"), fmt(ph["rebuild_other_s"], ".3f"),
                     fmt(ph["catch_up_checkpoints_s"], ".3f"), fmt(ph["gc_catch_up_s"], ".3f"),
                     f"{fmt(ph['gc_s'], '.3f')} ({ph['gc_collections']})"])
    tqdm.write("   inside (s): rebuild = the restore line's store read + fold + bases + the rest (the dataflow, "
               "source and sink start); in catch-up the new life's checkpoints and the cyclic GC's full "
               "collections; all full collections from the kill to the first new epoch (how many)")
    tqdm.write(table(rows, ["keys", "keys restored", "store read", "fold", "bases", "rest of rebuild",
                            "catch-up ckpt", "catch-up gc", "gc"]))


def part_recovery(cfg, bar, problems, failed) -> dict:
    out = {}
    for keys in cfg["recovery_sizes"]:
        bar.set_description(f"recovery {keys:,} keys")
        m = one_recovery(cfg, keys, problems, failed)
        bar.update()
        if m is not None:
            out[keys] = m
    recovery_tables(out, f"\n3. recovery: 2 processes, {cfg['rate']:g} epochs/s of {cfg['recovery_changed']:,} keys "
                         f"changed, process 1 SIGKILLed {cfg['before']:g} s after the load's results (seconds after "
                         f"the SIGKILL; catch-up: rebuilt -> first new epoch readable)")
    return out


# ---- plots --------------------------------------------------------------------------------------
def plot_costs(path, points, xs, xlabel, title):
    keys = list(points)
    with figure(path, 1, 2, figsize=(11, 4)) as (left, right):
        left.plot(xs, [points[k]["bytes_per_epoch"]["p50"] for k in keys], marker="o", label="bytes/epoch p50 (deltas)")
        left.plot(xs, [points[k]["bytes_per_epoch"]["mean"] for k in keys], marker="s", linestyle="--",
                  label="bytes/epoch mean (bases included)")
        style(left, xlog=True, ylog=True, xlabel=xlabel, ylabel="checkpoint bytes per epoch (2 workers)",
              title=title, title_size=10, grid="both", legend={"fontsize": 8})
        for key, marker, color, name in (("encode_ms", "o", "tab:blue", "encode + hand-over"),
                                         ("durable_ms", "^", "tab:red", "until durable")):
            right.plot(xs, [points[k][key]["p50"] for k in keys], marker=marker, color=color, label=f"{name} p50")
            right.plot(xs, [points[k][key]["p99"] for k in keys], marker=marker, color=color, linestyle="--",
                       label=f"{name} p99")
        style(right, xlog=True, ylog=True, xlabel=xlabel, ylabel="ms per worker and checkpoint",
              title="checkpoint time", title_size=10, grid="both", legend={"fontsize": 8})


def plot_recovery(path_time, path_latency, out):
    sizes = list(out)
    with figure(path_time, figsize=(8, 4.5)) as ax:
        parts = [("detect_s", "detect"), ("drop_s", "drop dataflows"),
                 ("decide_s", "decide (read incarnations, new incarnation)"),
                 ("store_read_s", "restore: store read"), ("fold_s", "restore: fold"),
                 ("bases_s", "new life's bases"), ("rebuild_other_s", "rest of rebuild (dataflow, source, sink)"),
                 ("catch_up_s", "catch-up (recompute to the first new epoch, readable)")]
        x = np.arange(len(sizes))
        stacked_bars(ax, x, {name: [max(0.0, out[k]["phases"][key] or 0.0) for k in sizes] for key, name in parts},
                     width=0.6)
        ax.plot(x, [out[k]["recovery_s"] or np.nan for k in sizes], "k*", markersize=12,
                label="recovery time (SIGKILL -> first new epoch readable)")
        ax.axhline(2.0, color="tab:red", linestyle=":", label="goal: 2 s")
        ax.set_xticks(x, [f"{k:,}" for k in sizes])
        style(ax, xlabel="keys in the state", ylabel="seconds after the SIGKILL",
              title="SIGKILL of 1 of 2 processes: recovery time by phase", title_size=10,
              legend={"fontsize": 7, "loc": "upper left"})
    with figure(path_latency, len(sizes), 1, figsize=(9, 2.8 * len(sizes)), squeeze=False) as axes:
        for ax, k in zip(axes[:, 0], sizes):
            r = out[k]
            es = sorted(r["epoch_latency_s"])
            ax.plot([r["epoch_written_s"][e] for e in es], [r["epoch_latency_s"][e] * 1e3 for e in es], marker=".",
                    label="epoch written -> results readable")
            ax.axvline(0, color="tab:red", linestyle="--", label="SIGKILL")
            if r["recovery_s"] is not None:
                ax.axvline(r["recovery_s"], color="tab:green", linestyle=":", label="first new epoch readable")
            style(ax, ylog=True, xlabel="epoch written at (s since the SIGKILL)", ylabel="latency (ms)",
                  title=f"{k:,} keys, {r['rate']:g} epochs/s of {r['changed']:,} keys changed", title_size=10,
                  legend={"fontsize": 7, "loc": "upper right"})


def main():
    def extra(p):
        p.add_argument("--repeats", type=int, default=0, help="runs per overhead cell (default 3; quick 1)")
        p.add_argument("--rate", type=float, default=5.0, help="epochs per second in the recovery runs")
        p.add_argument("--parts", default="overhead,cost,recovery", help="which parts, comma-separated")
    args = parse_args("recovery", __doc__.splitlines()[0], extra)
    if args.quick and not any(a == "--json" or a.startswith("--json=") for a in sys.argv[1:]):
        args.json = os.path.join(tempfile.gettempdir(), "recovery_quick.json")
    parts = set(args.parts.split(","))
    cfg = {"variants": [(0.10, 1), (0.01, 10)], "rate": args.rate, "before": 3.0, "after": 8.0,
           "recovery_changed": 2_000, "cost_changed": 1_000}
    if args.quick:
        cfg.update(overhead=[(10_000, 21), (100_000, 21)], repeats=args.repeats or 1,
                   cost_sizes=[10_000, 100_000], cost_epochs=21, changed_keys=10_000, changed_epochs=21,
                   recovery_sizes=[10_000, 100_000])
    else:
        cfg.update(overhead=[(100_000, 201), (1_000_000, 21)], repeats=args.repeats or 3,
                   cost_sizes=[10_000, 100_000, 1_000_000], cost_epochs=41, changed_keys=100_000, changed_epochs=21,
                   recovery_sizes=[10_000, 100_000, 1_000_000])
    started = time.perf_counter()
    problems: list[str] = []
    failed: list[str] = []
    total = ((len(cfg["overhead"]) * len(cfg["variants"]) * 2 * cfg["repeats"]) if "overhead" in parts else 0) + \
        ((len(cfg["cost_sizes"]) + 3) if "cost" in parts else 0) + \
        (len(cfg["recovery_sizes"]) if "recovery" in parts else 0)
    overhead, sizes, changed, recovery = [], {}, {}, {}
    with tqdm(total=total, unit="run") as bar:
        if "overhead" in parts:
            overhead = part_overhead(cfg, bar, problems, failed)
        if "cost" in parts:
            sizes, changed = part_costs(cfg, bar, problems, failed)
        if "recovery" in parts:
            recovery = part_recovery(cfg, bar, problems, failed)
    base = os.path.splitext(args.json)[0]
    pngs = []
    if sizes:
        pngs.append(base + "_checkpoint_size.png")
        plot_costs(pngs[-1], sizes, list(sizes), "keys in the state", f"{cfg['cost_changed']:,} keys changed per epoch")
    if changed:
        pngs.append(base + "_checkpoint_changed.png")
        plot_costs(pngs[-1], changed, [c["changed"] for c in changed.values()], "keys changed per epoch",
                   f"{cfg['changed_keys']:,} keys in the state")
    if recovery:
        pngs += [base + "_time.png", base + "_latency.png"]
        plot_recovery(pngs[-2], pngs[-1], recovery)

    def cost_summary(c):
        return {"encode_p50_ms": c["encode_ms"]["p50"], "encode_p99_ms": c["encode_ms"]["p99"],
                "durable_p50_ms": c["durable_ms"]["p50"], "durable_p99_ms": c["durable_ms"]["p99"],
                "bytes_per_epoch_p50": c["bytes_per_epoch"]["p50"],
                "bytes_per_epoch_mean": c["bytes_per_epoch"]["mean"],
                "keys_per_epoch_p50": c["keys_per_epoch"]["p50"]}
    summary = {
        "overhead_on_over_off": {f"{o['keys']} keys, {o['changed']} changed x{o['events_per_key']}": o["ratio"]
                                 for o in overhead},
        "overhead_events_per_s": {f"{o['keys']} keys, {o['changed']} changed x{o['events_per_key']}":
                                  {"on": o["on_events_per_s"], "off": o["off_events_per_s"]} for o in overhead},
        "overhead_cpu_seconds": {f"{o['keys']} keys, {o['changed']} changed x{o['events_per_key']}":
                                 {"job_off": o["off_job_cpu_s"], "job_on": o["on_job_cpu_s"],
                                  "broker_off": o["off_broker_cpu_s"], "broker_on": o["on_broker_cpu_s"]}
                                 for o in overhead},
        # the job is CPU-bound on this machine: on/off follows the CPU (job + broker) each
        # run used, and the broker's added CPU alone bounds on/off even if the workers'
        # checkpointing cost nothing
        "overhead_cpu_off_over_on": {f"{o['keys']} keys, {o['changed']} changed x{o['events_per_key']}":
                                     cpu_ratio(o) for o in overhead},
        "overhead_bound_by_broker_cpu": {f"{o['keys']} keys, {o['changed']} changed x{o['events_per_key']}":
                                         broker_bound(o) for o in overhead},
        "overhead_goal_0.90_met": {f"{o['keys']} keys, {o['changed']} changed x{o['events_per_key']}":
                                   o["ratio"] is not None and o["ratio"] >= 0.90 for o in overhead},
        "checkpoint_by_size": {str(k): cost_summary(c) for k, c in sizes.items()},
        "checkpoint_by_changed": {str(c["changed"]): cost_summary(c) for c in changed.values()},
        "recovery_seconds": {str(k): r["recovery_s"] for k, r in recovery.items()},
        "epochs_recomputed": {str(k): r["recomputed"] for k, r in recovery.items()},
        "recovery_phases_seconds": {str(k): r["phases"] for k, r in recovery.items()},
    }
    if len(sizes) >= 2:
        ks = sorted(sizes)
        summary["bytes_per_epoch_p50_largest_over_smallest_state"] = (sizes[ks[-1]]["bytes_per_epoch"]["p50"]
                                                                      / sizes[ks[0]]["bytes_per_epoch"]["p50"])
        summary["state_largest_over_smallest"] = ks[-1] / ks[0]
    if len(changed) >= 2:
        fs = sorted(changed)
        summary["bytes_per_epoch_p50_most_over_least_changed"] = (changed[fs[-1]]["bytes_per_epoch"]["p50"]
                                                                  / changed[fs[0]]["bytes_per_epoch"]["p50"])
        summary["changed_most_over_least"] = changed[fs[-1]]["changed"] / changed[fs[0]]["changed"]
    if recovery:
        big = max(recovery)
        summary["recovery_goal_2s_met_at_largest"] = (recovery[big]["recovery_s"] is not None
                                                     and recovery[big]["recovery_s"] <= 2.0)
    summary["failed_runs"] = failed
    summary["failed_checks"] = [p.splitlines()[0] for p in problems]
    summary["exact"] = not problems
    summary["total_seconds"] = round(time.perf_counter() - started, 1)
    write_report(args.json, "recovery", summary,
                 {"overhead": overhead,
                  "checkpoint_by_size": {str(k): c for k, c in sizes.items()},
                  "checkpoint_by_changed": {str(c["changed"]): c for c in changed.values()},
                  "recovery": {str(k): r for k, r in recovery.items()}},
                 quick=args.quick, config=cfg, pngs=pngs)
    conclude(problems, summary["total_seconds"])


if __name__ == "__main__":
    main()
