"""The checkpoint protocol as a model: workers, bins, crossings, moves, commits, crashes and
restores on the real checkpoint code (see the package docstring)."""
from __future__ import annotations

import random
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from ...checkpoint import records
from ...checkpoint.binlog import END, BinLog
from ...checkpoint.records import CheckpointError, Commit, Incarnation, RestorePoint
from ...checkpoint.registry import Registry
from ...megaphone.bin_states import Bin
from ..properties import Violation
from .store import NAMESPACE, MemStore, MemWriter

OP = "Count@(0, 3)"
TOPIC = "src"
CHECKPOINT_PROPERTIES = ("complete", "restorable", "exactly_once", "final")
WEIGHTS = {"apply": 5.0, "cross": 2.5, "ack": 3.0, "commit": 2.0, "config": 0.6, "ship": 1.5,
           "arrive": 1.5, "crash": 0.15, "restart": 0.07, "late": 1.0}
NO_HOLD = 1 << 30


@dataclass
class CheckpointOptions:
    """A schedule's shape; None: drawn per schedule."""
    workers: Optional[int] = None          # 2-4
    bins: Optional[int] = None             # 4-8
    interval: Optional[int] = None         # 1-3
    epochs: Optional[int] = None           # 6-14
    partitions: Optional[int] = None       # 1..workers
    max_crashes: Optional[int] = None      # crashes and restarts, 0-4
    tracked: Optional[bool] = None         # TrackedDict bins (stateful_unary) or touch (state_machine)
    virtual: bool = True                   # the restore checks after every durable change
    #: a dead life's pending records may also land later, in order, after the next life
    #: began (a survivor's store thread outliving its flush timeout); not in the fault
    #: model of the brief (lost or landed at the crash), so off by default
    late_writes: bool = False
    mutant: Optional[str] = None




def _brief(record: Any) -> str:
    if isinstance(record, Commit):
        return f"C{record.label}w{record.worker}"
    if isinstance(record, Incarnation):
        return f"I#{record.seq}"
    return f"b{record.bin}{'B' if record.kind == 'base' else 'd'}@{record.label}"




@dataclass(frozen=True)
class Record:
    id: int
    epoch: int
    key: str
    reset: bool            # drops the key's ids of earlier epochs (deletes the key if none is left)
    part: int
    offset: int


def fold(state: dict, rec: Record, epoch_of: list) -> None:
    """Apply ``rec`` to ``state`` (a dict, or a TrackedDict that sees what it touches): a
    key's value is the sorted ids of its records since its last reset, so within an
    epoch the order does not matter, and a record applied twice or never shows."""
    old = state.get(rec.key)
    if rec.reset:
        new = tuple(i for i in old or () if epoch_of[i] >= rec.epoch)
    else:
        new = tuple(sorted((old or ()) + (rec.id,)))
    if new:
        state[rec.key] = new
    else:
        state.pop(rec.key, None)


class _Worker:
    __slots__ = ("index", "bins", "log", "writer", "todo", "applied_max", "frontier", "ended",
                 "committed", "final")

    def __init__(self, index: int, bins: dict, log: BinLog, writer: MemWriter, label: int) -> None:
        self.index = index
        self.bins = bins
        self.log = log
        self.writer = writer
        self.todo: list = []                 # records routed here, not applied, by epoch
        self.applied_max = label - 1
        self.frontier = label                # the last X crossed (END once ended)
        self.ended = False
        self.committed: Optional[int] = None  # the commit operator's last label
        self.final = False


@dataclass
class _Move:
    c: int
    moves: dict                              # bin -> (from, to)
    table: list                              # the owners from c on
    unshipped: set
    inflight: list = field(default_factory=list)   # (to, bin, wire)
    arrived: set = field(default_factory=set)


class CheckpointModel:
    """One schedule's world: the source, the truth, the store and the current life."""

    def __init__(self, options: CheckpointOptions, seed: int) -> None:
        self.options = options
        rng = self.rng = random.Random(seed)
        o = options
        self.nworkers = o.workers or rng.randint(2, 4)
        self.nbins = o.bins or rng.randint(4, 8)
        self.interval = o.interval or rng.randint(1, 3)
        self.epochs = o.epochs or rng.randint(6, 14)
        self.nparts = o.partitions or rng.randint(1, self.nworkers)
        self.max_crashes = o.max_crashes if o.max_crashes is not None else rng.choice((0, 1, 2, 3, 3, 4))
        self.tracked = o.tracked if o.tracked is not None else rng.random() < 0.5
        self.skip_ship_cross = o.mutant == "ship_without_cross"
        keys = [f"k{i}" for i in range(rng.randint(3, 3 * self.nbins))]
        self.bin_of = {k: zlib.crc32(k.encode()) % self.nbins for k in keys}
        self.records: list[Record] = []
        offsets = [0] * self.nparts
        for t in range(self.epochs):
            for _ in range(rng.choice((0, 1, 2, 2, 3, 4))):
                key = rng.choice(keys)
                part = zlib.crc32(b"p" + key.encode()) % self.nparts
                self.records.append(Record(len(self.records), t, key, rng.random() < 0.15, part,
                                           offsets[part]))
                offsets[part] += 1
        self.epoch_of = [r.epoch for r in self.records]
        # truth[L][b]: bin b as of L (every record of an epoch < L applied); offset_at[p][L]
        self.truth: list = []
        self.offset_at = [[0] * (self.epochs + 1) for _ in range(self.nparts)]
        state: dict = {}
        for L in range(self.epochs + 1):
            per_bin: list = [{} for _ in range(self.nbins)]
            for k, v in state.items():
                per_bin[self.bin_of[k]][k] = v
            self.truth.append(per_bin)
            for p in range(self.nparts):
                self.offset_at[p][L] = sum(1 for r in self.records if r.part == p and r.epoch < L)
            for r in self.records:
                if r.epoch == L:
                    fold(state, r, self.epoch_of)
        self.store = MemStore()
        self.registry: Optional[Registry] = None
        self.crashes = 0
        self.crash_after = rng.choice((0, 20, 40, 60))   # transitions into a life before a crash
        self.ghosts: list[MemWriter] = []                  # dead writers whose records land late
        self.age = 0
        self.steps = 0
        self.draining = False
        self.doing: Optional[str] = None
        self.checked_version = -1
        self.restores = 0
        self.coverage: Counter = Counter()
        self.evaluations: Counter = Counter()
        # the current life
        self.inc: Optional[Incarnation] = None
        self.start = 0
        self.members: list = []
        self.workers: dict[int, _Worker] = {}
        self.table: list = []
        self.parts: dict = {}
        self.move: Optional[_Move] = None

    def summary(self) -> str:
        return (f"{self.nworkers} workers, {self.nbins} bins, interval {self.interval}, "
                f"{self.epochs} epochs, "
                f"{len(self.records)} records in {self.nparts} partition(s), "
                f"{'TrackedDict' if self.tracked else 'touched'} bins, up to {self.max_crashes} crashes")

    # ---- lives -------------------------------------------------------------------------
    def _registry(self) -> Registry:
        registry = Registry(lambda key, make: make())     # one process: it agrees with itself
        registry.stores[NAMESPACE] = self.store
        return registry

    def begin(self) -> str:
        """The job's first start (a fresh store)."""
        self.registry = self._registry()
        members = list(range(self.nworkers))
        return self._begin(self.registry.decide(NAMESPACE, members), members)

    def _begin(self, decision: Any, members: list) -> str:
        rng = self.rng
        rp = decision.restore
        previous, self.inc = self.inc, decision.inc
        label = 0 if rp is None else rp.label
        if rp is None:
            restored = [{} for _ in range(self.nbins)]
            self.coverage["restore: none (a fresh start)" if previous is None else
                          "restore: none (the dead lives never completed a checkpoint)"] += 1
        else:
            restored = self._check_restore(rp, self.registry.entries(NAMESPACE),
                                           f"the restore of life #{self.inc.seq}")
            self.restores += 1
            self.coverage["restore: a checkpoint of the life that died" if rp.inc.id == previous.id else
                          "restore: the dead life's start (its parent's checkpoint)"] += 1
            if rp.label == self.epochs:
                self.coverage["restore: at the end epoch"] += 1
        self.start = label
        self.age = 0
        self.members = list(members)
        self.table = [rng.choice(self.members) for _ in range(self.nbins)]
        self.parts = {p: self.members[p % len(self.members)] for p in range(self.nparts)}
        self.move = None
        self.workers = {}
        for m in self.members:
            writer = self.store.writer(m, self.inc.id)
            bins = {b: Bin(dict(restored[b])) for b in range(self.nbins) if self.table[b] == m}
            log = BinLog(OP, bins, self.interval, writer, self.inc.id, m, 0, tracked=self.tracked)
            for bin in bins.values():
                bin.state = log.adopt(bin.state)
            log.start(label)
            self.workers[m] = _Worker(m, bins, log, writer, label)
        positions = {} if rp is None else rp.positions()
        for r in self.records:        # the sources read on from the restore point's positions
            if r.offset >= positions.get((TOPIC, r.part), 0):
                self.workers[self.table[self.bin_of[r.key]]].todo.append(r)
        origin = "fresh" if rp is None else f"from #{rp.inc.seq} at {rp.label}"
        return (f"life #{self.inc.seq} ({origin}) on workers {self.members}: bins "
                f"{''.join(str(w) for w in self.table)}, "
                f"partitions {[self.parts[p] for p in range(self.nparts)]}")

    # ---- the checks ----------------------------------------------------------------------
    def _check_restore(self, rp: RestorePoint, entries: dict, when: str) -> list:
        """Check a restore point and restore every bin from ``entries`` ((op, bin) -> [Entry])
        as the checkpoint context does; returns the bins' states."""
        ev = self.evaluations
        label = rp.label
        where = f"{when} from incarnation #{rp.inc.seq} at {label}"
        ev["complete"] += 1
        needed = {(TOPIC, p) for p in range(self.nparts)}
        covered = {tp for c in self.store.commits if c.inc == rp.inc.id and c.label == label
                   for tp in c.positions}
        if not needed <= covered:
            raise Violation("complete", f"{where}: the durable commits of #{rp.inc.seq} at {label} cover "
                                        f"partitions {sorted(p for _, p in covered)} of {self.nparts}")
        stray = [c for c in rp.commits if (c.inc, c.label) != (rp.inc.id, label)]
        if stray:
            raise Violation("complete", f"{where}: the restore point carries commits of other "
                                        f"checkpoints: {stray[:3]}")
        ev["restorable"] += 1
        if rp.ops() != {OP: self.nbins}:
            raise Violation("restorable", f"{where}: the commits name operators {rp.ops()}")
        positions = rp.positions()
        missing = sorted(needed - set(positions))
        if missing:
            raise Violation("restorable", f"{where}: no position for partitions {missing}")
        ev["exactly_once"] += 1
        expected = {(TOPIC, p): self.offset_at[p][label] for p in range(self.nparts)}
        if positions != expected:
            raise Violation("exactly_once", f"{where}: the sources would read on from {positions}, but "
                                            f"the epochs from {label} begin at {expected}")
        states = []
        for b in range(self.nbins):
            ev["restorable"] += 1
            try:
                state, _ = records.fold_bin(entries.get((OP, b), []), label, f"{OP} bin {b}")
            except CheckpointError as e:
                raise Violation("restorable", f"{where}: {type(e).__name__}: {e}") from None
            ev["exactly_once"] += 1
            truth = self.truth[label][b]
            if state != truth:
                diff = {k: (state.get(k), truth.get(k)) for k in sorted(set(state) | set(truth))
                        if state.get(k) != truth.get(k)}
                raise Violation("exactly_once", f"{where}: bin {b} is restored wrong (key: (restored, "
                                                f"the fold of the epochs before {label})): {diff}")
            states.append(state)
        return states

    def check(self) -> None:
        """After a transition: if something became durable, a crash of every worker now
        (every pending record lost) must restore correctly."""
        if not self.options.virtual or self.store.version == self.checked_version:
            return
        self.checked_version = self.store.version
        self.evaluations["restorable"] += 1
        try:
            rp = records.restore_point(self.store.incarnations, self.store.commits)
        except CheckpointError as e:
            raise Violation("restorable", f"a restart now: restore_point raises "
                                          f"{type(e).__name__}: {e}") from None
        if rp is None:
            return
        entries: dict = {}
        for e in self.store.read([rp.inc.id]).entries:
            entries.setdefault((e.op, e.bin), []).append(e)
        self._check_restore(rp, entries, "a restart now")
        self.restores += 1

    def final(self) -> None:
        """After draining: every key holds the fold of every record; the store restores
        at the end epoch."""
        ev = self.evaluations
        ev["final"] += 1
        if self.move is not None or any(not w.ended or w.writer.pending or not w.final
                                        for w in self.workers.values()):
            raise Violation("final", "draining left work undone")
        held: dict = {}
        for w in self.workers.values():
            for b, bin in w.bins.items():
                if b in held:
                    raise Violation("exactly_once", f"at the end, bin {b} is held twice")
                held[b] = dict(dict.items(bin.state))
        ev["exactly_once"] += 1
        for b in range(self.nbins):
            if held.get(b) != self.truth[self.epochs][b]:
                raise Violation("exactly_once", f"at the end, bin {b} holds {held.get(b)}, the fold of "
                                                f"every record is {self.truth[self.epochs][b]}")
        rp = records.restore_point(self.store.incarnations, self.store.commits)
        if rp is None or rp.label != self.epochs:
            raise Violation("final", f"every record is durable, but the store restores at "
                                     f"{None if rp is None else rp.label}, not the end {self.epochs}")

    # ---- what may happen ---------------------------------------------------------------
    def _hold(self, w: int) -> int:
        """The time worker ``w`` may not pass (the time of a move it still takes part in)."""
        m = self.move
        if m is None:
            return NO_HOLD
        if w in m.unshipped or any(to == w and b not in m.arrived for b, (_, to) in m.moves.items()):
            return m.c
        return NO_HOLD

    def _applicable(self, w: int) -> list:
        wk = self.workers[w]
        if not wk.todo:
            return []
        t = wk.todo[0].epoch
        if t > self._hold(w):
            return []
        return [r for r in wk.todo if r.epoch == t and self.bin_of[r.key] in wk.bins]

    def _cross_range(self, w: int) -> Optional[tuple]:
        wk = self.workers[w]
        if wk.ended:
            return None
        hold = self._hold(w)
        lo = max(wk.applied_max, wk.frontier) + 1
        hi = min(wk.todo[0].epoch if wk.todo else self.epochs, hold, self.epochs)
        end = not wk.todo and hold == NO_HOLD
        if lo <= hi or end:
            return lo, hi, end
        return None

    def _commit_label(self, w: int) -> Optional[tuple]:
        wk = self.workers[w]
        if wk.final:
            return None
        durables = [self.workers[m].log.durable() for m in self.members]
        if any(d is None for d in durables):
            return None
        if all(d == END for d in durables):
            return self.epochs, True
        label = (int(min(durables)) // self.interval) * self.interval
        if label > self.start and (wk.committed is None or label > wk.committed):
            return label, False
        return None

    def _config_range(self) -> Optional[tuple]:
        if self.move is not None or len(self.members) < 2 or any(w.ended for w in self.workers.values()):
            return None
        cmin = max(max(w.applied_max + 1, w.frontier) for w in self.workers.values())
        if cmin > self.epochs - 1:
            return None
        return cmin, min(cmin + 2, self.epochs - 1)

    def enabled(self) -> dict:
        out: dict = {}
        members = self.members
        found = [(w,) for w in members if self._applicable(w)]
        if found:
            out["apply"] = found
        found = [(w,) for w in members if self._cross_range(w) is not None]
        if found:
            out["cross"] = found
        found = [(w,) for w in members if self.workers[w].writer.pending]
        if found:
            out["ack"] = found
        found = [(w,) for w in members if self._commit_label(w) is not None]
        if found:
            out["commit"] = found
        m = self.move
        if m is None:
            if not self.draining and self._config_range() is not None:
                out["config"] = [()]
        else:
            found = [(a,) for a in sorted(m.unshipped) if not self.workers[a].todo
                     or self.workers[a].todo[0].epoch >= m.c]
            if found:
                out["ship"] = found
            if m.inflight:
                out["arrive"] = [(to, b) for to, b, _ in m.inflight]
        found = [(i,) for i, g in enumerate(self.ghosts) if g.pending]
        if found:
            out["late"] = found
        if not self.draining and self.crashes < self.max_crashes and self.age >= self.crash_after:
            if len(members) >= 2:
                out["crash"] = [()]
            out["restart"] = [()]
        return out

    def quiescent(self) -> bool:
        return (self.move is None and not any(g.pending for g in self.ghosts)
                and all(w.ended and w.final and not w.writer.pending for w in self.workers.values()))

    def run(self, kind: str, args: tuple) -> Optional[str]:
        self.doing = None           # what a transition that fails half-way has done
        label = getattr(self, "do_" + kind)(*args)
        if label is not None:
            self.age += 1
        return label

    # ---- the transitions ---------------------------------------------------------------
    def _written(self, wk: _Worker, before: int) -> str:
        new = [_brief(rec) for ticket, _, rec in wk.writer.pending if ticket > before]
        return f" [writes {' '.join(new)}]" if new else ""

    def do_apply(self, w: int) -> Optional[str]:
        wk = self.workers[w]
        candidates = self._applicable(w)
        if not candidates:
            return None
        if self.draining:
            chosen = candidates
        else:
            chosen = self.rng.sample(candidates, self.rng.randint(1, len(candidates)))
        t = chosen[0].epoch
        before = wk.writer.tickets.issued
        log = wk.log
        log.cross(t)                 # every record before t is applied, none after
        log.applied(t)
        for r in chosen:
            b = self.bin_of[r.key]
            state = wk.bins[b].state
            if self.tracked:
                log.touch_bin(b)
                if r.id % 5 == 0:    # a logic that reads every value: the bin is written whole
                    sum(len(v) for v in state.values())
            else:
                log.touch(b, [r.key])
            fold(state, r, self.epoch_of)
            if self.tracked and r.id % 3 == 0:
                log.settle(b)        # its logic returned: what it marked is packed now
            wk.todo.remove(r)
        wk.applied_max = t
        wk.frontier = max(wk.frontier, t)
        what = " ".join(f"#{r.id}{r.key}{'!' if r.reset else '+'}b{self.bin_of[r.key]}" for r in chosen)
        return f"w{w} applies at {t}: {what}{self._written(wk, before)}"

    def do_cross(self, w: int) -> Optional[str]:
        found = self._cross_range(w)
        if found is None:
            return None
        lo, hi, end = found
        wk = self.workers[w]
        if end and (lo > hi or self.draining or self.rng.random() < 0.3):
            x = None
        else:
            x = hi if self.draining else self.rng.randint(lo, hi)
        before = wk.writer.tickets.issued
        wrote = wk.log.cross(x)
        if x is None:
            wk.ended = True
            wk.frontier = END
        else:
            wk.frontier = x
        return f"w{w} crosses {'the end' if x is None else x}{'' if wrote else ' (no boundary)'}" \
               f"{self._written(wk, before)}"

    def do_ack(self, w: int) -> Optional[str]:
        writer = self.workers[w].writer
        n = len(writer.pending)
        if n == 0:
            return None
        if not self.draining:
            n = self.rng.choice((1, 1, 2, n, self.rng.randint(1, n)))
        done = self.store.ack(writer, n)
        return f"store: w{w}'s {' '.join(_brief(r) for r in done)} durable"

    def do_late(self, i: int) -> Optional[str]:
        ghost = self.ghosts[i]
        if not ghost.pending:
            return None
        n = len(ghost.pending) if self.draining else self.rng.randint(1, len(ghost.pending))
        done = self.store.ack(ghost, n)
        self.coverage["late writes of a dead life"] += len(done)
        return (f"store: dead w{ghost.worker}'s {' '.join(_brief(r) for r in done)} "
                f"(life #{ghost.inc.split('-')[0]}) land late")

    def do_commit(self, w: int) -> Optional[str]:
        found = self._commit_label(w)
        if found is None:
            return None
        label, final = found
        wk = self.workers[w]
        if final:
            wk.final = True
            if label <= self.start or label == wk.committed:
                return f"w{w}'s commit operator: inputs exhausted, nothing left to commit"
        positions = {(TOPIC, p): self.offset_at[p][label] for p, m in self.parts.items() if m == w}
        wk.writer.write(Commit(self.inc.id, label, w, positions, {TOPIC: self.nparts}, {OP: self.nbins}))
        wk.committed = label
        self.coverage["commit at the end" if final else "commit"] += 1
        durables = [self.workers[m].log.durable() for m in self.members]
        return (f"w{w} commits {label}{' (final)' if final else ''}: partitions "
                f"{sorted(p for _, p in positions)} "
                f"(durable {['end' if d == END else d for d in durables]})")

    def do_config(self) -> Optional[str]:
        found = self._config_range()
        if found is None:
            return None
        rng = self.rng
        c = rng.randint(*found)
        table = list(self.table)
        moves = {}
        for b in rng.sample(range(self.nbins), rng.choice((1, 1, 2))):
            to = rng.choice([m for m in self.members if m != table[b]])
            moves[b] = (table[b], to)
            table[b] = to
        self.move = _Move(c, moves, table, {a for a, _ in moves.values()})
        for wk in self.workers.values():       # records of the moved bins from c on: the new owner's
            going = [r for r in wk.todo if r.epoch >= c and self.bin_of[r.key] in moves]
            for r in going:
                wk.todo.remove(r)
                self.workers[table[self.bin_of[r.key]]].todo.append(r)
        for wk in self.workers.values():
            wk.todo.sort(key=lambda r: (r.epoch, r.id))
        self.coverage["bin moves"] += len(moves)
        return f"config at {c}: " + ", ".join(f"bin {b} w{a}->w{to}"
                                              for b, (a, to) in sorted(moves.items()))

    def do_ship(self, a: int) -> Optional[str]:
        m = self.move
        wk = self.workers[a]
        if m is None or a not in m.unshipped or (wk.todo and wk.todo[0].epoch < m.c):
            return None
        before = wk.writer.tickets.issued
        if not self.skip_ship_cross:
            wk.log.cross(m.c)        # S has absorbed everything before c, nothing after
        wk.frontier = max(wk.frontier, m.c)
        moving = sorted(b for b, (src, _) in m.moves.items() if src == a)
        for b in moving:
            wk.log.leave(b)
            m.inflight.append((m.moves[b][1], b, wk.bins.pop(b).to_wire()))
        m.unshipped.discard(a)
        return f"w{a} ships bins {moving} at {m.c}{self._written(wk, before)}"

    def do_arrive(self, to: int, b: int) -> Optional[str]:
        m = self.move
        found = [i for i, (t, bb, _) in enumerate(m.inflight) if (t, bb) == (to, b)] if m else []
        if not found:
            return None
        _, _, (items, pending) = m.inflight.pop(found[0])
        wk = self.workers[to]
        bin = Bin.from_wire(items, pending)
        bin.state = wk.log.adopt(bin.state)
        wk.log.arrive(b, m.c)
        wk.bins[b] = bin
        m.arrived.add(b)
        if not m.unshipped and not m.inflight:
            self.table = m.table
            self.move = None
        return f"w{to} receives bin {b} at {m.c}"

    def _die(self) -> str:
        """Every writer of the life loses a suffix of its pending records."""
        lines = []
        rng = self.rng
        for w, wk in sorted(self.workers.items()):
            n = len(wk.writer.pending)
            keep = rng.choice((0, n, rng.randint(0, n))) if n else 0
            late = rng.randint(0, n - keep) if self.options.late_writes else 0
            kept, lost = self.store.crash(wk.writer, keep, late)
            if late:
                self.ghosts.append(wk.writer)
            if kept or lost or late:
                lines.append(f"w{w} {kept} landed/{lost} lost" + (f"/{late} late" if late else ""))
        self.crashes += 1
        return "; ".join(lines) or "nothing pending"

    def do_crash(self) -> Optional[str]:
        if len(self.members) < 2 or self.crashes >= self.max_crashes:
            return None
        rng = self.rng
        dead = sorted(rng.sample(self.members, rng.randint(1, len(self.members) - 1)))
        survivors = [m for m in self.members if m not in dead]
        lost = self._die()
        self.coverage["crash (survivors roll back)"] += 1
        self.doing = f"CRASH of w{dead} ({lost}); survivors {survivors} restore ..."
        self.registry.install(self.registry.redecide(survivors))
        life = self._begin(self.registry.decide(NAMESPACE, survivors), survivors)
        return f"CRASH of w{dead} ({lost}); {life}"

    def do_restart(self) -> Optional[str]:
        if self.crashes >= self.max_crashes:
            return None
        lost = self._die()
        self.coverage["restart of every worker"] += 1
        self.doing = f"RESTART ({lost}); restore ..."
        self.registry = self._registry()
        members = list(range(self.nworkers))
        life = self._begin(self.registry.decide(NAMESPACE, members), members)
        return f"RESTART ({lost}); {life}"

    def drain(self, take: Callable[[str, tuple], bool], limit: int = 10_000) -> None:
        """No more moves or crashes: every worker applies and crosses to the end, every
        write lands, every commit operator commits."""
        self.draining = True
        for _ in range(limit):
            enabled = self.enabled()
            if not enabled:
                return
            moved = False
            for kind in ("ship", "arrive", "apply", "cross", "ack", "late", "commit"):
                for args in enabled.get(kind, ()):
                    moved |= take(kind, args)
            if not moved:
                raise Violation("final", f"draining is stuck: {sorted(enabled)} enabled, none moves")
        raise Violation("final", f"draining did not finish in {limit} rounds")
