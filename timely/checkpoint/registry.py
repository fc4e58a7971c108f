"""The checkpoint stores of one process, and the incarnation its workers agree on.

Every worker thread of a process builds the same dataflows, so they share one store per
namespace (one Kafka producer or one SQLite connection), one read of it at start-up,
and one decision of where the job restarts from. The decision is made once for the
whole cluster: by the process itself when it runs alone, and otherwise by the lowest
process of the cluster, which tells the others (``hub.agree``), so every process of a
life writes under the same incarnation and restores the same label.

Costs: opening a store once per namespace; the start-up read once per process
(O(store size), decoding only the entries of the bins its workers hold).
"""
from __future__ import annotations

import threading
import uuid
from typing import Any, Callable, Optional

from ..collector import paused_gc
from .compaction import Compactor
from .records import CheckpointError, Entry, Incarnation, RestorePoint, restore_point
from .store import DirStore, Store


class Decision:
    """Where a life of the job starts: its incarnation and the restore point (None for a
    fresh start)."""

    __slots__ = ("inc", "restore")

    def __init__(self, inc: Incarnation, restore: Optional[RestorePoint]) -> None:
        self.inc = inc
        self.restore = restore

    def to_wire(self) -> tuple:
        r = self.restore
        return ((self.inc.id, self.inc.seq, self.inc.parent, self.inc.start, list(self.inc.members)),
                None if r is None else (r.inc.id, r.label))


def open_store(mode: str, namespace: str, brokers: Optional[str], options: Optional[dict] = None) -> Store:
    """The store ``--checkpoint`` names: ``dir:PATH`` or ``kafka`` (at ``brokers``)."""
    if mode.startswith("dir:"):
        return DirStore(mode[4:], namespace)
    if mode in ("kafka", "auto"):
        if not brokers:
            raise CheckpointError(f"checkpoints of {namespace!r} go to Kafka, but no broker is known: "
                                  f"use a kafka_source, --kafka-bootstrap, or --checkpoint dir:PATH")
        from .kafka_store import KafkaStore
        return KafkaStore(brokers, namespace, options)
    raise CheckpointError(f"unknown checkpoint store {mode!r}: use kafka, dir:PATH or off")


class Registry:
    """One process's stores and decisions (see the module docstring)."""

    def __init__(self, agree: Callable[[str, Callable[[], Any]], Any],
                 lead: Callable[[], bool] = lambda: True, compact_keys: Optional[int] = None) -> None:
        self._agree = agree
        self._lead = lead                   # this process compacts the stores (the lowest member)
        self._compact_keys = compact_keys   # Config.checkpoint_compact_keys (None: the default)
        self._lock = threading.Lock()
        self.stores: dict[str, Store] = {}
        self.compactors: dict[str, Compactor] = {}
        self.decisions: dict[str, Decision] = {}
        self._entries: dict[str, dict] = {}
        self._installed: dict[str, tuple] = {}   # a rollback's decisions, not read yet

    def store(self, mode: str, namespace: str, brokers: Optional[str], options: Optional[dict] = None) -> Store:
        with self._lock:
            found = self.stores.get(namespace)
            if found is None:
                found = self.stores[namespace] = open_store(mode, namespace, brokers, options)
                self.compactors[namespace] = Compactor(found, self._lead, lambda: self._current(namespace),
                                                         min_keys=self._compact_keys)
            return found

    def _current(self, namespace: str) -> Optional[str]:
        """The incarnation this process writes ``namespace`` under (None: not decided)."""
        found = self.decisions.get(namespace)
        return None if found is None else found.inc.id

    @staticmethod
    def key(namespace: str) -> str:
        """The name under which the cluster agrees on ``namespace``'s incarnation."""
        return f"checkpoint:{namespace}"

    @staticmethod
    def _start_life(store: Store, members: list[int]) -> tuple:
        """Read the store, find its restore point, write a new incarnation from there."""
        contents = store.read()
        rp = restore_point(contents.incarnations, contents.commits)
        seq = max((i.seq for i in contents.incarnations), default=0) + 1
        inc = Incarnation(f"{seq}-{uuid.uuid4().hex[:8]}", seq,
                          None if rp is None else rp.inc.id, None if rp is None else rp.label,
                          tuple(members))
        store.start(inc)
        return Decision(inc, rp).to_wire()

    def decide(self, namespace: str, members: list[int],
               want: Optional[Callable[[str, int], bool]] = None, joiner: bool = False) -> Decision:
        """The incarnation this life of ``namespace`` writes under, agreed by the cluster
        (or the one a rollback installed); reading its restore point also reads the
        entries ``want(op, bin)`` accepts (this process's bins), once. A ``joiner``
        restores no bin: it may start from this life's latest complete checkpoint."""
        with self._lock:
            found = self.decisions.get(namespace)
            if found is not None:
                return found
            store = self.stores[namespace]
            wire = self._installed.pop(namespace, None)
            if wire is None:
                wire = self._agree(self.key(namespace), lambda: self._start_life(store, members))
            decision = self._from_wire(namespace, store, wire, want, joiner)
            self.decisions[namespace] = decision
            return decision

    def redecide(self, members: list[int]) -> dict[str, tuple]:
        """(On the coordinator of a rollback.) A new life of every namespace this process
        has open, from its last complete checkpoint: ``{namespace: decision}``."""
        with self._lock:
            return {ns: self._start_life(store, members) for ns, store in self.stores.items()}

    def install(self, decisions: dict[str, tuple]) -> dict[str, tuple]:
        """Adopt a rollback's decisions (what ``redecide`` made), for the dataflows built
        next; returns them by agreement key."""
        with self._lock:
            self.decisions.clear()
            self._entries.clear()
            self._installed = {ns: wire for ns, wire in decisions.items() if ns in self.stores}
        return {self.key(ns): wire for ns, wire in decisions.items()}

    def _from_wire(self, namespace: str, store: Store, wire: tuple,
                   want: Optional[Callable[[str, int], bool]], joiner: bool = False) -> Decision:
        """The decision ``wire`` names, and (if it restores) the entries of its restore
        point that ``want`` accepts, in one read of the store."""
        (iid, seq, parent, start, members), restore = wire
        inc = Incarnation(iid, seq, parent, start, tuple(members))
        if restore is None:
            return Decision(inc, None)
        rid, label = restore
        with paused_gc():      # a restore makes many long-lived objects: no collection midway
            contents = store.read([rid], want)
            found: dict = {}
            for e in contents.entries:
                found.setdefault((e.op, e.bin), []).append(e)
        self._entries[namespace] = found
        by_id = {i.id: i for i in contents.incarnations}
        if rid not in by_id and joiner:
            # Once this life completed a checkpoint, compaction forgot the one it started
            # from; a joiner restores no bin, so this life's latest checkpoint serves it.
            rp = restore_point(contents.incarnations, contents.commits)
            if rp is not None and rp.inc.id == iid:
                return Decision(inc, rp)
        if rid not in by_id:
            raise CheckpointError(f"the restore point names incarnation {rid}, which this process "
                                  f"cannot read from the store {store.namespace!r}")
        commits = [c for c in contents.commits if c.inc == rid and c.label == label]
        return Decision(inc, RestorePoint(by_id[rid], label, commits))

    def entries(self, namespace: str) -> dict[tuple[str, int], list[Entry]]:
        """The restore point's entries by ``(op, bin)`` (what ``decide`` read)."""
        with self._lock:
            return self._entries.get(namespace, {})

    def close(self) -> None:
        with self._lock:
            for compactor in self.compactors.values():
                compactor.finish(10)
            for store in self.stores.values():
                store.close()
            self.stores.clear()
