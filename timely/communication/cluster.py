"""Cluster mode: worker threads in several processes, connected over TCP.

One TCP connection per pair of processes, each with a send thread and a receive thread
(as in timely). Process i listens on its address (``Config.address_of(i)``), connects to
every process with a smaller index, and accepts the others. Every connection starts
with a mutual HMAC challenge on the cluster secret (the secret never crosses the wire);
a connection that fails it, or that speaks garbage, is logged and closed while the
process carries on. After the handshake the connection carries frames (see
``codec``): data and progress messages for the receiving process's worker threads, and
control frames (heartbeats, goodbye, the rescaling protocol).

Fail-stop: a peer that disconnects without saying goodbye, goes silent for longer than
``Config.timeout``, or sends a malformed frame makes every worker of this process stop
with a ``ClusterError`` naming it — never a wrong frontier, never a hang past the
timeout. A joining process that disappears before it finished joining is dropped
instead: no data was routed to it yet, so the cluster carries on.

Costs: a message to a remote worker is one msgpack encoding and one frame; a progress
batch crosses each process boundary once, whatever the number of remote workers. The
send thread writes everything queued (up to 256 frames) in one ``sendall``; the receive
thread reads whatever the socket holds (up to 1 MB) in one ``recv_into`` and decodes
every complete frame in it, so the system calls and GIL hand-offs are per chunk, not
per frame.
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import os
import queue
import signal
import socket
import struct
import threading
import time
from collections import deque
from typing import Any, Callable, Optional

from .codec import HEADER, FrameError, decode_header, decode_payload, encode_frame, new_decoder
from .thread import LocalPusher, ProcessHub, QueuePuller, ThreadAllocator, ThreadPusher

log = logging.getLogger("timely.cluster")

CONTROL = 0xFFFFFFFF          # channel of control frames
# magic, process, processes, workers, original processes, joining (bootstrap worker + 1, or 0)
_HELLO = struct.Struct("!8sIIIII")
_MAGIC = b"pytimely"
_NONCE = 32
_RECV_CHUNK = 1 << 20         # the receive buffer (grown for a frame that is larger)
_RECV_ROOM = 1 << 16          # least free space a receive is made into


class ClusterError(RuntimeError):
    """The cluster cannot go on: a peer died, went silent, or broke the protocol."""


def secret_from(config: Any) -> bytes:
    """The cluster secret: TIMELY_CLUSTER_SECRET, else the file in config.secret_file."""
    value = os.environ.get("TIMELY_CLUSTER_SECRET")
    if value:
        return value.encode()
    path = getattr(config, "secret_file", None)
    if path:
        try:
            with open(path, "rb") as f:
                data = f.read().strip()
        except OSError as e:
            raise ClusterError(f"cannot read the cluster secret file {path!r}: {e}") from None
        if data:
            return data
        raise ClusterError(f"the cluster secret file {path!r} is empty")
    secret = getattr(config, "secret", None)
    if secret:
        return secret.encode()
    raise ClusterError("cluster mode needs a secret: set TIMELY_CLUSTER_SECRET, --secret-file, "
                       "or `secret` in the TOML config")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def handshake(sock: socket.socket, secret: bytes, hello: tuple, timeout: float) -> tuple:
    """Exchange hellos and prove knowledge of ``secret`` both ways; returns the peer's
    hello (process, processes, workers, original processes, joining)."""
    sock.settimeout(timeout)
    mine = os.urandom(_NONCE)
    sock.sendall(_HELLO.pack(_MAGIC, *hello) + mine)
    data = _recv_exact(sock, _HELLO.size + _NONCE)
    magic, *theirs = _HELLO.unpack(data[:_HELLO.size])
    if magic != _MAGIC:
        raise FrameError("not a pytimely peer (bad magic)")
    nonce = data[_HELLO.size:]
    proof = hmac.new(secret, nonce + _HELLO.pack(_MAGIC, *hello), hashlib.sha256).digest()
    sock.sendall(proof)
    their_proof = _recv_exact(sock, len(proof))
    expected = hmac.new(secret, mine + data[:_HELLO.size], hashlib.sha256).digest()
    if not hmac.compare_digest(their_proof, expected):
        raise PermissionError("peer does not know the cluster secret")
    return tuple(theirs)


class Connection:
    """One authenticated TCP connection to another process: a send and a receive thread."""

    def __init__(self, hub: "ClusterHub", process: int, sock: socket.socket, joining: bool) -> None:
        self.hub = hub
        self.process = process
        self.sock = sock
        self.joining = joining        # the peer is a joiner that has not finished joining
        self._sendq: "queue.SimpleQueue[Optional[bytes]]" = queue.SimpleQueue()
        self._closed = threading.Event()
        self.bytes_sent = 0
        self.frames_sent = 0
        self.frames_queued = 0        # by send_frame, for flush
        self.frames_written = 0
        self._count_lock = threading.Lock()
        self.peer_gone = False        # the peer said goodbye: it needs nothing more from us
        self.progress_frames = 0      # progress batches sent to this process (instruments)
        self.progress_bytes = 0
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sender = threading.Thread(target=self._send_loop, daemon=True,
                                        name=f"timely-send-{hub.process}-{process}")
        self._receiver = threading.Thread(target=self._recv_loop, daemon=True,
                                          name=f"timely-recv-{hub.process}-{process}")

    def start(self) -> None:
        self._sender.start()
        self._receiver.start()

    def send(self, frame: bytes) -> None:
        if not self.peer_gone:
            with self._count_lock:
                self.frames_queued += 1
            self._sendq.put(frame)

    def send_frame(self, channel: int, source: int, first: int, last: int, seq: int, obj: Any) -> None:
        if not self.peer_gone:
            with self._count_lock:
                self.frames_queued += 1
            self._sendq.put(encode_frame(channel, source, first, last, seq, obj))

    def flush(self, timeout: float) -> bool:
        """Wait until every frame queued by ``send_frame`` so far has been written to
        the socket (or ``timeout`` passes); returns whether it was."""
        target = self.frames_queued
        deadline = time.monotonic() + timeout
        while self.frames_written < target:
            if self._closed.is_set() or self.peer_gone or time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def goodbye(self) -> None:
        """Flush what is queued, say goodbye, and stop sending (also in answer to the
        goodbye of a peer that leaves: it waits for ours)."""
        self._sendq.put(encode_frame(CONTROL, -1, 0, 0, 0, ("bye",)))
        self._sendq.put(None)

    def _send_loop(self) -> None:
        heartbeat = max(0.05, self.hub.timeout / 4)
        get = self._sendq.get
        try:
            while True:
                queued = 1
                try:
                    frame = get(timeout=heartbeat)
                except queue.Empty:
                    frame = encode_frame(CONTROL, -1, 0, 0, 0, ("hb",))
                    queued = 0
                if frame is None:
                    break
                frames = [frame]
                stop = False
                while len(frames) < 256:       # coalesce what is queued into one write
                    try:
                        more = self._sendq.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    frames.append(more)
                    queued += 1
                data = b"".join(frames)
                self.sock.sendall(data)
                self.bytes_sent += len(data)
                self.frames_sent += len(frames)
                self.frames_written += queued
                if stop:
                    break
        except OSError as e:
            if not self._closed.is_set() and not self.peer_gone:
                self.hub.connection_lost(self, f"send failed: {e}")

    def _recv_loop(self) -> None:
        sock = self.sock
        sock.settimeout(self.hub.timeout)
        hub = self.hub
        size = HEADER.size
        # One buffer, filled by recv_into as far as the socket has data and parsed for
        # every complete frame in it: one system call and one GIL hand-back per chunk
        # (up to _RECV_CHUNK bytes, often dozens of frames), not two per frame.
        buf = bytearray(_RECV_CHUNK)
        view = memoryview(buf)
        decoder = new_decoder()
        start = end = 0         # unparsed bytes are buf[start:end]
        need = size             # bytes the next frame needs from start (header first)
        try:
            while True:
                if start == end:
                    start = end = 0
                    if len(buf) > 4 * _RECV_CHUNK:      # a large frame has gone: shrink back
                        view.release()
                        buf = bytearray(_RECV_CHUNK)
                        view = memoryview(buf)
                if len(buf) - end < _RECV_ROOM or len(buf) - start < need:
                    # Move the partial frame to the front (growing the buffer if the
                    # frame is larger than it): the room to receive into stays large.
                    view.release()
                    pending = buf[start:end]
                    if len(buf) < need + _RECV_ROOM:
                        buf = bytearray(need + _RECV_CHUNK)
                    buf[:len(pending)] = pending
                    view = memoryview(buf)
                    start, end = 0, len(pending)
                received = sock.recv_into(view[end:])
                if not received:
                    raise ConnectionError("connection closed")
                end += received
                while end - start >= size:
                    channel, source, first, last, seq, length = decode_header(view[start:start + size])
                    need = size + length
                    if end - start < need:
                        break
                    payload = decode_payload(view[start + size:start + need], decoder) if length else None
                    start += need
                    need = size
                    if channel == CONTROL:
                        kind = payload[0] if payload else None
                        if kind == "hb":
                            continue
                        if kind == "bye":
                            self.peer_gone = True
                            hub.connection_closed(self)
                            return
                        hub.control(self, source, first, last, payload)
                    else:
                        hub.deliver(channel, source, first, last, seq, payload)
        except socket.timeout:
            hub.connection_lost(self, f"silent for more than {hub.timeout:g} s")
        except (ConnectionError, OSError) as e:
            if not self._closed.is_set() and not self.peer_gone:
                hub.connection_lost(self, f"disconnected ({e})")
        except (FrameError, ValueError, TypeError) as e:
            hub.connection_lost(self, f"sent a malformed frame: {e}")

    def close(self) -> None:
        self._closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class RescaleMessage:
    """A process joined (``kind == "join"``) or finished joining (``"joined"``), or a
    joiner was lost before it finished (``"lost"``); applied by each worker at the
    start of its next step."""

    __slots__ = ("kind", "process", "first", "last", "bootstrap")

    def __init__(self, kind: str, process: int, first: int, last: int, bootstrap: int = -1) -> None:
        self.kind, self.process, self.first, self.last, self.bootstrap = kind, process, first, last, bootstrap

    def __repr__(self) -> str:
        return f"RescaleMessage({self.kind}, process {self.process}, workers {self.first}..{self.last})"


class ClusterHub(ProcessHub):
    """This process's side of the cluster: local queues, connections, the acceptor."""

    def __init__(self, config: Any, secret: bytes, processes: int, original_processes: int,
                 joining: bool = False) -> None:
        super().__init__(config.workers, first_index=config.process * config.workers)
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
        self.rescales = [deque() for _ in range(config.workers)]
        self.finished_joining = set()
        self._listener: Optional[socket.socket] = None
        self._stopping = threading.Event()
        self.refused = 0
        self.bootstrapped = 0
        self._joined = threading.Event()
        #: this process's workers exist: their allocators know the members without a
        #: joiner, so a join may now reach them as a RescaleMessage (with its back-fill)
        self.workers_ready = threading.Event()
        # scale-in (timely.rescaling.leave)
        self.leave_requested = False
        self.leave_started = False
        self.leave_refused: Optional[str] = None
        self.leave_applied = 0              # local workers that applied our own leave
        self.quiesced = 0
        self.quiesce_sent = False
        self.leaving: set[int] = set()      # processes leaving (ours included)
        self.departed: set[int] = set()
        self._waiting_logged = ""
        self.members: Optional[set] = None  # a joiner: the processes its bootstrap process named

    # ---- start-up ---------------------------------------------------------------------
    def listen(self) -> None:
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

        A joiner connects to its bootstrap process first, which tells it the members
        of the cluster (processes that left are not), then to the other members."""
        deadline = time.monotonic() + self.timeout
        order = list(range(self.process))
        if self.joining:
            server = self.config.join // self.workers_per_process
            order = [server]
        while order:
            process = order.pop(0)
            host, port = self.config.address_of(process)
            while True:
                try:
                    sock = socket.create_connection((host, port), timeout=self.timeout)
                    theirs = handshake(sock, self.secret, self._hello(), self.timeout)
                    break
                except (ConnectionRefusedError, socket.timeout, ConnectionResetError):
                    if time.monotonic() > deadline:
                        raise ClusterError(f"process {process} at {host}:{port} did not answer "
                                           f"within {self.timeout:g} s") from None
                    time.sleep(0.05)
                except PermissionError as e:
                    raise ClusterError(f"process {process} at {host}:{port} refused us: {e}") from None
            self._check_peer(theirs, process)
            self._add(process, sock, joining=False)
            if self.joining and process == self.config.join // self.workers_per_process:
                self._await(lambda: self.members is not None, deadline,
                            lambda: f"process {process} at {host}:{port} did not admit us "
                                    f"within {self.timeout:g} s")
                order = sorted(p for p in self.members if p != process and p < self.process)
        expected = (set(range(self.processes)) if self.members is None else self.members) - {self.process}

        def missing() -> list[int]:
            with self._lock:
                return sorted(p for p in expected if p not in self.connections)
        self._await(lambda: not missing(), deadline,
                    lambda: f"process {self.process}: processes {missing()} did not connect "
                            f"within {self.timeout:g} s")

    def _await(self, done: Callable[[], bool], deadline: float, failure: Callable[[], str]) -> None:
        """Poll ``done()`` until it holds; raise the cluster's error if one occurs, or a
        ClusterError saying ``failure()`` once ``deadline`` (monotonic) has passed."""
        while not done():
            if self.error is not None:
                raise self.error
            if time.monotonic() > deadline:
                raise ClusterError(failure())
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
        if joining:
            if not self.workers_ready.wait(self.timeout):
                log.warning("process %d refused the join of process %d: its workers did not start "
                            "within %g s", self.process, process, self.timeout)
                sock.close()
                return
            # a join waits for a leave under way to finish (the joiner's connect waits too)
            deadline = time.monotonic() + self.timeout
            while self.leaving and time.monotonic() < deadline and not self._stopping.is_set():
                time.sleep(0.02)
            if self.leaving:
                log.warning("process %d refused the join of process %d: processes %s are leaving",
                            self.process, process, sorted(self.leaving))
                sock.close()
                return
            log.info("process %d: process %d is joining (%d processes)", self.process, process, processes)
            first = process * self.workers_per_process
            if self.kafka is not None:
                self.kafka.subscribe(range(first, first + self.workers_per_process))
            # The join must reach our workers before anything the joiner says (its
            # "joined" arrives on this connection): post it before the threads start.
            with self._lock:
                members = sorted(set(self.connections) | {self.process})

            def admit(conn: Connection) -> None:
                if joining - 1 in range(self.first_index, self.first_index + self.workers):
                    conn.send_frame(CONTROL, -1, 0, 0, 0, ("members", members))
                self._post(RescaleMessage("join", process, first, first + self.workers_per_process - 1,
                                          bootstrap=joining - 1))
            self._add(process, sock, joining=True, before_start=admit)
        else:
            self._add(process, sock, joining=False)

    def _add(self, process: int, sock: socket.socket, joining: bool,
             before_start: Optional[Callable[[], None]] = None) -> None:
        conn = Connection(self, process, sock, joining)
        with self._lock:
            self.connections[process] = conn
            self.processes = max(self.processes, process + 1)
        if before_start is not None:
            before_start(conn)
        conn.start()

    def _post(self, message: RescaleMessage) -> None:
        for local, pending in enumerate(self.rescales):
            pending.append(message)
            self.events[local].append(CONTROL)
            self.wakes[local].set()

    # ---- receiving --------------------------------------------------------------------
    def deliver(self, channel: int, source: int, first: int, last: int, seq: int, payload: Any) -> None:
        base = self.first_index
        lo, hi = first - base, last - base
        if lo < 0 or hi >= self.workers:
            raise FrameError(f"frame for workers {first}..{last}, but this process hosts "
                             f"{base}..{base + self.workers - 1}")
        queues = self.queues(channel)
        for local in range(lo, hi + 1):
            queues[local].append(payload)
            self.events[local].append(channel)
            self.wakes[local].set()

    def control(self, conn: Connection, source: int, first: int, last: int, payload: Any) -> None:
        kind = payload[0]
        if kind == "leave":
            process = payload[1]
            log.info("process %d: process %d is leaving", self.process, process)
            with self._lock:
                self.leaving.add(process)
            first_w = process * self.workers_per_process
            self._post(RescaleMessage("leave", process, first_w, first_w + self.workers_per_process - 1))
        elif kind == "quiesce":
            first_w = payload[1] * self.workers_per_process
            self._post(RescaleMessage("quiesce", payload[1], first_w, first_w + self.workers_per_process - 1))
        elif kind == "members":
            self.members = set(payload[1])
        elif kind == "log-ends":
            if self.kafka is not None:
                first = conn.process * self.workers_per_process
                self.kafka.departed(range(first, first + self.workers_per_process),
                                    {int(w): n for w, n in payload[1].items()})
        elif kind == "joined":
            conn.joining = False
            process = payload[1]
            self.finished_joining.add(process)
            first_w = process * self.workers_per_process
            self._post(RescaleMessage("joined", process, first_w, first_w + self.workers_per_process - 1))
        else:
            self.deliver(CONTROL, source, first, last, 0, payload)

    # ---- failures ---------------------------------------------------------------------
    def connection_lost(self, conn: Connection, why: str) -> None:
        if self._stopping.is_set():
            return
        host, port = self.config.address_of(conn.process)
        with self._lock:
            if self.connections.get(conn.process) is conn:
                del self.connections[conn.process]
        if conn.joining:
            log.warning("process %d: joining process %d (%s:%d) was lost before it finished "
                        "joining: %s; carrying on without it", self.process, conn.process, host, port, why)
            first = conn.process * self.workers_per_process
            self._post(RescaleMessage("lost", conn.process, first, first + self.workers_per_process - 1))
            conn.close()
            return
        self.fail(ClusterError(f"process {conn.process} ({host}:{port}) {why}"))

    def connection_closed(self, conn: Connection) -> None:
        with self._lock:
            if self.connections.get(conn.process) is conn:
                del self.connections[conn.process]
            departing = conn.process in self.leaving and conn.process != self.process
            if departing:
                self.leaving.discard(conn.process)
                self.departed.add(conn.process)
        if departing and not self._stopping.is_set():
            log.info("process %d: process %d has left the cluster", self.process, conn.process)
            conn.goodbye()          # it waits for our goodbye before it exits
            first = conn.process * self.workers_per_process
            self._post(RescaleMessage("left", conn.process, first, first + self.workers_per_process - 1))

    # ---- leaving (timely.rescaling.leave) -------------------------------------------------
    def request_leave(self, why: str) -> None:
        """Ask for this process to leave the cluster (SIGTERM, or a worker's call)."""
        if not self.leave_requested:
            log.info("process %d: leave requested (%s)", self.process, why)
        self.leave_requested = True
        for wake in self.wakes:
            wake.set()

    def refuse_leave(self, why: str) -> None:
        log.error("process %d cannot leave the cluster: %s; it carries on", self.process, why)
        self.leave_refused = why
        self.leave_requested = False

    def try_start_leave(self) -> bool:
        """Start our leave unless a join or another leave is under way (then it waits)."""
        with self._lock:
            joining = sorted(p for p, c in self.connections.items() if c.joining)
            if self.joining and not self._joined.is_set():
                joining.append(self.process)
            others = sorted(self.leaving - {self.process})
            if joining or others:
                why = (f"process {joining[0]} is joining" if joining else f"process {others[0]} is leaving")
                if why != self._waiting_logged:
                    self._waiting_logged = why
                    log.info("process %d: the leave waits: %s", self.process, why)
                return False
            self.leave_started = True
            self.leaving.add(self.process)
            conns = list(self.connections.values())
        log.info("process %d leaves the cluster", self.process)
        for conn in conns:
            conn.send_frame(CONTROL, -1, 0, 0, 0, ("leave", self.process))
        first = self.first_index
        self._post(RescaleMessage("leave", self.process, first, first + self.workers - 1))
        return True

    def leave_finished(self) -> None:
        """Every local worker drained: in Kafka mode, tell the others where our logs end
        (every record acknowledged first); the goodbyes follow in ``shutdown``."""
        if self.kafka is not None:
            ends = self.kafka.final_positions()
            with self._lock:
                conns = list(self.connections.values())
            for conn in conns:
                conn.send_frame(CONTROL, -1, 0, 0, 0, ("log-ends", ends))
        log.info("process %d has drained and leaves", self.process)

    def quiesced_locally(self) -> None:
        """A leaving worker needs no more broadcasts; once all have, tell everyone."""
        with self._lock:
            self.quiesced += 1
            everyone = self.quiesced == self.workers and not self.quiesce_sent
            if everyone:
                self.quiesce_sent = True
            conns = list(self.connections.values())
        if everyone:
            log.info("process %d holds no keyed state any more: broadcasts to it stop", self.process)
            for conn in conns:
                conn.send_frame(CONTROL, -1, 0, 0, 0, ("quiesce", self.process))
            first = self.first_index
            self._post(RescaleMessage("quiesce", self.process, first, first + self.workers - 1))

    def leave_applied_locally(self) -> None:
        with self._lock:
            self.leave_applied += 1

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
        for conn in conns:
            conn._sender.join(timeout=max(0.0, deadline - time.monotonic()))
        for conn in conns:
            conn._receiver.join(timeout=max(0.0, deadline - time.monotonic()))
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

    def joined_locally(self, worker: Any) -> None:
        """A joining worker finished bootstrapping; once all have, tell every process.

        Every local worker waits here until "joined" is on the wire to every process, so
        no progress batch of this process precedes it: a joiner lost before that point
        has said nothing, and its bootstrap worker can take back the capabilities it
        granted (``timely.rescaling.grants.retract``) without counting anything twice."""
        with self._lock:
            self.bootstrapped += 1
            everyone = self.bootstrapped == self.workers
            conns = list(self.connections.values())
        if everyone:
            log.info("process %d finished joining", self.process)
            for conn in conns:
                conn.send_frame(CONTROL, -1, 0, 0, 0, ("joined", self.process))
            for conn in conns:
                conn.flush(self.timeout)
            self._joined.set()
            return
        while not self._joined.wait(0.05):
            if self.abort.is_set():
                return

    def allocator(self, local: int) -> "ClusterAllocator":
        return ClusterAllocator(self, local)


class _RemotePusher:
    """Sends to one worker of another process."""

    __slots__ = ("_conn", "_channel", "_source", "_target")

    def __init__(self, conn: Connection, channel: int, source: int, target: int) -> None:
        self._conn, self._channel, self._source, self._target = conn, channel, source, target

    def push(self, message: Any) -> None:
        self._conn.send_frame(self._channel, self._source, self._target, self._target, 0, message)


class _ProcessPusher:
    """Sends once to every worker of another process (progress batches)."""

    __slots__ = ("_conn", "_channel", "_source", "_first", "_last")

    def __init__(self, conn: Connection, channel: int, source: int, first: int, last: int) -> None:
        self._conn, self._channel, self._source, self._first, self._last = conn, channel, source, first, last

    def push(self, message: Any) -> None:
        frame = encode_frame(self._channel, self._source, self._first, self._last, 0, message)
        conn = self._conn
        conn.progress_frames += 1
        conn.progress_bytes += len(frame)
        conn.send(frame)


class _DeadPusher:
    """Stands for a worker that is gone (a joiner lost mid-join): nothing was routed to it."""

    __slots__ = ()

    def push(self, message: Any) -> None:
        pass


class ClusterAllocator(ThreadAllocator):
    """A worker's allocator in cluster mode: local threads plus remote processes."""

    def __init__(self, hub: ClusterHub, local: int) -> None:
        super().__init__(hub, local)
        self.hub: ClusterHub = hub
        self.peers = hub.processes * hub.workers_per_process
        self._per_worker: dict[int, list] = {}     # channel -> pushers per global worker
        self._per_process: dict[int, list] = {}    # channel -> pushers per process/local worker
        self._processes = list(range(hub.processes))

    def _remote(self, process: int) -> Optional[Connection]:
        return self.hub.connections.get(process)

    def _worker_pushers(self, channel: int, process: int) -> list:
        w = self.hub.workers_per_process
        if process == self.hub.process:
            queues = self.hub.queues(channel)
            return [LocalPusher(q, self._events, channel) if i == self.local else
                    ThreadPusher(q, self.hub.events[i], self.hub.wakes[i], channel)
                    for i, q in enumerate(queues)]
        conn = self._remote(process)
        if conn is None:
            return [_DeadPusher() for _ in range(w)]
        return [_RemotePusher(conn, channel, self.index, process * w + i) for i in range(w)]

    def allocate(self, channel: int) -> tuple[list, QueuePuller]:
        pushers: list = []
        for process in self._processes:
            pushers.extend(self._worker_pushers(channel, process))
        self._per_worker[channel] = pushers
        return pushers, QueuePuller(self.hub.queues(channel)[self.local])

    def allocate_broadcast(self, channel: int) -> tuple[list, QueuePuller]:
        """Pushers that reach every worker, one per remote process (progress batches);
        in Kafka progress mode, the worker's progress log."""
        if self.hub.kafka is not None:
            return self.hub.kafka.pushers(channel), QueuePuller(self.hub.queues(channel)[self.local])
        pushers: list = []
        for process in self._processes:
            pushers.extend(self._broadcast_pushers(channel, process))
        self._per_process[channel] = pushers
        return pushers, QueuePuller(self.hub.queues(channel)[self.local])

    def _broadcast_pushers(self, channel: int, process: int) -> list:
        w = self.hub.workers_per_process
        if process == self.hub.process:
            return self._worker_pushers(channel, process)
        conn = self._remote(process)
        if conn is None:
            return [_DeadPusher()]
        return [_ProcessPusher(conn, channel, self.index, process * w, process * w + w - 1)]

    def add_process(self, process: int) -> dict[int, list]:
        """Back-fill every channel allocated so far with pushers to ``process``; returns,
        per broadcast channel, the pushers added (the progcasters' new links)."""
        if process in self._processes:
            return {}
        self._processes.append(process)
        self.peers = max(self.peers, (process + 1) * self.hub.workers_per_process)
        for channel, pushers in self._per_worker.items():
            pushers.extend(self._worker_pushers(channel, process))
        added = {}
        for channel, pushers in self._per_process.items():
            new = self._broadcast_pushers(channel, process)
            pushers.extend(new)
            added[channel] = new
        return added

    def remove_process(self, process: int) -> None:
        """Forget a process that is gone (a joiner lost before it finished joining)."""
        w = self.hub.workers_per_process
        for channel, pushers in self._per_worker.items():
            for g in range(process * w, process * w + w):
                if g < len(pushers):
                    pushers[g] = _DeadPusher()
        for channel, pushers in self._per_process.items():
            for i, p in enumerate(pushers):
                if isinstance(p, _ProcessPusher) and p._first == process * w:
                    pushers[i] = _DeadPusher()

    def control_send(self, process: int, first: int, last: int, payload: Any) -> None:
        conn = self._remote(process)
        if conn is None:
            raise ClusterError(f"no connection to process {process}")
        conn.send_frame(CONTROL, self.index, first, last, 0, payload)

    def control_puller(self) -> QueuePuller:
        return QueuePuller(self.hub.queues(CONTROL)[self.local])

    def rescales(self) -> list[RescaleMessage]:
        pending = self.hub.rescales[self.local]
        out = []
        while pending:
            out.append(pending.popleft())
        return out


def execute_cluster(config: Any, build: Callable[[Any], Any]) -> list[Any]:
    """``execute`` for one process of a cluster (or a process joining one)."""
    from ..worker import Worker, WorkerAborted

    secret = secret_from(config)
    joining = config.join is not None
    processes = config.process + 1 if joining else config.processes
    hub = ClusterHub(config, secret, processes, config.processes, joining)
    hub.listen()
    try:
        if config.progress_mode == "kafka":
            from .kafka import KafkaProgress
            w = config.workers
            hub.kafka = KafkaProgress(config, hub, list(range(config.process * w, (config.process + 1) * w)),
                                      list(range(processes * w)), joining)
        hub.connect_all()
    except BaseException:
        hub.kill()
        if hub.kafka is not None:
            hub.kafka.close()
        raise
    if not config.rescaling:
        hub.stop_accepting()
    _leave_on_sigterm(hub)
    results: list[Any] = [None] * config.workers
    errors: list[BaseException] = []
    workers = [Worker(config, hub.allocator(i), hub.abort) for i in range(config.workers)]
    hub.workers_ready.set()

    def run(local: int) -> None:
        worker = workers[local]
        try:
            results[local] = build(worker)
            worker.run()
        except WorkerAborted:
            pass
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
            if not isinstance(e, ClusterError):
                hub.fail(ClusterError(f"worker {worker.index} failed: {e!r}"))

    threads = [threading.Thread(target=run, args=(i,), name=f"timely-worker-{config.process}-{i}",
                                daemon=True) for i in range(config.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if hub.error is not None or errors:
        hub.kill()
        if hub.kafka is not None:
            hub.kafka.close()
        first = next((e for e in errors if not isinstance(e, ClusterError)), None)
        raise first or hub.error or errors[0]
    if hub.leave_started:
        hub.leave_finished()
    hub.shutdown()
    if hub.kafka is not None:
        hub.kafka.close()
    return results


def _leave_on_sigterm(hub: ClusterHub) -> None:
    """SIGTERM (what an orchestrator sends to scale down) asks this process to leave."""
    if threading.current_thread() is not threading.main_thread():
        return                      # signals can only be handled on the main thread
    signal.signal(signal.SIGTERM, lambda signum, frame: hub.request_leave("SIGTERM"))
