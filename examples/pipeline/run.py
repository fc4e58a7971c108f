"""The Spark pipeline, end to end: `make run`.

1. An embedded Kafka-protocol broker (Tansu, from PyPI) starts on 127.0.0.1, unless
   ``--brokers`` names one.
2. Spark (``local[2]``, or the cluster ``--spark-master`` / ``SPARK_MASTER`` names, e.g.
   ``spark://HOST:7077``) makes a raw clickstream with bad rows, cleans and enriches it
   (``spark_jobs``), and writes it to the ``clicks`` topic one epoch at a time, each
   epoch followed by its markers. Spark runs at niceness 10 once its Python workers
   are up (``--spark-nice``, 0 for Spark's own priority; on a cluster only the
   driver's side), so that the dataflow, sharing the machine's cores, gets the CPU as
   soon as an epoch is readable.
3. Meanwhile a pytimely cluster (2 processes; a third joins after a third of the
   epochs) reads ``clicks``, keeps per-page state that migrates to the joiner, and
   writes per-epoch and running aggregates to the ``results`` topic (``dataflow.py``).
   Halfway through the epochs (once the joiner is a member) one process is
   SIGKILLed: the others roll back to their last checkpoint and go on, and a
   replacement started with the dead process's arguments joins them; the recovery
   time (SIGKILL -> the next epoch's results readable) is printed. An epoch later a
   process (process 0 by default) is sent SIGTERM: it hands its bins, Kafka
   partitions and rebalancer on and leaves gracefully; the leave's time (SIGTERM ->
   exit) and the slowest epoch around it are printed.
4. Spark reads the results back with ``timely-kafka`` and checks them against its own
   computation from the same events: exact equality per epoch, printed as a table.
   The dataflow also writes per-page event-time windows (``--windows LENGTH:EVERY``
   seconds, default 60:30) to a ``windows`` topic, which Spark checks against its own
   ``window()`` over the same clicks ("spark window check").

Prints what each stage did and how fast, each epoch's latency (its last marker handed
to Kafka, by the marker's timestamp -> its results complete in ``results``, seen by a
watcher in this process), and exits non-zero on any difference.

    python examples/pipeline/run.py [--events 1000000 --epochs 10 --progress-mode kafka]
                                    [--spark-master spark://HOST:7077 --brokers HOST:9092]
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)

import spark_jobs  # noqa: E402
from timely.connectors.client import consumer_config, create_topics, drain, scan  # noqa: E402
from timely.connectors.epochs import EPOCH, EPOCH_END, MARKER, PartitionEpochs, complete_epochs  # noqa: E402
from timely.launch import LocalCluster, free_port_range  # noqa: E402


class EpochWatcher:
    """Tails a topic and records when each epoch became complete in every partition
    (what a reader of it can see), by the markers: ``completed_at``, in wall-clock time
    (that of Kafka's record timestamps)."""

    def __init__(self, brokers: str, topic: str, partitions: int) -> None:
        from confluent_kafka import Consumer, TopicPartition
        self.consumer = Consumer(consumer_config(brokers, None, {"enable.partition.eof": False}))
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self.states = {p: PartitionEpochs(topic, p) for p in range(partitions)}
        self.completed_at: dict[int, float] = {}
        self.error: Optional[BaseException] = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"watcher-{topic}")
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for m in drain(self.consumer, 10_000, 0.05):
                    if m.error() is None:
                        self.states[m.partition()].record(m.offset(), m.headers(), None)
                done = complete_epochs(self.states.values())
                if done is not None:
                    now = time.time()
                    for e in range(done + 1):
                        self.completed_at.setdefault(e, now)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.consumer.close()
        if self.error is not None:
            raise self.error


def marker_times(brokers: str, topic: str, partitions: int) -> dict[int, float]:
    """Per epoch of ``topic``: when it became complete in every partition, in wall-clock
    seconds: the latest over the partitions of the timestamp of the epoch's first
    marker there (the writer's clock as it handed the marker to Kafka, so its wait for
    the broker's acknowledgement counts as latency). Read after the run, so that
    watching the input costs the run nothing."""
    from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer
    consumer = Consumer(consumer_config(brokers, None, None))
    first: dict[tuple[int, int], float] = {}
    try:
        for batch in scan(consumer, {(topic, p): 0 for p in range(partitions)}):
            for m in batch:
                headers = dict(m.headers() or ())
                if headers.get(MARKER) == EPOCH_END:
                    kind, ms = m.timestamp()
                    if kind == TIMESTAMP_NOT_AVAILABLE:
                        raise ValueError(f"{topic}[{m.partition()}]@{m.offset()}: a marker without a timestamp")
                    first.setdefault((int(headers[EPOCH]), m.partition()), ms / 1000)
    finally:
        consumer.close()
    out: dict[int, float] = {}
    for (epoch, _), t in first.items():
        out[epoch] = max(out.get(epoch, t), t)
    return out


@dataclass
class Report:
    """What each stage did, how long it took, and what the check found."""
    raw: int = 0
    clean: int = 0
    dropped: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    # per epoch, in wall-clock time (that of Kafka's record timestamps):
    written_at: dict = field(default_factory=dict)     # Spark's write of the epoch returned
    readable_at: dict = field(default_factory=dict)    # the epoch's last marker in the clicks topic
    completed_at: dict = field(default_factory=dict)   # its results complete in the results topic
    codes: list = field(default_factory=list)
    cluster_log: list = field(default_factory=list)
    check: list = field(default_factory=list)
    started_at: Optional[float] = None       # wall-clock time of the first epoch's write
    killed_at: Optional[float] = None        # wall-clock time of the SIGKILL
    recovery_s: Optional[float] = None       # SIGKILL -> the next epoch's results readable
    leaver: Optional[int] = None             # the process sent SIGTERM
    sigterm_at: Optional[float] = None       # wall-clock time of the SIGTERM
    left_at: Optional[float] = None          # ... and of the leaver's exit
    leave_code: Optional[int] = None
    cut_at: Optional[float] = None           # monotonic time the network to the broker was cut
    restored_at: Optional[float] = None      # ... and came back
    cut_after: Optional[int] = None          # the epoch after whose write it was cut
    windows: dict = field(default_factory=dict)  # the window check (spark_jobs.compare_windows)

    @property
    def latencies_ms(self) -> dict[int, float]:
        """Per epoch: the epoch complete in the clicks topic (the timestamp of its last
        marker, over the partitions) -> its results complete in the results topic (seen
        by ``EpochWatcher``). Not from Spark's write returning: the driver learns that its
        job ended 20-60 ms after the markers are in Kafka, later when Spark runs at a
        lower priority, and the dataflow can have answered by then."""
        return {e: (self.completed_at[e] - t) * 1000 for e, t in self.readable_at.items()
                if e in self.completed_at}

    @property
    def differences(self) -> int:
        bad = sum(r["missing"] + r["extra"] + r["different"] + r["duplicated"] + r["wrong_epoch"]
                  for r in self.check)
        return bad + (0 if self.check else 1) + sum(1 for c in self.codes if c) + window_differences(self.windows)

    def around_leave(self) -> dict[int, float]:
        """Latencies (ms) of the epochs readable from the SIGTERM to the leaver's exit,
        and of the first one after it."""
        if self.sigterm_at is None or self.left_at is None:
            return {}
        lat = self.latencies_ms
        during = [e for e, t in self.completed_at.items() if self.sigterm_at <= t <= self.left_at]
        after = [e for e, t in self.completed_at.items() if t > self.left_at]
        chosen = during + ([min(after)] if after else [])
        return {e: lat[e] for e in sorted(chosen) if e in lat}

    def recovered(self) -> Optional[float]:
        """Seconds from the SIGKILL to the first epoch, not complete before it, whose
        results are readable."""
        if self.killed_at is None:
            return None
        before = [e for e, t in self.completed_at.items() if t <= self.killed_at]
        after = [t for e, t in self.completed_at.items() if t > self.killed_at and e > max(before, default=-1)]
        return min(after) - self.killed_at if after else None


def run_pipeline(spark: Any, brokers: str, events: int = 1_000_000, epochs: int = 10,
                 partitions: int = 4, processes: int = 2, join_after: Optional[int] = None,
                 progress: tuple = (), workers: int = 1, pace: float = 0.0,
                 migration: str = "all-at-once", kill_after: Optional[int] = -1,
                 leave_after: Optional[int] = -1, leaver: int = 0, metrics_port: int = 0,
                 screenshot: Optional[str] = None, rows_per_message: Optional[int] = None,
                 spark_nice: int = 0, writer_tasks: Optional[int] = 1,
                 outage: Optional[tuple] = None, windows: Optional[tuple] = (60, 30), say=print) -> Report:
    """Run the pipeline on ``spark`` against ``brokers``; ``join_after``: the epoch after
    whose write a process joins (default a third of the way; -1 for none);
    ``kill_after``: the epoch after whose write process 1 is SIGKILLed and a
    replacement started (None: halfway; -1, the default here, for none);
    ``leave_after``: the epoch after whose write process ``leaver`` is sent SIGTERM to
    leave (None: the epoch after the kill; -1, the default here, for none);
    ``metrics_port``: process p serves metrics and the status page on it + p (0: off);
    ``screenshot``: a PNG of the status page taken once the joiner holds bins;
    ``rows_per_message``: clicks per Kafka record Spark writes (None: its packed default);
    ``spark_nice``: the niceness Spark runs at once its workers are up (``lower_priority``;
    0, the default: as started); ``writer_tasks``: Spark tasks that write each epoch,
    each writing whole Kafka partitions (None: one per Kafka partition; 1, the default:
    on a machine whose cores the dataflow shares, one task per epoch costs Spark least,
    as each task of a Python data source costs tens of milliseconds of CPU);
    ``outage``: ``(proxy, epoch, seconds)``: after that epoch's write, the network to
    the broker (a ``broker.proxy.TcpProxy`` every client reaches it through) is cut for
    that long, and Spark writes again once it is back; ``windows``: ``(length, every)``
    seconds of the event-time windows the dataflow writes and Spark checks (None: none)."""
    report = Report()
    run = uuid.uuid4().hex[:8]
    clicks, results = f"clicks-{run}", f"results-{run}"
    create_topics(brokers, {clicks: partitions, results: partitions})
    windowed = window_args(brokers, f"windows-{run}", partitions, windows)
    join_after = epochs // 3 if join_after is None else join_after
    kill_after = epochs // 2 if kill_after is None else kill_after
    leave_after = max(kill_after, join_after) + 1 if leave_after is None else leave_after

    t = time.monotonic()
    raw = spark_jobs.raw_clicks(spark, events, epochs)
    clean, counts = spark_jobs.clean(raw, spark_jobs.catalog(spark, 500))
    rows = spark_jobs.to_kafka_rows(clean, partitions, writer_tasks)
    frames = spark_jobs.epoch_frames(rows, range(epochs))
    rows.unpersist()
    report.raw, report.clean, report.dropped = counts["raw"], counts["clean"], counts["dropped"]
    report.seconds["spark clean"] = time.monotonic() - t
    say(f"spark: made {report.raw:,} raw clicks, dropped "
        + ", ".join(f"{n:,} ({why})" for why, n in report.dropped.items())
        + f"; {report.clean:,} clean clicks enriched with categories in {report.seconds['spark clean']:.1f} s")

    extra = ["--brokers", brokers, "--clicks", clicks, "--results", results, "--epochs", str(epochs),
             "--group", f"pipeline-{run}", "--timeout", "30",
             # per-page state is small: one step moves the joiner's share at once
             "--migration", migration, *windowed, *progress]
    if metrics_port:
        extra += ["--metrics-port", str(metrics_port)]
        say("metrics: " + ", ".join(f"process {p} at http://127.0.0.1:{metrics_port + p}/metrics"
                                    for p in range(processes + 1))
            + f"; the status page at http://127.0.0.1:{metrics_port}/")
    watcher = EpochWatcher(brokers, results, partitions)
    with LocalCluster([os.path.join(HERE, "dataflow.py")], slots=processes + 1, workers=workers,
                      extra=extra) as cluster:
        cluster.start(processes)
        t = time.monotonic()
        problem = spark_jobs.warm_up(spark, brokers)     # (while the dataflow's processes start)
        report.seconds["spark warm-up"] = time.monotonic() - t
        say(f"spark: the writer's Python workers started in {report.seconds['spark warm-up']:.1f} s, "
            f"before the first epoch" + (f" ({problem})" if problem else ""))
        if spark_nice:
            from timely.connectors.spark import lower_priority
            threads = lower_priority(spark, spark_nice)
            if spark.sparkContext.master.startswith("local"):
                say(f"spark: runs at niceness {spark_nice} ({threads} threads of its JVM and Python workers): "
                    f"the dataflow gets the CPU first")
            else:
                say(f"spark: the driver runs at niceness {spark_nice} ({threads} threads of its JVM and Python "
                    f"workers); the executors run at their workers' niceness")
        t = time.monotonic()
        report.started_at = time.time()
        for epoch in range(epochs):
            spark_jobs.write_rows(frames[epoch], brokers, clicks, rows_per_message)
            report.written_at[epoch] = time.time()
            if epoch == join_after:
                cluster.join(original=processes)
                say(f"cluster: process {processes} joins after epoch {epoch}")
            if epoch == kill_after:
                crash(cluster, processes, report, say)
            if epoch == leave_after:
                leave(cluster, leaver, report, say)
            if outage is not None and epoch == outage[1]:
                cut(outage[0], epoch, outage[2], report, say)
            if screenshot and epoch == min(epochs - 1, join_after + 2):
                shoot(f"http://127.0.0.1:{metrics_port}/", screenshot, say)
            if pace:
                time.sleep(pace)
        report.seconds["spark write"] = time.monotonic() - t
        say(f"spark: wrote {report.clean:,} clicks to {clicks} in {epochs} epochs, "
            f"{report.seconds['spark write']:.1f} s ({report.clean / report.seconds['spark write']:,.0f} clicks/s)")
        try:
            report.codes = cluster.wait(120 + epochs * 5)
        except subprocess.TimeoutExpired:
            # a stuck job: say so and show its log (the processes are stopped by PID)
            report.codes = [p.popen.poll() if p.popen.poll() is not None else "stuck"
                            for p in cluster.processes]
            say(f"cluster: the job is stuck: exit codes {report.codes}; its log follows")
        report.seconds["processes exited"] = time.monotonic() - t
        report.cluster_log = cluster.interleaved()
    deadline = time.monotonic() + 30
    while len(watcher.completed_at) < epochs and time.monotonic() < deadline:
        time.sleep(0.05)
    watcher.stop()
    report.completed_at = watcher.completed_at
    # The end of the run is when a reader can see the last results, not when the
    # processes are gone: closing their consumers and connections takes a few tenths
    # of a second more, and no result waits for it.
    complete = len(report.completed_at) >= epochs
    report.seconds["dataflow"] = (max(report.completed_at.values()) - report.started_at if complete
                                  else report.seconds["processes exited"])
    shown = [line for line in report.cluster_log
             if any(s in line for s in ("read ", "joins", " ships ", "done in", "restarts", "roll back",
                                        "rollback ", "restored at", "finished joining", "leaves the cluster",
                                        "has drained and leaves", "drives from", "cannot leave"))]
    say("\n".join(shown if not any(report.codes) else report.cluster_log))
    said = (f"all results in Kafka {report.seconds['dataflow']:.2f} s after the first write "
            f"({report.clean / report.seconds['dataflow']:,.0f} clicks/s end to end)" if complete else
            f"results of only {len(report.completed_at)} of {epochs} epochs in Kafka")
    say(f"dataflow: {processes}+1 processes, exit codes {report.codes}; {said}; the processes exited "
        f"{report.seconds['processes exited']:.2f} s after the first write")
    report.readable_at = marker_times(brokers, clicks, partitions)
    lat = sorted(report.latencies_ms.values())
    say(f"latency: epoch written (its last marker in {clicks}) -> results readable: p50 "
        f"{statistics.median(lat) if lat else float('nan'):.0f} ms, max {lat[-1] if lat else float('nan'):.0f} ms; "
        "per epoch (ms): " + ", ".join(f"{e}: {ms:.0f}" for e, ms in sorted(report.latencies_ms.items())))
    lags = sorted((t - report.readable_at[e]) * 1000 for e, t in report.written_at.items()
                  if e in report.readable_at)
    if lags:
        say(f"latency: Spark's driver saw each write return {statistics.median(lags):.0f} ms (p50) after the "
            "epoch's last marker was handed to Kafka")
    if report.killed_at is not None:
        report.recovery_s = report.recovered()
        say("recovery: SIGKILL -> the next epoch's results readable in "
            + ("(never)" if report.recovery_s is None else f"{report.recovery_s:.2f} s")
            + "; the survivors were not restarted")

    if report.sigterm_at is not None:
        around = report.around_leave()
        took = ("(it did not exit)" if report.left_at is None
                else f"{report.left_at - report.sigterm_at:.2f} s, exit code {report.leave_code}")
        slowest = max(around.items(), key=lambda kv: kv[1]) if around else None
        say(f"leave: process {report.leaver} SIGTERM -> exit {took}; epochs around it (ms): "
            + (", ".join(f"{e}: {ms:.0f}" for e, ms in around.items()) or "none")
            + (f"; the slowest, epoch {slowest[0]}: {slowest[1]:.0f} ms" if slowest else ""))

    if report.cut_at is not None:
        say(outage_timeline(report, cluster))

    t = time.monotonic()
    got = spark_jobs.read_results(spark, brokers, results)
    report.check = spark_jobs.compare(spark_jobs.expected(clean), got)
    report.seconds["spark check"] = time.monotonic() - t
    say("spark check: epoch | expected | received | missing | extra | different | duplicated | clicks")
    for r in report.check:
        say(f"  {r['epoch']:>5} | {r['expected']:>8} | {r['received']:>8} | {r['missing']:>7} | "
            f"{r['extra']:>5} | {r['different']:>9} | {r['duplicated']:>10} | {r['clicks']:>8,}")
    verdict = "EXACT" if report.differences == 0 else f"{report.differences} DIFFERENCES"
    say(f"spark check: {len(report.check)} epochs, {sum(r['received'] for r in report.check):,} result rows: "
        f"{verdict} ({report.seconds['spark check']:.1f} s)")
    if windows:
        report.windows = check_windows(spark, clean, brokers, f"windows-{run}", windows, say)
    clean.unpersist()
    spark_jobs.release(frames)
    return report


def window_args(brokers: str, topic: str, partitions: int, windows: Optional[tuple]) -> list[str]:
    """The dataflow's arguments for event-time windows of ``(length, every)`` seconds
    written to ``topic`` (created here), over Spark's epochs (``EPOCH_SECONDS`` from
    ``START``); none for ``windows`` None."""
    if not windows:
        return []
    create_topics(brokers, {topic: partitions})
    return ["--windows", topic, "--window-seconds", str(windows[0]), "--slide-seconds", str(windows[1]),
            "--epoch-seconds", str(spark_jobs.EPOCH_SECONDS), "--epoch-origin", str(spark_jobs.START)]


def check_windows(spark: Any, clean: Any, brokers: str, topic: str, windows: tuple, say) -> dict:
    """Spark's ``window()`` over the clean clicks against the dataflow's window rows in
    ``topic``: printed, and returned (``spark_jobs.compare_windows``)."""
    t = time.monotonic()
    want = spark_jobs.expected_windows(clean, *windows)
    got = spark_jobs.read_windows(spark, brokers, topic)
    found = spark_jobs.compare_windows(want, got, spark_jobs.EPOCH_SECONDS, spark_jobs.START)
    bad = window_differences(found)
    verdict = "EXACT" if bad == 0 else f"{bad} DIFFERENCES"
    say(f"spark window check: {found['windows']} windows of {windows[0]} s every {windows[1]} s, "
        f"{found['expected']:,} (page, window) rows expected, {found['received']:,} received; missing "
        f"{found['missing']}, extra {found['extra']}, different {found['different']}, duplicated "
        f"{found['duplicated']}, in another epoch than the one closing the window {found['wrong_epoch']}; "
        f"{found['clicks']:,} clicks in windows: {verdict} ({time.monotonic() - t:.1f} s)")
    return found


def window_differences(found: dict) -> int:
    """What the window check found wrong (0: exact; 1 for a check with no rows at all)."""
    if not found:
        return 0
    return (sum(found[k] for k in ("missing", "extra", "different", "duplicated", "wrong_epoch"))
            + (0 if found["received"] else 1))


def shoot(url: str, path: str, say) -> None:
    """A screenshot of the status page at ``url``, in headless Chromium (the browser
    tests' harness, tests/browser.py: Debian's chromium and Playwright, as make test
    installs them)."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from browser import open_page, screenshot, wait_for_polls
    with open_page() as page:
        page.goto(url)
        wait_for_polls(page, 3)
        screenshot(page, path)
    say(f"metrics: a screenshot of the status page is in {path}")


def joined(cluster: LocalCluster, processes: int, timeout: float) -> bool:
    """Wait until every process started after the first ``processes`` has said that it
    finished joining; False if one has exited or ``timeout`` seconds went by first."""
    deadline = time.monotonic() + timeout
    return all(p.wait_for("finished joining", deadline - time.monotonic()) for p in cluster.processes[processes:])


def crash(cluster: LocalCluster, processes: int, report: Report, say) -> None:
    """SIGKILL process 1 once the joiner is a member; once a survivor has rolled back,
    start a replacement with process 1's arguments (it finds the cluster running and
    joins it). A process still joining when a peer dies stops, to be started again (as
    an orchestrator would): the crash shown here is one of a running cluster, so when
    Spark writes fast enough to reach it before the join is over, it waits for it."""
    if not joined(cluster, processes, 60):
        say("cluster: the joiner did not finish joining; process 1 is SIGKILLed anyway")
    victim = cluster.processes[1]
    report.killed_at = time.time()
    cluster.kill(victim, signal.SIGKILL)
    victim.wait(10)
    say("cluster: process 1 SIGKILLed; the others roll back to their last checkpoint")
    if not cluster.processes[0].wait_for("rebuilt dataflows", 60):
        say("cluster: the survivors did not roll back")
        return
    cluster.restart(1, processes)
    say("cluster: a replacement for process 1 starts with its arguments")


def leave(cluster: LocalCluster, leaver: int, report: Report, say) -> None:
    """SIGTERM process ``leaver`` (a replacement, if it was replaced): it leaves the
    cluster gracefully while epochs go on arriving; a thread notes when it exits."""
    proc = cluster.processes[leaver]
    report.leaver = leaver
    report.sigterm_at = time.time()
    cluster.kill(proc, signal.SIGTERM)
    say(f"cluster: process {leaver} sent SIGTERM: it leaves, its bins and Kafka partitions move")

    def wait() -> None:
        report.leave_code = proc.popen.wait()
        report.left_at = time.time()
    threading.Thread(target=wait, daemon=True, name="leaver").start()


def parse_outage(parser: argparse.ArgumentParser, text: str, epochs: int) -> tuple[int, float]:
    """``EPOCH:SECONDS`` as (epoch, seconds), or a parser error saying what is wrong."""
    epoch, sep, seconds = text.partition(":")
    try:
        found = int(epoch), float(seconds)
    except ValueError:
        found = None
    if not sep or found is None or not 0 <= found[0] < epochs - 1 or found[1] <= 0:
        parser.error(f"--broker-outage takes EPOCH:SECONDS with 0 <= EPOCH < {epochs - 1} (an epoch must "
                     f"follow the outage) and SECONDS > 0, got {text!r}")
    return found


def parse_windows(parser: argparse.ArgumentParser, text: str) -> Optional[tuple[int, int]]:
    """``LENGTH:EVERY`` as (length, every) seconds, None for ``off``, or a parser error."""
    if text == "off":
        return None
    length, sep, every = text.partition(":")
    try:
        found = int(length), int(every)
    except ValueError:
        found = None
    if not sep or found is None or not 0 < found[1] <= found[0]:
        parser.error(f"--windows takes LENGTH:EVERY seconds with 0 < EVERY <= LENGTH, or off; got {text!r}")
    return found


def cut(proxy: Any, epoch: int, seconds: float, report: Report, say) -> None:
    """Cut the network to the broker for ``seconds`` (connections closed, new ones
    refused; the broker keeps its data), then let it back."""
    report.cut_after = epoch
    report.cut_at = time.monotonic()
    proxy.cut()
    say(f"broker: the network to the broker is cut after epoch {epoch}, for {seconds:g} s")
    time.sleep(seconds)                  # the outage itself
    proxy.restore()
    report.restored_at = time.monotonic()
    say("broker: the network to the broker is back")


def outage_timeline(report: Report, cluster: LocalCluster) -> str:
    """When each process said it lost the broker and had it back, and when the first
    epoch written after the outage was readable, in seconds from the cut."""
    parts = []
    for proc in cluster.processes:
        said = {kind: next((cluster.start_time + t - report.cut_at for t, line in proc.lines
                            if pattern in line and cluster.start_time + t >= report.cut_at), None)
                for kind, pattern in (("lost", "lost the Kafka broker"), ("back", "is back after"))}
        if said["lost"] is not None:
            parts.append(f"process {proc.index} lost it at +{said['lost']:.1f} s, back at "
                         + ("(never)" if said["back"] is None else f"+{said['back']:.1f} s"))
    after = report.cut_after + 1
    readable = report.completed_at.get(after)
    # completed_at is wall-clock: the cut's wall-clock time is now - (monotonic now - cut)
    cut_wall = time.time() - (time.monotonic() - report.cut_at)
    first = ("(never)" if readable is None else f"+{readable - cut_wall:.1f} s")
    return (f"outage: cut at +0.0 s, back at +{report.restored_at - report.cut_at:.1f} s; "
            + "; ".join(parts or ["no process noticed it"])
            + f"; epoch {after}, the first written after it, readable at {first}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--join-after", type=int, default=None, help="epoch after which a process joins (-1: none)")
    parser.add_argument("--kill-after", type=int, default=None,
                        help="epoch after which process 1 is SIGKILLed and replaced (-1: none)")
    parser.add_argument("--leave-after", type=int, default=None,
                        help="epoch after which a process is sent SIGTERM and leaves (default: the "
                             "epoch after the kill; -1: none)")
    parser.add_argument("--leaver", type=int, default=0, help="the process that leaves (default 0)")
    parser.add_argument("--broker-outage", metavar="EPOCH:SECONDS",
                        help="after EPOCH's write, cut the network to the embedded broker for SECONDS "
                             "(every client reaches it through a proxy)")
    parser.add_argument("--progress-mode", default="p2p", choices=["p2p", "kafka"])
    parser.add_argument("--brokers", help="use this Kafka instead of starting the embedded broker")
    parser.add_argument("--spark-master", default=os.environ.get("SPARK_MASTER") or None,
                        help="Spark's master URL: local[N] or a standalone cluster's spark://HOST:PORT (default: "
                             "$SPARK_MASTER, else local[2]); its executors must run this Python and reach the "
                             "brokers")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="process p serves metrics and the status page on this port + p "
                             "(default: free ports found at start; 0: off)")
    parser.add_argument("--screenshot", help="save a PNG of the status page here, after the join")
    parser.add_argument("--pace", type=float, default=0.0,
                        help="seconds Spark waits after writing each epoch (default 0: back to back, "
                             "the CPU saturated); a paced writer shows the latency of an epoch alone")
    parser.add_argument("--spark-nice", type=int, default=10,
                        help="niceness of Spark's JVM and Python workers once they are up (default 10: on a "
                             "machine whose cores Spark shares with the dataflow, the dataflow gets the CPU "
                             "first, for lower latency; 0: Spark's own priority, a little more throughput)")
    parser.add_argument("--writer-tasks", type=int, default=1,
                        help="Spark tasks that write each epoch, each writing whole Kafka partitions "
                             "(default 1: Spark's CPU per epoch is least, and the dataflow gets the other core)")
    parser.add_argument("--windows", default="60:30", metavar="LENGTH:EVERY",
                        help="seconds of the event-time windows the dataflow writes and Spark checks with its "
                             "own window() (default 60:30: 60 s windows every 30 s; off: none)")
    args = parser.parse_args(argv)
    windows = parse_windows(parser, args.windows)
    if not 1 <= args.writer_tasks <= args.partitions:
        parser.error(f"--writer-tasks must be between 1 and --partitions ({args.partitions}), got {args.writer_tasks}")
    if not 0 <= args.spark_nice <= 19:
        parser.error(f"--spark-nice must be between 0 and 19, got {args.spark_nice}")
    if args.pace < 0:
        parser.error(f"--pace must be >= 0 seconds, got {args.pace}")
    outage = parse_outage(parser, args.broker_outage, args.epochs) if args.broker_outage else None
    if outage and args.brokers:
        parser.error("--broker-outage cuts the network to the embedded broker: it cannot be used with --brokers")
    metrics_port = free_port_range(4) if args.metrics_port is None else args.metrics_port
    from broker.proxy import TcpProxy
    from broker.tansu import TansuBroker, free_port
    from timely.connectors.spark import SparkClusterError, executor_count, on_this_host, session
    if args.spark_master:
        try:
            remote = not on_this_host(args.spark_master)
        except ValueError as exc:
            parser.error(f"--spark-master: {exc}")
        if remote and not args.brokers:
            print(f"warning: the embedded broker listens on 127.0.0.1 only, where executors of "
                  f"{args.spark_master} on other hosts cannot reach it: give --brokers HOST:PORT", file=sys.stderr)
    started = time.monotonic()
    proxy = TcpProxy("127.0.0.1:0", port=free_port()) if outage else None
    broker = None if args.brokers else TansuBroker().start(advertise=proxy and proxy.address)
    brokers = args.brokers or broker.bootstrap
    if proxy is not None:
        proxy.target = ("127.0.0.1", broker.port)
        brokers = proxy.start().address
    try:
        print(f"broker: {'embedded Tansu at ' if broker else ''}{broker.bootstrap if broker else brokers}"
              + (f", every client reaching it through a proxy at {brokers}" if proxy else ""))
        t = time.monotonic()
        try:
            spark = session(args.spark_master, "pytimely-pipeline")
        except SparkClusterError as exc:
            print(f"spark: {exc}", file=sys.stderr)
            return 2
        master = spark.sparkContext.master
        print(f"spark: session on {master} up in {time.monotonic() - t:.1f} s"
              + ("" if master.startswith("local") else f", {executor_count(spark)} executor(s) registered"))
        progress = (["--progress-mode", "kafka", "--kafka-bootstrap", brokers,
                     "--kafka-prefix", f"pipe{uuid.uuid4().hex[:8]}"] if args.progress_mode == "kafka" else [])
        report = run_pipeline(spark, brokers, args.events, args.epochs, args.partitions,
                              join_after=args.join_after, progress=progress, kill_after=args.kill_after,
                              leave_after=args.leave_after, leaver=args.leaver,
                              metrics_port=metrics_port, screenshot=args.screenshot, pace=args.pace,
                              spark_nice=args.spark_nice, writer_tasks=args.writer_tasks,
                              outage=outage and (proxy, *outage), windows=windows)
        spark.stop()
    finally:
        if proxy is not None:
            proxy.stop()
        if broker is not None:
            broker.stop()
    print(f"pipeline: {time.monotonic() - started:.1f} s in all")
    return 1 if report.differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
