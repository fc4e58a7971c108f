"""Broker outages: the pipeline rides them out quietly and visibly, or stops and says why.

Protects issue 40's promise, with ``examples/pipeline/dataflow.py`` on 2 real processes
reaching a real broker (Tansu) through a proxy whose network the test cuts, in both
progress modes:
- while the network is cut, each process logs one line that it lost the broker and one
  when it is back, and none of librdkafka's per-attempt lines; its status says the
  broker is down (``kafka.brokers``: what ``timely_kafka_broker_up`` and the status
  page's banner read); afterwards every epoch is exact and once;
- with the broker gone for longer than ``--broker-timeout``, the process exits
  non-zero with ``BrokerUnreachable`` naming the address, and its restart resumes
  exactly from the checkpoint;
- a broker that restarts empty (the embedded one keeps everything in memory) stops
  every process with an error that says so: nothing is read again from the start.
"""
from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from clusters import wait_for_line, wait_until  # noqa: E402
from test_kafka_connectors import Writer  # noqa: E402
from test_recovery import DATAFLOW, PARTITIONS, clicks, differences, expected, finish, read_results  # noqa: E402
from broker.proxy import TcpProxy  # noqa: E402
from broker.tansu import TansuBroker, free_port  # noqa: E402
from timely.connectors.client import create_topics  # noqa: E402
from timely.launch import LocalCluster, free_port_range  # noqa: E402

EPOCHS = 8
CONNECTION_NOISE = ("rdkafka", "Connect to", "brokers are down", "Connection refused")


@pytest.fixture
def proxied():
    """A broker of the test's own, advertising a proxy in front of it: every client
    (ours, the processes') reaches it through the proxy."""
    proxy = TcpProxy("127.0.0.1:0", port=free_port())
    broker = TansuBroker().start(port=free_port(), advertise=proxy.address)
    proxy.target = ("127.0.0.1", broker.port)
    proxy.start()
    proxy.broker = broker
    try:
        yield proxy
    finally:
        proxy.stop()
        broker.stop()


def _args(proxy: TcpProxy, names: dict, mode: str, broker_timeout: float, metrics: int) -> list[str]:
    args = ["--brokers", proxy.address, "--clicks", names["clicks"], "--results", names["results"],
            "--group", names["group"], "--epochs", str(EPOCHS), "--bins", "16", "--timeout", "20",
            "--broker-timeout", str(broker_timeout), "--metrics-port", str(metrics)]
    if mode == "kafka":
        args += ["--progress-mode", "kafka", "--kafka-bootstrap", proxy.address,
                 "--kafka-prefix", f"c{uuid.uuid4().hex[:10]}"]
    return args


def _topics(proxy: TcpProxy, epochs: int) -> tuple[dict, Writer]:
    """The run's topics, and a writer that has written its first ``epochs`` epochs."""
    run = uuid.uuid4().hex[:8]
    names = {"clicks": f"clicks-{run}", "results": f"results-{run}", "group": f"g-{run}"}
    create_topics(proxy.address, {names["clicks"]: PARTITIONS, names["results"]: PARTITIONS})
    writer = Writer(proxy.address, names["clicks"])
    for e in range(epochs):
        writer.epoch(e, clicks(e))
    return names, writer


def _brokers(port: int) -> list[dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json", timeout=5) as reply:
        return json.loads(reply.read())["kafka"]["brokers"]


@pytest.mark.parametrize("mode", ["p2p", "kafka"])
def test_a_network_cut_is_ridden_out_with_one_line_each_way_and_stays_exact(proxied, mode):
    names, writer = _topics(proxied, 4)
    metrics = free_port_range(2)
    with LocalCluster([DATAFLOW], slots=2, extra=_args(proxied, names, mode, 120, metrics)) as c:
        c.start(2)
        _wait_for_epoch(proxied, names, 3, c)
        proxied.cut()
        for p in c.processes:
            wait_for_line(p, r"lost the Kafka broker at 127\.0\.0\.1:\d+", timeout=60)
        assert wait_until(lambda: [b["up"] for b in _brokers(metrics)] == [False], timeout=30), \
            _brokers(metrics)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as reply:
            exposition = reply.read().decode()
        assert f'timely_kafka_broker_up{{address="{proxied.address}"}} 0.0' in exposition, exposition
        proxied.restore()
        for p in c.processes:
            wait_for_line(p, r"the Kafka broker at 127\.0\.0\.1:\d+ is back after", timeout=60)
        assert wait_until(lambda: [b["up"] for b in _brokers(metrics)] == [True], timeout=30)
        log = _finish(proxied, names, writer, c)
    for p in c.processes:
        out = p.output()
        assert out.count("lost the Kafka broker") == 1 and out.count("is back after") == 1, out
        noise = [line for line in out.splitlines() if any(n in line for n in CONNECTION_NOISE)
                 and "broker.health" not in line]
        assert not noise, "librdkafka's per-attempt lines got through:\n" + "\n".join(noise[:10])
    assert "lost the Kafka broker" not in log.split("is back after")[-1], log


@pytest.mark.parametrize("mode", ["p2p", "kafka"])
def test_a_paused_broker_stalls_the_job_which_then_goes_on_exact(proxied, mode):
    """SIGSTOP: connections stay open and requests go unanswered (no connection error
    until librdkafka's request timeouts); the job waits, then goes on exact."""
    names, writer = _topics(proxied, 4)
    with LocalCluster([DATAFLOW], slots=2, extra=_args(proxied, names, mode, 120, free_port_range(2))) as c:
        c.start(2)
        _wait_for_epoch(proxied, names, 3, c)
        proxied.broker.pause()
        try:
            time.sleep(3.0)             # the outage itself
        finally:
            proxied.broker.resume()
        _finish(proxied, names, writer, c)


def _wait_for_epoch(proxy: TcpProxy, names: dict, epoch: int, cluster: LocalCluster) -> None:
    """Until the results of ``epoch`` are readable."""
    assert wait_until(lambda: any(e == epoch for e, _ in read_results(proxy.address, names["results"])),
                      timeout=90), "\n".join(cluster.interleaved())


def _finish(proxy: TcpProxy, names: dict, writer: Writer, cluster: LocalCluster) -> str:
    """Write the epochs from 4 on; the job ends, every result exact and once."""
    for e in range(4, EPOCHS):
        writer.epoch(e, clicks(e))
    codes = cluster.wait(120)
    log = "\n".join(cluster.interleaved())
    assert codes == [0] * len(codes), log
    got = read_results(proxy.address, names["results"])
    want = expected(EPOCHS)
    assert got == want, differences(got, want) + "\n" + log
    return log


def test_a_broker_gone_past_the_broker_timeout_stops_the_process_and_a_restart_resumes_exact(proxied):
    """The process exits non-zero with ``BrokerUnreachable`` naming the address; started
    again (as a supervisor does) once the network is back, it resumes from its
    checkpoint: every epoch exact and once."""
    names, writer = _topics(proxied, 4)
    # one process: with two, the first to stop makes the other stop as a minority
    with LocalCluster([DATAFLOW], slots=1, extra=_args(proxied, names, "p2p", 3, free_port_range(1))) as c:
        c.start(1)
        _wait_for_epoch(proxied, names, 1, c)
        proxied.cut()
        code = finish(c.processes[0], c, 90)
        out = c.processes[0].output()
        assert code not in (0, None), out
        assert "BrokerUnreachable" in out and proxied.address in out and "--broker-timeout 3" in out, out
        proxied.restore()
        c.restart(0, 1)
        _finish(proxied, names, writer, c)


def test_a_broker_back_without_its_data_stops_each_process_saying_so(proxied):
    names, writer = _topics(proxied, 3)
    with LocalCluster([DATAFLOW], slots=2, extra=_args(proxied, names, "p2p", 60, free_port_range(2))) as c:
        c.start(2)
        _wait_for_epoch(proxied, names, 2, c)
        proxied.broker.restart_empty()
        codes = c.wait(90)
        log = "\n".join(c.interleaved())
    assert all(code not in (0, None) for code in codes), log
    assert "it restarted without its data" in log, log
