"""This process's side of a cluster: listening, connecting, admitting, delivering, failing.

Process i listens on its address (``Config.address_of(i)``), connects to every process
with a smaller index, and accepts the others (``listen``, ``connect_all``); a joiner
connects to its bootstrap process first, which names the members, then to them. A
connection that fails the handshake (``timely.communication.cluster.connection``), or
speaks garbage, is logged and closed while the process carries on; whether a joiner is
admitted is the membership's decision (``timely.rescaling.membership``, the hub's
``membership``). Frames for this process's workers go to their queues (``deliver``);
control frames of the join/leave protocol go to the membership (``control``).

Fail-stop: a peer that disconnects without saying goodbye, goes silent for longer than
``Config.timeout``, or sends a malformed frame is reported by its connection
(``connection_lost``); unless the peer was a joiner that had not finished joining, every
worker of this process stops with a ``ClusterError`` naming it. What the end of a
connection means for the cluster is the membership's to say; the hub forgets the
connection (``forget``). ``shutdown`` says goodbye to every peer and waits for theirs;
``kill`` closes every connection at once, so that the peers see this process fail.

Costs: delivering a frame appends it to the queue of each worker it is for, O(targets),
and a progress batch crosses each process boundary once, whatever the number of remote
workers; a credited data frame is counted in its channel's ledger, and
acknowledgements of credit update a window each (``timely.communication.credit``).
Start-up makes one connection per pair of processes, each with two threads, plus one
short-lived thread per accepted connection for its handshake (at most 10 s) and
admission; it waits at most ``Config.timeout`` for the others. ``shutdown`` waits
up to ``Config.timeout`` for the peers' goodbyes.
"""
from __future__ import annotations

import logging
import socket
import struct
import threading
import time
from typing import Any, Callable, Optional

from ...rescaling.membership import Membership
from ...rescaling.rollback import quorum
from ..codec import FrameError
from ..credit import CREDITED
from ..errors import ClusterError
from .. import progress_trace
from ..kafka import KafkaProgress, progress_prefix
from ..thread import ProcessHub
from .allocator import ClusterAllocator
from .connection import CONTROL, Connection, handshake, read_frame
from .patience import PeerWait, describe

log = logging.getLogger("timely.cluster")
#: seconds without an arrival after which a majority starts without the missing, at least
START_WITHOUT_AFTER = 10.0


class ClusterHub(ProcessHub):
    """This process's side of the cluster: local queues, connections, the acceptor."""

    def __init__(self, config: Any, secret: bytes, processes: int, original_processes: int,
                 joining: bool = False) -> None:
        super().__init__(config.workers, first_index=config.process * config.workers)
        self.trace = progress_trace.for_config(config, config.process)
        self.config = config
        self.process = config.process
        self.workers_per_process = config.workers
        self.processes = processes
        self.original_processes = original_processes
        self.joining = joining
        self.timeout = config.timeout
        self.secret = secret
        self.connections: dict[int, Connection] = {}
        self._lock = threading.RLock()
        self._listener: Optional[socket.socket] = None
        self._stopping = threading.Event()
        self.refused = 0
        #: processes that said goodbye: finished (or left), so no longer to wait for at start-up
        self.said_goodbye: set[int] = set()
        #: who is in the cluster, and the join/leave protocol (timely.rescaling.membership),
        #: which knows this hub as a ``MembershipHub`` (timely.rescaling.hub_interface)
        self.membership = Membership(self, self._lock)
        #: this start of the job, as the cluster agreed (names its Kafka progress logs)
        self.run = ""
        #: the program's check that the job is already complete (``execute(complete=)``),
        #: asked while this process waits for peers
        self.complete: Optional[Callable[[], Optional[str]]] = None
        #: exchange credit (timely.communication.credit): the windows of this process's
        #: workers, by (channel, sender, receiver), and the bytes delivered here, by
        #: (channel, local worker) and sender
        self.windows: dict = {}
        self.ledgers: dict = {}
        #: while starting: the processes here, and since when (``_start_without``)
        self._here: set = set()
        self._here_since = time.monotonic()
        #: a majority starts without the missing once nobody has arrived for this long:
        #: the timeout, and never less than START_WITHOUT_AFTER (a process slow to start
        #: on a loaded machine is not one that never comes)
        self.start_without_after = max(self.timeout, START_WITHOUT_AFTER)

    def restart_progress(self, round_: int, workers: list[int]) -> None:
        """A rollback: in Kafka progress mode, the survivors' progress goes to new logs
        (those of round ``round_``), tailed from their start; peer-to-peer needs nothing
        (the rebuilt dataflows' progress channels are new)."""
        old = self.kafka
        if old is None:
            return
        first = self.first_index
        self.kafka = KafkaProgress(self.config, self, list(range(first, first + self.workers)), list(workers),
                                   joining=False, prefix=progress_prefix(self.config, self.run, round_))
        old.close()

    def agree(self, key: str, decide: Callable[[], Any]) -> Any:
        """One value for ``key`` in the whole cluster (``Membership.agree``)."""
        return self.membership.agree(key, decide)

    # ---- start-up ---------------------------------------------------------------------
    def listen(self, sock: Optional[socket.socket] = None) -> None:
        """Listen on this process's address, or accept on ``sock``, a socket already
        listening there (``-w`` as processes binds them all before forking)."""
        if sock is None:
            host, port = self.config.address_of(self.process)
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as e:
                raise ClusterError(f"process {self.process} cannot listen on {host}:{port}: {e}") from None
            sock.listen(64)
        self._listener = sock
        threading.Thread(target=self._accept_loop, daemon=True, name=f"timely-acceptor-{self.process}").start()

    def _hello(self) -> tuple:
        joining = self.config.join + 1 if self.joining else 0
        return (self.process, self.processes, self.workers_per_process, self.original_processes, joining)

    def connect_all(self) -> None:
        """Connect to every process with a smaller index; wait for the others to connect.

        A joiner connects to its bootstrap process first, which tells it the members of
        the cluster (processes that left or died are not), then to the other members. A
        process started as a member learns whether the cluster already runs: each process
        it connects to greets it first, as one forming the cluster with it (``"welcome"``)
        or as one of a running cluster (``"members"``: it died and comes back, and joins
        as a joiner does). A process whose higher peers are late asks them too (the lowest
        process, coming back, has no lower one to ask); a peer that is starting as well
        closes such a connection and connects to it itself. Every wait here is a
        ``PeerWait`` (timely.communication.cluster.patience): no crash loop.

        Processes that do not come at all (one left the cluster for good, or its machine
        is gone) do not hold the others for ever: once the processes here are a majority
        of the cluster and none has arrived for ``Config.timeout`` seconds, the lowest of
        them starts the cluster without the missing (``_start_without``); a missing
        process that comes later joins it. (At least ``START_WITHOUT_AFTER`` seconds.)"""
        wait = PeerWait(self.process, self.timeout, self.config.connect_timeout, self.complete)
        if self.joining:
            return self._connect_as_joiner(wait)
        lower = list(range(self.process))           # processes this one connects to
        retry = 0.0
        pause = 0.05
        asked = time.monotonic() + 1.0

        def missing() -> list[int]:
            # A peer with nothing to do may finish before our last peer connects: its
            # goodbye ends its connection, and it is not missing.
            with self._lock:
                keep = self.membership.present
                return sorted(p for p in range(self.processes) if p != self.process
                              and p not in self.connections and p not in self.said_goodbye
                              and (keep is None or p in keep))
        while True:
            if self.error is not None:
                raise self.error
            present = self.membership.present
            if lower and time.monotonic() >= retry:
                for process in list(lower):
                    if present is not None and process not in present:
                        lower.remove(process)
                        continue
                    sock, greeting = self._connect(process, None)
                    if sock is None:
                        continue
                    lower.remove(process)
                    self._add(process, sock, joining=False)
                    if greeting is not None and greeting[0] == "members":
                        self._rejoin(greeting)
                        return self.connect_all_as_joiner(wait)
                retry = time.monotonic() + pause
                pause = min(0.5, pause * 1.25)
            absent = missing()
            if not absent:
                return
            self._start_without(absent)
            wait.tick(lambda: f"{describe(self.config, absent)} to "
                              f"{'answer' if set(absent) & set(lower) else 'connect'}")
            if time.monotonic() > asked:
                asked = time.monotonic() + 1.0
                for process in absent:
                    if process > self.process and self._ask(process):
                        return self.connect_all_as_joiner(wait)
            time.sleep(0.01)

    def _connect_as_joiner(self, wait: PeerWait) -> None:
        """A joiner: its bootstrap process names the members, then it connects to them."""
        order = [self.config.join // self.workers_per_process]
        while order:
            process = order.pop(0)
            sock, _ = self._connect(process, wait)
            self._add(process, sock, joining=False)
            if self.membership.members is None:
                self._await(lambda: self.membership.members is not None, wait,
                            lambda: f"{describe(self.config, [process])} to admit us")
            with self._lock:
                order = sorted(p for p in self.membership.members
                               if p != self.process and p not in self.connections)

    def _start_without(self, missing: list[int]) -> None:
        """(While starting.) If this process is the lowest of those here, they are a
        majority of the cluster (``quorum``), and nobody has arrived for
        ``start_without_after`` seconds, decide that they start without ``missing``, and
        tell them."""
        with self._lock:
            here = {self.process} | {p for p, c in self.connections.items() if not c.joining}
        now = time.monotonic()
        if here != self._here:
            self._here, self._here_since = here, now
        if (self.membership.present is not None or not self.config.rescaling
                or now - self._here_since < self.start_without_after or self.process != min(here)
                or not quorum(here, set(range(self.processes)))):
            return
        log.warning("process %d: %s did not come within %g s; processes %s, a majority of the "
                    "cluster, start without them (they join it when they come)", self.process,
                    describe(self.config, missing), self.start_without_after, sorted(here))
        self.membership.start_without(sorted(here))
        with self._lock:
            conns = list(self.connections.values())
        for conn in conns:
            conn.send_frame(CONTROL, -1, 0, 0, 0, ("start-without", sorted(here)))

    def connect_all_as_joiner(self, wait: PeerWait) -> None:
        """A process that came back: connect to every member it has no connection to."""
        with self._lock:
            order = sorted(p for p in self.membership.members if p != self.process and p not in self.connections)
        for process in order:
            sock, _ = self._connect(process, wait)
            self._add(process, sock, joining=False)

    def _connect(self, process: int, wait: Optional[PeerWait]) -> tuple:
        """An authenticated socket to ``process`` and, unless this process joins, the
        greeting it sent (None if it closed the connection instead: it is starting).
        Without ``wait``, one attempt: ``(None, None)`` if nobody answers."""
        host, port = self.config.address_of(process)
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=1.0 if wait is None else self.timeout)
                theirs = handshake(sock, self.secret, self._hello(), self.timeout)
                break
            except (ConnectionRefusedError, socket.timeout, ConnectionResetError):
                if wait is None:
                    return None, None
                if self.error is not None:      # e.g. the process that admitted us dropped us
                    raise self.error
                wait.tick(lambda: f"{describe(self.config, [process])} to answer")
                wait.pause()
            except PermissionError as e:
                raise ClusterError(f"process {process} at {host}:{port} refused us: {e}") from None
        self._check_peer(theirs, process)
        if self.joining:
            return sock, None
        try:
            return sock, read_frame(sock, self.timeout)[-1]
        except (ConnectionError, OSError, FrameError):
            sock.close()
            return None, None

    def _ask(self, process: int) -> bool:
        """Ask the late ``process`` whether a cluster runs; True if it does (this process
        now joins it: the members are known)."""
        sock, greeting = self._connect(process, None)
        if sock is None or greeting is None:
            return False
        self._add(process, sock, joining=False)
        if greeting[0] == "members":
            self._rejoin(greeting)
            return True
        return False

    def _rejoin(self, greeting: tuple) -> None:
        """The cluster runs without this process, which was one of its members: it joins
        as a joiner does, bootstrapped by the worker its greeter named."""
        self.membership.control(None, greeting)
        self.joining = True
        self.config.join = greeting[3]
        log.warning("process %d: the cluster runs without it (it died and comes back): it joins, "
                    "bootstrapped by worker %d", self.process, greeting[3])

    def _await(self, done: Callable[[], bool], wait: PeerWait, whom: Callable[[], str]) -> None:
        """Poll ``done()`` until it holds; raise the cluster's error if one occurs; tick
        ``wait`` (whom: what it waits for) meanwhile."""
        while not done():
            if self.error is not None:
                raise self.error
            wait.tick(whom)
            time.sleep(0.01)

    def _check_peer(self, hello: tuple, expected: Optional[int]) -> None:
        process, processes, workers, original, _ = hello
        if expected is not None and process != expected:
            raise ClusterError(f"expected process {expected} but process {process} answered")
        if workers != self.workers_per_process:
            raise ClusterError(f"process {process} runs {workers} workers, this one {self.workers_per_process}: "
                               f"every process must run the same number")

    def _accept_loop(self) -> None:
        listener = self._listener
        while not self._stopping.is_set():
            try:
                sock, addr = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._admit, args=(sock, addr), daemon=True).start()

    def _admit(self, sock: socket.socket, addr: Any) -> None:
        try:
            theirs = handshake(sock, self.secret, self._hello(), min(self.timeout, 10.0))
            self._check_peer(theirs, None)
        except (PermissionError, FrameError, ConnectionError, OSError, ClusterError, struct.error) as e:
            self.refused += 1
            log.warning("process %d refused a connection from %s: %s", self.process, addr, e)
            sock.close()
            return
        process, processes, _, _, joining = theirs
        with self._lock:
            if process in self.connections or process == self.process:
                log.warning("process %d refused a second connection claiming to be process %d",
                            self.process, process)
                sock.close()
                return
        if joining or self.membership.workers_ready.is_set():
            # a joiner; or, once this process runs, a process started as a member: one that
            # died comes back (a replacement), and joins as any joiner does
            bootstrap = joining - 1 if joining else self.first_index
            admit = self.membership.admit(process, processes, bootstrap, rejoin=not joining)
            if admit is None:
                sock.close()
                return
            self._add(process, sock, joining=True, before_start=admit)
        elif self.membership.present is not None and process not in self.membership.present:
            # the cluster starts without it: once it runs, it is admitted as a joiner
            sock.close()
        elif process < self.process:
            # a lower process asks whether a cluster runs (it came back after a crash): not
            # here yet, this process is starting too and connects to it itself
            sock.close()
        else:
            self._add(process, sock, joining=False, before_start=self._welcome)

    @staticmethod
    def _welcome(conn: Connection) -> None:
        """A process starting with this one: the cluster is forming (not a rejoin)."""
        conn.send_frame(CONTROL, -1, 0, 0, 0, ("welcome",))

    def _add(self, process: int, sock: socket.socket, joining: bool,
             before_start: Optional[Callable[[Connection], None]] = None) -> None:
        conn = Connection(self, process, sock, joining)
        with self._lock:
            self.connections[process] = conn
            self.processes = max(self.processes, process + 1)
        if before_start is not None:
            before_start(conn)
        conn.start()

    # ---- receiving --------------------------------------------------------------------
    def deliver(self, channel: int, source: int, first: int, last: int, seq: int, payload: Any,
                size: int = 0) -> None:
        """``payload`` for workers ``first..last`` of this process: queued, the workers told.
        A credited frame (``size`` bytes) is counted in its channel's ledger after it is
        queued and before the worker hears of it (``timely.communication.credit``)."""
        base = self.first_index
        lo, hi = first - base, last - base
        if lo < 0 or hi >= self.workers:
            raise FrameError(f"frame for workers {first}..{last}, but this process hosts "
                             f"{base}..{base + self.workers - 1}")
        queues = self.queues(channel)
        for local in range(lo, hi + 1):
            queues[local].append(payload)
        if seq == CREDITED:
            ledger = self.ledger(channel, lo)
            ledger[source] = ledger.get(source, 0) + size
        for local in range(lo, hi + 1):
            self.events[local].append(channel)
            self.wakes[local].set()

    def ledger(self, channel: int, local: int) -> dict:
        """Bytes of credited frames delivered to local worker ``local`` on ``channel``, per
        sender (written by the receive threads, read by the worker's ``CreditedPuller``)."""
        found = self.ledgers.get((channel, local))
        if found is None:
            found = self.ledgers.setdefault((channel, local), {})
        return found

    def credit(self, entries: Any) -> None:
        """Acknowledgements from a receiving process: ``(channel, sender, receiver, total
        bytes consumed)`` for windows of this process's workers."""
        windows = self.windows
        for channel, source, target, total in entries:
            window = windows.get((channel, source, target))
            if window is not None:
                window.acknowledge(total)

    def control(self, conn: Connection, source: int, first: int, last: int, payload: Any) -> None:
        """A control frame (not a heartbeat or a goodbye): the membership's, or else for
        this process's workers (the bootstrap protocol, "stopped")."""
        if not self.membership.control(conn, payload):
            self.deliver(CONTROL, source, first, last, 0, payload)

    # ---- the end of a connection: what it means is the membership's ------------------------
    def connection_lost(self, conn: Connection, why: str) -> None:
        """``conn`` broke (``why``); expected, and ignored, once this process stops."""
        if self._stopping.is_set():
            return
        self.membership.connection_lost(conn, why)

    def connection_closed(self, conn: Connection) -> None:
        """``conn``'s peer said goodbye."""
        with self._lock:
            self.said_goodbye.add(conn.process)
        self.membership.connection_closed(conn)

    def forget(self, conn: Connection) -> None:
        """Drop ``conn`` from the connections, unless another has replaced it since."""
        with self._lock:
            if self.connections.get(conn.process) is conn:
                del self.connections[conn.process]

    @property
    def stopping(self) -> bool:
        """This process is shutting down or was killed: connections may end."""
        return self._stopping.is_set()

    # ---- the end of this process --------------------------------------------------------
    def fail(self, error: BaseException) -> None:
        if self.error is None:
            log.error("%s", error)
        super().fail(error)

    def shutdown(self) -> None:
        """Say goodbye to every peer once our queues are flushed, wait (up to the timeout)
        for their goodbyes, then close."""
        self._stopping.set()
        with self._lock:
            conns = list(self.connections.values())
        for conn in conns:
            conn.goodbye()
        deadline = time.monotonic() + self.timeout
        # An acceptor's thread publishes a connection, then starts it: a worker that
        # finished at once can get here in between. Its goodbye is queued; wait for the
        # threads that send it.
        started = [conn for conn in conns if conn.started.wait(max(0.0, deadline - time.monotonic()))]
        for conn in started:
            conn._sender.join(timeout=max(0.0, deadline - time.monotonic()))
        for conn in started:
            conn._receiver.join(timeout=max(0.0, deadline - time.monotonic()))
        for conn in conns:
            conn.close()
        if self._listener is not None:
            self._listener.close()

    def kill(self) -> None:
        """Close every connection at once, without goodbye: peers see this process die."""
        self._stopping.set()
        with self._lock:
            conns = list(self.connections.values())
        for conn in conns:
            conn.close()
        if self._listener is not None:
            self._listener.close()

    def stop_accepting(self) -> None:
        """Rescaling is off: no process may join once the cluster is connected."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def progress_traffic(self) -> dict[str, int]:
        """Progress messages and bytes this process has sent: frames to other processes
        in peer-to-peer mode, records appended to its logs in Kafka mode."""
        if self.kafka is not None:
            return {"messages": self.kafka.log.records, "bytes": self.kafka.log.bytes}
        with self._lock:
            conns = list(self.connections.values())
        return {"messages": sum(c.progress_frames for c in conns),
                "bytes": sum(c.progress_bytes for c in conns)}

    def allocator(self, local: int) -> "ClusterAllocator":
        return ClusterAllocator(self, local)
