"""``-w N`` as processes (``timely.communication.cluster.forked``): workers that run in parallel.

Protects what a user of ``-w`` relies on when the workers are forked processes rather
than threads: ``execute`` returns what ``build`` returned on each worker, by index, as
with threads; the workers really are separate processes (so they compute in parallel
on a GIL build) and exchange records exactly, in both progress modes, WordCount's per-epoch
jobs (every word exchanged, and partial counts) included; a worker that
raises makes ``execute`` raise that worker's own error (not the "disconnected" the
others saw), and a result that cannot travel back gives an error naming the worker;
``--worker-mode threads`` keeps threads; a bad ``worker_mode``, or ``processes`` with
``-n``, is a ConfigError; the default on this (GIL) build is processes, and
``TIMELY_WORKER_MODE`` overrides it. Peer-to-peer progress only: the test process holds
Kafka clients, which a fork cannot carry (see the module); Kafka progress with forked
workers is run by ``examples/hello.py -w 3 --progress-mode kafka`` below, a process of
its own.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import uuid

import pytest

from bounded import execute_bounded

import timely
from timely import Config, ConfigError
from timely.communication.cluster import workers_as_processes
from timely.communication.cluster.forked import gil_enabled

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import wordcount  # noqa: E402


def exchanged_squares(worker, n=200):
    """Every worker sends its share of 0..n-1; each number is squared on worker x % peers.
    Returns (index, pid, what this worker squared)."""
    def dataflow(scope):
        handle, stream = scope.new_input()
        return handle, stream.exchange(lambda x: x).map(lambda x: (x, x * x)).capture(), None

    handle, captured, _ = worker.dataflow(dataflow)
    handle.send_batch(list(range(worker.index, n, worker.peers)))
    handle.close()
    worker.run()
    return worker.index, os.getpid(), sorted(r for _, rs in captured.batches for r in rs)


def check_squares(results, workers, n=200):
    assert [index for index, _, _ in results] == list(range(workers))
    for index, _, squared in results:
        assert squared == [(x, x * x) for x in range(n) if x % workers == index]


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_are_processes_and_return_their_results_by_index(workers):
    config = Config.from_args(["-w", str(workers), "--worker-mode", "processes"])
    results = execute_bounded(config, exchanged_squares, timeout=60)
    check_squares(results, workers)
    pids = [pid for _, pid, _ in results]
    assert pids[0] == os.getpid() and len(set(pids)) == workers      # worker 0 runs here


@pytest.mark.parametrize("combine", [False, True], ids=["every-word-exchanged", "partial-counts"])
def test_wordcount_on_forked_workers_counts_every_epoch_exactly(combine):
    """examples/wordcount.py's per-epoch jobs on 2 worker processes, each reading its share:
    timely's (every word crosses to its counter) and ``--combine`` (partial counts per
    worker cross), both equal to a plain Counter per epoch."""
    lines = wordcount.synthetic_lines(3000, 10, 400)
    config = Config.from_args(["-w", "2", "--worker-mode", "processes"])
    captures = execute_bounded(config, lambda w: wordcount.run(w, lines, 3, all_workers=True, exchange=True,
                                                               combine=combine), timeout=60)
    got = {epoch: dict(counts) for epoch, counts in wordcount.merge(captures).items()}
    assert got == wordcount.expected_per_epoch(lines, 3)


def test_the_environment_chooses_for_auto(monkeypatch):
    monkeypatch.setenv("TIMELY_WORKER_MODE", "processes")
    assert workers_as_processes(Config(workers=2))
    monkeypatch.setenv("TIMELY_WORKER_MODE", "threads")
    assert not workers_as_processes(Config(workers=2))
    assert workers_as_processes(Config(workers=2, worker_mode="processes"))
    monkeypatch.setenv("TIMELY_WORKER_MODE", "fork")
    with pytest.raises(ConfigError, match="TIMELY_WORKER_MODE='fork' is not valid"):
        workers_as_processes(Config(workers=2))


def test_forked_workers_in_kafka_progress_mode_from_the_command_line(tansu):
    hello = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "hello.py")
    env = {**os.environ, "TIMELY_WORKER_MODE": "auto"}
    out = subprocess.run([sys.executable, hello, "-w", "3", "--rounds", "12", "--progress-mode", "kafka",
                          "--kafka-bootstrap", tansu.bootstrap, "--kafka-prefix", f"f{uuid.uuid4().hex[:10]}"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    seen = sorted((int(w), int(x)) for w, x in re.findall(r"^worker (\d+): seen (\d+)$", out.stdout, re.M))
    assert seen == sorted((x % 3, x) for x in range(12)), out.stdout + out.stderr
    assert "in a cluster of processes [0, 1, 2]" in out.stderr     # three processes, not threads


def test_threads_stay_available():
    results = execute_bounded(Config(workers=3, worker_mode="threads"), exchanged_squares)
    check_squares(results, 3)
    assert {pid for _, pid, _ in results} == {os.getpid()}


def test_the_default_on_a_gil_build_is_processes(monkeypatch):
    monkeypatch.delenv("TIMELY_WORKER_MODE")      # conftest makes threads the tests' default
    assert gil_enabled()            # CI's CPython 3.11
    assert workers_as_processes(Config.from_args(["-w", "2"]))
    assert not workers_as_processes(Config.from_args(["-w", "1"]))
    results = timely.execute_from_args(["-w", "2"], exchanged_squares)
    check_squares(results, 2)
    assert len({pid for _, pid, _ in results}) == 2


def failing_on(bad):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()

            def explode(x):
                if worker.index == bad and x == 9 + bad:
                    raise ValueError(f"record {x} is bad on worker {worker.index}")
                return x
            return handle, stream.map(explode).probe()

        handle, _ = worker.dataflow(dataflow)
        handle.send_batch(list(range(worker.index, 100, worker.peers)))
        handle.close()
        worker.run()
    return build


@pytest.mark.parametrize("bad", [0, 2])
def test_a_worker_error_is_raised_with_its_own_message(bad):
    with pytest.raises(ValueError, match=f"record {9 + bad} is bad on worker {bad}"):
        execute_bounded(Config(workers=3, worker_mode="processes"), failing_on(bad), timeout=60)


def test_a_result_that_cannot_travel_back_names_its_worker():
    def build(worker):
        return threading.Lock() if worker.index == 1 else worker.index

    with pytest.raises(RuntimeError, match=r"worker 1 .*its result cannot be sent back to the caller"):
        execute_bounded(Config(workers=2, worker_mode="processes"), build, timeout=60)


def test_bad_worker_modes_are_config_errors():
    with pytest.raises(ConfigError, match="worker_mode must be 'auto', 'processes' or 'threads', got 'fork'"):
        Config.from_args(["-w", "2", "--worker-mode", "fork"])
    with pytest.raises(ConfigError, match="a process of a cluster .* runs its workers as threads"):
        Config.from_args(["-w", "2", "-n", "2", "-p", "0", "--worker-mode", "processes"])
    assert not workers_as_processes(Config.from_args(["-w", "2", "-n", "2", "-p", "0"]))
