"""Progress-batch timestamps, from a Progcaster's send to every receiver's apply.

``--progress-trace DIR`` (or ``TIMELY_PROGRESS_TRACE``) makes every process record,
for each progress batch it touches, when it passed each stage, and write the events to
``DIR/progress-trace-p{process}-{pid}.msgpack`` when it stops. A batch is named by
``(source worker, channel, seq)``, the same in every process, and the clock is the
wall clock, which the processes of one machine share, so the files of a run join
into one timeline. Stages:

- ``send``: ``Progcaster.send`` handed the batch to its pushers (worker = the sender);
- ``append``: Kafka mode, its record went to the producer (the end of the worker's step:
  the step's batches travel in one record);
- ``ack``: Kafka mode, the broker acknowledged the record (the delivery report);
- ``fetch``: Kafka mode, a subscriber read it (worker = -1 - the reading process);
- ``apply``: a receiving worker's ``Progcaster.recv`` took it (worker = the receiver).

``Timeline`` indexes the events by batch and worker; ``hop_stages`` gives, over every
batch a worker of another process applied, the time spent in each stage;
``Timeline.critical_path`` walks back from an epoch's completion at one worker, through
the last batch each worker applied before it sent the one it was waiting for, to the
epoch's injection: the progress rounds the epoch waited for, one after the other
(``epoch_rounds`` for every epoch of a run). In Kafka mode a round's hop is long
enough to stand out; peer-to-peer, rounds of 0.3 ms mix with every other step's
batches, so the walk there also passes through batches the epoch did not wait for.
``benchmarks/progress_modes.py`` (part 4) and ``docs/progress-modes.md`` read them.

Costs: off (the default), one attribute test per batch sent and per apply; on, one
tuple appended per stage per batch (about a microsecond), kept in memory until the
process stops.
"""
from __future__ import annotations

import glob
import os
import time
from typing import Any, Iterable, Optional

import msgpack

STAGES = ("send", "append", "ack", "fetch", "apply")


class ProgressTrace:
    """One process's progress-batch events: ``(time, stage, worker, source, channel, seq)``."""

    __slots__ = ("directory", "process", "events")

    def __init__(self, directory: str, process: int) -> None:
        self.directory = directory
        self.process = process
        self.events: list[tuple] = []

    def mark(self, stage: str, worker: int, source: int, channel: int, seq: int) -> None:
        """Batch ``(source, channel, seq)`` passed ``stage`` now, at ``worker``."""
        self.events.append((time.time(), stage, worker, source, channel, seq))

    def mark_record(self, stage: str, source: int, entries: Iterable[tuple]) -> None:
        """Every batch ``(channel, seq)`` of one Kafka record of ``source``'s log passed
        ``stage`` now (the broker layer's hook: ``broker.ProgressLog``, ``Subscriber``)."""
        now = time.time()
        worker = source if stage in ("append", "ack") else -1 - self.process
        append = self.events.append
        for channel, seq in entries:
            append((now, stage, worker, source, channel, seq))

    def dump(self) -> Optional[str]:
        """Write the events to this process's file; returns its path (None if empty)."""
        if not self.events:
            return None
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, f"progress-trace-p{self.process}-{os.getpid()}.msgpack")
        with open(path, "wb") as f:
            f.write(msgpack.packb(self.events, use_bin_type=True))
        return path


def for_config(config: Any, process: int) -> Optional[ProgressTrace]:
    """Process ``process``'s trace if ``config.progress_trace`` names a directory."""
    directory = getattr(config, "progress_trace", None)
    return ProgressTrace(directory, process) if directory else None


def load(directory: str) -> list[tuple]:
    """Every event written under ``directory``, in time order."""
    events: list[tuple] = []
    for path in sorted(glob.glob(os.path.join(directory, "progress-trace-p*.msgpack"))):
        with open(path, "rb") as f:
            events.extend(tuple(e) for e in msgpack.unpackb(f.read(), raw=False))
    events.sort(key=lambda e: e[0])
    return events


class Timeline:
    """The events of a run, indexed: per batch its stages, per worker its applies and
    sends in time order."""

    def __init__(self, events: list[tuple], workers_per_process: int = 1) -> None:
        self.workers_per_process = workers_per_process
        #: (source, channel, seq) -> {stage: first time}; "apply" -> {worker: time},
        #: "fetch" -> {process: time}
        self.batches: dict[tuple, dict] = {}
        #: worker -> [(time, batch)] of the batches it applied / sent, in time order
        self.applied: dict[int, list] = {}
        self.sent: dict[int, list] = {}
        for t, stage, worker, source, channel, seq in events:
            key = (source, channel, seq)
            stages = self.batches.setdefault(key, {})
            if stage == "apply":
                stages.setdefault("apply", {}).setdefault(worker, t)
                self.applied.setdefault(worker, []).append((t, key))
            elif stage == "fetch":          # per reading process (worker = -1 - process)
                stages.setdefault("fetch", {}).setdefault(-1 - worker, t)
            else:
                stages.setdefault(stage, t)
                if stage == "send":
                    self.sent.setdefault(worker, []).append((t, key))

    def last_applied(self, worker: int, before: float, after: float) -> Optional[tuple]:
        """The last batch from another worker, or from ``worker`` itself, that ``worker``
        applied in ``(after, before]`` and that was sent after ``after``: ``(time, key)``."""
        for t, key in reversed(self.applied.get(worker, ())):
            if t > before:
                continue
            if t <= after:
                return None
            sent = self.batches[key].get("send")
            if sent is not None and sent > after:
                return t, key
        return None

    def hop(self, key: tuple, receiver: int) -> dict[str, Optional[float]]:
        """The stage times (seconds after ``send``) of batch ``key`` up to its apply at
        ``receiver``: {"append", "ack", "fetch", "apply"} (None: not recorded)."""
        stages = self.batches[key]
        sent = stages["send"]
        out: dict[str, Optional[float]] = {}
        for stage in ("append", "ack"):
            out[stage] = None if stage not in stages else stages[stage] - sent
        fetched = stages.get("fetch", {}).get(receiver // self.workers_per_process)
        out["fetch"] = None if fetched is None else fetched - sent
        applied = stages.get("apply", {}).get(receiver)
        out["apply"] = None if applied is None else applied - sent
        return out

    def critical_path(self, worker: int, injected: float, done: float) -> list[dict[str, Any]]:
        """The progress rounds an epoch injected at ``injected`` and complete at
        ``worker`` by ``done`` waited for, last first: each the batch applied last
        before the next step, its sender and receiver, send and apply times and stages.
        A round ends the walk when its sender's last apply before sending it is older
        than the injection (it sent because data arrived, or it is the injecting step)."""
        path: list[dict[str, Any]] = []
        at, when = worker, done
        seen: set = set()
        while True:
            found = self.last_applied(at, when, injected)
            if found is None or found[1] in seen:
                break
            t_apply, key = found
            seen.add(key)
            sent = self.batches[key]["send"]
            path.append({"batch": key, "sender": key[0], "receiver": at, "sent": sent, "applied": t_apply,
                         "stages": self.hop(key, at)})
            at, when = key[0], sent
        return path


def hop_stages(timeline: Timeline, remote_only: bool = True) -> dict[str, list[float]]:
    """Per stage, the seconds each applied batch spent in it: ``buffered`` (send to
    append: the rest of the sender's step), ``broker`` (append to the receiving
    process's fetch: produce, the broker, the fetch wait), ``handoff`` (fetch to apply:
    the subscriber hands it to the worker, which wakes and takes it), ``total`` (send to
    apply), and ``ack`` (append to the producer's delivery report, off the path);
    ``remote_only``: only applies in another process than the sender's."""
    wpp = timeline.workers_per_process
    out: dict[str, list[float]] = {s: [] for s in ("buffered", "broker", "handoff", "total", "ack")}
    for (source, _, _), stages in timeline.batches.items():
        sent = stages.get("send")
        if sent is None:
            continue
        for receiver, applied in stages.get("apply", {}).items():
            if remote_only and receiver // wpp == source // wpp:
                continue
            out["total"].append(applied - sent)
            fetched = stages.get("fetch", {}).get(receiver // wpp)
            if "append" in stages and fetched is not None:
                out["buffered"].append(stages["append"] - sent)
                out["broker"].append(fetched - stages["append"])
                out["handoff"].append(applied - fetched)
                if "ack" in stages:
                    out["ack"].append(stages["ack"] - stages["append"])
    return out


def epoch_rounds(timeline: Timeline, epochs: list, start: float, worker: int = 0) -> list[dict[str, Any]]:
    """For each epoch ``(inject offset, latency)`` (offsets from ``start``, as the
    latency job writes them) completed at ``worker``: its critical path (first round
    first), how many of its rounds crossed processes (``remote``), and per round the
    time from the previous round's apply to this one's send (``react``: the receiving
    worker's step, propagation and operators)."""
    wpp = timeline.workers_per_process
    out = []
    for offset, latency in epochs:
        injected = start + offset
        path = list(reversed(timeline.critical_path(worker, injected, injected + latency)))
        at = injected
        for hop in path:
            hop["react"] = hop["sent"] - at
            at = hop["applied"]
        out.append({"injected": injected, "latency": latency, "path": path,
                    "remote": sum(1 for h in path if h["sender"] // wpp != h["receiver"] // wpp),
                    "tail": injected + latency - at})
    return out
