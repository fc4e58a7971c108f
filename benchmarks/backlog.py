"""Memory flat on any backlog: the pipeline's dataflow started on topics that already hold 1x, 4x, 16x epochs.

The dataflow is the pipeline's (``examples/pipeline/dataflow.py``: ``kafka_source``
early, per-page Megaphone state, ``kafka_sink``, ``kafka_commit`` with checkpoints),
on ``--processes`` processes (1 by default). Each topic holds its epochs before the
dataflow starts, written under the epoch contract as Spark's writer does (100 clicks
per Kafka record, JSON); the state is the same either way (40 pages, 2,000 users), so
only the backlog grows. Each size runs bounded (``--source-read-ahead``, the default
unless ``--read-ahead`` says) and unbounded (``0``: read whatever Kafka holds), the two
taken in turns and in alternating order, ``--reps`` times.

Per run: the peak RSS of the dataflow's processes (``VmHWM`` sampled every 20 ms, the
largest process and the sum), the throughput from starting the processes to every
epoch's results complete in Kafka (a watcher tails the results' markers), and the CPU
seconds per million events of the processes (which this shared machine's load moves
less than wall-clock time); every run's results are checked exactly (per epoch and
page: clicks and running total).

A paced run then shows whether the bound moves latency when there is no backlog: the
epochs are written one every ``--pace`` seconds while the dataflow runs, bounded and
unbounded in turns; per epoch, its last marker in the clicks topic -> its results
complete (``examples/pipeline/run.py``'s measure).

Summary: median peak RSS, throughput and CPU per size and mode, the ratios 4x/1x and
16x/1x of peak RSS for each mode, throughput and CPU bounded/unbounded per size, paced
latency p50/p99 each way. Plot ``backlog.png``: peak RSS and throughput against the backlog.
"""
from __future__ import annotations

import os
import statistics
import sys
import threading
import time
import uuid
from typing import Optional

from _common import ROOT, conclude, cpu_seconds, figure, parse_args, percentiles, style, table, write_report

sys.path.insert(0, os.path.join(ROOT, "examples", "pipeline"))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import numpy as np  # noqa: E402
import orjson  # noqa: E402

from broker.tansu import TansuBroker  # noqa: E402
from run import EpochWatcher, marker_times  # noqa: E402
from test_recovery import PARTITIONS, read_results  # noqa: E402
from timely.config import Config, parse_bytes  # noqa: E402
from timely.connectors.client import create_topics, producer_config  # noqa: E402
from timely.connectors.epochs import PACKED_ROWS, data_headers, marker_headers  # noqa: E402
from timely.launch import LocalCluster  # noqa: E402

DATAFLOW = os.path.join(ROOT, "examples", "pipeline", "dataflow.py")
PAGES = 40
USERS = 2_000
SIZES = (1, 4, 16)


# ---- the clicks ------------------------------------------------------------------------------
def epoch_arrays(epoch: int, clicks: int) -> tuple[np.ndarray, np.ndarray]:
    """``(pages, users)`` of epoch ``epoch``'s clicks, click i in partition i % 4."""
    i = np.arange(clicks, dtype=np.int64)
    return (i * 13 + epoch) % PAGES, (i * 7 + epoch * 3) % USERS


def fill(brokers: str, topic: str, epochs: range, clicks: int) -> None:
    """Write ``epochs`` of ``clicks`` clicks each, 100 per record, each epoch's records then
    one marker per partition naming their offsets (the epoch contract)."""
    from confluent_kafka import Producer
    producer = Producer(producer_config(brokers, None))
    offsets: dict[int, list[int]] = {}
    errors: list = []

    def delivered(error, message) -> None:
        if error is not None:
            errors.append(str(error))
            return
        found = offsets.setdefault(message.partition(), [message.offset(), message.offset() + 1])
        found[0] = min(found[0], message.offset())
        found[1] = max(found[1], message.offset() + 1)

    def produce(value: bytes, partition: int, headers: list, callback) -> None:
        while True:
            try:
                producer.produce(topic, value, partition=partition, headers=headers, on_delivery=callback)
                return
            except BufferError:
                producer.poll(0.01)

    for e in epochs:
        offsets.clear()
        pages, users = epoch_arrays(e, clicks)
        for p in range(PARTITIONS):
            rows = [{"user": int(u), "page": f"p{g}", "category": f"c{g % 5}", "ts": e}
                    for g, u in zip(pages[p::PARTITIONS], users[p::PARTITIONS])]
            for k in range(0, len(rows), PACKED_ROWS):
                chunk = rows[k:k + PACKED_ROWS]
                produce(orjson.dumps(chunk), p, data_headers(e, rows=len(chunk)), delivered)
        if producer.flush(60) or errors:
            raise RuntimeError(f"writing {topic}: {errors[:3] or 'not acknowledged in 60 s'}")
        for p in range(PARTITIONS):
            first, end = offsets[p]
            produce(b"", p, marker_headers(e, first, end), None)
        if producer.flush(60):
            raise RuntimeError(f"writing {topic}'s markers: not acknowledged in 60 s")


def expected(epochs: int, clicks: int) -> dict[tuple[int, str], tuple[int, int]]:
    """Per (epoch, page): (its clicks in the epoch, its running total)."""
    totals = np.zeros(PAGES, dtype=np.int64)
    out = {}
    for e in range(epochs):
        counts = np.bincount(epoch_arrays(e, clicks)[0], minlength=PAGES)
        totals += counts
        for g in np.nonzero(counts)[0]:
            out[(e, f"p{g}")] = (int(counts[g]), int(totals[g]))
    return out


def check(brokers: str, topic: str, want: dict) -> Optional[str]:
    """None if the results topic holds exactly ``want`` (each (epoch, page) once), else
    what differs first."""
    try:
        got = {k: (r["clicks"], r["total_clicks"]) for k, r in read_results(brokers, topic).items()}
    except AssertionError as e:         # an (epoch, page) written twice
        return str(e).splitlines()[0]
    if got == want:
        return None
    missing = sorted(set(want) - set(got))
    wrong = sorted(k for k in set(want) & set(got) if want[k] != got[k])
    return f"{len(missing)} missing (first {missing[:2]}), {len(wrong)} wrong (first {wrong[:2]}), of {len(want)}"


# ---- one run --------------------------------------------------------------------------------
class PeakRSS:
    """The peak RSS (``VmHWM``) and the CPU seconds of processes, sampled every
    ``interval`` s on a thread: the last values read of each, which only grow."""

    def __init__(self, pids: list[int], interval: float = 0.02) -> None:
        self.peaks = dict.fromkeys(pids, 0.0)
        self.cpu = dict.fromkeys(pids, 0.0)
        self._stop = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            for pid in self.peaks:
                try:
                    with open(f"/proc/{pid}/status") as f:
                        for line in f:
                            if line.startswith("VmHWM"):
                                self.peaks[pid] = max(self.peaks[pid], int(line.split()[1]) / 1024)
                                break
                    self.cpu[pid] = cpu_seconds(pid)
                except (OSError, IndexError):
                    continue            # exited: its last reading stands
            if self._stop.wait(self._interval):
                return

    def stop(self) -> tuple[dict[int, float], dict[int, float]]:
        self._stop.set()
        self._thread.join(5)
        return self.peaks, self.cpu


def run_dataflow(brokers: str, topic: str, epochs: int, clicks: int, read_ahead: int, processes: int,
                 pace: float = 0.0, write: Optional[range] = None, timeout: float = 600,
                 env: Optional[dict] = None) -> dict:
    """The pipeline's dataflow on ``topic`` (``epochs`` of them; with ``write``, those are
    written every ``pace`` s once the processes started; ``env``: more environment for
    its processes); returns its peak RSS, seconds, events/s, per-epoch latencies (paced)
    and whether its results were exact."""
    run = uuid.uuid4().hex[:8]
    results = f"backlog-results-{run}"
    create_topics(brokers, {results: PARTITIONS})
    extra = ["--brokers", brokers, "--clicks", topic, "--results", results, "--epochs", str(epochs),
             "--group", f"backlog-{run}", "--source-read-ahead", str(read_ahead), "--timeout", "30"]
    watcher = EpochWatcher(brokers, results, PARTITIONS)
    with LocalCluster([DATAFLOW], slots=processes, extra=extra, env=env) as cluster:
        started = time.time()
        cluster.start(processes)
        rss = PeakRSS([p.pid for p in cluster.processes])
        try:
            if write is not None:
                time.sleep(2.0)         # the processes start: epochs written from now on wait for nothing
                for e in write:
                    fill(brokers, topic, range(e, e + 1), clicks)
                    time.sleep(pace)
            codes = cluster.wait(timeout)
        finally:
            peaks, cpu = rss.stop()
        log = cluster.interleaved()
    deadline = time.monotonic() + 30
    while len(watcher.completed_at) < epochs and time.monotonic() < deadline:
        time.sleep(0.02)
    watcher.stop()
    if any(codes) or len(watcher.completed_at) < epochs:
        print("\n".join(log[-80:]))
        raise SystemExit(f"the dataflow exited {codes} with {len(watcher.completed_at)} of {epochs} epochs' results")
    seconds = max(watcher.completed_at.values()) - started
    out = {"peak_rss_mib": max(peaks.values()), "peak_rss_mib_sum": sum(peaks.values()),
           "seconds": seconds, "events_per_s": epochs * clicks / seconds,
           "cpu_s_per_million_events": sum(cpu.values()) / (epochs * clicks) * 1e6,
           "problem": check(brokers, results, expected(epochs, clicks))}
    if write is not None:
        readable = marker_times(brokers, topic, PARTITIONS)
        out["latency_ms"] = {e: (t - readable[e]) * 1000 for e, t in watcher.completed_at.items() if e in readable}
    return out


def plot(path: str, summary: dict) -> None:
    """Peak RSS and throughput against the backlog, bounded and unbounded (from a
    report's ``summary``)."""
    base, clicks = summary["base_epochs"], summary["clicks_per_epoch"]
    sizes = summary.get("sizes", SIZES)
    xs = [base * s for s in sizes]
    with figure(path, 1, 2, figsize=(10, 4)) as (left, right):
        for m in ("bounded", "unbounded"):
            left.plot(xs, [summary["peak_rss_mib"][f"{s}x"][m] for s in sizes], marker="o", label=m)
            right.plot(xs, [summary["events_per_s"][f"{s}x"][m] / 1000 for s in sizes], marker="o", label=m)
        for ax, ylabel, title in ((left, "peak RSS (MiB)", "peak RSS of the dataflow"),
                                  (right, "thousand events/s", "throughput, start to last results")):
            style(ax, xlabel=f"epochs waiting in Kafka ({clicks:,} clicks each)", ylabel=ylabel, title=title,
                  xlog=True, grid="major", legend=True)
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.minorticks_off()
            ax.set_ylim(bottom=0)


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    started = time.monotonic()

    def extra(parser):
        parser.add_argument("--read-ahead", default=None,
                            help="the bounded runs' --source-read-ahead (default: the configuration's; --quick 512K)")
        parser.add_argument("--processes", type=int, default=1)
        parser.add_argument("--reps", type=int, default=None, help="runs of each size and mode (3; --quick 1)")
        parser.add_argument("--pace", type=float, default=0.25, help="seconds between epochs of the paced run")
        parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                            help="the backlogs, in multiples of the base (default 1,4,16; --sizes 16 for one)")
        parser.add_argument("--malloc", choices=("pymalloc", "malloc"), default="pymalloc",
                            help="the dataflow's small-object allocator (PYTHONMALLOC): malloc shows how much "
                                 "of the unbounded read's lead is pymalloc's fresh heap")
    args = parse_args("backlog", __doc__.splitlines()[0], extra)
    base, clicks = (3, 10_000) if args.quick else (12, 30_000)
    try:
        sizes = tuple(sorted({int(x) for x in args.sizes.split(",")}))
    except ValueError:
        raise SystemExit(f"--sizes: give multiples of the base backlog such as 1,4,16, got {args.sizes!r}")
    env = {"PYTHONMALLOC": "malloc"} if args.malloc == "malloc" else None
    reps = args.reps or (1 if args.quick else 3)
    if args.read_ahead is not None:
        bound = parse_bytes(args.read_ahead, "--read-ahead")
    else:       # --quick's backlog is smaller than the default bound: one in proportion
        bound = 512 << 10 if args.quick else Config().source_read_ahead
    modes = {"bounded": bound, "unbounded": 0}
    runs: dict = {size: {m: [] for m in modes} for size in sizes}
    problems: list[str] = []
    with TansuBroker() as broker:
        brokers = broker.bootstrap
        topics = {}
        for size in sizes:
            topics[size] = f"backlog-clicks-{size}x-{uuid.uuid4().hex[:6]}"
            create_topics(brokers, {topics[size]: PARTITIONS})
            t = time.monotonic()
            fill(brokers, topics[size], range(base * size), clicks)
            print(f"{topics[size]}: {base * size} epochs of {clicks:,} clicks written in "
                  f"{time.monotonic() - t:.1f} s", flush=True)
        for rep in range(reps):
            for size in sizes:
                order = list(modes) if (rep + size) % 2 == 0 else list(modes)[::-1]
                for mode in order:
                    r = run_dataflow(brokers, topics[size], base * size, clicks, modes[mode], args.processes, env=env)
                    runs[size][mode].append(r)
                    if r["problem"]:
                        problems.append(f"{size}x {mode}: results not exact: {r['problem']}")
                    print(f"rep {rep} {size:>2}x {mode:>9}: peak RSS {r['peak_rss_mib']:.0f} MiB, "
                          f"{r['events_per_s']:,.0f} events/s, {r['seconds']:.1f} s, "
                          f"{'exact' if not r['problem'] else r['problem']}", flush=True)
        paced: dict = {m: [] for m in modes}
        paced_epochs = 10 if args.quick else 30
        for rep in range(reps):
            for mode in (list(modes) if rep % 2 == 0 else list(modes)[::-1]):
                topic = f"backlog-paced-{uuid.uuid4().hex[:6]}"
                create_topics(brokers, {topic: PARTITIONS})
                r = run_dataflow(brokers, topic, paced_epochs, clicks, modes[mode], args.processes,
                                 pace=args.pace, write=range(paced_epochs), env=env)
                if r["problem"]:
                    problems.append(f"paced {mode}: results not exact: {r['problem']}")
                paced[mode].extend(r["latency_ms"][e] for e in sorted(r["latency_ms"]) if e >= 2)
                print(f"rep {rep} paced {mode:>9}: latency p50 {percentiles(list(r['latency_ms'].values()))['p50']:.0f} ms",
                      flush=True)
    figures = {size: {m: {"peak_rss_mib": median(runs[size][m], "peak_rss_mib"),
                          "peak_rss_mib_sum": median(runs[size][m], "peak_rss_mib_sum"),
                          "events_per_s": median(runs[size][m], "events_per_s"),
                          "cpu_s_per_million_events": median(runs[size][m], "cpu_s_per_million_events")}
                      for m in modes} for size in sizes}
    latency = {m: percentiles(paced[m]) for m in modes}
    print(table([[f"{s}x ({base * s} epochs)", *(f"{figures[s][m]['peak_rss_mib']:.0f}" for m in modes),
                  *(f"{figures[s][m]['events_per_s']:,.0f}" for m in modes),
                  f"{figures[s]['bounded']['events_per_s'] / figures[s]['unbounded']['events_per_s']:.2f}",
                  *(f"{figures[s][m]['cpu_s_per_million_events']:.2f}" for m in modes)]
                 for s in sizes],
                ["backlog", "peak RSS MiB bounded", "unbounded", "events/s bounded", "unbounded", "throughput b/u",
                 "CPU s/M events bounded", "unbounded"]))
    print(table([[m, f"{latency[m]['p50']:.0f}", f"{latency[m]['p99']:.0f}", f"{latency[m]['max']:.0f}"] for m in modes],
                ["paced run", "epoch latency p50 ms", "p99 ms", "max ms"]))
    summary = {
        "read_ahead_bytes": bound, "sizes": sizes, "malloc": args.malloc, "processes": args.processes,
        "base_epochs": base, "clicks_per_epoch": clicks,
        "peak_rss_mib": {f"{s}x": {m: figures[s][m]["peak_rss_mib"] for m in modes} for s in sizes},
        "events_per_s": {f"{s}x": {m: figures[s][m]["events_per_s"] for m in modes} for s in sizes},
        **{f"rss_{s}x_over_1x": {m: figures[s][m]["peak_rss_mib"] / figures[1][m]["peak_rss_mib"] for m in modes}
           for s in sizes if s != 1 and 1 in sizes},
        "throughput_bounded_over_unbounded": {f"{s}x": figures[s]["bounded"]["events_per_s"]
                                              / figures[s]["unbounded"]["events_per_s"] for s in sizes},
        "cpu_s_per_million_events": {f"{s}x": {m: figures[s][m]["cpu_s_per_million_events"] for m in modes}
                                     for s in sizes},
        "cpu_bounded_over_unbounded": {f"{s}x": figures[s]["bounded"]["cpu_s_per_million_events"]
                                       / figures[s]["unbounded"]["cpu_s_per_million_events"] for s in sizes},
        "paced_latency_ms": {m: {"p50": latency[m]["p50"], "p99": latency[m]["p99"]} for m in modes},
        "paced_latency_p50_bounded_over_unbounded": latency["bounded"]["p50"] / latency["unbounded"]["p50"],
    }
    if "rss_4x_over_1x" in summary and summary["rss_4x_over_1x"]["bounded"] > 1.25:
        problems.append(f"bounded peak RSS 4x/1x {summary['rss_4x_over_1x']['bounded']:.2f} > 1.25")
    write_report(args.json, "backlog", summary, {"runs": {f"{s}x": runs[s] for s in sizes}, "paced_ms": paced})
    plot(os.path.splitext(args.json)[0] + ".png", summary)
    conclude(problems, round(time.monotonic() - started, 1))


if __name__ == "__main__":
    main()
