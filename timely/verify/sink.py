"""A Kafka sink partition changing writer at epoch boundaries, as random schedules.

The writers are the real ``KafkaSinkState`` (its ``write``, ``through`` and the marker
``verify`` before a first write) over an in-memory partition log; a reader is the real
``PartitionEpochs``. The rest is Megaphone's protocol for the partition's bin, as
transitions a seeded scheduler picks at random:

- ``advance``: the input frontier passes one more epoch;
- ``write``: the bin's holder applies its next complete epoch, if the configuration in
  force then names it (S applies times in order; the real ``write``: data, flush,
  markers, flush);
- ``through``: the holder writes the empty markers up to the frontier (``advanced``);
- ``move``: the rebalancer names a new owner from an epoch H on (H past the frontier);
- ``ship``: the holder sends the bin, with its state, once it applied every epoch
  before H and the frontier is at H (F installs H once S absorbed everything before);
- ``arrive``: the bin reaches its new owner;
- ``crash``: every writer is lost (one may die inside a write, between its flushes);
  the survivors roll back to a checkpoint's label, which is past only epochs durable in
  the topic: the bin starts again on its first owner with no state (the sink is kept
  out of checkpoints: the topic is).

After every transition the partition, read as a reader does, must hold no epoch out of
order and each complete epoch's records exactly, and a complete epoch not yet written
must have a writer that can get to it (no hang); at the end every epoch is there once.
Mutants (``SINK_MUTANTS``) that a correct checker must catch: ``skip_verify`` (a writer
trusts the bin's state and never reads the markers), ``ship_early`` (the bin leaves as
soon as the move is known, before its owner wrote every epoch before H).

Costs: O(log size) per check, the log being a few records per epoch.

>>> run_sink_schedule(seed=3, steps=300).violation is None
True
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Optional

from ..connectors.epochs import JSON, PartitionEpochs
from ..connectors.kafka.sink import KafkaSinkState

__all__ = ["SINK_MUTANTS", "SinkResult", "run_sink_schedule", "explore_sink"]

SINK_MUTANTS = ("skip_verify", "ship_early")
TOPIC, WORKERS, EPOCHS = "out", 3, 8
#: how likely each transition is against the others (1): faults are rarer than steps
WEIGHTS = {"crash": 0.1, "write_crash": 0.1}


class _Crash(Exception):
    """A writer died inside a write."""


class _Message:
    __slots__ = ("_offset", "_value", "_headers", "_eof")

    def __init__(self, offset: int, value: bytes = b"", headers: Any = None, eof: bool = False) -> None:
        self._offset, self._value, self._headers, self._eof = offset, value, headers, eof

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def headers(self) -> Any:
        return self._headers

    def error(self) -> Any:
        if not self._eof:
            return None
        from confluent_kafka import KafkaError
        return KafkaError(KafkaError._PARTITION_EOF)


class _Producer:
    """Appends to the log at ``flush``; ``crash_in`` flushes from now it raises instead."""

    def __init__(self, log: list) -> None:
        self.log = log
        self.queue: list = []
        self.crash_in: Optional[int] = None

    def produce(self, topic, value, key=None, partition=0, headers=None, on_delivery=None) -> None:
        self.queue.append((value, headers, on_delivery))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        if self.crash_in is not None:
            self.crash_in -= 1
            if self.crash_in < 0:
                self.queue.clear()
                raise _Crash()
        queue, self.queue = self.queue, []
        for value, headers, delivered in queue:
            self.log.append((value, headers))
            delivered(None, _Message(len(self.log) - 1, value, headers))
        return 0


class _Consumer:
    """Reads the log from an assigned offset to its end, then says so (EOF)."""

    def __init__(self, log: list) -> None:
        self.log = log
        self.position = 0
        self.eof = False

    def assign(self, partitions: list) -> None:
        self.position = partitions[0].offset

    def poll(self, timeout: float) -> Optional[_Message]:
        if self.position < len(self.log):
            value, headers = self.log[self.position]
            self.position += 1
            return _Message(self.position - 1, value, headers)
        if not self.eof:
            self.eof = True
            return _Message(self.position, eof=True)
        return None

    def consume(self, n: int, timeout: float) -> list:
        out = []
        while len(out) < n:
            m = self.poll(0)
            if m is None:
                break
            out.append(m)
        return out

    def close(self) -> None:
        pass


def records(epoch: int) -> list:
    return [{"e": epoch, "i": i} for i in range(1 + epoch % 3)]


@dataclass
class SinkResult:
    seed: int
    transitions: int = 0
    violation: Optional[str] = None
    trace: list = field(default_factory=list)


class SinkModel:
    def __init__(self, seed: int, mutant: Optional[str] = None) -> None:
        if mutant is not None and mutant not in SINK_MUTANTS:
            raise ValueError(f"unknown sink mutant {mutant!r}: choose from {', '.join(SINK_MUTANTS)}")
        self.rng = random.Random(seed)
        self.mutant = mutant
        self.log: list = []
        self.frontier = 0
        self._start()

    def _start(self, label: int = 0) -> None:
        self.writers = []
        for _ in range(WORKERS):
            state = KafkaSinkState("memory", TOPIC, None, JSON, 1, 1.0, _Producer(self.log),
                                   reader=lambda: _Consumer(self.log))
            if self.mutant == "skip_verify":
                state.verify = lambda held: None     # hold() calls it through the instance
            self.writers.append(state)
        self.configs = [(0, 0)]             # (from epoch, owner), as the routing table says
        self.holder: Optional[int] = 0
        self.since = 0                      # the epoch from which the holder owns the bin
        self.flight: Optional[tuple] = None  # (to, H)
        self.state = [None, 0]              # the bin's state: {p: [last epoch, offset]}[0]
        self.next = label                   # the next epoch the bin's holder applies

    def owner_at(self, t: int) -> int:
        return max((c for c in self.configs if c[0] <= t), key=lambda c: c[0])[1]

    def enabled(self) -> list:
        out = []
        if self.frontier < EPOCHS:
            out.append(("advance",))
        if self.holder is not None:
            w = self.holder
            if self.next < self.frontier and self.owner_at(self.next) == w:
                out += [("write", w), ("write_crash", w)]
            if 0 < self.frontier <= self.next:      # S applied every complete epoch
                out.append(("through", w))
            moves = [c for c in self.configs if c[0] > self.since and c[1] != w]
            if moves:
                h = min(c[0] for c in moves)
                if (self.frontier >= h and self.next >= h) or self.mutant == "ship_early":
                    out.append(("ship", w, (h, self.owner_at(h))))
            if self.configs[-1][0] <= self.frontier < EPOCHS:
                out.append(("move",))
        if self.flight is not None:
            out.append(("arrive",))
        if self.frontier > 0:
            out.append(("crash",))
        return out

    def step(self, action: tuple) -> None:
        kind = action[0]
        held = {0: self.state}
        if kind == "advance":
            self.frontier += 1
        elif kind in ("write", "write_crash"):
            w = action[1]
            writer = self.writers[w]
            writer.producer.crash_in = self.rng.randrange(2) if kind == "write_crash" else None
            try:
                writer.hold(held)
                writer.write(self.next, {0: [(None, r) for r in records(self.next)]}, held)
            except _Crash:
                self.crash()
                return
            self.next += 1
        elif kind == "through":
            writer = self.writers[action[1]]
            writer.hold(held)
            writer.through(self.frontier - 1, held)
        elif kind == "move":
            choices = [w for w in range(WORKERS) if w != self.configs[-1][1]]
            self.configs.append((self.rng.randrange(self.frontier + 1, EPOCHS + 1), self.rng.choice(choices)))
        elif kind == "ship":
            _, w, (h, to) = action
            self.writers[w].forget({})
            self.holder, self.flight = None, (to, h)
            self.state = list(self.state)
        elif kind == "arrive":
            self.holder, self.since = self.flight
            self.flight = None
        elif kind == "crash":
            self.crash()

    def crash(self) -> None:
        # the survivors restore a checkpoint: its label is past only epochs whose results
        # were durable in the topic (the commit waits for the sink's frontier)
        reader = PartitionEpochs(TOPIC, 0)
        try:
            for offset, (value, headers) in enumerate(self.log):
                reader.record(offset, headers, value or None)
        except ValueError:              # already broken: the check after this step says so
            pass
        durable = 0 if reader.completed is None else reader.completed + 1
        self._start(label=self.rng.randrange(0, min(self.frontier, durable) + 1))

    def check(self, final: bool) -> Optional[str]:
        reader = PartitionEpochs(TOPIC, 0)
        seen: dict[int, list] = {}
        try:
            for offset, (value, headers) in enumerate(self.log):
                for epoch, recs in reader.record(offset, headers, None if not value else value):
                    seen[epoch] = [JSON.loads(v) for _, v, _ in recs]
                # readers drop a late copy of a complete epoch (a zombie's), but these
                # writers are never zombies: their epochs must never go back
                if reader.late:
                    return f"a writer went back: offset {offset} is of an epoch before {reader.completed}"
        except Exception as exc:  # noqa: BLE001 - what a reader of the topic would meet
            return f"a reader fails: {exc}"
        if self.next < self.frontier and not any(a[0] in ("write", "ship", "arrive") for a in self.enabled()):
            return (f"stuck: epoch {self.next} is complete but nobody can write it (the bin is at "
                    f"{self.holder}, the routing table names {self.owner_at(self.next)})")
        done = -1 if reader.completed is None else reader.completed
        for e in range(done + 1):
            if seen.get(e, []) != records(e):
                return f"epoch {e} reads {seen.get(e, [])}, written {records(e)}"
        if final and done != EPOCHS - 1:
            return f"the partition ends at epoch {done}, not {EPOCHS - 1}"
        return None


def run_sink_schedule(seed: int, steps: int = 300, mutant: Optional[str] = None) -> SinkResult:
    """One seeded schedule of at most ``steps`` transitions, then the run to the end
    (no more crashes or moves); checked after every transition."""
    model = SinkModel(seed, mutant)
    result = SinkResult(seed)
    for _ in range(steps):
        actions = model.enabled()
        action = model.rng.choices(actions, [WEIGHTS.get(a[0], 1.0) for a in actions])[0]
        result.trace.append(action)
        model.step(action)
        result.transitions += 1
        problem = model.check(final=False)
        if problem:
            result.violation = problem
            return result
    for _ in range(10 * EPOCHS):            # drain: the writers finish every epoch
        actions = [a for a in model.enabled() if a[0] not in ("crash", "move", "write_crash")]
        if not actions:
            break
        action = sorted(actions, key=lambda a: ["arrive", "ship", "write", "through", "advance"].index(a[0]))[0]
        result.trace.append(action)
        model.step(action)
        result.transitions += 1
    result.violation = model.check(final=True)
    return result


def explore_sink(seeds: int, steps: int = 300, mutant: Optional[str] = None) -> list[SinkResult]:
    """``run_sink_schedule`` for seeds 0..seeds-1; stops at the first violation."""
    results = []
    for seed in range(seeds):
        results.append(run_sink_schedule(seed, steps, mutant))
        if results[-1].violation:
            break
    return results
