"""The live status page (timely/metrics/static) in a real headless Chromium, against a fake
cluster: a threaded http.server on 127.0.0.1 serving the static folder and a cluster.json
that each test changes (processes joining, going down, failing).

Protects: every operator and every worker's bar is shown and follows joins and leaves, a
down process is shown as down, channel rates come from the growth of records between
polls, the error banner comes and goes with cluster.json, a stalled dataflow's banner says what
holds it and goes when it moves, and no JavaScript error is
thrown on partial or unexpected JSON. Waits are on the page's poll count, never sleeps.
"""
from __future__ import annotations

import json
import random
import struct
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from browser import (channel_rates, open_page, operators, polls, processes, screenshot,
                     wait_for_fresh_poll, wait_for_polls, workers)

STATIC = Path(__file__).resolve().parents[1] / "timely" / "metrics" / "static"
POLL_MS = 200

# A clickstream job: Kafka in, a broadcast config, an exchange into a stateful aggregate, an
# iterative scope with a feedback loop, Kafka out. (id, name, inputs, outputs, scope, nested)
OPERATORS = [
    ("0.1", "KafkaSource", 0, 1, "0", False),
    ("0.2", "ParseClicks", 1, 1, "0", False),
    ("0.3", "Config", 0, 1, "0", False),
    ("0.4", "DropBots", 2, 1, "0", False),
    ("0.5", "PageAggregates", 1, 1, "0", False),
    ("0.6", "Sessions", 1, 1, "0", True),
    ("0.6.1", "Concat", 2, 1, "0.6", False),
    ("0.6.2", "Propagate", 1, 1, "0.6", False),
    ("0.6.3", "MinLabel", 1, 1, "0.6", False),
    ("0.6.4", "Feedback", 1, 1, "0.6", False),
    ("0.7", "Concat", 2, 1, "0", False),
    ("0.8", "KafkaSink", 1, 0, "0", False),
    ("0.9", "Probe", 1, 0, "0", False),
]
# (from, from_port, to, to_port, kind)
CHANNELS = [
    ("0.1", 0, "0.2", 0, "pipeline"),
    ("0.2", 0, "0.4", 0, "pipeline"),
    ("0.3", 0, "0.4", 1, "broadcast"),
    ("0.4", 0, "0.5", 0, "exchange"),
    ("0.4", 0, "0.6", 0, "exchange"),
    ("0.6", 0, "0.6.1", 0, "pipeline"),
    ("0.6.1", 0, "0.6.2", 0, "exchange"),
    ("0.6.2", 0, "0.6.3", 0, "pipeline"),
    ("0.6.3", 0, "0.6.4", 0, "pipeline"),
    ("0.6.4", 0, "0.6.1", 1, "pipeline"),
    ("0.6.3", 0, "0.6", 0, "pipeline"),
    ("0.5", 0, "0.7", 0, "pipeline"),
    ("0.6", 0, "0.7", 1, "pipeline"),
    ("0.7", 0, "0.8", 0, "exchange"),
    ("0.7", 0, "0.9", 0, "pipeline"),
]
# Records per second into each operator on each worker; Config's consumers see no growth.
RATES = {"0.2": 400, "0.4": 400, "0.5": 380, "0.6": 380, "0.6.1": 500, "0.6.2": 500,
         "0.6.3": 500, "0.6.4": 120, "0.7": 760, "0.8": 760, "0.9": 760}
EXCHANGE_INTO_AGGREGATES = "0.4:0>0.5:0"
BROADCAST_INTO_DROPBOTS = "0.3:0>0.4:1"
PARSED_INTO_DROPBOTS = "0.2:0>0.4:0"
BIN_COUNT = 16


def worker_stats(worker: int, elapsed: float, hidden: set[str]) -> dict:
    epochs = 5 + int(elapsed * 4)
    ops = {}
    for op_id, _, inputs, _, _, _ in OPERATORS:
        if op_id in hidden:
            continue
        records = int(RATES.get(op_id, 0) * elapsed) + 1000
        frontier = [epochs + worker % 2] * inputs
        if op_id == "0.4":
            frontier[1] = None        # the config input is closed
        ops[op_id] = {"records_in": records, "records_out": records, "batches_in": records // 100,
                      "batches_out": records // 100, "scheduled_seconds": 0.01 * len(op_id) + elapsed / 50,
                      "schedules": 50, "frontier": frontier}
    return {"operators": ops, "epochs_completed": epochs, "frontier": epochs,
            "latency": [[e, 0.05 + 0.01 * ((e * 7 + worker) % 5)] for e in range(max(0, epochs - 8), epochs)]}


def process_status(process: int, own: list[int], members: list[int], elapsed: float,
                   hidden: set[str]) -> dict:
    return {
        "process": process, "workers": own, "members": members, "time": time.time(),
        "extra_key_the_page_ignores": {"x": 1},
        "dataflows": [{
            "index": 0, "name": "Clickstream",
            "operators": [{"id": i, "name": n, "inputs": ins, "outputs": outs, "scope": sc, "nested": nest}
                          for i, n, ins, outs, sc, nest in OPERATORS],
            "channels": [{"from": a, "from_port": ap, "to": b, "to_port": bp, "kind": k}
                         for a, ap, b, bp, k in CHANNELS],
            "workers": {str(w): worker_stats(w, elapsed, hidden) for w in own},
        }],
        "stateful": [{"dataflow": 0, "operator": "PageAggregates", "worker": w,
                      "bins": len(range(members.index(w), BIN_COUNT, len(members))), "keys": 40 + 3 * w,
                      "bin_count": BIN_COUNT} for w in own],
        "migrations": {"in_flight": 0, "bins_moved": 12},
        "kafka": {"lag": [{"topic": "clicks", "partition": w, "worker": w, "position": 100 * w,
                           "end": 100 * w + 12, "lag": 12 + w} for w in own], "sink_errors": 0},
        "checkpoint": {"last_label": 8, "incarnation": "2-ab12cd34", "rollbacks": 1},
    }


class FakeCluster:
    """Process 0's server as the page sees it: the static folder and a cluster.json.

    ``processes`` maps a process index to its workers, or to None when it is down;
    ``fail`` set to an HTTP status makes cluster.json answer with it; the operators in
    ``hidden_operators`` are left out of every worker's numbers.
    """

    def __init__(self) -> None:
        self.started = time.time()
        self.processes: dict[int, list[int] | None] = {0: [0, 1], 1: [2, 3]}
        self.fail: int | None = None
        self.hidden_operators: set[str] = set()
        self.body: dict | None = None      # when set, served as is instead
        self.stalls: dict[int, list] = {}   # process -> its /status.json "stalls"
        self.brokers: dict[int, list] = {}  # process -> its /status.json "kafka"."brokers"

        cluster = self

        class Handler(SimpleHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/cluster.json":
                    return super().do_GET()
                if cluster.fail:
                    self.send_error(cluster.fail, "fake failure")
                    return
                data = json.dumps(cluster.body if cluster.body is not None
                                  else cluster.cluster_json()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(STATIC)))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/?interval={POLL_MS}"

    def cluster_json(self) -> dict:
        elapsed = time.time() - self.started
        members = sorted(w for own in self.processes.values() if own for w in own)
        return {"generated": time.time(), "processes": [
            {"process": p, "url": f"http://127.0.0.1:{9100 + p}", "up": own is not None,
             "error": None if own is not None else "connection refused",
             "status": (self._status(p, own, members, elapsed) if own is not None else None)}
            for p, own in sorted(self.processes.items())]}

    def _status(self, p: int, own: list[int], members: list[int], elapsed: float) -> dict:
        status = {**process_status(p, own, members, elapsed, self.hidden_operators),
                  "stalls": self.stalls.get(p, [])}
        status["kafka"] = {**status["kafka"], "brokers": self.brokers.get(p, [])}
        return status

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def cluster():
    fake = FakeCluster()
    yield fake
    fake.close()


@pytest.fixture
def page(cluster):
    with open_page() as page:
        page.goto(cluster.url)
        wait_for_polls(page, 1)
        yield page
        assert page.js_errors == []


def boxes(page) -> dict[str, dict]:
    return page.eval_on_selector_all("[data-operator]", """els => Object.fromEntries(els.map(e => {
        const r = e.querySelector('.box').getBoundingClientRect();
        return [e.dataset.operator, {x: r.x, y: r.y, w: r.width, h: r.height}];
    }))""")


def overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])


def assert_boxes_apart(page) -> None:
    """No two operator boxes overlap, but a scope's frame holds exactly its own operators."""
    shown = boxes(page)
    for a in shown:
        for b in shown:
            if a < b:
                nested = b.startswith(a + ".") or a.startswith(b + ".")
                assert overlap(shown[a], shown[b]) == nested, (a, b)


def test_every_operator_process_and_worker_is_shown(page):
    assert operators(page) == {op_id: name for op_id, name, *_ in OPERATORS}
    assert processes(page) == {0: True, 1: True}
    assert workers(page) == [0, 1, 2, 3]
    assert page.eval_on_selector_all("[data-member]", "els => els.map(e => +e.dataset.member)") == [0, 1, 2, 3]
    assert "Clickstream" in page.inner_text("#title")

    # the frontier shown is the least over the workers; a closed input says so
    stats, epochs = page.evaluate("""() => [  // at once: the numbers move between polls
        document.querySelector('[data-operator="0.4"] .op-stats').textContent,
        document.querySelectorAll('.df-figures b')[2].textContent]""")  # epochs completed
    assert f"⇥ {epochs} | closed" in stats
    assert page.get_attribute(f'[data-channel="{EXCHANGE_INTO_AGGREGATES}"]', "class").split() == [
        "channel", "kind-exchange"]
    assert "feedback" in page.get_attribute('[data-channel="0.6.4:0>0.6.1:1"]', "class")
    assert_boxes_apart(page)

    # Kafka lag per partition, sink errors, migrations and checkpoints over both processes
    assert page.eval_on_selector_all("#kafka-lag tbody tr", "rows => rows.map(r => +r.dataset.partition)") == [0, 1, 2, 3]
    assert page.text_content("[data-sink-errors]") == "0"
    figures = page.eval_on_selector_all(
        "[data-figure]", "els => Object.fromEntries(els.map(e => [e.dataset.figure, e.querySelector('b').textContent]))")
    assert figures == {"in-flight": "0", "bins-moved": "24", "label": "8", "rollbacks": "1",
                       "incarnation": "2-ab12cd34"}


def test_workers_follow_a_join_and_a_leave(page, cluster):
    assert workers(page) == [0, 1, 2, 3]

    cluster.processes[2] = [4, 5]                  # a process joins with two workers
    wait_for_fresh_poll(page)
    assert workers(page) == [0, 1, 2, 3, 4, 5]
    assert processes(page) == {0: True, 1: True, 2: True}
    assert page.eval_on_selector_all("[data-member]", "els => els.map(e => +e.dataset.member)") == [0, 1, 2, 3, 4, 5]
    bins = page.eval_on_selector_all("[data-worker]", "els => els.map(e => +e.dataset.bins)")
    assert sum(bins) == BIN_COUNT

    cluster.processes[1] = None                    # and another goes down
    wait_for_fresh_poll(page)
    assert workers(page) == [0, 1, 4, 5]
    assert processes(page) == {0: True, 1: False, 2: True}
    row = page.inner_text('[data-process="1"]')
    assert "down" in row and "connection refused" in row


def near(rate: float | None, expected: float) -> bool:
    return rate is not None and 0.5 * expected < rate < 1.5 * expected


def test_channel_rates_come_from_growth_between_polls(page, cluster):
    wait_for_polls(page, 3)
    rates = channel_rates(page)
    assert set(rates) == {f"{a}:{ap}>{b}:{bp}" for a, ap, b, bp, _ in CHANNELS}
    workers_now = 4
    # the target has one input: its records_in
    assert near(rates[EXCHANGE_INTO_AGGREGATES], RATES["0.5"] * workers_now)
    label = page.text_content(f'[data-channel="{EXCHANGE_INTO_AGGREGATES}"] .rate')
    assert label.endswith("k/s") and not label.startswith("Σ")
    # into a two-input target: the one-output source's records_out (Config sends nothing)
    assert near(rates[PARSED_INTO_DROPBOTS], RATES["0.2"] * workers_now)
    assert rates[BROADCAST_INTO_DROPBOTS] == 0
    assert all(rate > 0 for key, rate in rates.items() if key != BROADCAST_INTO_DROPBOTS)

    # without the source's numbers, the target's records_in over all its inputs, marked so
    cluster.hidden_operators = {"0.3"}
    wait_for_fresh_poll(page)
    assert near(channel_rates(page)[BROADCAST_INTO_DROPBOTS], RATES["0.4"] * workers_now)
    assert page.text_content(f'[data-channel="{BROADCAST_INTO_DROPBOTS}"] .rate').startswith("Σ ")


def test_rate_is_zero_when_records_stop_growing(page, cluster):
    wait_for_polls(page, 2)
    cluster.body = cluster.cluster_json()          # frozen: the same records from now on
    wait_for_fresh_poll(page)                      # one frozen poll shown, then another after it
    wait_for_polls(page, polls(page) + 1)
    assert channel_rates(page)[EXCHANGE_INTO_AGGREGATES] == 0


def test_error_banner_comes_and_goes(page, cluster):
    assert page.is_hidden("#error")
    shown_before = polls(page)

    cluster.fail = 500
    page.wait_for_selector("#error", state="visible")
    assert "500" in page.inner_text("#error")
    assert operators(page)                         # the last good data stays
    assert page.get_attribute("body", "data-errors") != "0"

    cluster.fail = None
    page.wait_for_selector("#error", state="hidden")
    assert polls(page) > shown_before


def test_stall_banner_says_what_holds_a_stuck_dataflow(page, cluster):
    assert page.is_hidden("#stall")
    cluster.stalls = {1: [{"dataflow": "Clickstream", "worker": 2, "seconds": 45.2,
                           "held_here": [], "held_elsewhere": [], "in_flight": [],
                           "summary": "held here: Input (node 1, output 0) at 7 (an input the "
                                      "program has not closed)"}]}
    page.wait_for_selector("#stall", state="visible")
    text = page.inner_text("#stall")
    assert "dataflow Clickstream on worker 2 has made no progress for 45 s" in text, text
    assert "Input (node 1, output 0) at 7" in text, text
    cluster.stalls = {}
    page.wait_for_selector("#stall", state="hidden")


def test_broker_banner_says_which_broker_is_lost_for_how_long_and_who_waits(page, cluster):
    assert page.is_hidden("#broker")
    lost = {"address": "127.0.0.1:9092", "up": False, "errors": 120, "outages": 1, "down_seconds": 8.4}
    cluster.brokers = {0: [{**lost, "down_seconds": 7.9}], 1: [lost]}
    page.wait_for_selector("#broker", state="visible")
    text = page.inner_text("#broker")
    assert "127.0.0.1:9092 has not answered for 8 s" in text and "processes 0, 1" in text, text
    cluster.brokers = {0: [{**lost, "up": True, "down_seconds": None}]}
    page.wait_for_selector("#broker", state="hidden")


def test_screenshot_is_a_png(page, tmp_path):
    wait_for_polls(page, 3)
    path = screenshot(page, tmp_path / "status.png")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert width == 1440 and height > 1000
    assert len(data) > 50_000


ODD_CLUSTERS = [
    {},
    {"processes": None, "generated": "yesterday"},
    {"processes": [None, 7, {"up": True}, {"process": 1, "up": False, "status": None}]},
    {"processes": [{"process": 0, "status": {"dataflows": None, "stateful": None, "kafka": None}}]},
    {"processes": [{"process": 0, "up": True, "status": {
        "workers": [0], "members": "all", "stateful": [None, {"worker": "w0"}, {"worker": 0}],
        "kafka": {"lag": [None, {"topic": None}]}, "checkpoint": {}, "migrations": {},
        "dataflows": [None, {
            "name": None, "operators": [None, {"id": None}, {"id": "1.1", "scope": "1.1"},
                                        {"id": "1.2", "scope": "1.3"}, {"id": "1.3", "scope": "1.2"},
                                        {"id": "1.4", "nested": True}, {"id": "1.4.1", "scope": "1.4", "inputs": 1}],
            "channels": [None, {"from": "x"}, {"from": "1.1", "to": "1.2"}, {"from": "1.2", "to": "1.1"},
                         {"from": "1.1", "to": "1.1"}, {"from": "1.4.0", "to": "1.4.1", "to_port": 3},
                         {"from": "1.4.1", "to": "1.4.0", "kind": "weird"}],
            "workers": {"0": None, "1": {"operators": {"1.1": {"records_in": [5, "a"], "frontier": [[3, 1], None]}},
                                         "latency": [[1, 0.5], ["x"], None], "frontier": [3, 1]}}}]}}]},
]


def test_partial_and_unexpected_json_does_not_break_the_page(page, cluster):
    for body in ODD_CLUSTERS:
        cluster.body = body
        wait_for_fresh_poll(page)                  # polls count only what was shown
        assert page.is_hidden("#error"), (body, page.inner_text("#error"))
    assert set(operators(page)) == {"1.1", "1.2", "1.3", "1.4", "1.4.1"}
    cluster.body = None
    wait_for_fresh_poll(page)
    assert len(operators(page)) == len(OPERATORS)


def random_dataflow(seed: int, count: int = 20) -> dict:
    """``count`` operators at the root, each fed by one or two earlier ones, a few loops back,
    and a nested scope of four in a chain; no numbers."""
    rng = random.Random(seed)
    ids = [f"0.{i}" for i in range(1, count + 1)]
    channels = []
    inputs = dict.fromkeys(ids, 0)
    for i, op in enumerate(ids[1:], start=1):
        for source in rng.sample(ids[:i], min(i, rng.choice([1, 1, 2]))):
            channels.append((source, op))
    for _ in range(3):
        later, earlier = rng.sample(range(count), 2)
        channels.append((ids[max(later, earlier)], ids[min(later, earlier)]))
    wires = []
    for source, target in channels:
        wires.append({"from": source, "from_port": 0, "to": target, "to_port": inputs[target],
                      "kind": rng.choice(["pipeline", "exchange", "broadcast"])})
        inputs[target] += 1
    scope = ids[count // 2]
    inner = [f"{scope}.{i}" for i in range(1, 5)]
    wires += [{"from": scope, "to": inner[0]}, {"from": inner[-1], "to": scope}]
    wires += [{"from": a, "to": b, "kind": "exchange"} for a, b in zip(inner, inner[1:])]
    operators = [{"id": op, "name": f"Operator{op.replace('.', '_')}", "inputs": inputs[op], "outputs": 1,
                  "scope": "0", "nested": op == scope} for op in ids]
    operators += [{"id": op, "name": f"Inner{op[-1]}", "inputs": 1, "outputs": 1, "scope": scope}
                  for op in inner]
    return {"processes": [{"process": 0, "up": True, "status": {"process": 0, "workers": [0], "dataflows": [
        {"index": 0, "name": f"Random{seed}", "operators": operators, "channels": wires, "workers": {}}]}}]}


def test_larger_graphs_with_loops_are_laid_out_apart(page, cluster):
    for seed in range(3):
        cluster.body = random_dataflow(seed)
        wait_for_fresh_poll(page)
        assert len(operators(page)) == 24
        assert_boxes_apart(page)
