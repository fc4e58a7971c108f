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

``rec`` (every pointstamp that exists) is the sum of every worker's caps and of data.

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
progress goes through per-worker logs (records ``(lseq, channel, seq, updates)``, a
snapshot = ``broker.log.fold`` of a prefix + last seq per channel every
``snapshot_interval`` records, as ``broker.ProgressLog`` writes them); a joiner
subscribes to a snapshot of every log plus its tail (``join_start``) and runs the
real ``run_kafka_client`` (``kafka_install``).

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
    """Kafka mode: appends to the sender's progress log (``_LogPusher``)."""

    __slots__ = ("net", "channel")

    def __init__(self, net: "Net", channel: int) -> None:
        self.net = net
        self.channel = channel

    def push(self, message: Any) -> None:
        self.net.log_append(self.channel, message)


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

    def __init__(self, kafka: bool, snapshot_interval: int) -> None:
        self.kafka = kafka
        self.queues: dict[tuple, deque] = {}
        self.nonempty: dict[tuple, None] = {}      # insertion-ordered set of queue keys
        self.inboxes: dict[tuple, Inbox] = {}
        self.links: dict[tuple, list] = {}         # (channel, sender) -> the Progcaster's pushers
        # Kafka
        self.snapshot_interval = snapshot_interval
        self.logs: dict[int, list] = {}            # worker -> [(lseq, channel, seq, updates)]
        self.folds: dict[int, dict] = {}           # worker -> channel -> [last seq, {key: total}]
        self.snapshots: dict[int, list] = {}       # worker -> [(worker, lseq, offset, channels)]
        self.subscribers: dict[int, list] = {}     # worker -> receivers tailing its log
        # control (bootstrap) messages
        self.ctrl: dict[tuple, deque] = {}
        self.ctrl_inbox: dict[int, Inbox] = {}
        self.ctrl_hook = None                      # mutations rewrite messages in transit
        self.enqueued = 0

    def inbox(self, channel: int, worker: int) -> Inbox:
        box = self.inboxes.get((channel, worker))
        if box is None:
            box = self.inboxes[(channel, worker)] = Inbox()
        return box

    def enqueue(self, key: tuple, message: Any) -> None:
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = deque()
        q.append(message)
        self.nonempty[key] = None
        self.enqueued += 1

    def pop(self, key: tuple) -> Any:
        q = self.queues[key]
        message = q.popleft()
        if not q:
            del self.nonempty[key]
        return message

    def queue(self, key: tuple) -> deque:
        return self.queues.get(key) or deque()

    # ---- Kafka --------------------------------------------------------------------------
    def log_append(self, channel: int, message: Any) -> None:
        """``ProgressLog.append`` + the subscribers' delivery into their queues."""
        source, seq, updates = message
        log = self.logs.setdefault(source, [])
        lseq = len(log)
        log.append((lseq, channel, seq, updates))
        per_channel = self.folds.setdefault(source, {}).setdefault(channel, [-1, {}])
        per_channel[0] = seq
        fold([updates], per_channel[1])
        if self.snapshot_interval and (lseq + 1) % self.snapshot_interval == 0:
            channels = {ch: (last, list(acc.items())) for ch, (last, acc) in self.folds[source].items()}
            self.snapshots.setdefault(source, []).append((source, lseq + 1, lseq + 1, channels))
        for receiver in self.subscribers.get(source, ()):
            self.enqueue((channel, source, receiver), message)

    def subscribe(self, receiver: int, source: int, offset: int) -> None:
        """``receiver`` tails ``source``'s log from record ``offset`` on."""
        for lseq, channel, seq, updates in self.logs.get(source, [])[offset:]:
            self.enqueue((channel, source, receiver), (source, seq, updates))
        self.subscribers.setdefault(source, []).append(receiver)

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
    def __init__(self, index: int, joiner: bool) -> None:
        self.index = index
        self.joiner = joiner
        self.status = "joining" if joiner else "active"
        self.scopes: list[Scope] = []
        self.server: Optional[BootstrapServer] = None
        self.client: Optional["ClientThread"] = None

    @property
    def installed(self) -> bool:
        """Its progress view is defined: an original worker, or a joiner that finished."""
        return self.status != "joining"


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
        self.net = Net(options.kafka, snapshot_interval=rng.randint(1, 3))
        self.dataflows = [Dataflow(ch, random_graph(rng, self.kind), self.tmax) for ch in range(n_scopes)]
        self.workers: list[Worker] = []
        self.events: list[tuple] = []       # what changed, for the incremental checks
        self.errors: list[tuple] = []       # exceptions the real code raised: (what, exc)
        self.joins_started = 0
        self.joins_done = 0
        self.join: Optional[SimpleNamespace] = None
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
        if self.net.kafka:      # every process tails every original worker's log
            for s in range(n_workers):
                self.net.subscribers[s] = list(range(n_workers))
        for w in range(n_workers):
            worker = self._new_worker(w, joiner=False, receivers=list(range(n_workers)))
            for ch, scope in enumerate(worker.scopes):
                scope.caps = dict(per_worker[ch][w])
            self.workers.append(worker)
        self.net.ctrl_hook = self._ctrl_transit
        self.join_after = rng.randint(5, 120)   # joins start after this many transitions
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
    def perf_op(self, w: int, ch: int) -> Optional[str]:
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
        receivers = [x.index for x in self.workers if x.installed]
        kind = rng.choices(("step", "drop", "downgrade", "clone"), (6, 2, 3, 1))[0]
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

    def recv_cap(self, ch: int) -> Optional[str]:
        df = self.dataflows[ch]
        if not df.data:
            return None
        entries = list(df.data)
        r, p = entries[self.rng.randrange(len(entries))]
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
        if (not opts.join or self.join is not None or self.joins_started >= opts.max_joins
                or self.steps < self.join_after):
            return None
        rng = self.rng
        existing = [w.index for w in self.workers]
        j = len(self.workers)
        worker = self._new_worker(j, joiner=True, receivers=existing + [j])
        self.workers.append(worker)
        self.joins_started += 1
        join = self.join = SimpleNamespace(joiner=j, existing=existing, pending=list(existing),
                                           server=rng.choice(existing), kafka=self.net.kafka,
                                           snapshots={}, state_last={})
        net = self.net
        if net.kafka:
            # the joining process subscribes to every worker's latest snapshot and tail
            # (from_snapshot), and to its own log from the beginning
            net.subscribe(j, j, 0)
            for s in existing:
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
                if self.mutation == "skip_snapshot_tail":
                    offset = len(net.logs.get(s, []))        # BUG: tail from the end
                if self.mutation == "bootstrap_seq_off_by_one" and snapshot is not None:
                    w_, lseq, off, channels = snapshot
                    snapshot = (w_, lseq, off, {c: (last + 1, u) for c, (last, u) in channels.items()})
                join.snapshots[s] = snapshot
                net.subscribe(j, s, offset)
            return f"join_start w{j} (kafka) snapshots " + ", ".join(
                f"w{s}@{'-' if sn is None else sn[1]}" for s, sn in join.snapshots.items())
        # peer-to-peer: the client loop (real run_client) in a helper thread
        worker.client = ClientThread(self._client_worker(worker, join))
        return f"join_start w{j} server w{join.server}"

    def _client_worker(self, worker: Worker, join: SimpleNamespace) -> Any:
        net = self.net
        j = worker.index
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
            dataflows=lambda: [], dataflow_subgraph=lambda index: None,
            forget_dataflow=lambda index: None, scope_of_channel=lambda ch: scopes[ch],
            activations=SimpleNamespace(activate=lambda path: None))

    def apply_join(self, w: int) -> Optional[str]:
        """Existing worker ``w`` applies the join (``Worker._apply_rescale``)."""
        join = self.join
        if join is None or w not in join.pending:
            return None
        join.pending.remove(w)
        j = join.joiner
        worker = self.workers[w]
        net = self.net
        if join.kafka:
            net.subscribe(w, j, 0)      # tail the joiner's log from its beginning
            self._maybe_joined()
            return f"apply_join w{w} (subscribes to w{j})"
        for scope in worker.scopes:
            pusher = QueuePusher(net, scope.channel, w, j)
            net.links[(scope.channel, w)].append(pusher)      # add_process: back-fill the link
            if self.mutation == "marker_off_by_one":
                pusher.push((w, MARKER, scope.pc.seq - 1))    # BUG: one too low
            else:
                scope.pc.send_marker([pusher])
        label = f"apply_join w{w}"
        if w == join.server:
            fake = SimpleNamespace(
                index=w, progcasters={s.channel: s.pc for s in worker.scopes},
                allocator=SimpleNamespace(
                    control_send=lambda process, first, last, payload: net.ctrl_send(w, first, payload)))
            worker.server = BootstrapServer(fake, j, j, j)
            label += " (bootstrap server: state sent, recording)"
        return label

    def _ctrl_transit(self, sender: int, receiver: int, payload: Any) -> Any:
        kind = payload[0]
        if kind == "bs-state" and self.join is not None:
            self.join.state_last = {ch: dict(last) for ch, _, last in payload[2]}
        if kind == "bs-state" and self.mutation == "bootstrap_seq_off_by_one":
            # BUG: the state says it holds one batch more than it does
            _, index, state = payload
            return (kind, index, [(ch, u, {s: seq + 1 for s, seq in last.items()})
                                  for ch, u, last in state])
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

    def kafka_install(self) -> Optional[str]:
        join = self.join
        if join is None or not join.kafka or self.workers[join.joiner].installed:
            return None
        worker = self.workers[join.joiner]
        scopes = {s.channel: SimpleNamespace(final_pointstamp=s.changes, path=(s.channel,))
                  for s in worker.scopes}
        fake = SimpleNamespace(
            allocator=SimpleNamespace(hub=SimpleNamespace(kafka=SimpleNamespace(snapshots=join.snapshots))),
            progcasters={s.channel: s.pc for s in worker.scopes},
            scope_of_channel=lambda ch: scopes[ch],
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

    def shutdown(self) -> None:
        """Stop a client thread still running (the schedule ended mid-join)."""
        for worker in self.workers:
            if worker.client is not None:
                worker.client.abort()
                worker.client = None

    # ---- quiescence ------------------------------------------------------------------------
    def quiescent(self) -> bool:
        """Nothing left anywhere: no capability, data, buffered change, batch or join."""
        if self.join is not None or self.net.nonempty:
            return False
        if any(len(box) for box in self.net.inboxes.values()):
            return False
        for df in self.dataflows:
            if df.rec or df.data:
                return False
        return all(s.temp.is_empty() for w in self.workers for s in w.scopes)
