"""An executable model of timely's progress protocol, run on the real classes.

A configuration follows seed 002 §4 and §6, per dataflow (progress channel):

- ``caps[w]``: the capabilities worker w holds (pointstamps with positive counts);
- ``data``: capabilities in flight as data messages, ``(receiver, pointstamp)``;
- ``msg``: the progress batches in flight, FIFO per (channel, sender, receiver): the
  pushers of a real ``Progcaster`` append to them, the scheduler delivers one message
  at a time from any non-empty queue (any interleaving across channels);
- ``temp[w]``: w's changes not yet broadcast, a real ``ChangeBatch`` (the chosen twin);
- ``glob[w]``: w's view, the initial capabilities plus everything the real
  ``Progcaster.recv``/``apply`` handed it, which is also fed into w's real ``Tracker``
  (built by ``Builder`` from a random graph); ``propagate`` runs ``propagate_all``.

``rec`` (every pointstamp that exists) is the sum of every worker's caps and of data
(and of a joiner's grants between the announcement and its install).

Transitions (each returns a short label, or None when it is not enabled):

- ``perf_op(w, ch)``: an operation obeying the capability rules of §4: drop held
  capabilities (``neg``), send data at pointstamps *strictly* above a held one,
  create own capabilities at pointstamps at or above a held one; recorded in temp;
- ``recv_cap(i)``: a data message becomes its receiver's capability;
- ``send_upd(w, ch)``: a part of temp whose remainder is ``justified`` (§4) is sent as
  ONE batch through the real ``Progcaster.send`` (often all of temp);
- ``deliver(ch, s, r)``: the head of queue (s -> r) reaches r's puller and r runs the
  real ``Progcaster.recv`` (sequence checks included);
- ``propagate(w, ch)``: ``recv`` then ``Tracker.propagate_all`` (a scope's schedule),
  which empties the worklists; the first one initializes w (§6's ``init``).

Joining (seed 003 §3.4), when ``join`` is on: ``join_start`` adds a worker that holds
no capabilities; each existing worker later applies the join (``apply_join``: new
links, and a marker carrying its next sequence number as the first message on each);
the one chosen as bootstrap server snapshots its Progcasters' ``state()`` and records
later batches (the real ``BootstrapServer``); control messages travel FIFO
(``ctrl_deliver``) and the server answers range requests (``serve``, the real
``request``/``poll``/``done``); the joiner runs the real ``run_client`` in a helper
thread, one loop iteration per ``client_step`` (the thread only runs while the
scheduler waits for it, so runs stay deterministic). When it returns, the joiner has
installed state + ranges + held batches and is a normal worker. With ``kafka`` on,
the workers form processes of one or two (drawn), and progress goes through
per-worker logs as ``timely.communication.kafka`` sends it: a batch reaches the
sender's process mates (itself included) at once and waits in the sender's pending
record; ``flush_log(w)`` (the end of a worker's step, or a control message it sends)
appends w's pending batches, of every channel, as ONE record ``(lseq, [(channel, seq,
updates), ...])`` that every other process's subscriber then hands on batch by batch;
a snapshot = ``broker.log.fold`` of a prefix of records + last seq per channel every
``snapshot_interval`` records, as ``broker.ProgressLog`` writes them. A joiner (a
process of its own) subscribes to a snapshot of every other log plus its tail
(``join_start``) and runs the real ``run_kafka_client`` (``kafka_install``, enabled
once the server's grants reached its control box).

Joiner capabilities (seed 003 §3.2.1, ``timely.rescaling.grants``): when the server
applies the join, it grants, per channel, at every operator output the least time its
own capabilities imply there (``grants.implied_times``), keeping only grants *strictly*
above one it holds (seed 002's rule for handing a capability to another worker; see
``_grants``), and sends one batch with +1 at each through its real Progcaster before the
joiner hears anything (peer-to-peer: after the markers, before ``BootstrapServer``, which
carries the grants in ``bs-state``; Kafka: then ``("bs-grants", server, grants)``). The
grants count in rec from then on and become the joiner's caps when it installs.

Leaving, when ``leave`` is on (no join under way, one leave at a time, another worker
stays): ``leave_start(w)``: perf_op sends no more data to w; w may still operate, and
receives the data already on its way; ``handover(w)``: w moves one pointstamp it holds to
a worker that stays, net-zero (no batch), only when that is safe (strictly above a
capability w keeps; or, peer-to-peer, once every batch w sent was applied everywhere and
w's temp stays justified: see ``handover``); ``leave_finish(w)``: w holds nothing, sent
everything, no data is on its way to it; its batches stay in their queues (Kafka: its log
is read to its end) and what was queued for it is discarded; from then on no view, no
property and no join includes it. A peer-to-peer server applies a later join only once it
applied every batch of every departed worker (the joiner gets no marker from one); a
Kafka joiner reads departed workers' logs (snapshot + tail) like the others.

Mutations (``timely.verify.mutations``) are switched on by name and change one
behaviour: see there.

Costs: a transition is O(updates it moves) plus, for ``propagate``, the Tracker's
work; drawing a perf_op is O(held capabilities x reachable locations). The property
checks (``timely.verify.properties``) are separate.

>>> m = Model(Options(twin="python", workers=2, kind="int", scopes=1), seed=3)
>>> [w.index for w in m.workers], m.workers[1].scopes[0].glob == m.dataflows[0].rec
([0, 1], True)
>>> m.perf_op(0, 0) is not None, m.send_upd(0, 0, everything=True) is not None
(True, True)
>>> [m.deliver(key) is not None for key in list(m.net.nonempty)]
[True, True]
>>> m.workers[1].scopes[0].glob == m.dataflows[0].rec   # w1 has heard all of w0's batch
True
>>> m = Model(Options(twin="python", workers=3, kind="int", scopes=1, leave=True), seed=3)
>>> m.steps = m.leave_after; m.leave_start(2)
'leave_start w2'
>>> while m.handover(2) or m.send_upd(2, 0) or m.perf_op(2, 0, "drop"): pass
>>> m.leave_finish(2) is not None, [w.status for w in m.workers]
(True, ['active', 'active', 'gone'])
"""
from __future__ import annotations

import random
import threading
from collections import Counter, deque
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Optional

from broker.log import fold

from ..progress import twins
from ..progress.broadcast import MARKER, Progcaster
from ..rescaling.bootstrap import BootstrapServer, run_client, run_kafka_client
from ..rescaling.grants import implied_times
from .oracle import Oracle
from .order import PointstampOrder, fmt, fmt_updates, random_graph

__all__ = ["Options", "Model", "Net", "ModelAllocator"]


@dataclass
class Options:
    """What one schedule looks like; ``None`` fields are drawn from the schedule's rng."""

    twin: str = "python"            # "python" | "cython": ChangeBatch and Tracker twins
    workers: Optional[int] = None   # initial workers, 2..4
    kind: Optional[str] = None      # "int" | "pair" timestamps
    scopes: Optional[int] = None    # dataflows (progress channels), 1..2
    join: bool = False              # joining transitions (peer-to-peer bootstrap)
    kafka: bool = False             # progress through logs; joins from snapshots + tail
    max_joins: int = 2
    leave: bool = False             # workers leave mid-run (handover, then gone)
    max_leaves: int = 2
    mutation: Optional[str] = None  # a deliberately broken variant (mutations.MUTATIONS)
    rec_limit: int = 10             # past this many pointstamps, operations only retire


class Inbox:
    """A worker's puller for one channel: what the scheduler delivered, not yet pulled."""

    __slots__ = ("messages",)

    def __init__(self) -> None:
        self.messages: list = []

    def drain(self) -> list:
        out, self.messages = self.messages, []
        return out

    def __len__(self) -> int:
        return len(self.messages)


class QueuePusher:
    """Appends to the FIFO queue (channel, sender -> receiver)."""

    __slots__ = ("net", "key")

    def __init__(self, net: "Net", channel: int, sender: int, receiver: int) -> None:
        self.net = net
        self.key = (channel, sender, receiver)

    def push(self, message: Any) -> None:
        self.net.enqueue(self.key, message)


class LogPusher:
    """Kafka mode: the sender's pending record (``_LogPusher``) and its process mates'
    queues (the pushers ``ClusterAllocator.allocate_broadcast`` adds)."""

    __slots__ = ("net", "channel")

    def __init__(self, net: "Net", channel: int) -> None:
        self.net = net
        self.channel = channel

    def push(self, message: Any) -> None:
        self.net.log_push(self.channel, message)


class ModelAllocator:
    """What a Progcaster needs: ``index`` and ``allocate_broadcast(channel)``."""

    def __init__(self, net: "Net", index: int, receivers: list[int]) -> None:
        self.net = net
        self.index = index
        self.receivers = receivers

    def allocate_broadcast(self, channel: int) -> tuple[list, Inbox]:
        net = self.net
        if net.kafka:
            pushers: list = [LogPusher(net, channel)]
        else:
            pushers = [QueuePusher(net, channel, self.index, r) for r in self.receivers]
        net.links[(channel, self.index)] = pushers
        return pushers, net.inbox(channel, self.index)


class Net:
    """Progress queues, pullers, Kafka logs and snapshots, control channels."""

    def __init__(self, kafka: bool, snapshot_interval: int, mutation: Optional[str] = None) -> None:
        self.kafka = kafka
        self.mutation = mutation
        self.queues: dict[tuple, deque] = {}
        self.nonempty: dict[tuple, None] = {}      # insertion-ordered set of queue keys
        self.inboxes: dict[tuple, Inbox] = {}
        self.links: dict[tuple, list] = {}         # (channel, sender) -> the Progcaster's pushers
        # Kafka
        self.snapshot_interval = snapshot_interval
        self.logs: dict[int, list] = {}            # worker -> [(lseq, [(channel, seq, updates), ...])]
        self.pending: dict[int, list] = {}         # worker -> its next record's batches
        self.folds: dict[int, dict] = {}           # worker -> channel -> [last seq, {key: total}]
        self.snapshots: dict[int, list] = {}       # worker -> [(worker, lseq, offset, channels)]
        self.subscribers: dict[int, list] = {}     # worker -> receivers tailing its log
        self.mates: dict[int, list] = {}           # worker -> its process's workers (direct)
        # control (bootstrap) messages
        self.ctrl: dict[tuple, deque] = {}
        self.ctrl_inbox: dict[int, Inbox] = {}
        self.ctrl_hook = None                      # mutations rewrite messages in transit
        self.enqueued = 0
        self.stamps: dict[tuple, deque] = {}       # per queue: when each message was enqueued

    def inbox(self, channel: int, worker: int) -> Inbox:
        box = self.inboxes.get((channel, worker))
        if box is None:
            box = self.inboxes[(channel, worker)] = Inbox()
        return box

    def enqueue(self, key: tuple, message: Any) -> None:
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = deque()
            self.stamps[key] = deque()
        q.append(message)
        self.stamps[key].append(self.enqueued)
        self.nonempty[key] = None
        self.enqueued += 1

    def pop(self, key: tuple) -> Any:
        q = self.queues[key]
        message = q.popleft()
        self.stamps[key].popleft()
        if not q:
            del self.nonempty[key]
        return message

    def head_stamp(self, key: tuple) -> int:
        """When the message at the head of (non-empty) queue ``key`` was enqueued."""
        return self.stamps[key][0]

    def queue(self, key: tuple) -> deque:
        return self.queues.get(key) or deque()

    # ---- Kafka --------------------------------------------------------------------------
    def log_push(self, channel: int, message: Any) -> None:
        """A Progcaster's batch: to the sender's process mates at once, and into the
        sender's pending record."""
        source, seq, updates = message
        self.pending.setdefault(source, []).append((channel, seq, updates))
        for receiver in self.mates.get(source, ()):
            self.enqueue((channel, source, receiver), message)

    def log_flush(self, source: int) -> int:
        """``KafkaProgress.flush``: ``source``'s pending batches as one record (``ProgressLog
        .append_batches``), then the other processes' subscribers hand each batch of it
        on. Returns the number of records appended (two under ``record_splits_batch``)."""
        batches = self.pending.pop(source, None)
        if not batches:
            return 0
        records = [batches]
        if self.mutation == "record_last_batch_per_channel":
            # BUG: the record kept as {channel: batch}: a channel's earlier batches of the step are lost
            last = {}
            for batch in batches:
                last[batch[0]] = batch
            records = [list(last.values())]
        elif self.mutation == "record_splits_batch":
            for i, (channel, seq, updates) in enumerate(batches):
                if len(updates) > 1:
                    # BUG: cut at a record size: the batch straddling the cut goes half in
                    # each record, both under its own sequence number
                    half = len(updates) // 2
                    records = [batches[:i] + [(channel, seq, updates[:half])],
                               [(channel, seq, updates[half:])] + batches[i + 1:]]
                    break
        log = self.logs.setdefault(source, [])
        for record in records:
            lseq = len(log)
            log.append((lseq, record))
            folds = self.folds.setdefault(source, {})
            for channel, seq, updates in record:
                per_channel = folds.setdefault(channel, [-1, {}])
                per_channel[0] = seq
                fold([updates], per_channel[1])
            if self.snapshot_interval and (lseq + 1) % self.snapshot_interval == 0:
                channels = {ch: (last, list(acc.items())) for ch, (last, acc) in folds.items()}
                self.snapshots.setdefault(source, []).append((source, lseq + 1, lseq + 1, channels))
            for receiver in self.subscribers.get(source, ()):
                for channel, seq, updates in record:
                    self.enqueue((channel, source, receiver), (source, seq, updates))
        return len(records)

    def subscribe(self, receiver: int, source: int, offset: int) -> None:
        """``receiver`` tails ``source``'s log from record ``offset`` on."""
        for lseq, record in self.logs.get(source, [])[offset:]:
            for channel, seq, updates in record:
                self.enqueue((channel, source, receiver), (source, seq, updates))
        self.subscribers.setdefault(source, []).append(receiver)

    def drop_receiver(self, worker: int) -> int:
        """``worker`` left: nothing is sent to it any more (p2p: every pusher to it is
        dropped; Kafka: it stops tailing every log) and what was queued for it is
        discarded. Returns how many progress messages were discarded."""
        for pushers in self.links.values():
            pushers[:] = [p for p in pushers if not (isinstance(p, QueuePusher) and p.key[2] == worker)]
        for receivers in [*self.subscribers.values(), *self.mates.values()]:
            if worker in receivers:
                receivers.remove(worker)
        discarded = 0
        for key in [k for k in self.queues if k[2] == worker]:
            discarded += len(self.queues.pop(key))
            del self.stamps[key]
            self.nonempty.pop(key, None)
        for key, box in self.inboxes.items():
            if key[1] == worker:
                discarded += len(box.drain())
        return discarded

    # ---- control ------------------------------------------------------------------------
    def ctrl_send(self, sender: int, receiver: int, payload: Any) -> None:
        if self.ctrl_hook is not None:
            payload = self.ctrl_hook(sender, receiver, payload)
        q = self.ctrl.get((sender, receiver))
        if q is None:
            q = self.ctrl[(sender, receiver)] = deque()
        q.append(payload)

    def ctrl_box(self, worker: int) -> Inbox:
        box = self.ctrl_inbox.get(worker)
        if box is None:
            box = self.ctrl_inbox[worker] = Inbox()
        return box


class Dataflow:
    """One dataflow (progress channel): its graph, order, and global exchange state."""

    def __init__(self, channel: int, graph: Any, tmax: int) -> None:
        self.channel = channel
        self.graph = graph
        self.oracle = Oracle(graph)
        self.order = PointstampOrder(self.oracle, tmax)
        self.initial: dict = {}        # the initial capabilities, common knowledge (glob at Init)
        self.rec: dict = {}            # every pointstamp that exists: caps + data
        self.rec_bits = 0
        self.rec_total = 0
        self.data: Counter = Counter()  # (receiver, pointstamp) -> count
        self.announced: dict = {}       # initial + every batch sent (what globs tend to)
        #: capabilities that exist but were never announced: only under a mutation (a
        #: grant announced late, a handover that sent a -1); the model's books add it
        self.unannounced: Counter = Counter()


class Scope:
    """One worker's state for one dataflow."""

    __slots__ = ("channel", "pc", "tracker", "temp", "changes", "glob", "caps", "initialized",
                 "frontiers", "vacant", "gpos")

    def __init__(self, channel: int, pc: Progcaster, tracker: Any, change_batch: type) -> None:
        self.channel = channel
        self.pc = pc
        self.tracker = tracker
        self.temp = change_batch()
        self.changes = change_batch()       # the scope's final_pointstamp: recv/install write here
        self.glob: dict = {}
        self.caps: dict = {}
        self.initialized = False
        self.frontiers: dict = {}           # location -> implication frontier at the last propagate
        self.vacant = 0                     # bitset: every p this glob was ever vacant up to
        self.gpos: Optional[int] = None     # cache: up-set of glob's positive entries


class Worker:
    """Status: "joining" (until its bootstrap installed), "active" (an original worker),
    "joined", "leaving" (since ``leave_start``) or "gone" (since ``leave_finish``)."""

    def __init__(self, index: int, joiner: bool) -> None:
        self.index = index
        self.joiner = joiner
        self.status = "joining" if joiner else "active"
        self.scopes: list[Scope] = []
        self.server: Optional[BootstrapServer] = None
        self.client: Optional["ClientThread"] = None

    @property
    def installed(self) -> bool:
        """Its progress view is defined: an original worker or a joiner that finished,
        not gone."""
        return self.status in ("active", "joined", "leaving")

    @property
    def routable(self) -> bool:
        """Installed and not leaving: data may be sent to it, capabilities handed to it."""
        return self.status in ("active", "joined")


class _Flag:
    def __init__(self) -> None:
        self.value = False

    def is_set(self) -> bool:
        return self.value


class ClientThread:
    """The real ``run_client`` in a helper thread, resumed one loop iteration at a time.

    ``run_client`` waits for events with ``allocator.await_events``: there it hands
    control back to the scheduler and sleeps until the next ``step()``. Exactly one of
    the two threads runs at any moment."""

    def __init__(self, fake_worker: Any) -> None:
        self.worker = fake_worker
        self._resume = threading.Event()
        self._paused = threading.Event()
        self.done = False
        self.error: Optional[BaseException] = None
        self.iterations = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="verify-run_client")
        self._started = False
        fake_worker.allocator.await_events = self._await

    def _run(self) -> None:
        self._resume.wait()
        self._resume.clear()
        try:
            run_client(self.worker)
        except BaseException as e:  # noqa: BLE001 - reported as a violation by the model
            self.error = e
        finally:
            self.done = True
            self._paused.set()

    def _await(self, timeout: Optional[float] = None) -> None:
        self._paused.set()
        self._resume.wait()
        self._resume.clear()

    def step(self) -> None:
        if self.done:
            return
        if not self._started:
            self._started = True
            self._thread.start()
        self.iterations += 1
        self._paused.clear()
        self._resume.set()
        self._paused.wait()

    def abort(self) -> None:
        """Make ``run_client`` stop (``hub.abort``) and wait for the thread."""
        if self._started and not self.done:
            self.worker.allocator.hub.abort.value = True
            self.step()
        if self._started:
            self._thread.join(timeout=5)


class Model:
    """The configuration and its transitions; see the module docstring."""

    def __init__(self, options: Options, seed: int) -> None:
        self.options = options
        self.seed = seed
        rng = self.rng = random.Random(seed)
        self.mutation = options.mutation
        found = twins("ChangeBatch")
        if options.twin not in found:
            raise RuntimeError(f"twin {options.twin!r} is not available (built: {sorted(found)})")
        self.ChangeBatch = found[options.twin]
        self.Tracker = twins("Tracker")[options.twin]
        n_workers = options.workers or rng.randint(2, 4)
        self.kind = options.kind or rng.choice(("int", "pair"))
        self.tmax = 6 if self.kind == "int" else 3
        n_scopes = options.scopes or rng.choice((1, 1, 2))
        self.net = Net(options.kafka, snapshot_interval=rng.randint(1, 3), mutation=options.mutation)
        self.dataflows = [Dataflow(ch, random_graph(rng, self.kind), self.tmax) for ch in range(n_scopes)]
        self.workers: list[Worker] = []
        self.events: list[tuple] = []       # what changed, for the incremental checks
        self.errors: list[tuple] = []       # exceptions the real code raised: (what, exc)
        self.joins_started = 0
        self.joins_done = 0
        self.join: Optional[SimpleNamespace] = None
        self.leave: Optional[int] = None    # the worker leaving now
        self.leaves_started = 0
        self.leaves_done = 0
        #: mutation grant_announced_late: (server, joiner, channel, updates) not yet sent
        self.late: list = []
        #: how often interesting corners were reached (partial sends, range requests,
        #: negative counts, old snapshots ...), reported by the scheduler
        self.coverage: Counter = Counter()
        # initial capabilities: timely-like (one per operator output per worker) or random
        per_worker: list[list[dict]] = []       # [channel][worker] -> caps
        for df in self.dataflows:
            timely_like = rng.random() < 0.5
            caps_of = []
            for w in range(n_workers):
                caps: dict = {}
                if timely_like:
                    for loc in df.order.locations:
                        if loc.is_source and loc.node != 0 and rng.random() < 0.7:
                            caps[(loc, df.order.minimum)] = 1
                for _ in range(rng.randint(0 if caps else 1, 2)):
                    p = df.order.draw_low(rng)
                    caps[p] = caps.get(p, 0) + 1
                caps_of.append(caps)
                for p, c in caps.items():
                    df.initial[p] = df.initial.get(p, 0) + c
            per_worker.append(caps_of)
            df.rec = dict(df.initial)
            df.rec_bits = df.order.bits(df.rec)
            df.rec_total = sum(df.rec.values())
            df.announced = dict(df.initial)
        if self.net.kafka:
            # processes of one or two workers: a batch reaches the sender's process at once,
            # and every other process through the sender's log, which it tails
            per_process = rng.choice((1, 2))
            for s in range(n_workers):
                self.net.mates[s] = [r for r in range(n_workers) if r // per_process == s // per_process]
                self.net.subscribers[s] = [r for r in range(n_workers) if r // per_process != s // per_process]
        for w in range(n_workers):
            worker = self._new_worker(w, joiner=False, receivers=list(range(n_workers)))
            for ch, scope in enumerate(worker.scopes):
                scope.caps = dict(per_worker[ch][w])
            self.workers.append(worker)
        self.net.ctrl_hook = self._ctrl_transit
        self.join_after = rng.randint(5, 120)   # joins start after this many transitions
        # leaves start after this many (drawn only with leaves on: other schedules unchanged)
        self.leave_after = rng.randint(5, 150) if options.leave else 0
        self.steps = 0

    # ---- construction --------------------------------------------------------------------
    def _new_worker(self, index: int, joiner: bool, receivers: list[int]) -> Worker:
        worker = Worker(index, joiner)
        allocator = ModelAllocator(self.net, index, receivers)
        for df in self.dataflows:
            pc = Progcaster(allocator, df.channel, accumulate=not self.net.kafka)
            if pc.accumulated is not None:
                pc.accumulated = self.ChangeBatch()     # the twin under test
            tracker = df.graph.builder().build(tracker_class=self.Tracker)
            scope = Scope(df.channel, pc, tracker, self.ChangeBatch)
            # every worker knows the initial capabilities (seed 004): its glob starts there
            scope.glob = dict(df.initial)
            for (loc, t), c in df.initial.items():
                tracker.update(loc, t, c)
            worker.scopes.append(scope)
        return worker

    # ---- bookkeeping ---------------------------------------------------------------------
    def _rec_add(self, df: Dataflow, p: tuple, d: int) -> None:
        old = df.rec.get(p, 0)
        new = old + d
        if new < 0:
            raise AssertionError(f"model error: rec count of {p} would be {new}")
        df.rec_total += d
        if new:
            df.rec[p] = new
            if not old:
                df.rec_bits |= df.order.bit(p)
                self.events.append(("rec+", df.channel, p))
        else:
            del df.rec[p]
            df.rec_bits &= ~df.order.bit(p)

    def _absorb(self, worker: Worker, scope: Scope) -> None:
        """Move what the real Progcaster wrote into ``changes`` into glob and the Tracker."""
        if scope.changes.is_empty():
            scope.changes.clear()
            return
        glob = scope.glob
        tracker = scope.tracker
        for (loc, t), d in scope.changes.drain():
            key = (loc, t)
            c = glob.get(key, 0) + d
            if c:
                glob[key] = c
            else:
                del glob[key]
            tracker.update(loc, t, d)
        scope.gpos = None
        if any(c < 0 for c in glob.values()):
            self.coverage["negative glob count"] += 1
        self.events.append(("glob", worker.index, scope.channel))

    # ---- the exchange protocol (§4) --------------------------------------------------------
    def perf_op(self, w: int, ch: int, kind: Optional[str] = None) -> Optional[str]:
        """An operation of ``w`` on ``ch`` (``kind`` drawn unless given: a drain makes a
        leaving worker ``drop``)."""
        worker = self.workers[w]
        if not worker.installed:
            return None
        scope = worker.scopes[ch]
        held = list(scope.caps)
        if not held:
            return None
        df = self.dataflows[ch]
        order = df.order
        rng = self.rng
        neg: Counter = Counter()
        data: list = []
        selfs: list = []
        support = rng.choice(held)
        receivers = [x.index for x in self.workers if x.routable]    # not to a leaving worker
        kind = kind or rng.choices(("step", "drop", "downgrade", "clone"), (6, 2, 3, 1))[0]
        if df.rec_total >= self.options.rec_limit and kind in ("step", "clone"):
            kind = rng.choice(("drop", "downgrade"))
        if kind == "drop":
            neg[support] += 1
            if len(held) > 1 and rng.random() < 0.3:
                other = rng.choice(held)
                if neg[other] < scope.caps[other]:
                    neg[other] += 1
        elif kind == "downgrade":
            q = order.draw_above(rng, support, strict=True)
            if q is not None:
                selfs.append(q)
            neg[support] += 1
        elif kind == "clone":
            selfs.append(support)
        else:   # consume / produce: messages strictly above, maybe a capability, maybe retire
            for _ in range(rng.randint(1, 2)):
                q = order.draw_above(rng, support, strict=True)
                if q is not None:
                    data.append((rng.choice(receivers), q))
            if rng.random() < 0.3:
                q = order.draw_above(rng, support, strict=False)
                if q is not None:
                    selfs.append(q)
            if rng.random() < 0.6:
                neg[support] += 1
        if self.mutation == "unsupported_positive" and rng.random() < 0.3:
            # a capability out of nothing: not above anything held
            q = order.draw_low(rng)
            if not any(order.le(h, q) for h in held):
                selfs.append(q)
        delta_self = Counter(selfs)
        delta_self.subtract(neg)
        if not data and not any(delta_self.values()):
            return None
        caps = scope.caps
        temp = scope.temp
        for p, n in neg.items():
            left = caps[p] - n
            if left:
                caps[p] = left
            else:
                del caps[p]
            temp.update(p, -n)
            self._rec_add(df, p, -n)
        for r, p in data:
            df.data[(r, p)] += 1
            temp.update(p, 1)
            self._rec_add(df, p, 1)
        for p in selfs:
            caps[p] = caps.get(p, 0) + 1
            temp.update(p, 1)
            self._rec_add(df, p, 1)
        return (f"perf_op w{w} ch{ch} {kind}: retire {fmt_updates([(p, -n) for p, n in neg.items()])} data "
                f"[{', '.join(f'{fmt(p)}->w{r}' for r, p in data)}] self [{', '.join(map(fmt, selfs))}]")

    def recv_cap(self, ch: int, receiver: Optional[int] = None) -> Optional[str]:
        """A data message on ``ch`` (to ``receiver``, if given) becomes a capability."""
        df = self.dataflows[ch]
        entries = list(df.data) if receiver is None else [k for k in df.data if k[0] == receiver]
        if not entries:
            return None
        r, p = entries[self.rng.randrange(len(entries))]
        if self.workers[r].status == "leaving":
            self.coverage["leave: data received while leaving"] += 1
        df.data[(r, p)] -= 1
        if not df.data[(r, p)]:
            del df.data[(r, p)]
        caps = self.workers[r].scopes[ch].caps
        caps[p] = caps.get(p, 0) + 1
        return f"recv_cap w{r} ch{ch} {fmt(p)}"

    def justified(self, order: PointstampOrder, caps: dict, rest: dict) -> bool:
        """§4's ``justified caps rest``: every positive entry is supported in rest, or
        by a strictly smaller capability, or by a larger count of itself in caps."""
        negs = [p for p, c in rest.items() if c < 0]
        held = [p for p, c in caps.items() if c > 0]
        lt = order.lt
        for p, c in rest.items():
            if c <= 0:
                continue
            if c < caps.get(p, 0):
                continue
            if any(lt(q, p) for q in negs) or any(lt(q, p) for q in held):
                continue
            return False
        return True

    def send_upd(self, w: int, ch: int, everything: bool = False) -> Optional[str]:
        worker = self.workers[w]
        scope = worker.scopes[ch]
        if scope.temp.is_empty():
            return None
        # sorted: a ChangeBatch's order depends on when it was compacted (by whoever
        # read it), and the schedule must not
        items = sorted(scope.temp)
        rng = self.rng
        gamma = items
        if not everything and len(items) > 1 and rng.random() < 0.6:
            order = self.dataflows[ch].order
            for _ in range(4):
                subset = [u for u in items if rng.random() < 0.5]
                if not subset or len(subset) == len(items):
                    continue
                chosen = {p for p, _ in subset}
                rest = {p: d for p, d in items if p not in chosen}
                if self.mutation == "unjustified_send" or self.justified(order, scope.caps, rest):
                    gamma = subset
                    self.coverage["partial send (justified remainder)"] += 1
                    break
        for p, d in gamma:
            scope.temp.update(p, -d)
        pc = scope.pc
        if self.mutation == "split_batch" and any(d < 0 for _, d in gamma) and any(d > 0 for _, d in gamma):
            # half-formed progress messages: the retirements first, the rest after
            pc.send(self.ChangeBatch([u for u in gamma if u[1] < 0]))
            self._sent(ch, w, [u for u in gamma if u[1] < 0])
            pc.send(self.ChangeBatch([u for u in gamma if u[1] > 0]))
            self._sent(ch, w, [u for u in gamma if u[1] > 0])
            return f"send_upd w{w} ch{ch} SPLIT {fmt_updates(gamma)}"
        pc.send(self.ChangeBatch(gamma))
        self._sent(ch, w, gamma)
        partial = " (part of temp)" if len(gamma) < len(items) else ""
        return f"send_upd w{w} ch{ch} seq {pc.seq - 1} {fmt_updates(gamma)}{partial}"

    def _sent(self, ch: int, w: int, updates: list) -> None:
        announced = self.dataflows[ch].announced
        for p, d in updates:
            c = announced.get(p, 0) + d
            if c:
                announced[p] = c
            else:
                del announced[p]
        self.events.append(("sent", ch, w, updates))

    def deliver(self, key: tuple) -> Optional[str]:
        """recv_upd: the head of queue ``key`` = (channel, sender, receiver) arrives."""
        ch, s, r = key
        if not self.net.queues.get(key):
            return None
        message = self.net.pop(key)
        worker = self.workers[r]
        scope = worker.scopes[ch]
        inbox = self.net.inbox(ch, r)
        inbox.messages.append(message)
        if worker.installed:
            self._recv(worker, scope)
        return f"deliver ch{ch} w{s}->w{r} seq {message[1]}"

    def flush_log(self, w: int) -> Optional[str]:
        """Kafka: the end of ``w``'s step (``flush_sends``): its pending batches, of every
        channel, go out as one record of its log."""
        batches = self.net.pending.get(w)
        if not batches:
            return None
        if len(batches) > 1:
            self.coverage["kafka: a record of several batches"] += 1
        if len({b[0] for b in batches}) > 1:
            self.coverage["kafka: a record of several channels"] += 1
        records = self.net.log_flush(w)
        return (f"flush_log w{w}: " + ", ".join(f"ch{ch} seq {seq}" for ch, seq, _ in batches)
                + (f" in {records} records" if records != 1 else ""))

    def _recv(self, worker: Worker, scope: Scope) -> None:
        try:
            scope.pc.recv(scope.changes)
        except Exception as e:  # noqa: BLE001 - the real code refused: report it
            self.errors.append((f"Progcaster.recv on worker {worker.index} channel {scope.channel}", e))
            scope.changes.clear()
            return
        self._absorb(worker, scope)

    def propagate(self, w: int, ch: int) -> Optional[str]:
        worker = self.workers[w]
        if not worker.installed:
            return None
        scope = worker.scopes[ch]
        if len(self.net.inbox(ch, w)):
            self._recv(worker, scope)
        tracker = scope.tracker
        tracker.propagate_all()
        tracker.pushed_changes().drain()
        for changes in tracker.output_changes:
            changes.drain()
        scope.initialized = True
        scope.frontiers = {loc: tracker.implications(loc).frontier()
                           for loc in self.dataflows[ch].order.locations}
        self.events.append(("prop", w, ch))
        return f"propagate w{w} ch{ch}"

    # ---- joining (seed 003 §3.4) ------------------------------------------------------------
    def join_start(self) -> Optional[str]:
        opts = self.options
        if (not opts.join or self.join is not None or self.leave is not None
                or self.joins_started >= opts.max_joins or self.steps < self.join_after):
            return None
        rng = self.rng
        existing = [w.index for w in self.workers if w.installed]
        gone = [w.index for w in self.workers if w.status == "gone"]
        j = len(self.workers)
        worker = self._new_worker(j, joiner=True, receivers=existing + [j])
        self.workers.append(worker)
        self.joins_started += 1
        join = self.join = SimpleNamespace(joiner=j, existing=existing, pending=list(existing),
                                           server=rng.choice(existing), kafka=self.net.kafka,
                                           snapshots={}, state_last={}, granted={},
                                           message_grants=None, listing=[], waited=False)
        if gone:
            self.coverage["joins after a leave"] += 1
        net = self.net
        if net.kafka:
            # the joining process subscribes to every worker's latest snapshot and tail
            # (from_snapshot), departed workers' logs included (their records stay); its
            # own batches reach it directly (it is a process of its own)
            net.mates[j] = [j]
            for s in existing + gone:
                written = net.snapshots.get(s, [])
                snapshot = None
                if written:
                    # the snapshot index may lag: mostly the latest, sometimes an older one
                    roll = rng.random()
                    snapshot = written[-1] if roll < 0.6 else (
                        rng.choice(written) if roll < 0.9 else None)
                offset = snapshot[1] if snapshot is not None else 0
                behind = len(net.logs.get(s, [])) - offset
                self.coverage["kafka: no snapshot" if snapshot is None else
                              "kafka: older snapshot" if snapshot is not written[-1] else
                              "kafka: latest snapshot"] += 1
                if behind:
                    self.coverage["kafka: non-empty tail"] += 1
                if s in gone:
                    self.coverage["kafka: a departed worker's log read by a joiner"] += 1
                if self.mutation == "skip_snapshot_tail":
                    offset = len(net.logs.get(s, []))        # BUG: tail from the end
                if self.mutation == "bootstrap_seq_off_by_one" and snapshot is not None:
                    w_, lseq, off, channels = snapshot
                    snapshot = (w_, lseq, off, {c: (last + 1, u) for c, (last, u) in channels.items()})
                join.snapshots[s] = snapshot
                net.subscribe(j, s, offset)
            return f"join_start w{j} (kafka) server w{join.server} snapshots " + ", ".join(
                f"w{s}@{'-' if sn is None else sn[1]}" for s, sn in join.snapshots.items())
        # peer-to-peer: the client loop (real run_client) in a helper thread
        worker.client = ClientThread(self._client_worker(worker, join))
        return f"join_start w{j} server w{join.server}"

    def _client_worker(self, worker: Worker, join: SimpleNamespace) -> Any:
        net = self.net
        j = worker.index
        # hub.connections: the processes it is connected to, which a departed one is not
        hub = SimpleNamespace(workers_per_process=1, connections=set(join.existing),
                              abort=_Flag(), error=None)
        box = net.ctrl_box(j)
        allocator = SimpleNamespace(
            hub=hub, index=j, control_puller=lambda: box,
            control_send=lambda process, first, last, payload: net.ctrl_send(j, process, payload),
            events=lambda: [], await_events=None)
        scopes = {s.channel: SimpleNamespace(final_pointstamp=s.changes, path=(s.channel,))
                  for s in worker.scopes}
        return SimpleNamespace(
            index=j, allocator=allocator, progcasters={s.channel: s.pc for s in worker.scopes},
            config=SimpleNamespace(process=j, join=join.server, timeout=1e9),
            dataflows=lambda: [], dataflow_subgraph=lambda index: None, pending_capabilities=[],
            forget_dataflow=lambda index: None, scope_of_channel=lambda ch: scopes[ch],
            activations=SimpleNamespace(activate=lambda path: None))

    def can_apply_join(self, w: int) -> bool:
        """Whether existing worker ``w`` may apply the join now. Peer-to-peer, the server
        first waits until it has applied every batch of every departed worker: the joiner
        gets no marker (no link) from a departed worker, so whatever of its batches the
        server's state lacks, the joiner would never get."""
        join = self.join
        if join is None or w not in join.pending:
            return False
        if join.kafka or w != join.server:
            return True
        scopes = self.workers[w].scopes
        for g in self.workers:
            if g.status == "gone":
                for scope in g.scopes:
                    if scopes[scope.channel].pc.last_seq.get(g.index, -1) != scope.pc.seq - 1:
                        join.waited = True
                        return False
        return True

    def _grants(self, w: int) -> dict:
        """What server ``w`` grants the joiner, per channel ``{pointstamp: 1}``: at every
        operator output (a source location, not node 0) the least time its own
        capabilities imply there (``grants.implied_times``, the runtime's function),
        where one of them is *strictly* below it.

        A grant is a capability handed to another worker, which seed 002 allows only
        strictly above one the sender holds (``perf_op``'s data rule). A grant at a
        pointstamp p that only the server's own capability at p justifies is not safe:
        the joiner's -1 for p travels on its own queues and a view may apply it before
        the server's +1 for the grant, cancelling the server's own count at p: nothing
        at or below p, while the server still holds p. ``timely.rescaling.grants`` grants
        strictly; the model checks it does. (The mutation ``grant_not_strict`` grants at
        the capability held at an output itself.)"""
        worker = self.workers[w]
        out = {}
        for df in self.dataflows:
            order = df.order
            caps = worker.scopes[df.channel].caps
            outputs = [loc for loc in order.places if loc.is_source]
            times = (implied_times(df.graph.builder(), self.ChangeBatch(list(caps.items())), outputs)
                     if caps else {})
            held = [q for q, c in caps.items() if c > 0]
            if self.mutation == "grant_not_strict":
                for q in held:              # BUG: at the capability it holds itself, not after
                    if q[0] in times and order.le(q, (q[0], times[q[0]])):
                        times[q[0]] = q[1]
            if self.mutation == "grant_closed_time":
                for loc in outputs:
                    p = (loc, order.minimum)
                    if not any(order.le(q, p) for q in held):
                        times[loc] = order.minimum           # BUG: nothing held justifies it
            granted = {}
            for loc, t in sorted(times.items()):
                p = (loc, t)
                if p not in order.index:
                    self.coverage["grants: beyond the model's times (not granted)"] += 1
                    continue
                if self.mutation != "grant_closed_time" and not any(order.le(q, p) for q in held):
                    self.errors.append((f"grants.implied_times for server w{w} channel {df.channel}",
                                        AssertionError(f"granted {fmt(p)}, which no capability "
                                                       f"it holds is at or below")))
                if (self.mutation not in ("grant_not_strict", "grant_closed_time")
                        and not any(order.lt(q, p) for q in held)):
                    self.errors.append((f"grants.implied_times for server w{w} channel {df.channel}",
                                        AssertionError(f"granted {fmt(p)}, which no capability it "
                                                       f"holds is strictly below (see above)")))
                if any(q[0] == p[0] for q in held):
                    self.coverage["grants: after a capability held at the output itself"] += 1
                granted[p] = 1
            out[df.channel] = granted
        return out

    def _grant(self, w: int, join: SimpleNamespace) -> list:
        """Server ``w`` grants and announces (``grants.announce``): one batch per channel
        with +1 at each grant, sent before the joiner hears anything. Returns the grants
        in the runtime's form ``[(path, port, time)]``."""
        grants = join.granted = self._grants(w)
        listing = []
        for ch, granted in grants.items():
            if not granted:
                continue
            df = self.dataflows[ch]
            updates = sorted(granted.items())
            for p, c in updates:
                self._rec_add(df, p, c)      # granted, not yet held: the joiner's once installed
            if self.mutation == "grant_announced_late":
                for p, c in updates:        # BUG: handed over now, announced later
                    df.unannounced[p] += c
                self.late.append((w, join.joiner, ch, updates))
            else:
                self.workers[w].scopes[ch].pc.send(self.ChangeBatch(updates))
                self._sent(ch, w, updates)
            listing.extend(((ch, loc.node), loc.port, t) for (loc, t), _ in updates)
        self.coverage["grants: capabilities granted"] += len(listing)
        if not listing:
            self.coverage["grants: none (a join without grants)"] += 1
        join.listing = listing
        return listing

    def apply_join(self, w: int) -> Optional[str]:
        """Existing worker ``w`` applies the join (``Worker._apply_rescale``)."""
        if not self.can_apply_join(w):
            return None
        join = self.join
        join.pending.remove(w)
        j = join.joiner
        worker = self.workers[w]
        net = self.net
        if w == join.server and join.waited:
            self.coverage["p2p: server waited for a departed worker's batches"] += 1
        if join.kafka:
            net.subscribe(w, j, 0)      # tail the joiner's log from its beginning
            label = f"apply_join w{w} (subscribes to w{j})"
            if w == join.server:
                granted = self._grant(w, join)
                if net.log_flush(w):     # control_send flushes the sender's record first
                    self.coverage["kafka: grants announced in the record flushed before bs-grants"] += 1
                net.ctrl_send(w, j, ("bs-grants", w, granted))
                label += f" (bootstrap worker: {len(granted)} grants announced)"
            self._maybe_joined()
            return label
        for scope in worker.scopes:
            pusher = QueuePusher(net, scope.channel, w, j)
            net.links[(scope.channel, w)].append(pusher)      # add_process: back-fill the link
            if self.mutation == "marker_off_by_one":
                pusher.push((w, MARKER, scope.pc.seq - 1))    # BUG: one too low
            else:
                scope.pc.send_marker([pusher])
        label = f"apply_join w{w}"
        if w == join.server:
            granted = self._grant(w, join)
            fake = SimpleNamespace(
                index=w, progcasters={s.channel: s.pc for s in worker.scopes},
                allocator=SimpleNamespace(
                    control_send=lambda process, first, last, payload: net.ctrl_send(w, first, payload)))
            worker.server = BootstrapServer(fake, j, j, j, granted)
            label += f" (bootstrap server: {len(granted)} grants announced, state sent, recording)"
        return label

    def _ctrl_transit(self, sender: int, receiver: int, payload: Any) -> Any:
        kind = payload[0]
        if kind == "bs-state" and self.join is not None:
            self.join.state_last = {ch: dict(last) for ch, _, last in payload[2]}
            self.join.message_grants = list(payload[3])
        if kind == "bs-grants" and self.join is not None:
            self.join.message_grants = list(payload[2])
        if kind == "bs-state" and self.mutation == "bootstrap_seq_off_by_one":
            # BUG: the state says it holds one batch more than it does
            _, index, state, granted = payload
            return (kind, index, [(ch, u, {s: seq + 1 for s, seq in last.items()})
                                  for ch, u, last in state], granted)
        if kind == "bs-range" and self.mutation == "dropped_range":
            _, channel, source, start, batches = payload
            return (kind, channel, source, start, batches[:-1])   # BUG: the last batch is lost
        return payload

    def ctrl_deliver(self, key: tuple) -> Optional[str]:
        q = self.net.ctrl.get(key)
        if not q:
            return None
        payload = q.popleft()
        self.net.ctrl_box(key[1]).messages.append(payload)
        return f"ctrl w{key[0]}->w{key[1]} {payload[0]}"

    def serve(self, w: int) -> Optional[str]:
        """The server's ``Worker._serve_control``: requests, done, then ``poll``."""
        worker = self.workers[w]
        server = worker.server
        if server is None:
            return None
        box = self.net.ctrl_box(w)
        handled = []
        for message in box.drain():
            kind = message[0]
            handled.append(kind)
            if kind == "bs-req":
                _, requester, channel, source, start, end = message
                server.request(requester, channel, source, start, end)
                self.coverage["p2p: range requested"] += 1
                self.coverage["p2p: batches in ranges"] += end - start
            elif kind == "bs-done":
                if server.done(message[1]):
                    worker.server = None
                    self._maybe_joined()
        if worker.server is not None:
            before = len(server.pending)
            server.poll()
            if len(server.pending) < before:
                handled.append(f"answered {before - len(server.pending)}")
        if not handled:
            return None
        return f"serve w{w} {handled}"

    def client_step(self) -> Optional[str]:
        join = self.join
        if join is None or join.kafka:
            return None
        worker = self.workers[join.joiner]
        client = worker.client
        if client is None or client.done:
            return None
        client.step()
        if client.done:
            if client.error is not None:
                self.errors.append((f"run_client on joiner w{worker.index}", client.error))
                return f"client_step w{worker.index}: raised {client.error!r}"
            self._installed(worker)
            return f"client_step w{worker.index}: installed"
        return f"client_step w{worker.index}"

    def grants_delivered(self) -> bool:
        """Kafka: the server's grants reached the joiner's control box."""
        join = self.join
        return join is not None and any(
            m[0] == "bs-grants" for m in self.net.ctrl_box(join.joiner).messages)

    def kafka_install(self) -> Optional[str]:
        join = self.join
        if (join is None or not join.kafka or self.workers[join.joiner].installed
                or not self.grants_delivered()):
            return None
        worker = self.workers[join.joiner]
        j = worker.index
        scopes = {s.channel: SimpleNamespace(final_pointstamp=s.changes, path=(s.channel,))
                  for s in worker.scopes}
        box = self.net.ctrl_box(j)
        hub = SimpleNamespace(kafka=SimpleNamespace(snapshots=join.snapshots), abort=_Flag(), error=None)
        fake = SimpleNamespace(
            index=j, allocator=SimpleNamespace(hub=hub, control_puller=lambda: box),
            config=SimpleNamespace(process=j, join=join.server, timeout=1e9),
            progcasters={s.channel: s.pc for s in worker.scopes},
            scope_of_channel=lambda ch: scopes[ch], dataflows=lambda: [], pending_capabilities=[],
            activations=SimpleNamespace(activate=lambda path: None))
        try:
            run_kafka_client(fake)
        except Exception as e:  # noqa: BLE001
            self.errors.append((f"run_kafka_client on joiner w{worker.index}", e))
            return f"kafka_install w{worker.index}: raised {e!r}"
        self._installed(worker)
        self._maybe_joined()
        return f"kafka_install w{worker.index}"

    def _installed(self, worker: Worker) -> None:
        worker.status = "joined"
        worker.client = None
        self.coverage["joins installed"] += 1
        join = self.join
        if join is not None and not join.kafka:
            for scope in worker.scopes:
                last = join.state_last.get(scope.channel, {})
                for source, marker in scope.pc.markers.items():
                    if last.get(source, -1) + 1 > marker:
                        self.coverage["p2p: state ahead of a marker (held duplicates)"] += 1
                    elif last.get(source, -1) + 1 == marker:
                        self.coverage["p2p: state meets a marker (no gap)"] += 1
        if join is not None and join.joiner == worker.index:
            # the joiner now holds exactly what it was granted
            if sorted(join.message_grants or [], key=repr) != sorted(join.listing, key=repr):
                self.errors.append((f"bootstrap of joiner w{worker.index}", AssertionError(
                    f"the grants it was sent {join.message_grants} are not the server's "
                    f"{join.listing}")))
            for ch, granted in join.granted.items():
                caps = worker.scopes[ch].caps
                for p, c in granted.items():
                    caps[p] = caps.get(p, 0) + c
            if join.listing:
                self.coverage["grants: joiner installed holding grants"] += 1
            join.granted = {}
        for scope in worker.scopes:
            self._absorb(worker, scope)
            # batches still on their way that the state already holds (apply skips them)
            last = scope.pc.last_seq
            for s in range(len(self.workers)):
                for source, seq, _ in self.net.queue((scope.channel, s, worker.index)):
                    if seq != MARKER and seq <= last.get(source, -1):
                        self.coverage["duplicate batches skipped after install"] += 1
        self.events.append(("installed", worker.index))

    def _maybe_joined(self) -> None:
        """The join is over once the joiner installed its state, every existing worker
        applied the join, and (peer-to-peer) the server stopped recording."""
        join = self.join
        if join is None or join.pending or not self.workers[join.joiner].installed:
            return
        if not join.kafka and self.workers[join.server].server is not None:
            return
        self.join = None
        self.joins_done += 1

    def late_ready(self) -> bool:
        """Mutation grant_announced_late: a grant batch waits and its joiner installed."""
        return any(self.workers[j].installed for _, j, _, _ in self.late)

    def announce_late(self) -> Optional[str]:
        """Mutation grant_announced_late: the server sends a grant batch only now."""
        for i, (w, j, ch, updates) in enumerate(self.late):
            if self.workers[j].installed:
                del self.late[i]
                df = self.dataflows[ch]
                for p, c in updates:
                    df.unannounced[p] -= c
                    if not df.unannounced[p]:
                        del df.unannounced[p]
                self.workers[w].scopes[ch].pc.send(self.ChangeBatch(updates))
                self._sent(ch, w, updates)
                return f"announce_late w{w} ch{ch} {fmt_updates(updates)} (granted to w{j})"
        return None

    # ---- leaving ----------------------------------------------------------------------------
    def leave_candidates(self) -> list[int]:
        """Who may start leaving now: with leaves on, no join or other leave under way,
        an installed worker that is not leaving, and another one that stays."""
        opts = self.options
        if (not opts.leave or self.join is not None or self.leave is not None or self.late
                or self.leaves_started >= opts.max_leaves or self.steps < self.leave_after):
            return []
        routable = [w.index for w in self.workers if w.routable]
        return routable if len(routable) >= 2 else []

    def leave_start(self, w: int) -> Optional[str]:
        if w not in self.leave_candidates():
            return None
        self.workers[w].status = "leaving"       # perf_op no longer sends data to it
        self.leave = w
        self.leaves_started += 1
        self.coverage["leaves started"] += 1
        return f"leave_start w{w}"

    def handover(self, w: int) -> Optional[str]:
        """The leaving worker ``w`` hands one pointstamp ``p`` it holds (its whole count)
        to a worker that stays, net-zero: no progress batch (the +1 and -1 would cancel).

        Not every such move is safe: the batches w already sent may rest on ``p`` (a
        positive count w announced above it), and the new holder's -1 for ``p`` travels
        on another FIFO queue than w's batches, so a view could apply it first and see
        nothing at or below an existing pointstamp. A handover is enabled for ``p``

        - when w keeps a capability strictly below ``p``: then it is seed 002's data
          message at ``p`` plus the drop of ``p`` (``perf_op``) and its receipt
          (``recv_cap``), whose changes to temp cancel; or
        - peer-to-peer only, when every batch w sent on the channel has been applied by
          every worker (no queue from w is non-empty) and w's temp stays ``justified``
          by what it keeps. Not with Kafka: a later joiner may install an older snapshot
          of w's log next to a newer one of the new holder's, which has the -1.

        Otherwise w drops the capability itself (``perf_op``; in a drain, a ``drop``), as
        the runtime's leave does. The mutation ``handover_unordered`` drops both
        conditions (temp justified only)."""
        options = self.handover_options(w)
        targets = [x.index for x in self.workers if x.routable]
        if not options or not targets:
            return None
        rng = self.rng
        scope, p, why = options[rng.randrange(len(options))]
        t = rng.choice(targets)
        ch = scope.channel
        count = scope.caps.pop(p)
        caps = self.workers[t].scopes[ch].caps
        caps[p] = caps.get(p, 0) + count
        self.coverage["leave: handovers"] += 1
        self.coverage[f"leave: handover {why}"] += 1
        if not scope.temp.is_empty():
            self.coverage["leave: handover with changes not yet sent"] += 1
        label = f"handover w{w}->w{t} ch{ch} {fmt(p)} x{count} ({why})"
        if self.mutation == "handover_not_net_zero":
            # BUG: the leaver reports the capability gone; the receiver takes it silently
            updates = [(p, -count)]
            self.dataflows[ch].unannounced[p] += count
            scope.pc.send(self.ChangeBatch(updates))
            self._sent(ch, w, updates)
            return f"{label} SENT {fmt_updates(updates)}"
        return label

    def handover_options(self, w: int) -> list:
        """``[(scope, pointstamp, why)]``: what leaving ``w`` may hand over now."""
        worker = self.workers[w]
        if worker.status != "leaving":
            return []
        options = []
        nonempty = self.net.nonempty
        for scope in worker.scopes:
            if not scope.caps:
                continue
            ch = scope.channel
            order = self.dataflows[ch].order
            temp = None
            flushed = not self.net.kafka and not any(k[0] == ch and k[1] == w for k in nonempty)
            for p in scope.caps:
                kept = [q for q in scope.caps if q != p]
                if any(order.lt(q, p) for q in kept):
                    options.append((scope, p, "above a kept capability"))
                elif flushed or self.mutation == "handover_unordered":
                    if temp is None:
                        temp = dict(scope.temp)
                    if not temp or self.justified(order, {q: scope.caps[q] for q in kept}, temp):
                        options.append((scope, p, "after every batch was applied" if flushed
                                        else "UNORDERED"))
        return options

    def can_finish_leave(self, w: int) -> bool:
        """The leaving ``w`` holds nothing, has sent everything, and no data is on its way
        to it (its batches need not be delivered: their FIFO queues stay)."""
        worker = self.workers[w]
        if worker.status != "leaving":
            return False
        for scope in worker.scopes:
            if scope.caps or not scope.temp.is_empty():
                return False
        if self.net.pending.get(w):     # final_positions flushes the last record first
            return False
        return not any(r == w for df in self.dataflows for r, _ in df.data)

    def leave_finish(self, w: int) -> Optional[str]:
        if not self.can_finish_leave(w):
            return None
        self.workers[w].status = "gone"
        self.leave = None
        self.leaves_done += 1
        self.coverage["leaves finished"] += 1
        discarded = self.net.drop_receiver(w)
        if discarded:
            self.coverage["leave: messages to a departed worker discarded"] += discarded
        in_flight = sum(len(q) for (_, s, _), q in self.net.queues.items() if s == w)
        if in_flight:
            self.coverage["leave: batches of a departed worker still in flight"] += 1
        return f"leave_finish w{w} ({discarded} messages to it discarded)"

    def shutdown(self) -> None:
        """Stop a client thread still running (the schedule ended mid-join)."""
        for worker in self.workers:
            if worker.client is not None:
                worker.client.abort()
                worker.client = None

    # ---- quiescence ------------------------------------------------------------------------
    def quiescent(self) -> bool:
        """Nothing left anywhere: no capability, data, buffered change, batch or join."""
        if (self.join is not None or self.leave is not None or self.late or self.net.nonempty
                or any(self.net.pending.values())):
            return False
        if any(len(box) for box in self.net.inboxes.values()):
            return False
        for df in self.dataflows:
            if df.rec or df.data:
                return False
        return all(s.temp.is_empty() for w in self.workers for s in w.scopes)
