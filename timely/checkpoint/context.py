"""A dataflow's checkpointing on one worker: what takes part, whether it is on, and the
restore at start-up.

While a dataflow is built, its stateful operators (``add_state``), Kafka sources
(``add_source``), input handles (``add_input``) and commit operator (``add_commit``)
register here. When the build is over (``finish``, before the first step) it decides
whether checkpoints are on (``Config.checkpoint``: ``off``; ``kafka`` or ``dir:PATH``; or
``auto``, the default: on for a dataflow that reads with ``kafka_source`` and commits
with ``kafka_commit``), opens the store, agrees with the other processes on the
incarnation, and restores: every bin this worker holds is loaded as of the restore
point, the sources read on from the positions stored with it, and input handles start
at its label. It then adds a commit operator if the dataflow has none, and writes the
bins whole under the new incarnation.

Costs: registration O(1); the restore reads the store once per process and folds the
entries of this worker's bins (O(their size)).
"""
from __future__ import annotations

import logging
import re
import time
from typing import Any, Callable, Optional

from ..collector import paused_gc
from .binlog import BinLog
from .commit import checkpoint_commit, commit_record
from .records import CheckpointError, CheckpointMissing, RestorePoint, fold_bin

log = logging.getLogger("timely.checkpoint")


class StateEntry:
    """A stateful operator as checkpointing sees it."""

    __slots__ = ("op", "states", "nbins", "ack", "tracked", "minimum", "owner_of")

    def __init__(self, op: str, states: Any, nbins: int, ack: Any, tracked: bool, minimum: int) -> None:
        self.op = op
        self.states = states         # its BinStates: .bins {bin: Bin}, .log
        self.nbins = nbins
        self.ack = ack               # its acknowledgement stream
        self.tracked = tracked       # its logic mutates the bins' dicts (stateful_unary/binary)
        self.minimum = minimum


def _namespace(text: str) -> str:
    """A store namespace from free text: what Kafka topic names and file names accept."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "timely"


class DataflowCheckpoint:
    """See the module docstring."""

    def __init__(self, worker: Any, scope: Any) -> None:
        self.worker = worker
        self.scope = scope
        self.states: list[StateEntry] = []
        self.sources: list[Any] = []
        self.inputs: list[Any] = []
        self.sinks: list[Any] = []
        self.commits: list[Any] = []
        self.enabled = False
        self.decided = False
        self.namespace: Optional[str] = None
        self.inc: Optional[str] = None
        self.restored: Optional[RestorePoint] = None
        self.writer: Any = None
        self.interval = max(1, int(getattr(worker.config, "checkpoint_interval", 1)))
        self._noted = 0                 # keys the binlogs had written at the last commit
        self.last_label: Optional[int] = None   # of this worker's latest durable commit

    # ---- registration, while the dataflow is built -------------------------------------
    def add_state(self, op: str, states: Any, nbins: int, ack: Any, tracked: bool, minimum: int) -> None:
        if any(s.op == op for s in self.states):
            raise CheckpointError(f"two stateful operators are named {op!r} in one dataflow")
        if self.commits:
            raise CheckpointError(f"stateful operator {op!r} is built after the dataflow's commit "
                                  f"(kafka_commit): build the commit last, so it waits for every "
                                  f"operator's checkpoints")
        self.states.append(StateEntry(op, states, nbins, ack, tracked, minimum))

    def add_source(self, state: Any) -> None:
        self.sources.append(state)

    def add_input(self, handle: Any) -> None:
        self.inputs.append(handle)

    def add_sink(self, state: Any) -> None:
        self.sinks.append(state)

    def add_commit(self, commit: Any) -> None:
        self.commits.append(commit)

    def acks(self) -> list:
        """The acknowledgement streams of the stateful operators built so far."""
        return [s.ack for s in self.states]

    # ---- the decision and the restore ------------------------------------------------------
    def _mode(self) -> str:
        mode = getattr(self.worker.config, "checkpoint", "auto")
        if mode == "auto":
            return "kafka" if self.sources and self.commits else "off"
        return mode

    def finish(self) -> None:
        """The dataflow is built: decide, restore, and start writing (see the module)."""
        self.decided = True
        mode = self._mode()
        if mode == "off" or not (self.states or self.sources):
            for s in self.states:
                s.states.log = None
            return
        self.enabled = True
        worker = self.worker
        config = worker.config
        group = next((s.group_id for s in self.sources if getattr(s, "group_id", None)), None)
        self.namespace = _namespace(config.checkpoint_name or f"{group or 'timely'}.{self.scope.name}")
        brokers = next((s.brokers for s in self.sources), None) or config.kafka_bootstrap
        if brokers is not None and not isinstance(brokers, str):
            brokers = ",".join(brokers)
        registry = worker.checkpoints
        store = registry.store(mode, self.namespace, brokers)
        started = time.perf_counter()
        decision = registry.decide(self.namespace, list(worker.routing_workers), self._local_bins(),
                                   joiner=worker.is_joiner)
        decided = time.perf_counter()
        self.inc = decision.inc.id
        self.restored = decision.restore
        if not self.commits:
            checkpoint_commit(self.scope, [], self)
        self.writer = store.writer(worker.index, self.inc)
        label = self.scope.minimum
        if self.restored is not None:
            label = self.restored.label
            self._restore(registry)
        folded = time.perf_counter()
        for s in self.states:
            bins = s.states.bins
            binlog = BinLog(s.op, bins, self.interval, self.writer, self.inc, worker.index,
                            s.minimum, s.states.pending_wire, s.tracked)
            for bin in bins.values():
                bin.state = binlog.adopt(bin.state)
            s.states.log = binlog
            binlog.start(label)
        if self.restored is None:
            # A fresh life's start is a checkpoint too: its empty bins, and where its
            # sources began. Written after the bases, so durable after them. Without it,
            # a crash before the first complete checkpoint left no restore point, and the
            # survivors started afresh from the consumer group's offsets, which the
            # workers that had committed their partitions had moved on: wrong totals.
            self.writer.write(commit_record(self, label, worker.index))
        for handle in self.inputs:
            handle.restart_at(label)
        done = time.perf_counter()
        #: instruments of the start: seconds deciding (and reading the store), restoring
        #: (folding the entries), writing the new life's bases; keys restored
        self.timings = {"decide": decided - started, "fold": folded - decided, "bases": done - folded,
                        "keys": sum(s.states.keys() for s in self.states)}
        log.info("worker %d: checkpoints of %s to %s, incarnation %s%s", worker.index, self.namespace,
                 mode, self.inc, "" if self.restored is None else
                 f", restored at {self.restored.label} from incarnation {self.restored.inc.id} "
                 f"({self.timings['keys']} keys: store read {self.timings['decide']:.3f} s, fold "
                 f"{self.timings['fold']:.3f} s, bases written {self.timings['bases']:.3f} s)")

    def _local_bins(self) -> Callable[[str, int], bool]:
        """Whether an ``(op, bin)`` is held by a worker of this process when the dataflow
        starts (bins are spread round robin over the workers; a joiner holds none)."""
        workers = self.worker.initial_workers
        hub = self.worker.allocator.hub
        local = set(range(hub.first_index, hub.first_index + hub.workers))
        if self.worker.is_joiner:
            return lambda op, b: False
        return lambda op, b: workers[b % len(workers)] in local

    def _restore(self, registry: Any) -> None:
        rp = self.restored
        stored_ops = rp.ops()
        mine = {s.op: s.nbins for s in self.states}
        if stored_ops != mine:
            raise CheckpointError(f"the checkpoint of {self.namespace!r} at {rp.label} holds stateful "
                                  f"operators {sorted(stored_ops.items())}, but this dataflow builds "
                                  f"{sorted(mine.items())}: restore it with the program that wrote it, "
                                  f"or start afresh under another --checkpoint-name")
        entries = registry.entries(self.namespace)
        # the start of a fresh life: a bin whose worker wrote no base yet was empty there
        first = rp.inc.parent is None and rp.label == self.scope.minimum
        with paused_gc():
            for s in self.states:
                for b, bin in s.states.bins.items():
                    where = f"checkpoint {self.namespace!r} incarnation {rp.inc.id}: {s.op} bin {b}"
                    found = entries.get((s.op, b), [])
                    state, pending = ({}, {}) if first and not found else fold_bin(found, rp.label, where)
                    bin.state = state
                    bin.pending = pending
                    s.states.restored_pending(b, pending)
        positions = rp.positions()
        for source in self.sources:
            missing = [tp for tp in source.every if tp not in positions]
            if missing:
                raise CheckpointMissing(f"checkpoint {self.namespace!r} at {rp.label} has no position "
                                        f"for partitions {missing[:8]} of the source")
            source.restart_at(positions)

    # ---- a crash --------------------------------------------------------------------------
    def teardown(self, timeout: float = 5.0) -> None:
        """The dataflow is dropped (timely.rescaling.recovery): its sources stop reading,
        its sinks discard what they had not sent and wait for what was in flight (nothing
        of this life may land after the next one looked), its checkpoint writes finish."""
        for source in self.sources:
            source.close(quiet=True, timeout=timeout)
        for sink in self.sinks:
            sink.abort(timeout)
        if self.writer is not None:
            self.writer.flush(timeout)

    # ---- what the commit operator asks -----------------------------------------------------
    def committed(self, label: int) -> None:
        """This worker's commit at ``label`` is durable: tell the store's compactor what
        the checkpoints wrote since the last one, and the keys held."""
        self.last_label = label
        written = sum(s.states.log.keys_written for s in self.states if s.states.log is not None)
        compactor = self.worker.checkpoints.compactors.get(self.namespace)
        if compactor is not None:
            compactor.note(self.worker.index, written - self._noted,
                           sum(s.states.keys() for s in self.states))
        self._noted = written

    def ops(self) -> dict:
        return {s.op: s.nbins for s in self.states}

    def final_label(self) -> Optional[int]:
        """Where a restart resumes once every input is exhausted: the sources' end epoch
        (every worker's is the same), else the last boundary before the time this
        worker's input handles closed at (every worker crossed it), else None."""
        ends = [s.end_epoch for s in self.sources]
        if ends and None not in ends:
            return min(ends)
        closed = [h.closed_at for h in self.inputs if getattr(h, "closed_at", None) is not None]
        if closed and not self.sources:
            return (min(closed) // self.interval) * self.interval
        return None
