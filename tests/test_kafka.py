"""Kafka progress mode, on a real Kafka-protocol broker (Tansu) started on 127.0.0.1.

Protects: the broker package's log, snapshots and subscriber (order, duplicates, gaps,
one snapshot + tail to start); identical results in both progress modes; a join in
Kafka mode that needs no bootstrap server and reads one snapshot plus the tail per
worker even after 10,000+ epochs; a paused broker that stalls and then resumes
without losing or double-applying a batch; a broker that comes back empty stopping
the computation with a clear error; an unreachable broker named in the error.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter

import networkx as nx
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import wcc  # noqa: E402
import wordcount  # noqa: E402
from clusters import wait_until  # noqa: E402
from kafka_broker import TansuBroker  # noqa: E402

import timely  # noqa: E402
from broker import BrokerError, BrokerLostError, ProgressLog, Subscriber, Topics, fold  # noqa: E402
from broker.client import group_offsets  # noqa: E402
from broker.log import connect_admin, ensure_topics, pack  # noqa: E402
from timely.launch import LocalCluster  # noqa: E402


@pytest.fixture
def prefix():
    return f"t{uuid.uuid4().hex[:10]}"


def kafka_config(broker, prefix, **kw):
    return timely.Config(progress_mode="kafka", kafka_bootstrap=broker.bootstrap, kafka_prefix=prefix, **kw)


# ---- the broker package on its own ----------------------------------------------------------
def collect(sub_records):
    def deliver(worker, channel, seq, updates):
        sub_records.append((worker, channel, seq, tuple(updates)))
    return deliver


def test_log_and_subscriber_deliver_every_batch_in_order(tansu, prefix):
    log = ProgressLog(tansu.bootstrap, prefix, [0, 1], snapshot_interval=0)
    got, errors = [], []
    sub = Subscriber(tansu.bootstrap, prefix, collect(got), name="a", on_error=errors.append)
    sub.add(0), sub.add(1)
    sub.start()
    sent = []
    for seq in range(50):
        for w in (0, 1):
            updates = [(((1, 0, True), seq), 1), (((1, 0, True), seq - 1), -1)]
            log.append(w, 7, seq, updates)
            sent.append((w, 7, seq, tuple(updates)))
    log.flush()
    assert wait_until(lambda: len(got) == len(sent)), (len(got), errors)
    sub.stop(), log.close()
    assert not errors
    for w in (0, 1):
        assert [g for g in got if g[0] == w] == [s for s in sent if s[0] == w]


def test_subscriber_skips_duplicates_and_stops_on_a_gap(tansu, prefix):
    from confluent_kafka import Producer
    topics = Topics(prefix)
    ensure_topics(connect_admin(tansu.bootstrap), [topics.log(0, 0)])
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "max.in.flight.requests.per.connection": 1})
    for lseq in (0, 1, 1, 2, 4):       # a duplicate of 1, then 3 is missing
        producer.produce(topics.log(0, 0), pack((lseq, [(1, lseq, [(("k",), 1)])], False)), partition=0)
    assert producer.flush(10) == 0
    got, errors = [], []
    sub = Subscriber(tansu.bootstrap, prefix, collect(got), name="b", on_error=errors.append)
    sub.add(0)
    sub.start()
    assert wait_until(lambda: errors)
    sub.stop()
    assert [g[2] for g in got] == [0, 1, 2]
    assert isinstance(errors[0], BrokerLostError)
    assert "jumped from record 3 to 4" in str(errors[0])


def test_snapshot_folds_the_prefix_and_a_late_subscriber_reads_only_the_tail(tansu, prefix):
    log = ProgressLog(tansu.bootstrap, prefix, [0], snapshot_interval=100, segment_records=300)
    truth = {}
    for seq in range(1050):
        updates = [((("loc", seq), 0), 1), ((("loc", seq - 1), 0), -1)]
        log.append(0, 3, seq, updates)
        fold([updates], truth)
    log.flush()
    assert wait_until(lambda: log.snapshots_written >= 10)
    got, errors = [], []
    sub = Subscriber(tansu.bootstrap, prefix, collect(got), name="late", on_error=errors.append)
    snapshot = sub.add(0, from_snapshot=True)
    worker, lseq, start, channels = snapshot
    assert (worker, lseq, start) == (0, 1000, (3, 100))     # record 1000: segment 3, offset 100
    last_seq, folded = channels[3]
    assert last_seq == 999
    sub.start()
    assert wait_until(lambda: len(got) == 50)
    sub.stop(), log.close()
    state = fold([folded])
    fold([g[3] for g in got], state)
    assert state == truth
    assert sub.snapshots_read == {0: 1} and sub.records_read == {0: 50}


def test_snapshots_are_written_when_a_segment_is_acknowledged_after_later_ones(tansu, prefix, monkeypatch):
    """On a fresh broker the first record of a segment can wait for the topic's metadata
    while the next segments' records are acknowledged: every snapshot is still written,
    with the start its tail really has (a log whose acknowledgements were counted per
    segment but forgotten two segments on lost its snapshots for good)."""
    log = ProgressLog(tansu.bootstrap, prefix, [0], snapshot_interval=10, segment_records=10)
    produced, snapshots = [], []
    monkeypatch.setattr(log, "_produce", lambda topic, value, key=None, **kw: produced.append(topic))
    monkeypatch.setattr(log, "_write_snapshot", lambda w, covers, start, channels: snapshots.append((covers, start)))
    for seq in range(25):
        log.append(0, 1, seq, [(("k", seq), 1)])

    class Report:
        def __init__(self, topic, offset):
            self._topic, self._offset = topic, offset

        def topic(self):
            return self._topic

        def offset(self):
            return self._offset
    reports = [Report(topic, lseq % 10) for lseq, topic in enumerate(produced)]
    for report in reports[:4] + reports[10:] + reports[4:10]:    # most of segment 0 last
        log._delivered_cb(None, report)
    log.close()
    assert snapshots == [(10, (1, 0)), (20, (2, 0))]
    assert log.error is None


def test_unreachable_broker_is_named(prefix):
    from broker import health
    health.configure(1.0)           # waited for up to --broker-timeout, then named
    with pytest.raises(BrokerError, match=r"127\.0\.0\.1:1 is unreachable"):
        ProgressLog("127.0.0.1:1", prefix, [0])


def test_bad_kafka_settings_are_refused():
    with pytest.raises(timely.ConfigError, match="kafka_bootstrap"):
        timely.Config(progress_mode="kafka").validate()
    with pytest.raises(timely.ConfigError, match="not HOST:PORT"):
        timely.Config(progress_mode="kafka", kafka_bootstrap="nohost").validate()
    with pytest.raises(BrokerError, match="prefix"):
        Topics("bad prefix!")
    for setting, value in (("kafka_segment_records", 0), ("kafka_snapshot_interval", 0),
                           ("kafka_trim_interval", 0.0)):
        with pytest.raises(timely.ConfigError, match=f"^{setting} must be"):
            timely.Config(progress_mode="kafka", kafka_bootstrap="127.0.0.1:9092", **{setting: value}).validate()
    config = timely.Config.from_args(["--progress-mode", "kafka", "--kafka-bootstrap", "127.0.0.1:9092",
                                      "--kafka-trim-interval", "2.5"])
    assert config.kafka_trim_interval == 2.5


def test_segments_are_read_in_order_and_deleted_once_nobody_needs_them(tansu, prefix):
    """A log of 5-record segments: a subscriber crosses every segment boundary in order;
    trim keeps what a subscriber that has committed nothing may still read, then deletes
    the segments every subscriber left that neither of the two latest snapshots needs
    (a joiner may have read the index just before the latest); a joiner starting from
    the latest snapshot reads exactly the tail."""
    log = ProgressLog(tansu.bootstrap, prefix, [0], snapshot_interval=5, segment_records=5)
    got = []
    sub = Subscriber(tansu.bootstrap, prefix, collect(got), name="c", on_error=lambda e: None, commit_every=1)
    sub.add(0)
    sub.start()
    for seq in range(22):
        log.append(0, 1, seq, [(("k", seq), 1)])
    log.flush()
    assert wait_until(lambda: len(got) == 22 and log._indexed_lseq.get(0) == 20), \
        (len(got), sub.positions, log._indexed_lseq)
    assert [g[2] for g in got] == list(range(22))
    topics = Topics(prefix)
    admin = connect_admin(tansu.bootstrap)
    assert wait_until(lambda: group_offsets(admin, topics.subscriber_group("c")).get((topics.log(0, 4), 0)) == 2)
    sub.stop()
    assert log.trim(["c", "never-read"]) == 0            # "never-read" holds every segment
    assert log.trim(["c"]) == 3 and log.segments_deleted == 3   # 0-2; the snapshot before the latest starts in 3
    names = set(admin.list_topics(timeout=5).topics)
    assert {topics.log(0, k) for k in range(3)}.isdisjoint(names)
    assert {topics.log(0, 3), topics.log(0, 4)} <= names
    log.append(0, 1, 22, [(("k", 22), 1)])               # and the log carries on
    log.flush()
    late, errors = [], []
    joiner = Subscriber(tansu.bootstrap, prefix, collect(late), name="late", on_error=errors.append)
    worker, lseq, start, channels = joiner.add(0, from_snapshot=True)
    assert (lseq, start) == (20, (4, 0))
    joiner.start()
    assert wait_until(lambda: len(late) == 3)
    joiner.stop(), log.close()
    assert [g[2] for g in late] == [20, 21, 22] and not errors


def test_trim_keeps_the_segment_being_appended_to(tansu, prefix):
    """At a segment boundary, readers and the snapshots are already past the writer's
    segment while the writer has not rolled yet: trim must not delete it (the writer's
    own check would take that for a broker that lost its data)."""
    log = ProgressLog(tansu.bootstrap, prefix, [0], snapshot_interval=5, segment_records=5)
    got = []
    sub = Subscriber(tansu.bootstrap, prefix, collect(got), name="c", on_error=lambda e: None, commit_every=1)
    sub.add(0)
    sub.start()
    for seq in range(10):                                # segments 0 and 1, exactly full
        log.append(0, 1, seq, [(("k", seq), 1)])
    log.flush()
    topics = Topics(prefix)
    admin = connect_admin(tansu.bootstrap)
    assert wait_until(lambda: log._indexed_lseq.get(0) == 10 and group_offsets(
        admin, topics.subscriber_group("c")).get((topics.log(0, 2), 0)) == 0)
    assert log.trim(["c"]) == 1                          # segment 0 only
    log.verify()
    log.append(0, 1, 10, [(("k", 10), 1)])               # the roll to segment 2
    log.flush()
    assert wait_until(lambda: len(got) == 11)
    assert log.trim(["c"]) == 0                          # 1: where the snapshot before the latest starts
    log.verify()
    sub.stop(), log.close()
    assert [g[2] for g in got] == list(range(11))


def test_trim_asks_the_subscribers_only_once_a_snapshot_lets_a_segment_go(tansu, prefix, monkeypatch):
    """Every trim asked each other process's subscriber where it was (a round trip each,
    every second, from every process): now only once the snapshots would let a segment
    go, and the deletion is what it was."""
    import broker.log as log_module
    asked = []
    real = log_module.group_offsets
    monkeypatch.setattr(log_module, "group_offsets", lambda admin, group, *a: asked.append(group) or real(admin, group, *a))
    log = ProgressLog(tansu.bootstrap, prefix, [0], snapshot_interval=5, segment_records=5)
    for seq in range(7):                                  # segment 0 full, one snapshot (its tail starts in 1)
        log.append(0, 1, seq, [(("k", seq), 1)])
    log.flush()
    assert log.trim(["c", "d"]) == 0 and asked == []       # the snapshot before it covers nothing
    for seq in range(7, 12):                              # a second snapshot: segment 0 may go
        log.append(0, 1, seq, [(("k", seq), 1)])
    log.flush()
    assert wait_until(lambda: log._indexed_lseq.get(0) == 10)
    assert log.trim(["c", "d"]) == 0                       # nobody has read anything: nothing goes
    assert asked == [Topics(prefix).subscriber_group("c"), Topics(prefix).subscriber_group("d")]
    log.close()


def test_the_runtime_deletes_log_segments_as_it_goes(tansu, prefix, caplog):
    lines = wordcount.synthetic_lines(400, 5, 50)
    config = kafka_config(tansu, prefix, workers=2, kafka_snapshot_interval=10, kafka_segment_records=10,
                          kafka_trim_interval=0.2)
    with caplog.at_level("INFO", logger="broker"):
        # 100 epochs over 2 s or more: long enough for trims every 0.2 s to find segments
        totals = wordcount.merge(timely.execute(config, lambda w: wordcount.run(w, lines, 100, exchange=True,
                                                                                 epoch_delay=0.02)))
    assert sum(totals.values(), Counter()) == Counter(w for line in lines for w in line.split())
    assert any("deleted" in r.getMessage() and "segments" in r.getMessage() for r in caplog.records), caplog.text


def test_cli_shows_lengths_snapshots_and_positions(tansu, prefix):
    log = ProgressLog(tansu.bootstrap, prefix, [0, 1], snapshot_interval=10, segment_records=10)
    got = []
    sub = Subscriber(tansu.bootstrap, prefix, collect(got), name="p0", on_error=lambda e: None, commit_every=1)
    sub.add(0), sub.add(1)
    sub.start()
    for seq in range(25):
        log.append(0, 1, seq, [(("k", seq), 1)])
    for seq in range(4):
        log.append(1, 1, seq, [(("k", seq), 1)])
    log.flush()
    assert wait_until(lambda: len(got) == 29 and log.snapshots_written >= 2)
    sub.stop(), log.close()
    out = subprocess.run([sys.executable, "-m", "broker", "status", "--bootstrap", tansu.bootstrap,
                          "--prefix", prefix], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert re.search(r"worker 0: 25 records in segments 0-3; snapshot covers 20 records \(segment 2 offset 0\); "
                     r"p0 at segment 2 offset 5", out.stdout), out.stdout
    assert re.search(r"worker 1: 4 records in segments 0-1; no snapshot yet; p0 at segment 0 offset 4", out.stdout), out.stdout


# ---- the runtime in Kafka mode ---------------------------------------------------------------
def test_wordcount_same_in_both_modes(tansu, prefix):
    lines = wordcount.synthetic_lines(3000, 10, 500)

    def run(config):      # running counts on state_machine
        captures = timely.execute(config, lambda w: wordcount.run(w, lines, 3))
        return wordcount.latest([b for c in captures for b in c.batches])
    assert run(kafka_config(tansu, prefix, workers=2)) == run(timely.Config(workers=2)) \
        == wordcount.expected_running(lines, 3)


def test_a_step_appends_one_record_with_every_scope_s_batches(tansu, prefix, tmp_path):
    """Two dataflows stepped together: each step that sent progress in both appends ONE
    record holding both batches, every batch sent is in exactly one record, in order, and
    one process's own workers never read its logs back (no fetch: they hear each other
    directly). Checked on the progress trace (``--progress-trace``), so the trace is too."""
    from timely.communication.progress_trace import load
    epochs = 30

    def build(worker):
        inputs, probes = [], []
        for _ in range(2):
            source, probe = worker.dataflow(lambda scope: (lambda s: (s[0], s[1].exchange(lambda x: x).probe()))(
                scope.new_input()))
            inputs.append(source), probes.append(probe)
        for epoch in range(epochs):
            for source in inputs:
                if worker.index == 0:
                    source.send(epoch)
                source.advance_to(epoch + 1)
            worker.step_while(lambda: any(p.less_than(epoch + 1) for p in probes))
        for source in inputs:
            source.close()
    timely.execute(kafka_config(tansu, prefix, workers=2, progress_trace=str(tmp_path)), build)
    events = load(str(tmp_path))
    sent = sorted((e[3], e[4], e[5]) for e in events if e[1] == "send")
    appended = [e for e in events if e[1] == "append"]
    assert sorted((e[3], e[4], e[5]) for e in appended) == sent       # each batch in one record
    records: dict = {}
    for t, _, worker, source, channel, seq in appended:                # a record's batches share its time
        records.setdefault((source, t), []).append((channel, seq))
    assert any(len({ch for ch, _ in batches}) == 2 for batches in records.values()), records
    assert len(records) < len(sent)
    for w in (0, 1):                                                    # in order, per channel
        for ch in {c for s_, c, _ in sent}:
            seqs = [e[5] for e in appended if e[3] == w and e[4] == ch]
            assert seqs == sorted(seqs) == list(range(len(seqs)))
    assert not [e for e in events if e[1] == "fetch"]
    applied = Counter((e[2], e[3], e[4], e[5]) for e in events if e[1] == "apply")
    assert set(applied.values()) == {1} and len(applied) == 2 * len(sent)   # each worker, once


def test_other_processes_read_the_logs_and_their_own_workers_hear_each_other_directly(tansu, prefix, tmp_path):
    """Two processes of two workers: every batch is applied once by each of the four
    workers; the other process reads it from the broker (send <= append <= fetch <=
    apply), the sender's own process never fetches it."""
    from timely.communication.progress_trace import Timeline, hop_stages, load
    extra = ["--rounds", "20", "--delay", "0.01", "--timeout", "8", "--progress-mode", "kafka",
             "--kafka-bootstrap", tansu.bootstrap, "--kafka-prefix", prefix, "--progress-trace", str(tmp_path)]
    with LocalCluster(os.path.join(ROOT, "examples", "hello.py"), slots=2, workers=2, extra=extra) as cluster:
        cluster.start(2)
        assert cluster.wait(90) == [0, 0], "\n".join(cluster.interleaved())
    timeline = Timeline(load(str(tmp_path)), workers_per_process=2)
    assert timeline.batches
    for (source, _, _), stages in timeline.batches.items():
        assert sorted(stages["apply"]) == [0, 1, 2, 3], stages
        other = 1 - source // 2
        assert list(stages["fetch"]) == [other], stages                 # only the other process reads it
        assert stages["send"] <= stages["append"] <= stages["fetch"][other]
        for receiver, applied in stages["apply"].items():
            assert applied >= (stages["fetch"][other] if receiver // 2 == other else stages["send"])
    remote = hop_stages(timeline)
    assert len(remote["total"]) == 2 * len(timeline.batches) == len(remote["broker"])
    assert all(x >= 0 for x in remote["total"])


def test_wcc_same_in_both_modes_and_matches_networkx(tansu, prefix):
    batches = wcc.random_batches(50, 25, 3, 5)
    got = wcc.merge(timely.execute(kafka_config(tansu, prefix, workers=2), lambda w: wcc.run(w, batches)))
    assert got == wcc.merge(timely.execute(timely.Config(workers=2), lambda w: wcc.run(w, batches)))
    graph = nx.Graph()
    for epoch, batch in enumerate(batches):
        graph.add_edges_from(batch)
        assert got[epoch] == {v: min(c) for c in nx.connected_components(graph) for v in c}


def test_paused_broker_stalls_progress_then_resumes_without_loss(tansu, prefix):
    """SIGSTOP the broker mid-run: progress between the two processes stalls; SIGCONT:
    it resumes, nothing lost or doubled. Two processes, since a process's own workers
    hear each other's progress directly and only the other process's through the broker."""
    rounds = 300
    extra = ["--rounds", str(rounds), "--delay", "0.005", "--timeout", "8", "--progress-mode", "kafka",
             "--kafka-bootstrap", tansu.bootstrap, "--kafka-prefix", prefix]

    def seen(cluster) -> list[int]:
        return [int(m.group(1)) for p in cluster.processes for _, line in list(p.lines)
                if (m := re.match(r"worker \d+: seen (\d+)$", line))]
    with LocalCluster(os.path.join(ROOT, "examples", "hello.py"), slots=2, extra=extra) as cluster:
        cluster.start(2)
        assert wait_until(lambda: len(seen(cluster)) >= 20), "\n".join(cluster.interleaved())
        tansu.pause()
        try:
            # what was in flight when it stopped may still complete: wait until nothing has
            # for a second, then nothing more may while the broker stays paused
            state = {"n": len(seen(cluster)), "at": time.monotonic()}

            def quiet() -> bool:
                if len(seen(cluster)) != state["n"]:
                    state.update(n=len(seen(cluster)), at=time.monotonic())
                return time.monotonic() - state["at"] >= 1.0
            assert wait_until(quiet, 30), "rounds kept completing with the broker paused"
            stalled_at = len(seen(cluster))
            assert stalled_at < rounds
            time.sleep(1.0)
            assert len(seen(cluster)) == stalled_at, "rounds completed while the broker was paused"
            assert all(p.popen.poll() is None for p in cluster.processes)
        finally:
            tansu.resume()
        codes = cluster.wait(120)
        log = "\n".join(cluster.interleaved())
        assert codes == [0, 0], log
        assert sorted(seen(cluster)) == list(range(rounds)), log


def test_broker_that_comes_back_empty_stops_with_a_clear_error(prefix):
    broker = TansuBroker().start()
    try:
        config = kafka_config(broker, prefix, workers=2)
        outcome = {}

        def build(worker):
            def dataflow(scope):
                source, stream = scope.new_input()
                return source, stream.probe()
            source, probe = worker.dataflow(dataflow)
            for epoch in range(100_000):
                if worker.index == 0:
                    source.send(epoch)
                source.advance_to(epoch + 1)
                worker.step_while(lambda: probe.less_than(source.time()))
                if epoch == 20 and worker.index == 0:
                    broker.restart_empty()
            source.close()

        def run():
            try:
                timely.execute(config, build)
                outcome["finished"] = True
            except BaseException as e:  # noqa: BLE001 - what the test looks at
                outcome["error"] = e
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(60)
        assert not thread.is_alive(), "the computation hung after the broker lost its data"
        assert "error" in outcome, outcome
        assert re.search(r"lost|starts over", str(outcome["error"])), outcome["error"]
    finally:
        broker.stop()


# ---- clusters in Kafka mode ------------------------------------------------------------------
def test_join_in_kafka_mode_reads_one_snapshot_and_the_tail_after_10000_epochs(tansu, prefix, tmp_path):
    go = tmp_path / "go"
    job = os.path.join(ROOT, "benchmarks", "_history_job.py")
    extra = ["--history", "10500", "--go", str(go), "--timeout", "20", "--progress-mode", "kafka",
             "--kafka-bootstrap", tansu.bootstrap, "--kafka-prefix", prefix, "--kafka-snapshot-interval", "500"]
    with LocalCluster(job, slots=3, workers=1, extra=extra) as cluster:
        p0, _ = cluster.start(2)
        deadline = time.monotonic() + 240
        while not any(line.startswith("history ") for _, line in p0.lines):
            assert time.monotonic() < deadline and p0.popen.poll() is None, p0.output()
            time.sleep(0.1)
        joiner = cluster.join(original=2, bootstrap=0)
        while not any(line.startswith("joined ") for _, line in joiner.lines):
            assert time.monotonic() < deadline and joiner.popen.poll() is None, joiner.output()
            time.sleep(0.05)
        go.touch()
        codes = cluster.wait(120)
        assert codes == [0, 0, 0], "\n".join(cluster.interleaved())
        line = next(line for _, line in joiner.lines if line.startswith("joined "))
    read = json.loads(line[len("joined "):])     # printed once its view of progress is current
    snapshots = {int(w): n for w, n in read["snapshots_by_worker"].items()}
    records = {int(w): n for w, n in read["records_by_worker"].items()}
    assert snapshots.get(0) == 1, snapshots          # worker 0's 10,500 records are compacted
    for worker in (0, 1):                            # per log: at most one snapshot + its tail
        assert snapshots.get(worker, 0) <= 1, snapshots
        assert records.get(worker, 0) <= 500 + 50, records


@pytest.mark.parametrize("bootstrap", [0, 1])
def test_hello_join_in_kafka_mode(tansu, prefix, bootstrap):
    extra = ["--rounds", "30", "--delay", "0.2", "--timeout", "8", "--progress-mode", "kafka",
             "--kafka-bootstrap", tansu.bootstrap, "--kafka-prefix", prefix]
    with LocalCluster(os.path.join(ROOT, "examples", "hello.py"), slots=3, extra=extra) as cluster:
        cluster.start(2)
        deadline = time.monotonic() + 30
        while not any(line.endswith("seen 2") for p in cluster.processes for _, line in p.lines):
            assert time.monotonic() < deadline, "\n".join(cluster.interleaved())
            time.sleep(0.02)
        cluster.join(original=2, bootstrap=bootstrap)
        codes = cluster.wait(90)
        log = "\n".join(cluster.interleaved())
        assert codes == [0, 0, 0], log
        assert "bootstrap server" not in log      # Kafka mode needs none
        seen = sorted(int(m.group(2)) for p in cluster.processes for _, line in p.lines
                      if (m := re.match(r"worker (\d+): seen (\d+)$", line)))
    assert seen == list(range(30)), log
    assert any(re.match(r"worker 2: seen", line) for p in cluster.processes for _, line in p.lines), log
