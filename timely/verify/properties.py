"""The properties checked after every transition of the model.

Seed 002's invariants, on the model's configurations (``timely.verify.model``):

- ``exchange_safe`` (§4, ``Safe``): if worker w's glob was ever vacant up to p (no
  non-zero count at any p' <= p), then rec is vacant up to p, now and from then on.
  Each worker keeps the bitset of every p its glob was *ever* vacant up to (updated
  whenever its glob changes), so the temporal form is checked, not just "now":
  ``ever_vacant[w] & positive(rec) == 0``.
- ``glob_lemma`` (§4, lemma ``glob``): every pointstamp with a non-zero count in a
  progress batch still in flight to w (one w will apply: not a marker, not a
  duplicate) has a positive count in w's glob at some p' <= p.
- ``combined_safe`` (§6, ``Safe``): for every initialized worker w (it propagated at
  least once), every pointstamp (l, t) that exists (rec) and every minimal path
  summary s from l to l', some t' in the frontier of w's implications at l' has
  t' <= t (+) s.
- ``convergence`` (§5, lemma ``implied_frontier``): right after ``propagate_all`` (the
  worklists are empty), w's implication frontier at every location equals the
  independent oracle's ``implied_frontier`` of w's pointstamps, and the Tracker's
  pointstamp counts equal glob.
- ``accounting``: what w has applied plus what is in flight to it (and will be
  applied, a departed worker's batches included) sums to the initial capabilities plus
  every batch ever sent (a server's grant announcements included), and a
  Progcaster's ``accumulated`` equals what it applied. Not one of seed 002's
  statements but the bookkeeping they rest on; it pins a lost or doubled batch (a
  joiner's bad bootstrap) to the transition that caused it.
- ``implementation``: the real code raised (``ProgressSequenceError`` ...).
- ``final`` (end of a schedule, after draining every queue): every installed worker's
  glob equals rec and its frontiers the implied frontiers of rec;
- ``liveness``: draining finishes (every join completes, every queue empties) in a
  bounded number of rounds — it fails when the real code stopped a joiner.

Workers are checked while their view is defined: from the start (or a joiner's
install) until they leave (``leave_finish``); a departed worker is skipped by every
property, ``final`` included.

Checks are incremental: the model logs what each transition changed (a glob, a new
pointstamp in rec, a sent batch, a propagation, an installed joiner) and only the
affected conjuncts are re-evaluated; ``full=True`` re-evaluates everything on every
state (slow; used to validate the incremental bookkeeping).

Costs per transition: a glob change O(glob entries x reachable locations) to update
the bitsets (cached per pointstamp) + O(in-flight updates to w); a new rec pointstamp
O(workers x requirements x frontier); a propagation O(oracle implied_frontier) =
O(locations x glob entries x summaries).

>>> from timely.verify.model import Model, Options
>>> m = Model(Options(twin="python", workers=2, kind="int", scopes=1), seed=3)
>>> checker = Checker(m)
>>> checker.check(); m.propagate(0, 0) is not None; checker.check()
True
>>> checker.states, checker.evaluations["convergence"] > 0
(2, True)
"""
from __future__ import annotations

from collections import Counter
from typing import Any, Optional

from ..progress.broadcast import MARKER
from .oracle import le
from .order import fmt as _fmt

__all__ = ["Violation", "Checker", "PROPERTIES"]

PROPERTIES = ("exchange_safe", "glob_lemma", "combined_safe", "convergence", "accounting",
              "implementation", "final", "liveness")


class Violation(AssertionError):
    """A property failed: ``prop`` names it; the message says where and why."""

    def __init__(self, prop: str, message: str) -> None:
        super().__init__(f"[{prop}] {message}")
        self.prop = prop
        self.detail = message


def _skip(*args: Any, **kwargs: Any) -> None:
    """A disabled property."""


class Checker:
    """Evaluates the properties on a Model after each transition (``check``)."""

    def __init__(self, model: Any, full: bool = False, disabled: tuple = ()) -> None:
        self.model = model
        self.full = full
        unknown = set(disabled) - set(PROPERTIES)
        if unknown:
            raise ValueError(f"unknown properties {sorted(unknown)}: choose from {PROPERTIES}")
        self.disabled = frozenset(disabled)
        for name in disabled:
            if name not in ("implementation", "final", "liveness"):
                setattr(self, name, _skip)
        self.evaluations: Counter = Counter()   # atomic property evaluations, per property
        self.states = 0
        for worker in model.workers:
            for scope in worker.scopes:
                self._glob_changed(worker, scope)

    # ---- driving -----------------------------------------------------------------------
    def check(self) -> None:
        """Check the current configuration (call after every transition)."""
        m = self.model
        self.states += 1
        if m.errors and "implementation" not in self.disabled:
            what, exc = m.errors[0]
            raise Violation("implementation", f"{what} raised {type(exc).__name__}: {exc}")
        events, m.events = m.events, []
        if self.full:
            for ev in events:
                if ev[0] == "glob":
                    w = m.workers[ev[1]]
                    self._glob_changed(w, w.scopes[ev[2]])
                elif ev[0] == "installed":
                    w = m.workers[ev[1]]
                    for scope in w.scopes:
                        self._glob_changed(w, scope)
                elif ev[0] == "prop":
                    self.convergence(m.workers[ev[1]], ev[2])
            self.check_all()
            return
        for ev in events:
            kind = ev[0]
            if kind == "glob":
                worker = m.workers[ev[1]]
                scope = worker.scopes[ev[2]]
                self._glob_changed(worker, scope)
                self.exchange_safe(worker, ev[2])
                self.glob_lemma(worker, ev[2])
                self.accounting(worker, ev[2])
            elif kind == "rec+":
                ch, p = ev[1], ev[2]
                for worker in m.workers:
                    if worker.installed:
                        self.exchange_safe(worker, ch)
                        if worker.scopes[ch].initialized:
                            self.combined_safe(worker, ch, [p])
            elif kind == "sent":
                _, ch, _, updates = ev
                for worker in m.workers:
                    if worker.installed:
                        self.glob_lemma(worker, ch, [p for p, _ in updates])
            elif kind == "prop":
                worker = m.workers[ev[1]]
                ch = ev[2]
                self.convergence(worker, ch)
                self.combined_safe(worker, ch, list(m.dataflows[ch].rec))
            elif kind == "installed":
                worker = m.workers[ev[1]]
                for scope in worker.scopes:
                    self._glob_changed(worker, scope)
                    self.exchange_safe(worker, scope.channel)
                    self.glob_lemma(worker, scope.channel)
                    self.accounting(worker, scope.channel)

    def check_all(self) -> None:
        """Every property, every worker, every channel (convergence excepted: it is
        a statement about the moment propagation ends)."""
        m = self.model
        for df in m.dataflows:
            ch = df.channel
            self.model_consistency(ch)
            for worker in m.workers:
                if not worker.installed:
                    continue
                self.exchange_safe(worker, ch)
                self.glob_lemma(worker, ch)
                self.accounting(worker, ch)
                if worker.scopes[ch].initialized:
                    self.combined_safe(worker, ch, list(df.rec))

    # ---- bookkeeping -------------------------------------------------------------------
    def _glob_changed(self, worker: Any, scope: Any) -> None:
        """Fold the current glob into the worker's ever-vacant set."""
        if not worker.installed:
            return
        order = self.model.dataflows[scope.channel].order
        nonzero = order.up_of(scope.glob)
        scope.vacant |= order.all_bits & ~nonzero
        scope.gpos = None

    def _pending(self, worker: Any, ch: int) -> list:
        """The progress batches in flight to ``worker`` on ``ch`` that it will apply:
        its puller's and its queues', minus markers and batches it already has."""
        m = self.model
        r = worker.index
        last = worker.scopes[ch].pc.last_seq
        out = []
        net = m.net
        messages = list(net.inbox(ch, r).messages)
        for s in range(len(m.workers)):
            messages.extend(net.queue((ch, s, r)))
            if net.kafka and r not in net.mates.get(s, ()):
                if r not in net.subscribers.get(s, ()):
                    # not tailing s's log yet: all of it is still to come (from record 0)
                    messages.extend((s, seq, u) for _, record in net.logs.get(s, ())
                                    for c, seq, u in record if c == ch)
                # s's record not yet flushed: its batches come to r after the ones above
                messages.extend((s, seq, u) for c, seq, u in net.pending.get(s, ()) if c == ch)
        for source, seq, updates in messages:
            if seq == MARKER or seq <= last.get(source, -1):
                continue
            out.append((source, seq, updates))
        return out

    # ---- the properties ----------------------------------------------------------------
    def exchange_safe(self, worker: Any, ch: int) -> None:
        self.evaluations["exchange_safe"] += 1
        df = self.model.dataflows[ch]
        scope = worker.scopes[ch]
        bad = scope.vacant & df.rec_bits
        if bad:
            p = df.order.decode(bad)[0]
            raise Violation("exchange_safe", (
                f"worker {worker.index} channel {ch}: its glob was vacant up to {_fmt(p)} "
                f"but {_fmt(p)} exists (rec count {df.rec[p]}); glob now "
                f"{{{', '.join(f'{_fmt(k)}: {v}' for k, v in sorted(scope.glob.items(), key=repr))}}}"))

    def glob_lemma(self, worker: Any, ch: int, keys: Optional[list] = None) -> None:
        df = self.model.dataflows[ch]
        scope = worker.scopes[ch]
        order = df.order
        if scope.gpos is None:
            scope.gpos = order.up_of([p for p, c in scope.glob.items() if c > 0])
        positive = scope.gpos
        if keys is None:
            keys = [p for _, _, updates in self._pending(worker, ch) for p, _ in updates]
        index = order.index
        for p in keys:
            self.evaluations["glob_lemma"] += 1
            if not (positive >> index[p]) & 1:
                raise Violation("glob_lemma", (
                    f"worker {worker.index} channel {ch}: an update to {_fmt(p)} is in flight to it, "
                    f"but its glob has no positive count at or below {_fmt(p)}"))

    def combined_safe(self, worker: Any, ch: int, pointstamps: list) -> None:
        df = self.model.dataflows[ch]
        scope = worker.scopes[ch]
        frontiers = scope.frontiers
        requirements = df.order.requirements
        for p in pointstamps:
            if p not in df.rec:
                continue
            for loc, r in requirements(p):
                self.evaluations["combined_safe"] += 1
                for f in frontiers[loc]:
                    if le(f, r):
                        break
                else:
                    raise Violation("combined_safe", (
                        f"worker {worker.index} channel {ch}: {_fmt(p)} exists, reaches "
                        f"{_fmt((loc, r))}, but the implication frontier there is "
                        f"{sorted(frontiers[loc])}"))

    def convergence(self, worker: Any, ch: int) -> None:
        df = self.model.dataflows[ch]
        scope = worker.scopes[ch]
        P: dict = {}
        for (loc, t), c in scope.glob.items():
            P.setdefault(loc, {})[t] = c
        implied = df.oracle.implied_frontiers(P)
        tracker = scope.tracker
        for loc in df.order.locations:
            self.evaluations["convergence"] += 1
            got = scope.frontiers[loc]
            if len(got) != len(set(got)) or set(got) != implied[loc]:
                raise Violation("convergence", (
                    f"worker {worker.index} channel {ch}: after propagate_all the implication "
                    f"frontier at {loc} is {sorted(got)}, implied_frontier is {sorted(implied[loc])}"))
            counts = {t: c for t, c in tracker.pointstamps(loc).counts() if c}
            if counts != P.get(loc, {}):
                raise Violation("convergence", (
                    f"worker {worker.index} channel {ch}: Tracker pointstamps at {loc} are "
                    f"{counts}, glob says {P.get(loc, {})}"))

    def accounting(self, worker: Any, ch: int) -> None:
        self.evaluations["accounting"] += 1
        df = self.model.dataflows[ch]
        scope = worker.scopes[ch]
        total = dict(scope.glob)
        for _, _, updates in self._pending(worker, ch):
            for p, d in updates:
                c = total.get(p, 0) + d
                if c:
                    total[p] = c
                else:
                    del total[p]
        if total != df.announced:
            diff = Counter(total)
            diff.subtract(df.announced)
            diff = {k: v for k, v in diff.items() if v}
            raise Violation("accounting", (
                f"worker {worker.index} channel {ch}: glob + batches in flight to it differ from "
                f"the initial capabilities + every batch sent by "
                f"{{{', '.join(f'{_fmt(k)}: {v:+d}' for k, v in sorted(diff.items(), key=repr))}}} "
                f"(last seq applied {dict(scope.pc.last_seq)})"))
        acc = scope.pc.accumulated
        if acc is not None:
            expected = dict(scope.glob)
            for p, c in df.initial.items():
                e = expected.get(p, 0) - c
                if e:
                    expected[p] = e
                else:
                    expected.pop(p, None)
            if dict(iter(acc)) != expected:
                raise Violation("accounting", (
                    f"worker {worker.index} channel {ch}: Progcaster.accumulated "
                    f"{dict(iter(acc))} is not what it applied {expected}"))

    def model_consistency(self, ch: int) -> None:
        """rec = initial + every batch sent + every worker's temp (the model's own books;
        plus what a mutation let exist unannounced)."""
        self.evaluations["model"] += 1
        m = self.model
        df = m.dataflows[ch]
        total = Counter(df.announced)
        total.update(df.unannounced)
        for worker in m.workers:
            for p, d in worker.scopes[ch].temp:
                total[p] += d
        total = +total if all(v >= 0 for v in total.values()) else total
        if {k: v for k, v in total.items() if v} != df.rec:
            raise AssertionError(f"model error: channel {ch}: rec {df.rec} != "
                                 f"announced + temps {dict(total)}")

    def final(self) -> None:
        """After draining: every installed worker's glob is rec, its frontiers rec's."""
        if "final" in self.disabled:
            return
        m = self.model
        for df in m.dataflows:
            ch = df.channel
            P: dict = {}
            for (loc, t), c in df.rec.items():
                P.setdefault(loc, {})[t] = c
            implied = df.oracle.implied_frontiers(P)
            for worker in m.workers:
                if not worker.installed:
                    continue
                scope = worker.scopes[ch]
                self.evaluations["final"] += 1
                if scope.glob != df.rec:
                    raise Violation("final", f"worker {worker.index} channel {ch}: after draining, "
                                             f"glob {scope.glob} != rec {df.rec}")
                for loc in df.order.locations:
                    if set(scope.frontiers.get(loc, ())) != implied[loc]:
                        raise Violation("final", (
                            f"worker {worker.index} channel {ch}: after draining, the frontier at "
                            f"{loc} is {scope.frontiers.get(loc)}, implied by rec {sorted(implied[loc])}"))
