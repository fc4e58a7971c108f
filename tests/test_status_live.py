"""Metrics and the status page of a real run: the pipeline's dataflow in 2 processes on
Tansu, then a third joins, then one dies. Every metric family is read. /metrics of every process is parsed with prometheus_client's
own parser and checked against what the run did; the status page is loaded in headless
Chromium before and after the join."""
from __future__ import annotations

import time
import uuid

from browser import open_page, operators, processes, screenshot, wait_for_fresh_poll, wait_for_polls, workers
from clusters import wait_for_line
from test_kafka_connectors import Writer
from test_metrics import get_json, scrape, total
from test_recovery import (DATAFLOW, PARTITIONS, clicks, differences, expected, read_results,
                           wait_for_any_line, wait_for_epochs)
from timely.connectors.client import create_topics
from timely.launch import LocalCluster, free_port_range

EPOCHS, BINS = 9, 16
JOINED = 7       # epochs written once the joiner is in: its bins move at the 6th (all-at-once)


def _wait(condition, cluster, what: str, timeout: float = 60):
    """Wait for ``condition()`` to return something true; fail with the cluster's log."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        assert time.monotonic() < deadline, f"never: {what}\n" + "\n".join(cluster.interleaved())
        time.sleep(0.1)


def _scrapes(port: int, processes: int) -> list[dict]:
    return [scrape(f"http://127.0.0.1:{port + p}/metrics") for p in range(processes)]


def test_metrics_and_the_status_page_follow_a_real_run_and_a_join(tansu, tmp_path):
    run = uuid.uuid4().hex[:8]
    names = {"clicks": f"clicks-{run}", "results": f"results-{run}"}
    create_topics(tansu.bootstrap, {names["clicks"]: PARTITIONS, names["results"]: PARTITIONS})
    writer = Writer(tansu.bootstrap, names["clicks"])
    for e in range(3):
        writer.epoch(e, clicks(e))
    port = free_port_range(3)
    extra = ["--brokers", tansu.bootstrap, "--clicks", names["clicks"], "--results", names["results"],
             "--group", f"g-{run}", "--epochs", str(EPOCHS), "--bins", str(BINS), "--timeout", "20",
             "--migration", "all-at-once", "--metrics-port", str(port)]
    with LocalCluster([DATAFLOW], slots=3, extra=extra) as cluster:
        cluster.start(2)
        wait_for_epochs(tansu.bootstrap, names["results"], 3, cluster)
        # everything written so far is read: the lag falls to 0, and the sources gave
        # the dataflow every event once
        sent = sum(len(events) for e in range(3) for events in clicks(e).values())
        m = _wait(lambda: (lambda ms: ms if sum(total(x, "timely_kafka_source_lag") for x in ms) == 0
                           and sum(total(x, "timely_kafka_source_position") for x in ms) > 0 else None)(
            _scrapes(port, 2)), cluster, "the sources read all that was written")
        graph = get_json(f"http://127.0.0.1:{port}/status.json")["dataflows"][0]
        source = next(o["id"] for o in graph["operators"] if o["name"] == "KafkaSource")
        assert sum(total(x, "timely_operator_records_out_total", operator=source) for x in m) == sent
        assert {dict(ls)["partition"] for x in m for (n, ls) in x if n == "timely_kafka_source_lag"} \
            == {str(p) for p in range(PARTITIONS)}
        assert sum(total(x, "timely_stateful_bins", operator="PageAggregates") for x in m) == BINS
        for p, x in enumerate(m):
            assert total(x, "timely_dataflow_frontier", worker=str(p)) >= 3
            assert total(x, "timely_epochs_completed_total", worker=str(p)) >= 3
            assert total(x, "timely_progress_batches_sent_total", mode="p2p") > 0
            assert total(x, "timely_progress_batches_received_total") > 0
            # every operator that got records counted their batches and its time scheduled
            assert total(x, "timely_operator_batches_in_total") > 0 < total(x, "timely_operator_batches_out_total")
            assert total(x, "timely_operator_scheduled_seconds_total") > 0
            assert total(x, "timely_kafka_sink_errors_total") == 0
            # each worker's source reads a bounded amount ahead (--source-read-ahead, 8 MiB)
            assert ("timely_kafka_source_buffered_bytes", (("worker", str(p)),)) in x
            assert 0 <= total(x, "timely_kafka_source_buffered_bytes") <= 12 << 20
            # and the bytes it has in flight to the other process stay within the credit (16 MiB)
            assert 0 <= total(x, "timely_exchange_in_flight_bytes", worker=str(p)) <= 16 << 20
            assert total(x, "timely_migrations_in_flight") == 0
            assert total(x, "timely_rollbacks_total") == 0
        # the sink's input passes the epochs written so far, and their checkpoint commits
        sink = next(o["id"] for o in graph["operators"] if o["name"] == "KafkaSink")
        _wait(lambda: all(total(x, "timely_operator_input_frontier", operator=sink) >= 3
                          and total(x, "timely_checkpoint_label") >= 3 for x in _scrapes(port, 2)),
              cluster, "the sink's input frontier and the checkpoint label at 3")

        with open_page() as page:
            page.goto(f"http://127.0.0.1:{port}/")
            wait_for_polls(page, 2)
            shown = operators(page)
            assert shown == {o["id"]: o["name"] for o in graph["operators"]}
            assert workers(page) == [0, 1] and processes(page) == {0: True, 1: True}
            screenshot(page, tmp_path / "before.png")

            joiner = cluster.join(original=2)
            wait_for_line(joiner, r"finished joining", timeout=60)
            moved = False
            for e in range(3, JOINED):              # bins move once the epochs they move at come
                writer.epoch(e, clicks(e))
                moved = moved or wait_for_any_line(cluster.processes, r"ships \d+ bins", timeout=5)
            assert moved, "\n".join(cluster.interleaved())
            wait_for_epochs(tansu.bootstrap, names["results"], JOINED, cluster)
            _wait(lambda: wait_for_fresh_poll(page) and workers(page) == [0, 1, 2], cluster,
                  "the page shows the joiner's bins")
            assert processes(page) == {0: True, 1: True, 2: True}
            assert operators(page) == shown
            assert not page.js_errors, page.js_errors
            screenshot(page, tmp_path / "after.png")
        after = _scrapes(port, 3)
        assert sum(total(x, "timely_stateful_bins", operator="PageAggregates") for x in after) == BINS
        assert total(after[2], "timely_stateful_bins", operator="PageAggregates") > 0
        assert sum(total(x, "timely_bins_moved_total") for x in after) > 0
        # a crash: the survivors count their rollback and how long it took
        cluster.kill(cluster.processes[1])
        for p in (0, 2):
            wait_for_line(cluster.processes[p], r"rebuilt dataflows", timeout=60)
        crashed = [scrape(f"http://127.0.0.1:{port + p}/metrics") for p in (0, 2)]
        for x in crashed:
            assert total(x, "timely_rollbacks_total") == 1
            assert total(x, "timely_recovery_seconds") > 0
        for e in range(JOINED, EPOCHS):
            writer.epoch(e, clicks(e))
        codes = cluster.wait(120)
        log = cluster.interleaved()
    assert codes == [0, -9, 0], "\n".join(log)
    assert all((tmp_path / f).stat().st_size > 10_000 for f in ("before.png", "after.png"))
    got = read_results(tansu.bootstrap, names["results"])
    assert got == expected(EPOCHS), differences(got, expected(EPOCHS))
