"""execute / execute_from_args / Config: running workers, completing, failing.

Protects:
- ``execute`` runs ``build`` on every worker and returns their results by index; a
  closed input lets every dataflow complete and ``execute`` return (1 and several
  workers, with and without an iterative scope, with several dataflows per worker);
- an exception raised on one worker (in an operator, in an iterative scope, in the
  build function, a CapabilityError) is raised by ``execute``, and the other workers
  stop instead of hanging (every run here is bounded by a timeout);
- ``Config.from_args`` parses -w/-n/-p (and the long forms), leaves arguments that are
  not options in ``extra``, stops on an option nobody declares (a mistyped flag)
  naming it and the closest timely flag, and rejects bad values with a ConfigError
  naming the setting; an example with flags of its own still runs;
  ``execute_from_args(["-w", "2"], ...)`` runs 2 workers;
- workers run with Python's full collections at ``Config.gc_full_after`` (forked
  processes and threads alike; 0 leaves it alone) and the caller gets its own setting
  back, also after a failure;
- ``check_progress`` mode accepts correct dataflows.
"""
from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from bounded import bounded, execute_bounded  # noqa: E402

import timely
from timely import CapabilityError, Config, ConfigError, Exchange, Pipeline
from timely.collector import GC_FULL_AFTER

WORKERS = (1, 3)






@pytest.fixture
def clean_env(monkeypatch):
    for name in ("TIMELY_WORKERS", "TIMELY_PROCESSES", "TIMELY_PROCESS", "TIMELY_HOSTFILE",
                 "TIMELY_CONFIG", "TIMELY_PROGRESS_MODE", "TIMELY_KAFKA_BOOTSTRAP",
                 "TIMELY_CHECK_PROGRESS", "TIMELY_TIMEOUT", "TIMELY_GC_FULL_AFTER"):
        monkeypatch.delenv(name, raising=False)


# ---- running and completing ---------------------------------------------------------------
@pytest.mark.parametrize("workers", (1, 2, 4))
def test_execute_returns_build_results_by_worker_index(workers):
    results = execute_bounded(workers, lambda w: (w.index, w.peers))
    assert results == [(i, workers) for i in range(workers)]


def count_up_to_multiple(stream, sc, n):
    """In iterative scope ``sc``: each record goes round the loop, +1 a round, until it is
    a multiple of ``n``, and then leaves."""
    loop_handle, loop = sc.loop_variable(1)
    body = stream.enter(sc).concat(loop).exchange(lambda x: x)
    body.filter(lambda x: x % n != 0).map(lambda x: x + 1).connect_loop(loop_handle)
    return body.filter(lambda x: x % n == 0).leave()


@pytest.mark.parametrize("workers", WORKERS)
def test_a_closed_input_lets_execute_return(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()
            out = stream.exchange(lambda x: x).map(lambda x: x + 1)
            return handle, out.capture(), out.probe()

        handle, captured, probe = worker.dataflow(dataflow)
        handle.send_batch(range(worker.index * 10, worker.index * 10 + 10))
        handle.advance_to(3)
        handle.send(1000 + worker.index)
        handle.close()                       # no stepping here: execute runs to completion
        return worker, captured, probe

    results = execute_bounded(workers, build)
    got = sorted((t, r) for _, captured, _ in results for t, rs in captured.batches for r in rs)
    expected = sorted([(0, x + 1) for x in range(workers * 10)]
                      + [(3, 1001 + w) for w in range(workers)])
    assert got == expected
    for worker, captured, probe in results:
        assert captured.done() and probe.done()
        assert worker.dataflows() == []
        assert worker.step() is False


@pytest.mark.parametrize("workers", WORKERS)
def test_a_closed_input_lets_execute_return_with_an_iterative_scope(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()

            out = scope.iterative(lambda sc: count_up_to_multiple(stream, sc, 7))
            return handle, out.capture()

        handle, captured = worker.dataflow(dataflow)
        for epoch in range(3):
            handle.send_batch([epoch * 100 + worker.index * 10 + i for i in range(5)])
            handle.advance_to(epoch + 1)
        handle.close()
        return captured

    results = execute_bounded(workers, build)
    got = sorted((t, r) for c in results for t, rs in c.batches for r in rs)
    sent = [(e, e * 100 + w * 10 + i) for e in range(3) for w in range(workers) for i in range(5)]
    # every record climbs to the next multiple of 7, and leaves at the epoch it entered
    assert got == sorted((e, x + (-x) % 7) for e, x in sent)
    assert all(c.done() for c in results)


@pytest.mark.parametrize("workers", WORKERS)
def test_several_dataflows_per_worker_all_complete(workers):
    def build(worker):
        first = worker.dataflow(lambda s: s.new_input())
        second = worker.dataflow(lambda s: s.to_stream([worker.index]).exchange(lambda x: 0).capture())
        third = worker.dataflow(lambda s: s.to_stream([worker.index]).map(lambda x: -x).capture())
        handle, stream = first
        handle.close()
        return second, third

    results = execute_bounded(workers, build)
    assert [sorted(c.records()) for c, _ in results] == [list(range(workers))] + [[]] * (workers - 1)
    assert [c.records() for _, c in results] == [[-w] for w in range(workers)]


def test_step_reports_completion():
    def build(worker):
        handle, probe = worker.dataflow(lambda s: (lambda h, st: (h, st.probe()))(*s.new_input()))
        alive = [worker.step()]
        handle.close()
        while worker.step():
            pass
        alive.append(worker.step())
        return alive, probe.done()

    [(alive, done)] = execute_bounded(1, build)
    assert alive == [True, False] and done


# ---- failing --------------------------------------------------------------------------------
class Boom(RuntimeError):
    pass


@pytest.mark.parametrize("workers,failing", [(1, 0), (3, 0), (3, 2)])
def test_an_exception_in_an_operator_is_raised_by_execute(workers, failing):
    def build(worker):
        def explode(x):
            if worker.index == failing and x == "boom":
                raise Boom(f"operator failed on worker {worker.index}")
            return x

        def dataflow(scope):
            handle, stream = scope.new_input()
            return handle, stream.map(explode).probe()

        handle, probe = worker.dataflow(dataflow)
        for epoch in range(1000):                # the failing worker never finishes this
            handle.send("boom" if epoch == 3 else "ok")
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
        handle.close()

    with pytest.raises(Boom, match=f"operator failed on worker {failing}"):
        execute_bounded(workers, build)


@pytest.mark.parametrize("workers", WORKERS)
def test_an_exception_inside_an_iterative_scope_is_raised_by_execute(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()

            def inner(sc):
                loop_handle, loop = sc.loop_variable(1)
                body = stream.enter(sc).concat(loop).exchange(lambda x: 0)

                def constructor(cap, info):
                    cap.drop()

                    def logic(input, output):
                        for c, records in input:
                            if c.time[1] == 5:
                                raise Boom(f"round {c.time[1]}")
                            output.give_batch(c, list(records))
                    return logic
                body.unary(Pipeline(), "Rounds", constructor).connect_loop(loop_handle)
                return body.leave()
            return handle, scope.iterative(inner).probe()

        handle, probe = worker.dataflow(dataflow)
        handle.send(worker.index)
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))   # never: the loop fails in round 5
        handle.close()

    with pytest.raises(Boom, match="round 5"):
        execute_bounded(workers, build)


@pytest.mark.parametrize("workers", WORKERS)
def test_an_exception_in_one_workers_build_is_raised_by_execute(workers):
    def build(worker):
        handle, probe = worker.dataflow(lambda s: (lambda h, st: (h, st.exchange(lambda x: x).probe()))(*s.new_input()))
        if worker.index == workers - 1:
            raise KeyError("no such thing")
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))  # waits for the failed worker
        handle.close()

    with pytest.raises(KeyError, match="no such thing"):
        execute_bounded(workers, build)


@pytest.mark.parametrize("workers", WORKERS)
def test_a_capability_error_in_an_operator_is_raised_by_execute(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()

            def constructor(cap, info):
                cap.drop()

                def logic(input, output):
                    for c, records in input:
                        held = c.retain()
                        held.drop()
                        output.give(held, "with a dropped capability")
                return logic
            return handle, stream.unary(Exchange(lambda x: 0), "Bad", constructor).probe()

        handle, probe = worker.dataflow(dataflow)
        handle.send(worker.index)
        handle.advance_to(1)
        worker.step_while(lambda: probe.less_than(1))
        handle.close()

    with pytest.raises(CapabilityError, match="dropped"):
        execute_bounded(workers, build)


def test_execute_after_a_failure_runs_normally():
    def failing(worker):
        worker.dataflow(lambda s: s.to_stream([1]).map(lambda x: 1 / 0).probe())

    with pytest.raises(ZeroDivisionError):
        execute_bounded(2, failing)
    results = execute_bounded(2, lambda w: w.dataflow(lambda s: s.to_stream([w.index]).capture()))
    assert [c.records() for c in results] == [[0], [1]]


# ---- configuration --------------------------------------------------------------------------
def test_from_args_parses_timely_flags(clean_env):
    c = Config.from_args(["prog", "-w", "3", "-n", "2", "-p", "1", "x"], env={})
    assert (c.workers, c.processes, c.process, c.extra) == (3, 2, 1, ["prog", "x"])
    c = Config.from_args(["--workers", "5", "--processes", "3", "--process", "2"], env={})
    assert (c.workers, c.processes, c.process, c.extra) == (5, 3, 2, [])
    c = Config.from_args([], env={})
    assert (c.workers, c.processes, c.process) == (1, 1, 0)
    assert Config.from_args([], env={"TIMELY_WORKERS": "4"}).workers == 4
    assert Config.from_args(["-w", "2"], env={"TIMELY_WORKERS": "4"}).workers == 2   # args win
    assert c.source_read_ahead == 8 << 20
    assert Config.from_args(["--source-read-ahead", "512K"], env={}).source_read_ahead == 512 << 10
    assert Config.from_args([], env={"TIMELY_SOURCE_READ_AHEAD": "0"}).source_read_ahead == 0
    assert (c.exchange_credit, Config.from_args(["--exchange-credit", "0"], env={}).exchange_credit) == (16 << 20, 0)


@pytest.mark.parametrize("argv,setting", [
    (["-w", "0"], "workers"),
    (["-w", "-3"], "workers"),
    (["-w", "abc"], "-w"),
    (["-n", "0"], "processes"),
    (["-n", "x"], "-n"),
    (["-p", "1"], "process"),
    (["-n", "2", "-p", "2"], "process"),
    (["-n", "2", "-p", "-1"], "process"),
    (["-p", "y"], "-p"),
    (["--gc-full-after", "-1"], "gc_full_after"),
    (["--source-read-ahead", "lots"], "source_read_ahead"),
    (["--source-read-ahead=-1M"], "source_read_ahead"),
    (["--exchange-credit", "100K"], "exchange_credit"),
])
def test_from_args_rejects_bad_values_naming_the_setting(clean_env, argv, setting):
    with pytest.raises(ConfigError) as info:
        Config.from_args(argv, env={})
    assert setting in str(info.value)


@pytest.mark.parametrize("argv,named,hint", [
    (["-w", "1", "--progres-mode", "kafka"], "--progres-mode", "--progress-mode"),
    (["--worker", "2"], "--worker", "--workers"),
    (["--chekpoint=off"], "--chekpoint", "--checkpoint"),
    (["-q"], "-q", None),
])
def test_a_mistyped_option_is_an_error_naming_it_and_the_closest_flag(clean_env, argv, named, hint):
    with pytest.raises(ConfigError) as info:
        Config.from_args(argv, env={})
    message = str(info.value)
    assert f"unknown option {named!r}" in message
    assert (f"did you mean {hint!r}" in message) if hint else "did you mean" not in message


def test_a_program_with_flags_of_its_own_still_runs_and_a_typo_stops_it():
    hello = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "hello.py")
    ok = subprocess.run([sys.executable, hello, "--rounds", "3", "-w", "1"], capture_output=True, text=True,
                        timeout=60)
    assert ok.returncode == 0 and "worker 0: seen 2" in ok.stdout, ok.stderr
    bad = subprocess.run([sys.executable, hello, "-w", "1", "--progres-mode", "kafka"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode != 0
    assert "unknown option '--progres-mode'" in bad.stderr and "'--progress-mode'" in bad.stderr, bad.stderr
    assert "seen" not in bad.stdout


def test_bad_environment_value_names_the_variable(clean_env):
    with pytest.raises(ConfigError, match="TIMELY_WORKERS"):
        Config.from_args([], env={"TIMELY_WORKERS": "many"})


def test_execute_rejects_a_bad_worker_count():
    with pytest.raises(ConfigError, match="workers"):
        timely.execute(0, lambda w: None)


def test_execute_from_args_runs_that_many_workers(clean_env):
    results = bounded(lambda: timely.execute_from_args(["-w", "2"], lambda w: (w.index, w.peers)))
    assert results == [(0, 2), (1, 2)]
    results = bounded(lambda: timely.execute(["-w", "3"], lambda w: w.peers))
    assert results == [3, 3, 3]


def test_workers_run_with_full_collections_rare_and_the_caller_gets_its_setting_back(clean_env):
    before = gc.get_threshold()
    tuned = (*before[:2], GC_FULL_AFTER)
    # -w 2 alone: forked processes, which inherit the setting
    assert bounded(lambda: timely.execute(["-w", "2"], lambda w: gc.get_threshold())) == [tuned] * 2
    assert gc.get_threshold() == before
    threads = Config(workers=2, worker_mode="threads", gc_full_after=50)
    assert bounded(lambda: timely.execute(threads, lambda w: gc.get_threshold())) == [(*before[:2], 50)] * 2
    assert bounded(lambda: timely.execute(Config(gc_full_after=0), lambda w: gc.get_threshold())) == [before]
    assert Config.from_args(["--gc-full-after", "0"], env={}).gc_full_after == 0
    assert Config.from_args([], env={"TIMELY_GC_FULL_AFTER": "200"}).gc_full_after == 200

    def fails(worker):
        raise ValueError("built wrong")
    with pytest.raises(ValueError, match="built wrong"):
        bounded(lambda: timely.execute(Config(workers=2, worker_mode="threads"), fails))
    assert gc.get_threshold() == before


@pytest.mark.parametrize("workers", WORKERS)
def test_check_progress_mode_accepts_correct_dataflows(workers):
    def build(worker):
        def dataflow(scope):
            handle, stream = scope.new_input()

            looped = scope.iterative(lambda sc: count_up_to_multiple(stream, sc, 5))
            out = scope.region(lambda r: looped.enter(r).map(lambda x: x).leave())
            return handle, out.capture(), out.probe()

        handle, captured, probe = worker.dataflow(dataflow)
        for epoch in range(3):
            handle.send_batch([epoch * 10 + worker.index + i for i in range(3)])
            handle.advance_to(epoch + 1)
            worker.step_while(lambda: probe.less_than(epoch + 1))
        handle.close()
        return captured

    results = execute_bounded(Config(workers=workers, check_progress=True), build)
    got = sorted(r for c in results for r in c.records())
    sent = [e * 10 + w + i for e in range(3) for w in range(workers) for i in range(3)]
    assert got == sorted(x + (-x) % 5 for x in sent)
