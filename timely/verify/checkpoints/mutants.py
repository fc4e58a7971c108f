"""Broken variants of the checkpoint code that the model must catch."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Optional

from ...checkpoint import records
from ...checkpoint.binlog import BinLog
from ...checkpoint.records import RestorePoint


@dataclass(frozen=True)
class CheckpointMutant:
    name: str
    description: str
    props: tuple                    # the properties that may catch it
    #: (owner, attribute, make(original) -> replacement); owner a class or a module of
    #: timely.checkpoint (then every module of the package holding the original is patched)
    patches: tuple = ()


def _delta_label_applied_max(original: Callable) -> Callable:
    def _write(self: BinLog, b: int, label: int, kind: str, keys: Optional[set] = None) -> None:
        return original(self, b, label - 1 if kind == "delta" else label, kind, keys)
    return _write


def _arrival_base_at_crossing_label(original: Callable) -> Callable:
    def cross(self: BinLog, x: Any) -> bool:
        label = self.minimum if self.applied_max is None else self.applied_max + 1
        self.arrived = {b: min(since, label) if x is None or since <= x else since
                        for b, since in self.arrived.items()}
        return original(self, x)
    return cross


class _Rewriting:
    """A writer that hands ``rewrite(record)`` on to ``writer``."""

    def __init__(self, writer: Any, rewrite: Callable[[Any], Any]) -> None:
        self.writer = writer
        self.rewrite = rewrite

    def write(self, record: Any) -> int:
        return self.writer.write(self.rewrite(record))


def _deletes_dropped(original: Callable) -> Callable:
    def _write(self: BinLog, b: int, label: int, kind: str, keys: Optional[set] = None) -> None:
        writer, self.writer = self.writer, _Rewriting(self.writer, lambda e: replace(e, deleted=[]))
        try:
            return original(self, b, label, kind, keys)
        finally:
            self.writer = writer
    return _write


class _AllDurable:
    @staticmethod
    def durable(ticket: int) -> bool:
        return True


def _durable_at_last_crossing(original: Callable) -> Callable:
    def durable(self: BinLog) -> Any:
        writer, self.writer = self.writer, _AllDurable
        try:
            return original(self)
        finally:
            self.writer = writer
    return durable


def _complete_any_commit(original: Callable) -> Callable:
    def complete_labels(commits: Any) -> list:
        return sorted({c.label for c in commits})
    return complete_labels


def _restore_ignoring_incarnations(original: Callable) -> Callable:
    def restore_point(incarnations: list, commits: list) -> Optional[RestorePoint]:
        labels = records.complete_labels(commits)
        if not incarnations or not labels:
            return None
        return RestorePoint(incarnations[-1], labels[-1], [c for c in commits if c.label == labels[-1]])
    return restore_point


def _fold_stale_deltas(original: Callable) -> Callable:
    def fold_bin(entries: list, label: int, where: str) -> tuple:
        latest = max((e.label for e in entries if e.kind == "base" and e.label <= label), default=None)
        if latest is not None:     # older deltas relabelled: they fold after the latest base
            entries = [replace(e, label=latest) if e.kind == "delta" and e.label < latest else e
                       for e in entries]
        return original(entries, label, where)
    return fold_bin


def _start_without_bases(original: Callable) -> Callable:
    def start(self: BinLog, label: int) -> None:
        bins, self.bins = self.bins, {}
        try:
            original(self, label)
        finally:
            self.bins = bins
    return start


CHECKPOINT_MUTANTS: dict[str, CheckpointMutant] = {m.name: m for m in (
    CheckpointMutant("delta_label_applied_max", "deltas labelled applied_max instead of applied_max + 1",
                     ("exactly_once",), ((BinLog, "_write", _delta_label_applied_max),)),
    CheckpointMutant("arrival_base_at_crossing_label",
                     "an arrived bin's base labelled with the crossing's label, not max(label, arrival)",
                     ("exactly_once",), ((BinLog, "cross", _arrival_base_at_crossing_label),)),
    CheckpointMutant("commit_before_durable",
                     "durable() is the last crossing's X, durable or not: commits before the state is",
                     ("exactly_once", "restorable"), ((BinLog, "durable", _durable_at_last_crossing),)),
    CheckpointMutant("complete_ignores_partitions", "complete_labels: any commit completes its label",
                     ("complete",), ((records, "complete_labels", _complete_any_commit),)),
    CheckpointMutant("restore_ignores_incarnations",
                     "restore_point: the latest complete label over every incarnation's commits, "
                     "restored from the latest incarnation",
                     ("complete",), ((records, "restore_point", _restore_ignoring_incarnations),)),
    CheckpointMutant("delta_without_deletes",
                     "a delta leaves out the keys deleted since the bin's last entry",
                     ("exactly_once",), ((BinLog, "_write", _deletes_dropped),)),
    CheckpointMutant("fold_stale_deltas", "fold_bin applies deltas older than the latest base (after it)",
                     ("exactly_once",), ((records, "fold_bin", _fold_stale_deltas),)),
    CheckpointMutant("start_without_bases", "a new life does not write every bin whole at its start",
                     ("restorable", "exactly_once"), ((BinLog, "start", _start_without_bases),)),
    CheckpointMutant("ship_without_cross", "F ships a bin without crossing its time first",
                     ("exactly_once",)),
)}


@contextmanager
def mutant_applied(name: Optional[str]) -> Iterator[None]:
    """Patch the real code as mutant ``name`` says (None: nothing), for the block."""
    undo: list = []
    try:
        for owner, attr, make in (CHECKPOINT_MUTANTS[name].patches if name else ()):
            if isinstance(owner, type):
                targets = [owner]
            else:
                targets = [mod for key, mod in list(sys.modules.items())
                           if key.startswith("timely.checkpoint") and
                           getattr(mod, attr, None) is getattr(owner, attr)]
            original = getattr(owner, attr)
            replacement = make(original)
            for target in targets:
                undo.append((target, attr, target.__dict__[attr]))
                setattr(target, attr, replacement)
        yield
    finally:
        for target, attr, value in reversed(undo):
            setattr(target, attr, value)


