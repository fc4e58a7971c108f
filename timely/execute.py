"""execute and execute_from_args: run a computation on its workers.

``execute(config, build)`` starts ``config.workers`` workers, calls ``build(worker)`` on
each, steps each worker until its dataflows complete, and returns the list of what
``build`` returned, by worker index. If a worker raises, the others stop (fail-stop)
and the first error is raised here.

Where the workers run: with ``-n``/``-h``/``-j``, as threads of one process of a
cluster (``timely.communication.cluster``); otherwise, on a build whose threads share
one GIL, ``-w N`` runs N forked processes, so that workers add throughput
(``timely.communication.cluster.forked``; results come back pickled), and
``worker_mode="threads"`` (``--worker-mode threads``) keeps them threads of this
process, as does a single worker or a free-threaded build.
"""
from __future__ import annotations

import logging
import threading
import uuid
from typing import Any, Callable, Optional, Sequence

from broker import health as broker_health

from .communication.cluster import execute_cluster, execute_forked, workers_as_processes
from .communication.cluster.start import serve_metrics
from .communication import progress_trace
from .communication.kafka import KafkaProgress, progress_prefix
from .communication.thread import ProcessHub
from .checkpoint.registry import Registry
from .collector import full_collections_after
from .config import Config
from .worker import Worker, WorkerAborted

log = logging.getLogger("timely.execute")


def execute(config: Any, build: Callable[[Worker], Any],
            complete: Optional[Callable[[], Optional[str]]] = None) -> list[Any]:
    """Run ``build`` on every worker (see the module docstring), with Python's full
    collections made rare meanwhile (``Config.gc_full_after``, ``timely.collector``).

    ``complete()``, if given, says why the job is already done (or None): e.g.
    ``timely.connectors.kafka.job_complete``. A process of a cluster asks it while it
    waits for peers, and one of a single process before it starts; if the job is done,
    ``execute`` says so and returns ``[]`` without running anything, so a process a
    supervisor restarts after its job ended exits with status 0 at once."""
    config = Config.coerce(config)
    broker_health.configure(config.broker_timeout)
    with full_collections_after(config.gc_full_after):
        return _execute(config, build, complete)


def _execute(config: Config, build: Callable[[Worker], Any],
             complete: Optional[Callable[[], Optional[str]]]) -> list[Any]:
    if config.cluster:
        return execute_cluster(config, build, complete=complete)
    done = complete() if complete is not None else None
    if done:
        log.warning("the job is already complete (%s): nothing to do", done)
        return []
    if workers_as_processes(config):
        return execute_forked(config, build)
    hub = ProcessHub(config.workers)
    hub.trace = progress_trace.for_config(config, 0)
    hub.checkpoints = Registry(hub.agree, compact_keys=config.checkpoint_compact_keys or None)
    if config.progress_mode == "kafka":
        everyone = list(range(config.workers))
        hub.kafka = KafkaProgress(config, hub, everyone, everyone, joining=False,
                                  prefix=progress_prefix(config, uuid.uuid4().hex[:8]))

    workers = [Worker(config, hub.allocator(i), hub.abort) for i in range(config.workers)]
    metrics = serve_metrics(config, 0, workers, hub)
    try:
        return _run(config, build, hub, workers)
    finally:
        if metrics is not None:
            metrics.close()


def _run(config: Config, build: Callable[[Worker], Any], hub: ProcessHub, workers: list[Worker]) -> list[Any]:
    results: list[Any] = [None] * config.workers
    errors: list[BaseException] = []
    if config.check_progress:
        lock = threading.RLock()
        for worker in workers:
            worker.process_workers = workers
            worker.step_lock = lock

    def run(local: int) -> None:
        worker = workers[local]
        try:
            results[local] = worker.execute(build)
        except WorkerAborted:
            pass
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            errors.append(e)
            hub.fail(e)

    if config.workers == 1:
        run(0)
    else:
        threads = [threading.Thread(target=run, args=(i,), name=f"timely-worker-{i}", daemon=True)
                   for i in range(config.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    hub.close_clients()
    if errors:
        raise errors[0]
    if hub.error is not None:
        raise hub.error
    return results


def execute_from_args(argv: Sequence[str], build: Callable[[Worker], Any],
                      complete: Optional[Callable[[], Optional[str]]] = None) -> list[Any]:
    """``execute`` with a Config parsed from command-line arguments (``-w``, ``-n`` ...)."""
    return execute(Config.from_args(argv), build, complete)
