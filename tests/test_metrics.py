"""Metrics (timely.metrics): /metrics parsed with prometheus_client's own parser, the
figures checked against what the run did; /status.json and /cluster.json; a port in
use named at start. The real 2-process run and the status page in Chromium are in
test_status_live.py."""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import timely
from timely.config import ConfigError
from timely.launch import free_port_range
from timely.metrics.server import MetricsError


def scrape(url: str) -> dict:
    """``{(name, labels as a sorted tuple): value}`` of every sample at ``url``."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(samples: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == v for k, v in labels.items()))


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return json.loads(reply.read())


EPOCHS, PER_EPOCH = 6, 500


def _counting_job(port: int, seen: list, **config) -> list:
    """Two workers count words by key through an exchange; after every epoch worker 0
    reads its process's metrics while the dataflow is still running."""
    def build(worker):
        def dataflow(scope):
            source, stream = scope.new_input()
            counts = (stream.map(lambda w: (w, 1))
                      .state_machine(lambda k, v, s: ((s or 0) + v, [(k, (s or 0) + v)]), bins=8))
            return source, counts.probe()
        source, probe = worker.dataflow(dataflow)
        for epoch in range(EPOCHS):
            source.send_batch([f"w{(worker.index * 7 + i) % 50}" for i in range(PER_EPOCH)])
            source.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
            if worker.index == 0 and epoch in (1, EPOCHS - 1):
                seen.append((epoch, scrape(f"http://127.0.0.1:{port}/metrics"),
                             get_json(f"http://127.0.0.1:{port}/status.json"),
                             get_json(f"http://127.0.0.1:{port}/cluster.json")))
        source.close()
        worker.run()
        return worker.index
    return timely.execute(timely.Config(workers=2, worker_mode="threads", metrics_port=port,
                                        checkpoint="off", **config), build)


def test_metrics_count_what_the_run_did_while_it_runs():
    port = free_port_range(1)
    seen: list = []
    assert _counting_job(port, seen) == [0, 1]
    (early, m1, _, _), (last, m2, status, cluster) = seen
    assert (early, last) == (1, EPOCHS - 1)
    # the Pair map took in every record the two inputs sent, and gave out as many
    sent = 2 * PER_EPOCH * (last + 1)
    pair = next(o["id"] for o in status["dataflows"][0]["operators"] if o["name"] == "Map")
    assert total(m2, "timely_operator_records_in_total", operator=pair) == sent
    assert total(m2, "timely_operator_records_out_total", operator=pair) == sent
    # worker 0's own Map (a pipeline from its own input) as of when it scraped
    assert total(m1, "timely_operator_records_in_total", operator=pair, worker="0") == PER_EPOCH * (early + 1)
    # both workers are there, every operator was scheduled
    workers = {dict(ls)["worker"] for (n, ls) in m2 if n == "timely_operator_schedules_total"}
    assert workers == {"0", "1"}
    assert all(v > 0 for (n, ls), v in m2.items() if n == "timely_operator_schedules_total"
               and dict(ls)["operator"] == pair)
    # frontiers advance with the epochs; epochs complete, each with a latency
    assert total(m1, "timely_dataflow_frontier", worker="0") <= early + 1
    assert total(m2, "timely_dataflow_frontier", worker="0") == last + 1 > total(m1, "timely_dataflow_frontier", worker="0")
    assert total(m2, "timely_epochs_completed_total", worker="0") == last + 1
    assert total(m2, "timely_epoch_latency_seconds_count", worker="0") == last + 1
    # the stateful operator's bins, over both workers, are all of them
    assert total(m2, "timely_stateful_bins") == 8
    assert total(m2, "timely_stateful_keys") == 50
    # status.json and cluster.json tell the same run
    assert status["workers"] == [0, 1] and status["members"] == [0, 1]
    assert {s["bins"] for s in status["stateful"]} and sum(s["bins"] for s in status["stateful"]) == 8
    assert [p["process"] for p in cluster["processes"]] == [0] and cluster["processes"][0]["up"]
    assert cluster["processes"][0]["status"]["dataflows"][0]["operators"] == status["dataflows"][0]["operators"]


def test_kafka_progress_mode_shows_where_its_logs_are_written_and_read(tansu):
    port = free_port_range(1)
    seen: list = []
    _counting_job(port, seen, progress_mode="kafka", kafka_bootstrap=tansu.bootstrap)
    (_, early, _, _), (_, last, _, _) = seen
    for worker in ("0", "1"):
        written = [total(m, "timely_progress_log_written", worker=worker) for m in (early, last)]
        read = [total(m, "timely_progress_log_read", worker=worker) for m in (early, last)]
        # a process's own workers hear each other directly: it reads only other processes' logs
        assert 0 < written[0] < written[1] and read == [0, 0], (worker, written, read)
    assert total(last, "timely_progress_batches_sent_total", mode="kafka") > 0


def test_the_status_page_and_its_files_are_served():
    port = free_port_range(1)
    pages: list = []

    def build(worker):
        for path in ("/", "/status.css", "/../config.py", "/nothing.js"):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
                    pages.append((reply.status, reply.headers["Content-Type"], reply.read().decode()))
            except urllib.error.HTTPError as e:
                pages.append((e.code, None, None))
    timely.execute(timely.Config(metrics_port=port), build)
    (code, kind, html), (css_code, css_kind, _), (outside, _, _), (missing, _, _) = pages
    assert code == 200 and kind.startswith("text/html") and "<html" in html and "status.css" in html
    assert css_code == 200 and css_kind.startswith("text/css")
    assert outside == missing == 404


def test_a_metrics_port_in_use_is_named_at_start():
    port = free_port_range(1)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen(1)
        with pytest.raises(MetricsError, match=f"127.0.0.1:{port}.*--metrics-port {port}"):
            timely.execute(timely.Config(metrics_port=port), lambda worker: None)


def test_a_bad_metrics_port_is_a_config_error():
    with pytest.raises(ConfigError, match="metrics_port"):
        timely.Config.from_args(["--metrics-port", "70000"])
