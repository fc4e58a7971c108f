"""Kafka progress mode: progress batches go through ``broker/`` instead of all-to-all.

With ``Config.progress_mode == "kafka"`` every Progcaster of this process pushes its
batches to its worker's log (``broker.ProgressLog``): a worker's batches of one step,
of every scope and dataflow, wait in ``pending`` and go out as ONE Kafka record when
the step ends (``flush``, from the allocator's ``flush_sends``), so a step costs one
produce and its readers one fetch, however many scopes it ran. The process's own
workers get each batch at once through their queues, as peer-to-peer does (the
allocator adds their pushers): a round between two workers of one process never waits
for the broker. One ``broker.Subscriber`` per process tails the logs of every *other*
process's workers and hands each batch to every local worker thread through the same
queues: Progcaster.recv does not know the difference. Every batch is still in its
writer's log, in order, for joiners (snapshots + tail), for ``python -m broker status``
and for the survivors of a crash. Data still flows over the cluster's TCP connections
(or between threads).

A joining process subscribes to each worker's latest snapshot plus the tail of its
log: it needs no bootstrap server. The others subscribe to a joiner's log when its
RescaleMessage arrives.

Costs: a worker step that sent progress is one Kafka record, appended by the worker
when its step ends (a list append per batch before that); the subscriber hands each
batch it reads to every local worker, O(workers per process) deque appends. Twice a
second a background thread checks that the logs are still the ones this process
wrote; every ``kafka_trim_interval`` it deletes what every other process's subscriber
has read. The Kafka client (confluent-kafka) is imported only where it is
called, so that this module loads without the ``[kafka]`` extra.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Optional

from broker import BrokerError, BrokerLostError, ProgressLog, Subscriber

from .errors import ClusterError

log = logging.getLogger("timely.kafka")


class _LogPusher:
    """Holds a Progcaster's messages ``(source, seq, updates)`` for its worker's next
    record (``KafkaProgress.flush`` at the end of the worker's step)."""

    __slots__ = ("_pending", "_channel")

    def __init__(self, pending: dict[int, list], channel: int) -> None:
        self._pending = pending
        self._channel = channel

    def push(self, message: Any) -> None:
        source, seq, updates = message
        self._pending[source].append((self._channel, seq, updates))


def progress_prefix(config: Any, run: str, round_: int = 0) -> str:
    """The topic prefix of a run's progress logs: ``--kafka-prefix``, the run (a fresh
    start of the job: old logs are never read again), and the round after crashes.

    >>> progress_prefix(type("C", (), {"kafka_prefix": "job"}), "ab12", 2)
    'job.ab12.r2'
    """
    base = f"{config.kafka_prefix}.{run}"
    return base if not round_ else f"{base}.r{round_}"


class KafkaProgress:
    """One process's progress transport over Kafka: the writer and the subscriber."""

    def __init__(self, config: Any, hub: Any, local_workers: list[int], cluster_workers: list[int],
                 joining: bool, prefix: str) -> None:
        self.config = config
        self.hub = hub
        bootstrap = config.kafka_bootstrap
        options = dict(config.kafka_options or {})
        #: the logs of one run of the job (and one round of it: a rollback after a crash
        #: starts every worker's log afresh): ``progress_prefix``
        self.prefix = prefix
        log.info("progress logs under %s", prefix)
        trace = hub.trace.mark_record if getattr(hub, "trace", None) is not None else None
        self.log = ProgressLog(bootstrap, prefix, local_workers,
                               snapshot_interval=config.kafka_snapshot_interval,
                               segment_records=config.kafka_segment_records, options=options, trace=trace)
        self.subscriber = Subscriber(bootstrap, prefix, self._deliver,
                                     name=f"p{config.process}", on_error=self._error, options=options,
                                     check=lambda: self.log.error, trace=trace)
        #: per local worker, the batches of its current step (its thread only)
        self.pending: dict[int, list] = {w: [] for w in local_workers}
        self.local_workers = list(local_workers)
        #: the snapshots a joiner installs: the other processes' workers (ours reach
        #: our workers directly, so this process never reads its own logs)
        self.snapshots: dict[int, Optional[tuple]] = {}
        for w in cluster_workers:
            if w not in self.pending:
                self.snapshots[w] = self.subscriber.add(w, from_snapshot=joining)
        self.subscriber.start()
        self._stop = threading.Event()
        self._trimmer = threading.Thread(target=self._trim_loop, daemon=True, name="timely-kafka-trim")
        self._trimmer.start()

    def _trim_loop(self) -> None:
        """Twice a second, check that our logs are still the ones we wrote (a broker
        that came back empty must stop the computation, not stall it); every
        ``kafka_trim_interval`` seconds, delete what every subscriber has read (where the
        broker can)."""
        from confluent_kafka import KafkaException
        next_trim = time.monotonic() + self.config.kafka_trim_interval
        trimming = True
        while not self._stop.wait(0.5):
            try:
                self.log.verify()
            except BrokerLostError as e:
                self._error(e)
                return
            except (KafkaException, BrokerError, OSError):
                continue                    # no answer: a stall, which resumes by itself
            if trimming and time.monotonic() >= next_trim:
                next_trim = time.monotonic() + self.config.kafka_trim_interval
                processes = getattr(self.hub, "processes", 1)
                membership = getattr(self.hub, "membership", None)
                # a departed subscriber holds nothing back
                gone = membership.departed if membership is not None else ()
                # every other live process's subscriber (ours does not read our logs)
                readers = [f"p{p}" for p in range(processes) if p not in gone and p != self.config.process]
                try:
                    if self.log.trim(readers) == 0 \
                            and not self.log.can_delete:
                        trimming = False
                except (KafkaException, BrokerError) as e:
                    log.warning("trimming the progress logs: %s", e)

    def _deliver(self, worker: int, channel: int, seq: int, updates: Any) -> None:
        hub = self.hub
        message = (worker, seq, updates)
        queues = hub.queues(channel)
        for local in range(hub.workers):
            queues[local].append(message)
            hub.events[local].append(channel)
            hub.wakes[local].set()

    def _error(self, error: BaseException) -> None:
        fail = getattr(self.hub, "fail", None)
        if fail is not None:
            fail(ClusterError(f"progress over Kafka failed: {error}"))
        else:
            self.hub.kafka_error = error
            for wake in self.hub.wakes:
                wake.set()

    def pushers(self, channel: int) -> list:
        """The pusher that puts a Progcaster's batches in its worker's next record (the
        allocator adds the pushers to this process's workers)."""
        return [_LogPusher(self.pending, channel)]

    def flush(self, worker: int) -> None:
        """Append what local ``worker`` sent in its step as one record (its thread)."""
        batches = self.pending[worker]
        if batches:
            self.pending[worker] = []
            self.log.append_batches(worker, batches)

    def subscribe(self, workers: range) -> None:
        """A process joined: tail its workers' logs from their beginning."""
        for w in workers:
            if w not in self.snapshots and w not in self.pending:
                self.snapshots[w] = self.subscriber.add(w, from_snapshot=False)

    def final_positions(self) -> dict[int, int]:
        """Our workers' log lengths, once every record is acknowledged (a leaving
        process tells the others, so they stop tailing at the end). Called once our
        workers stopped: what their last steps sent is appended first."""
        for w in self.local_workers:
            self.flush(w)
        self.log.flush(self.config.timeout)
        return {w: self.log._lseq[w] for w in self.log.workers}

    def departed(self, workers: range, ends: Optional[dict] = None) -> None:
        """Processes that left: stop tailing their logs at the ends they announced."""
        for w in workers:
            if ends is not None and w in ends:
                self.subscriber.retire(w, ends[w])

    def close(self) -> None:
        self._stop.set()
        self.subscriber.stop()
        try:
            self.log.close()
        except BrokerError as e:
            log.warning("closing the progress log: %s", e)
