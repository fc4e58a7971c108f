"""broker.health on its own: what a process knows of its broker, and what it says.

Protects: a probe tells a broker that answers from a closed port; a suspicion the
broker answers is cleared without a word, one it does not answer is an outage logged
once, and the broker's return is logged once; past the broker timeout ``failure()`` is
a ``BrokerUnreachable`` naming the address; librdkafka's connection lines are counted,
not printed, while its other lines pass; a computation forgets what an earlier one saw.
"""
from __future__ import annotations

import logging
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from clusters import wait_until  # noqa: E402
from broker import health  # noqa: E402
from broker.proxy import TcpProxy  # noqa: E402
from broker.tansu import free_port  # noqa: E402


@pytest.fixture
def fresh():
    health.configure(300.0)
    yield
    health.configure(300.0)


def test_a_probe_tells_a_broker_from_a_closed_port(tansu):
    assert health.probe(tansu.bootstrap) is None
    why = health.probe(f"127.0.0.1:{free_port()}", timeout=1)
    assert why is not None and "refused" in why.lower(), why


def test_an_outage_is_one_line_lost_and_one_back_and_its_timeout_names_the_address(tansu, fresh, caplog):
    proxy = TcpProxy(tansu.bootstrap).start()
    try:
        h = health.health(proxy.address)
        with caplog.at_level(logging.WARNING, logger="broker.health"):
            h.suspect("a connection closed")              # the broker answers: nothing said
            assert wait_until(lambda: h._prober is None, 10)
            assert h.up and not caplog.records
            proxy.cut()
            h.suspect("connection refused")
            assert wait_until(lambda: not h.up, 10)
            assert h.failure() is None                        # within the timeout
            h.timeout = 0.0
            unreachable = h.failure()
            assert isinstance(unreachable, health.BrokerUnreachable) and proxy.address in str(unreachable)
            assert health.failure() is not None               # what a worker's step raises
            h.timeout = 300.0
            proxy.restore()
            assert wait_until(lambda: h.up, 10)
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 2 and "lost the Kafka broker" in said[0] and "is back after" in said[1], said
        assert health.failure() is None and h.state()["outages"] == 1
    finally:
        proxy.stop()


def test_librdkafka_connection_lines_are_counted_and_its_other_lines_pass(fresh, caplog):
    hooks = health.hooks("127.0.0.1:1", logging.getLogger("test.rdkafka"))
    lines = hooks["logger"]
    with caplog.at_level(logging.DEBUG, logger="test.rdkafka"):
        lines.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1",
                  "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused")
        lines.log(logging.WARNING, "%s [%s] %s", "CONFWARN", "rdkafka#producer-2", "a setting is ignored")
    shown = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert shown[0][0] == logging.DEBUG and "Connect to" in shown[0][1]
    assert shown[1] == (logging.WARNING, "CONFWARN [rdkafka#producer-2] a setting is ignored")
    assert health.health("127.0.0.1:1").errors == 1


def test_a_new_computation_forgets_the_brokers_an_earlier_one_lost(fresh):
    h = health.health(f"127.0.0.1:{free_port()}")
    h.suspect("refused")
    assert wait_until(lambda: not h.up, 10)
    h.timeout = 0.0
    assert health.failure() is not None
    health.configure(300.0)
    assert health.failure() is None and health.states() == []
