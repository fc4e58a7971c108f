"""One process of a cluster, from start to end: its secret, its hub, its workers.

``execute_cluster`` is ``timely.execute`` for one process of a cluster (or a process
joining one). It reads the cluster secret (``secret_from``: TIMELY_CLUSTER_SECRET, the
secret file, or the TOML config), listens and connects (``ClusterHub``), starts Kafka
progress if configured, lets SIGTERM ask the process to leave the cluster, runs
``Config.workers`` worker threads until their dataflows complete (or the process has
left), then says goodbye to every peer. If a worker raises or the cluster fails, every
worker stops, the connections close without goodbye (the peers see this process
fail), and the first error is raised. A SIGTERM asks the process to leave; if it cannot
(``timely.rescaling.leave.refusal``), it stops at once, and ``execute`` exits with status
143 as the signal's default action would: the others roll back as after a crash.

This module runs workers, so it imports ``timely.worker``: it is the one module of
``timely.communication`` above the worker, and nothing the worker imports imports it.

Costs: start-up waits for the other processes as long as it takes, saying whom it waits
for (``Config.connect_timeout`` bounds it; timely.communication.cluster.patience); the
end waits at most ``Config.timeout`` for their goodbyes.
"""
from __future__ import annotations

import os
import signal
import socket
import threading
import logging
import uuid
from typing import Any, Callable, Optional

from ...checkpoint.registry import Registry
from ...worker import Worker, WorkerAborted
from ..errors import ClusterError, Terminated
from ..kafka import KafkaProgress, progress_prefix
from .hub import ClusterHub
from .patience import JobComplete

log = logging.getLogger("timely.cluster")


def secret_from(config: Any) -> bytes:
    """The cluster secret: TIMELY_CLUSTER_SECRET, else the file in config.secret_file."""
    value = os.environ.get("TIMELY_CLUSTER_SECRET")
    if value:
        return value.encode()
    path = getattr(config, "secret_file", None)
    if path:
        try:
            with open(path, "rb") as f:
                data = f.read().strip()
        except OSError as e:
            raise ClusterError(f"cannot read the cluster secret file {path!r}: {e}") from None
        if data:
            return data
        raise ClusterError(f"the cluster secret file {path!r} is empty")
    secret = getattr(config, "secret", None)
    if secret:
        return secret.encode()
    raise ClusterError("cluster mode needs a secret: set TIMELY_CLUSTER_SECRET, --secret-file, "
                       "or `secret` in the TOML config")


def execute_cluster(config: Any, build: Callable[[Any], Any], listener: Optional[socket.socket] = None,
                    complete: Optional[Callable[[], Optional[str]]] = None) -> list[Any]:
    """``execute`` for one process of a cluster (or a process joining one); ``listener``:
    a socket already listening on this process's address, if the caller bound it;
    ``complete``: the program's check that the job is already done, asked while this
    process waits for its peers (it then returns ``[]`` at once)."""
    secret = secret_from(config)
    joining = config.join is not None
    processes = config.process + 1 if joining else config.processes
    hub = ClusterHub(config, secret, processes, config.processes, joining)
    hub.checkpoints = Registry(hub.agree, lambda: hub.membership.coordinator() == hub.process,
                               config.checkpoint_compact_keys or None)
    hub.complete = complete
    workers: list = []              # the metrics server reads them once they exist
    metrics = serve_metrics(config, config.process, workers, hub)
    try:
        return _run(config, build, hub, listener, processes, workers)
    finally:
        if metrics is not None:
            metrics.close()


def serve_metrics(config: Any, process: int, workers: list, hub: Any) -> Any:
    """Process ``process``'s metrics server (timely.metrics), if ``--metrics-port`` asks."""
    if not config.metrics_port:
        return None
    from ...metrics.server import serve
    return serve(config, process, workers, hub)


def _run(config: Any, build: Callable[[Any], Any], hub: ClusterHub, listener: Optional[socket.socket],
         processes: int, workers: list) -> list[Any]:
    hub.listen(listener)
    _leave_on_sigterm(hub)          # from the start: a SIGTERM while connecting stops it too
    try:
        hub.connect_all()
        # one name per start of the job: a restarted job never reads an old run's logs
        hub.run = hub.agree("run", lambda: uuid.uuid4().hex[:8])
        if config.progress_mode == "kafka":
            w = config.workers
            round_, members = hub.membership.current_round()
            local = list(range(config.process * w, (config.process + 1) * w))
            everyone = sorted(set(members or range(processes * w)) | set(local))
            hub.kafka = KafkaProgress(config, hub, local, everyone, hub.joining,
                                      progress_prefix(config, hub.run, round_))
    except JobComplete as done:
        log.warning("process %d: the job is already complete (%s): nothing to do", config.process, done)
        hub.kill()
        hub.close_clients()
        return []
    except BaseException:
        hub.kill()
        hub.close_clients()
        raise
    if not config.rescaling:
        hub.stop_accepting()
    results: list[Any] = [None] * config.workers
    errors: list[BaseException] = []
    workers.extend(Worker(config, hub.allocator(i), hub.abort) for i in range(config.workers))
    hub.membership.started()

    def run(local: int) -> None:
        worker = workers[local]
        try:
            results[local] = worker.execute(build)
        except WorkerAborted:
            pass
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
            if not isinstance(e, ClusterError):
                hub.fail(ClusterError(f"worker {worker.index} failed: {e!r}"))

    threads = [threading.Thread(target=run, args=(i,), name=f"timely-worker-{config.process}-{i}",
                                daemon=True) for i in range(config.workers)]
    for t in threads:
        t.start()
    for t in threads:
        # in short waits: Python runs a signal's handler (SIGTERM: leave) on this thread
        # only, and a signal the kernel gave another thread (a worker's, librdkafka's)
        # does not interrupt a join without a timeout: it waited for the job's end
        while t.is_alive():
            t.join(0.1)
    if hub.error is not None or errors:
        hub.kill()
        hub.close_clients()
        if isinstance(hub.error, Terminated) or hub.membership.leave_signalled:
            # stopped after a SIGTERM (no leave was possible, or the cluster stopped under
            # it): exit as the signal's default action does
            log.error("process %d stops: %s", config.process, hub.error)
            raise SystemExit(143)
        first = next((e for e in errors if not isinstance(e, ClusterError)), None)
        raise first or hub.error or errors[0]
    if hub.membership.leave_started:
        hub.membership.leave_finished()
    hub.shutdown()
    hub.close_clients()
    return results


def _leave_on_sigterm(hub: ClusterHub) -> None:
    """SIGTERM (what an orchestrator sends to scale down) asks this process to leave."""
    if threading.current_thread() is not threading.main_thread():
        return                      # signals can only be handled on the main thread
    signal.signal(signal.SIGTERM, lambda signum, frame: hub.membership.request_leave("SIGTERM", signal=True))
