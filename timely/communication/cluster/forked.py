"""Workers as processes: ``-w N`` on one machine, run as a loopback cluster of N forked processes.

CPython threads share one interpreter lock, so N worker threads compute no faster than
one (WordCount with ``-w 2`` threads ran at a fifth of ``-w 1``). Timely users reach for
``-w`` first, so ``execute`` runs ``-w N`` (without ``-n``) as N processes: this process
listens on N free 127.0.0.1 ports, forks N - 1 children, and each process runs one
worker of a cluster of N (``execute_cluster``, with a fresh secret), worker ``i`` in
process ``i``; this process is process 0. Each child sends back what ``build``
returned (pickled, over a pipe), and ``execute`` returns the results by worker index as
it does for threads. If a worker raises, the others stop and its error is raised here
(a child's error, pickled back; one that cannot be pickled comes back as a
``RuntimeError`` naming it); children still running when this process fails are
SIGKILLed by PID and reaped (at once if this process's own worker raised; after
``Config.timeout`` at most if another process failed, so its error can arrive).

What changes for a program: the workers share no memory (what ``build`` returns is the
way back, as in timely, where workers are threads but share nothing either), results
must be picklable, and records between workers are serialized as between processes of a
cluster. ``Config.worker_mode`` decides: ``"auto"`` (the default) forks where threads
cannot run in parallel (a build with the GIL, and ``os.fork`` available),
``"processes"`` always forks, ``"threads"`` keeps worker threads (cheap to start, shared
memory; for I/O-bound work). A free-threaded build runs threads in ``"auto"``, and
``"auto"`` follows ``TIMELY_WORKER_MODE`` when it is set, even for a Config built in code.

A fork copies this process as it is: open Kafka clients do not survive it (librdkafka
is not fork-safe: a child that opens a client of its own may abort when the parent's
client threads held its locks), nor do locks other threads of the program held. Open
clients inside ``build``, as the connectors do, or run threads (``--worker-mode
threads``) in a program that holds clients of its own before ``execute``.

Costs: start-up forks N - 1 processes and connects N (N - 1) / 2 loopback sockets
(a few ms each); then a record between workers costs its serialization, as in a cluster.
"""
from __future__ import annotations

import dataclasses
import os
import pickle
import secrets
import signal
import socket
import sys
import threading
from typing import Any, Callable

from ...config import ConfigError
from ..errors import ClusterError
from .start import execute_cluster

WORKER_MODES = ("auto", "processes", "threads")


def gil_enabled() -> bool:
    """Whether this interpreter runs Python threads one at a time (every build before
    3.13, and 3.13+ unless free-threaded with the GIL off).

    >>> isinstance(gil_enabled(), bool)
    True
    """
    probe = getattr(sys, "_is_gil_enabled", None)
    return True if probe is None else bool(probe())


def workers_as_processes(config: Any) -> bool:
    """Whether ``execute`` runs ``config.workers`` as forked processes (see the module
    docstring); a cluster process (``-n``, ``-h``, ``-j``) keeps its workers as threads.

    >>> from timely.config import Config
    >>> workers_as_processes(Config(workers=2, worker_mode="threads"))
    False
    >>> workers_as_processes(Config(workers=1))
    False
    """
    mode = config.worker_mode
    if mode == "auto":              # a Config built in code still follows the environment
        mode = os.environ.get("TIMELY_WORKER_MODE", "auto")
        if mode not in WORKER_MODES:
            raise ConfigError(f"environment TIMELY_WORKER_MODE={mode!r} is not valid: "
                              f"{', '.join(WORKER_MODES)}")
    if config.workers == 1 or config.cluster or mode == "threads":
        return False
    if mode == "processes":
        return True
    return gil_enabled() and hasattr(os, "fork")


def execute_forked(config: Any, build: Callable[[Any], Any]) -> list[Any]:
    """``execute`` with ``config.workers`` workers, each in a process of its own."""
    n = config.workers
    listeners = [_listener() for _ in range(n)]
    addresses = [f"127.0.0.1:{s.getsockname()[1]}" for s in listeners]
    secret = secrets.token_hex(16)

    def config_of(process: int) -> Any:
        return dataclasses.replace(config, workers=1, processes=n, process=process, hostfile=None,
                                   addresses=addresses, secret=secret, secret_file=None,
                                   worker_mode="threads", rescaling=False, join=None, nn=None)

    if config.metrics_port:         # imported once here, not once per forked process
        import timely.metrics.server  # noqa: F401
    sys.stdout.flush()              # or the children print what this process had buffered
    sys.stderr.flush()
    children: dict[int, int] = {}
    pipes: dict[int, int] = {}
    try:
        for process in range(1, n):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:            # the child: never returns
                os.close(read)
                _run_child(config_of(process), build, listeners[process], write,
                           [s for i, s in enumerate(listeners) if i != process])
            os.close(write)
            children[process], pipes[process] = pid, read
    except BaseException:
        _stop(children)
        for fd in pipes.values():
            os.close(fd)
        raise
    finally:
        for s in listeners[1:]:
            s.close()
    # Read the children's answers as they come, so a child never blocks on a full pipe.
    answers: dict[int, bytes] = {}
    readers = [threading.Thread(target=_read_all, args=(fd, answers, process), daemon=True,
                                name=f"timely-forked-{process}") for process, fd in pipes.items()]
    for t in readers:
        t.start()
    error: BaseException | None = None
    results: list[Any] = [None] * n
    try:
        results[0] = execute_cluster(config_of(0), build, listener=listeners[0])[0]
    except BaseException as e:  # noqa: BLE001 - re-raised below, or a child's error instead
        error = e
        if not isinstance(e, ClusterError):
            _stop(children)         # this worker failed: the others need not finish
    if error is not None:
        # Another process failed first: give the children the time a silent peer gets to
        # send their answers (a failing worker's own error), then stop those still running.
        for t in readers:
            t.join(config.timeout)
        _stop(children)
    for t in readers:
        t.join()
    for process, pid in children.items():
        os.waitpid(pid, 0)
    child_errors = []
    for process in sorted(pipes):
        kind, value = _decode(answers.get(process, b""), process)
        if kind == "ok":
            results[process] = value[0]
        else:
            child_errors.append(value)
    # The error a user wants is the one that started the stop: a worker's own exception,
    # not the "process N disconnected" the others saw after it.
    for candidate in ([error] if error is not None else []) + child_errors:
        if not isinstance(candidate, ClusterError):
            raise candidate
    if error is not None:
        raise error
    if child_errors:
        raise child_errors[0]
    return results


def _listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


def _run_child(config: Any, build: Callable, listener: socket.socket, fd: int, others: list) -> None:
    """Process ``config.process`` of the forked cluster: run, answer on ``fd``, exit."""
    code = 0
    try:
        for s in others:
            s.close()
        answer: tuple = ("ok", execute_cluster(config, build, listener=listener))
    except SystemExit as e:
        answer, code = ("exit", e.code), (e.code if isinstance(e.code, int) else 1)
    except BaseException as e:  # noqa: BLE001 - sent to the parent, which raises it
        answer, code = ("error", e), 1
    try:
        data = pickle.dumps(answer)
    except Exception as e:  # noqa: BLE001 - the answer itself cannot travel
        what = "its result" if answer[0] == "ok" else f"its error {answer[1]!r}"
        data = pickle.dumps(("error", RuntimeError(
            f"worker {config.process} (a forked process, -w runs workers as processes): {what} "
            f"cannot be sent back to the caller: {e}")))
        code = code or 1
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.close(fd)
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)      # not the parent's atexit handlers, nor its test runner's


def _read_all(fd: int, answers: dict, process: int) -> None:
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    answers[process] = b"".join(chunks)


def _decode(data: bytes, process: int) -> tuple:
    """A child's answer: ``("ok", results)``, or ``("error", exception)``."""
    if not data:
        return "error", ClusterError(f"worker {process} (a forked process) died without an answer")
    kind, value = pickle.loads(data)
    if kind == "exit":
        if value in (0, None):
            return "error", ClusterError(f"worker {process} (a forked process) exited before it finished")
        return "error", SystemExit(value)
    return kind, value


def _stop(children: dict[int, int]) -> None:
    """SIGKILL the children still running (by the PIDs this process forked)."""
    for pid in children.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
