"""The random scheduler: runs schedules of the model, checking after every transition.

A *schedule* is one run of the model from an initial configuration: a random graph
(or two), workers, initial capabilities and transition weights, all drawn from one
32-bit seed. At each step the scheduler lists the enabled transitions by kind, picks
a kind (weighted; the weights are perturbed per schedule so that some schedules
deliver eagerly and some let queues grow, some propagate often and some rarely), then
one enabled instance (uniformly; deliveries by the schedule's delivery policy: uniform,
slow links, or newest head first), runs it and runs the ``Checker``. A schedule stops at
its step budget, or when the system is quiescent (no capability, data, buffered
change or batch left), or at the first violation. Then it is *drained* (no new
operations; every buffered change sent, every join and leave finished, every queue
delivered, every worker propagated — each of these a checked transition too) and the
``final`` property is checked.

``explore`` runs schedules for a list of seeds, each seed spending a budget of
transitions over as many schedules as it takes; the same seed always gives the same
schedules (``ScheduleResult.seed`` replays one with ``run_schedule``).

Costs: choosing a transition is O(workers x channels + non-empty queues); the rest is
the transition's and the checks' cost (see model and properties).

>>> report = explore(Options(twin="python", join=True), seeds=[0], steps=300)
>>> report.violations, report.transitions >= 300, report.states > report.transitions
([], True, True)
"""
from __future__ import annotations

import random
import time
from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

from .model import Model, Options
from .properties import Checker, Violation

__all__ = ["WEIGHTS", "ScheduleResult", "Report", "run_schedule", "explore"]

WEIGHTS = {"perf_op": 3.0, "recv_cap": 2.0, "send_upd": 2.5, "deliver": 5.0, "propagate": 1.5,
           "join_start": 0.5, "apply_join": 0.8, "ctrl": 1.5, "serve": 1.0, "client": 1.5,
           "kafka_install": 0.7, "announce_late": 0.5, "leave_start": 0.3, "handover": 1.0,
           "leave_finish": 1.0, "flush_log": 2.0}


@dataclass
class ScheduleResult:
    seed: int
    steps: int = 0                  # the schedule's length (what --schedule-steps replays)
    transitions: int = 0
    drain_transitions: int = 0
    states: int = 0
    by_kind: Counter = field(default_factory=Counter)
    evaluations: Counter = field(default_factory=Counter)
    joins: int = 0
    leaves: int = 0
    coverage: Counter = field(default_factory=Counter)
    quiescent: bool = False
    violation: Optional[Violation] = None
    trace: list = field(default_factory=list)
    summary: str = ""


@dataclass
class Report:
    """What ``explore`` did: counts, and the violations it found."""

    schedules: int = 0
    transitions: int = 0
    states: int = 0
    joins: int = 0
    leaves: int = 0
    quiescent: int = 0
    seconds: float = 0.0
    coverage: Counter = field(default_factory=Counter)
    by_kind: Counter = field(default_factory=Counter)
    evaluations: Counter = field(default_factory=Counter)
    violations: list = field(default_factory=list)   # ScheduleResults with a violation

    def add(self, result: ScheduleResult) -> None:
        self.schedules += 1
        self.transitions += result.transitions + result.drain_transitions
        self.states += result.states
        self.joins += result.joins
        self.leaves += result.leaves
        self.quiescent += result.quiescent
        self.coverage.update(result.coverage)
        self.by_kind.update(result.by_kind)
        self.evaluations.update(result.evaluations)
        if result.violation is not None:
            self.violations.append(result)

    def text(self) -> str:
        rate = self.transitions / self.seconds if self.seconds else 0.0
        lines = [f"schedules:   {self.schedules}",
                 f"transitions: {self.transitions} ({rate:,.0f}/s)",
                 f"states checked: {self.states}",
                 f"joins completed: {self.joins}",
                 f"leaves completed: {self.leaves}",
                 f"schedules that ran to quiescence: {self.quiescent}",
                 "coverage: " + ", ".join(f"{k} {v}" for k, v in sorted(self.coverage.items())),
                 "transitions by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items())),
                 "property evaluations: " + ", ".join(f"{k} {v}"
                                                      for k, v in sorted(self.evaluations.items())),
                 f"violations: {len(self.violations)}",
                 f"time: {self.seconds:.1f}s"]
        return "\n".join(lines)


def _enabled(model: Model) -> dict:
    """Enabled transitions by kind: kind -> list of argument tuples."""
    out: dict = {}
    workers = model.workers
    installed = [w for w in workers if w.installed]
    perf, send, prop = [], [], []
    for w in installed:
        for scope in w.scopes:
            if scope.caps:
                perf.append((w.index, scope.channel))
            if not scope.temp.is_empty():
                send.append((w.index, scope.channel))
            prop.append((w.index, scope.channel))
    if perf:
        out["perf_op"] = perf
    if send:
        out["send_upd"] = send
    out["propagate"] = prop
    data = [(df.channel,) for df in model.dataflows if df.data]
    if data:
        out["recv_cap"] = data
    net = model.net
    if net.nonempty:
        out["deliver"] = [(key,) for key in net.nonempty]
    flush = [(w,) for w, batches in net.pending.items() if batches]
    if flush:
        out["flush_log"] = flush
    opts = model.options
    if model.late and model.late_ready():
        out["announce_late"] = [()]
    if model.leave is not None:
        w = model.leave
        if model.handover_options(w):
            out["handover"] = [(w,)]
        if model.can_finish_leave(w):
            out["leave_finish"] = [(w,)]
    join = model.join
    if join is None:
        if (opts.join and model.leave is None and model.joins_started < opts.max_joins
                and model.steps >= model.join_after):
            out["join_start"] = [()]
        leavers = model.leave_candidates()
        if leavers:
            out["leave_start"] = [(w,) for w in leavers]
        return out
    apply = [(w,) for w in join.pending if model.can_apply_join(w)]
    if apply:
        out["apply_join"] = apply
    ctrl = [(key,) for key, q in net.ctrl.items() if q]
    if ctrl:
        out["ctrl"] = ctrl
    if join.kafka:
        if not workers[join.joiner].installed and model.grants_delivered():
            out["kafka_install"] = [()]
        return out
    server = workers[join.server].server
    if server is not None and (server.pending or len(net.ctrl_box(join.server))):
        out["serve"] = [(join.server,)]
    client = workers[join.joiner].client
    if client is not None and not client.done:
        out["client"] = [()]
    return out


def _runner(model: Model) -> dict:
    return {"perf_op": model.perf_op, "send_upd": model.send_upd, "propagate": model.propagate,
            "recv_cap": model.recv_cap, "deliver": model.deliver, "join_start": model.join_start,
            "apply_join": model.apply_join, "kafka_install": model.kafka_install,
            "ctrl": model.ctrl_deliver, "serve": model.serve,
            "client": lambda: model.client_step(), "announce_late": model.announce_late,
            "leave_start": model.leave_start, "handover": model.handover,
            "leave_finish": model.leave_finish, "flush_log": model.flush_log}


def run_schedule(options: Options, seed: int, steps: int = 400, full_checks: bool = False,
                 drain: bool = True, trace_length: int = 60, disabled: tuple = ()) -> ScheduleResult:
    """Run one schedule (see the module docstring); never raises a Violation, returns it."""
    result = ScheduleResult(seed=seed, steps=steps)
    model = Model(options, seed)
    rng = random.Random(seed ^ 0x5EED)
    weights = {k: v * rng.uniform(0.25, 2.0) for k, v in WEIGHTS.items()}
    choose_delivery = _delivery_policy(seed, model)
    checker = Checker(model, full=full_checks, disabled=disabled)
    runner = _runner(model)
    trace: deque = deque(maxlen=trace_length)

    def take(kind: str, args: tuple) -> bool:
        label = runner[kind](*args)
        if label is None:
            return False
        model.steps += 1
        result.by_kind[kind] += 1
        trace.append(label)
        checker.check()
        return True

    def choose(kind: str, candidates: list, rng: random.Random) -> tuple:
        if kind == "deliver" and len(candidates) > 1:
            return choose_delivery(candidates, rng)
        return candidates[rng.randrange(len(candidates))]

    try:
        checker.check()
        walk(rng, weights, steps, model.quiescent, lambda: _enabled(model), take, result, choose)
        if drain:
            before = model.steps
            _drain(model, take, stuck_is_violation="liveness" not in checker.disabled)
            result.drain_transitions = model.steps - before
            checker.final()
    except Violation as v:
        result.violation = v
    finally:
        model.shutdown()
    result.states = checker.states
    result.evaluations = checker.evaluations
    result.joins = model.joins_done
    result.leaves = model.leaves_done
    result.coverage = model.coverage
    result.trace = list(trace)
    result.summary = (f"seed {seed}: {len(model.workers)} workers, {len(model.dataflows)} dataflow(s), "
                      f"{model.kind} times, {'kafka' if options.kafka else 'p2p'}"
                      f"{', leaves' if options.leave else ''}"
                      f"{', mutation ' + options.mutation if options.mutation else ''}")
    return result


def walk(rng: random.Random, weights: dict, steps: int, quiescent: Callable[[], bool],
         enabled: Callable[[], dict], take: Callable[[str, tuple], bool], result: ScheduleResult,
         choose: Optional[Callable[[str, list, random.Random], tuple]] = None) -> None:
    """A schedule's random walk, for every model: up to ``steps`` times, unless the model
    is ``quiescent()``, pick a kind of ``enabled()`` transition by weight and one of its
    candidates (``choose``, or uniformly), and ``take`` it; counts go to ``result``."""
    for _ in range(steps):
        if quiescent():
            result.quiescent = True
            return
        found = enabled()
        kinds = list(found)
        kind = rng.choices(kinds, [weights[k] for k in kinds])[0]
        candidates = found[kind]
        args = choose(kind, candidates, rng) if choose is not None else candidates[rng.randrange(len(candidates))]
        if take(kind, args):
            result.transitions += 1


def _delivery_policy(seed: int, model: Model) -> Callable[[list, random.Random], tuple]:
    """How a schedule picks which queue delivers next (``[(key,)]`` -> one of them).

    A third of the schedules pick uniformly; a third have slow links (about half the
    links, sender -> receiver, deliver 100 times less often than the others); a third
    mostly deliver the newest head first, so older batches wait while later ones, from
    other senders, overtake them. Progress batches from different senders are ordered
    by nothing, and the last two make the orderings that matter likely."""
    policy_rng = random.Random(seed ^ 0x11C5)
    policy = policy_rng.choice(("uniform", "slow links", "newest first"))
    if policy == "uniform":
        return lambda candidates, rng: candidates[rng.randrange(len(candidates))]
    if policy == "newest first":
        net = model.net

        def newest(candidates: list, rng: random.Random) -> tuple:
            if rng.random() < 0.2:
                return candidates[rng.randrange(len(candidates))]
            return max(candidates, key=lambda c: net.head_stamp(c[0]))

        return newest
    speeds: dict = {}

    def speed(key: tuple) -> float:
        link = (key[1], key[2])
        found = speeds.get(link)
        if found is None:
            found = speeds[link] = 0.01 if policy_rng.random() < 0.5 else 1.0
        return found

    return lambda candidates, rng: rng.choices(candidates, [speed(c[0]) for c in candidates])[0]


def _drain(model: Model, take: Callable[[str, tuple], bool], stuck_is_violation: bool = True,
           limit: int = 2000) -> None:
    """No new operations: flush temps, finish the join or leave (the leaver receives
    the data on its way to it and hands over what it holds), deliver everything,
    propagate."""
    for _ in range(limit):
        moved = False
        for w in model.workers:
            if w.installed:
                for scope in w.scopes:
                    if not scope.temp.is_empty():
                        moved |= take("send_upd", (w.index, scope.channel, True))
        if model.leave is not None:
            for df in model.dataflows:
                for r, _ in list(df.data):
                    if r == model.leave:
                        moved |= take("recv_cap", (df.channel, r))
        enabled = _enabled(model)
        for kind in ("join_start", "leave_start", "perf_op", "send_upd", "propagate", "recv_cap"):
            enabled.pop(kind, None)
        for kind, candidates in enabled.items():
            for args in candidates:
                moved |= take(kind, args)
        if model.leave is not None and "handover" not in enabled:
            # what it cannot hand over, the leaver releases itself
            for scope in model.workers[model.leave].scopes:
                if scope.caps:
                    moved |= take("perf_op", (model.leave, scope.channel, "drop"))
        if not moved:
            break
    else:
        if stuck_is_violation:
            raise Violation("liveness", f"draining did not finish in {limit} rounds (join {model.join})")
    for w in model.workers:
        if w.installed:
            for scope in w.scopes:
                take("propagate", (w.index, scope.channel))
    if model.join is not None and stuck_is_violation:
        raise Violation("liveness", f"the join of worker {model.join.joiner} could not finish"
                                    f"{': ' + repr(model.errors[0][1]) if model.errors else ''}")
    if model.leave is not None and stuck_is_violation:
        raise Violation("liveness", f"the leave of worker {model.leave} could not finish")


def explore(options: Options, seeds: list[int], steps: int, schedule_steps: int = 400,
            full_checks: bool = False, stop_on_violation: bool = False, disabled: tuple = (),
            progress: Optional[Callable[[Report], None]] = None) -> Report:
    """Run schedules for every seed until each has spent ``steps`` transitions."""
    return explore_with(lambda seed, length: run_schedule(options, seed, length, full_checks=full_checks,
                                                          disabled=disabled),
                        seeds, steps, schedule_steps, stop_on_violation, progress)


def explore_with(run_one: Callable[[int, int], ScheduleResult], seeds: list[int], steps: int,
                 schedule_steps: int, stop_on_violation: bool = False,
                 progress: Optional[Callable[[Report], None]] = None) -> Report:
    """Run ``run_one(seed, length)`` schedules for every seed until each has spent
    ``steps`` transitions (the exploration of every model)."""
    report = Report()
    started = time.perf_counter()
    for seed in seeds:
        rng = random.Random(seed)
        spent = 0
        while spent < steps:
            # schedule lengths vary (a quarter to 1.5 times the nominal length): many
            # short schedules explore many initial configurations, long ones deep states
            length = rng.randint(max(1, schedule_steps // 4), max(1, schedule_steps * 3 // 2))
            result = run_one(rng.getrandbits(32), min(length, steps - spent))
            spent += max(1, result.transitions + result.drain_transitions)
            report.add(result)
            if progress is not None:
                progress(report)
            if result.violation is not None and stop_on_violation:
                report.seconds = time.perf_counter() - started
                return report
    report.seconds = time.perf_counter() - started
    return report


def variant(options: Options, **changes) -> Options:
    return replace(options, **changes)
