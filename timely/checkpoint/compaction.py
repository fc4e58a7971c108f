"""Compaction: a checkpoint store that stays about the size of the state it restores.

Every checkpoint appends (deltas, and now and then a base of a bin), so a store only
grows; a restore needs just the latest complete label of the latest incarnation: per
bin, its last base at or before that label and what follows. ``compact`` deletes the
rest (``Store.forget``): every incarnation older than the one the restore point is in
(those started later are kept: a rollback may be writing one right now), and every
entry of it labelled before its bin's last base at or before the restore point.

``Compactor`` decides when, per store and process: once this process's workers have
written ``GROWTH`` times the keys they hold since the last compaction (and at least
``MIN_KEYS``), it compacts on a thread of its own, so the store stays within about
``1 + GROWTH`` times the state and the cost of compacting (reading the store's record
heads) is a constant factor of what the checkpoints wrote, never paid on the processing
path; when the job ends (``finish``), the store is compacted once more if compaction
ran during the job (or ``MIN_KEYS`` were written) and commits came after. Only
the lowest process of the cluster compacts (``lead``), so two never delete the same
thing.

Costs: ``note`` O(1); ``compact`` one read of the store's heads (only each entry's
head is decoded, never its keys; a ``KafkaStore`` fetches only the records appended
since its last read of heads, so over a job every record is fetched about once) and
the deletes.

>>> import tempfile
>>> from timely.checkpoint.records import Commit, Entry, Incarnation
>>> from timely.checkpoint.store import DirStore
>>> with tempfile.TemporaryDirectory() as d:
...     s = DirStore(d, "job")
...     s.start(Incarnation("a", 1, None, None, (0,)))
...     w = s.writer(0, "a")
...     for label, kind in [(0, "base"), (1, "delta"), (2, "base"), (3, "delta")]:
...         _ = w.write(Entry("a", "op", 0, label, kind, 0, label, 0, 1, [("k", label)], [], []))
...     _ = w.write(Commit("a", 3, 0))
...     _ = w.flush(10)
...     gone, left = compact(s), [e.label for e in s.read(["a"]).entries]
...     s.close()
>>> gone, left
(2, [2, 3])
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Optional

from .records import restore_point

log = logging.getLogger("timely.checkpoint")

#: compact once the keys written since the last compaction reach this many times the keys held
GROWTH = 4
#: ... and at least this many (a small state is not worth a read of the store)
MIN_KEYS = 50_000


def compact(store: Any, inc: Optional[str] = None) -> int:
    """Delete what no restore can need any more (see the module); returns how many
    records went (0 when the store has no complete checkpoint in its latest life).
    ``inc``: the incarnation this process writes under, when it knows it (one read of
    the store, where finding the latest one first costs another)."""
    if inc is None:
        found = store.read().incarnations
        if not found:
            return 0
        inc = found[-1].id
    contents = store.read([inc], heads=True)
    rp = restore_point(contents.incarnations, contents.commits)
    if rp is None or rp.inc.id != contents.incarnations[-1].id or rp.inc.id != inc:
        return 0
    keep = {i.id for i in contents.incarnations if i.seq >= rp.inc.seq}
    floors = bases_before(contents.entries, rp.label)

    def obsolete(e: Any) -> bool:
        floor = floors.get((e.op, e.bin))
        return e.inc == inc and floor is not None and e.label < floor

    return store.forget(keep, obsolete)


def bases_before(entries: list, label: int) -> dict[tuple[str, int], int]:
    """Per ``(op, bin)``, the label of its latest base at or before ``label``, from the
    entries' heads (``EntryHead``). A base a restore at ``label`` could not use (a part
    lost) can only be one whose writer never made ``label`` durable, and then its later
    entries are missing too: the restore fails on them, with or without compaction.

    >>> from timely.checkpoint.records import EntryHead as H
    >>> bases_before([H("a", "op", 0, 0, "base"), H("a", "op", 0, 2, "delta"), H("a", "op", 0, 6, "base")], 5)
    {('op', 0): 0}
    """
    floors: dict[tuple[str, int], int] = {}
    for e in entries:
        if e.kind == "base" and e.label <= label and e.label > floors.get((e.op, e.bin), -1):
            floors[(e.op, e.bin)] = e.label
    return floors


class Compactor:
    """When to compact one store, for one process (see the module)."""

    def __init__(self, store: Any, lead: Callable[[], bool], current: Callable[[], Optional[str]] = lambda: None,
                 growth: Optional[int] = None, min_keys: Optional[int] = None) -> None:
        self.store = store
        self._lead = lead
        self._current = current         # the incarnation this process writes under, if known
        self.growth = GROWTH if growth is None else growth
        self.min_keys = MIN_KEYS if min_keys is None else min_keys
        self._written = 0
        self._notes = 0                 # commits noted since the last compaction started
        self._held: dict[int, int] = {}
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        #: instruments: compactions run, records they deleted, the last one's error
        self.runs = 0
        self.deleted = 0
        self.error: Optional[BaseException] = None

    def note(self, worker: int, keys_written: int, keys_held: int) -> None:
        """Worker ``worker`` of this process wrote ``keys_written`` more keys to the store
        and holds ``keys_held``; compact (on a thread) if that makes it due."""
        with self._lock:
            self._written += keys_written
            self._notes += 1
            self._held[worker] = keys_held
            if self._written < max(self.min_keys, self.growth * sum(self._held.values())):
                return
            if self._thread is not None and self._thread.is_alive() or not self._lead():
                return
            self._written = self._notes = 0
            self._thread = threading.Thread(target=self._run, name=f"compact {self.store.namespace}",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            gone = compact(self.store, self._current())
        except Exception as e:      # unreachable, closed: nothing is lost, the next note tries again
            self.error = e
            log.warning("compacting checkpoints of %s failed: %s", self.store.namespace, e)
            return
        self.runs += 1
        self.deleted += gone
        log.info("compacted checkpoints of %s: %d records deleted", self.store.namespace, gone)

    def finish(self, timeout: float) -> None:
        """The job's stores close: wait for a compaction under way, then compact what was
        written since, so a finished job leaves its store as small as a restore allows."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            # a compaction started by a worker's last commit may have read the store
            # before the others' last commits: any commit since it asks for one more
            active = self.runs > 0 or self._written >= self.min_keys
            due = (active and self._notes > 0 and self._lead()
                   and (thread is None or not thread.is_alive()))
            self._written = self._notes = 0
        if due:
            self._run()
