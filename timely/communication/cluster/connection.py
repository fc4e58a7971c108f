"""One connection between two processes of a cluster: wire framing, handshake, threads.

Every connection starts with a mutual HMAC challenge on the cluster secret
(``handshake``; the secret never crosses the wire): each side sends its hello (magic,
process index, processes, workers per process, original processes, and the worker
bootstrapping it if it joins) with a random nonce, and proves it knows the secret by
the HMAC of the other's nonce and its own hello. After the handshake the connection
carries frames (see ``codec``): data and progress messages for the receiving process's
worker threads, and control frames on channel ``CONTROL`` (heartbeats, goodbye, the
rescaling protocol).

A ``Connection`` has a send thread and a receive thread (as in timely). Frames a worker
pushes while it steps are not handed to the send thread: the worker writes them itself
at the end of the step (``defer``, then ``write_queued``), so a message is on the wire
as soon as its step ends, not when the send thread next gets the interpreter (a
hand-off measured at about 0.3 ms per hop between two busy processes on 2 cores, twice
per epoch of a closed loop). Control frames from any thread go through the send thread,
which also writes a heartbeat when nothing was written for a quarter of
``Config.timeout``; every frame leaves in the order it was queued. The receive thread hands
data frames to its hub (``hub.deliver``) and control frames other than heartbeats and
goodbye to ``hub.control`` (acknowledgements of credit to ``hub.credit``); a goodbye ends it (``hub.connection_closed``), and so does
a peer that disconnects, goes silent for longer than the timeout, or sends a malformed
frame (``hub.connection_lost``, with the reason).

Costs: the handshake is one exchange of hellos and one of proofs (two HMAC-SHA256s),
once per connection. A message to a remote worker is one msgpack encoding and one
frame. Whoever writes (the worker at the end of its step, or the send thread) writes
everything queued in one ``sendall``;
the receive thread reads whatever the socket holds (up to 1 MB) in one ``recv_into``
and decodes every complete frame in it, so the system calls and GIL hand-offs are per
chunk, not per frame.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import socket
import struct
import threading
import time
from typing import TYPE_CHECKING, Any, Optional

from ..codec import CONTROL, HEADER, FrameError, decode_header, decode_payload, encode_frame, new_decoder

if TYPE_CHECKING:
    from .hub import ClusterHub

# magic, process, processes, workers, original processes, joining (bootstrap worker + 1, or 0)
_HELLO = struct.Struct("!8sIIIII")
_MAGIC = b"pytimely"
_NONCE = 32
_RECV_CHUNK = 1 << 20         # the receive buffer (grown for a frame that is larger)
_RECV_ROOM = 1 << 16          # least free space a receive is made into


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket, timeout: float) -> tuple:
    """One frame, read before the connection's threads start (a greeting):
    ``(channel, source, first, last, seq, payload)``."""
    sock.settimeout(timeout)
    channel, source, first, last, seq, length = decode_header(_recv_exact(sock, HEADER.size))
    payload = decode_payload(_recv_exact(sock, length), new_decoder()) if length else None
    return channel, source, first, last, seq, payload


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
        self._pending: list[bytes] = []   # frames queued and not yet written, in order
        self._pending_lock = threading.Lock()
        self._write_lock = threading.Lock()   # one writer at a time, in queue order
        self._wake = threading.Event()        # the send thread has frames to write
        self._closing = False         # our goodbye is queued: nothing more after it
        self._broken: Optional[OSError] = None    # a write failed (the send thread reports it)
        self._last_write = time.monotonic()
        self._closed = threading.Event()
        self.bytes_sent = 0
        self.frames_sent = 0
        self.frames_queued = 0        # for flush
        self.frames_written = 0
        self.peer_gone = False        # the peer said goodbye: it needs nothing more from us
        self.progress_frames = 0      # progress batches sent to this process (instruments)
        self.progress_bytes = 0
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sender = threading.Thread(target=self._send_loop, daemon=True,
                                        name=f"timely-send-{hub.process}-{process}")
        self._receiver = threading.Thread(target=self._recv_loop, daemon=True,
                                          name=f"timely-recv-{hub.process}-{process}")
        #: set once both threads run: an acceptor publishes a connection, then starts it
        self.started = threading.Event()

    def start(self) -> None:
        self._sender.start()
        self._receiver.start()
        self.started.set()

    def _queue(self, frame: bytes) -> bool:
        with self._pending_lock:
            if self.peer_gone or self._closing or self._broken is not None:
                return False
            self._pending.append(frame)
            self.frames_queued += 1
        return True

    def send(self, frame: bytes) -> None:
        """Queue ``frame``; the send thread writes it."""
        if self._queue(frame):
            self._wake.set()

    def send_frame(self, channel: int, source: int, first: int, last: int, seq: int, obj: Any) -> None:
        self.send(encode_frame(channel, source, first, last, seq, obj))

    def defer(self, frame: bytes) -> None:
        """Queue ``frame`` for the caller's next ``write_queued`` (a worker's, at the end
        of its step): no hand-off to the send thread."""
        self._queue(frame)

    @property
    def has_queued(self) -> bool:
        return bool(self._pending)

    def write_queued(self) -> None:
        """Write every frame queued so far, in one ``sendall``. A failure is left to the
        send thread to report (its caller may be a worker in the middle of a step)."""
        with self._write_lock:
            with self._pending_lock:
                frames, self._pending = self._pending, []
            if not frames or self._broken is not None:
                return
            data = b"".join(frames)
            try:
                self.sock.sendall(data)
            except OSError as e:
                self._broken = e
                self._wake.set()
                return
            self._last_write = time.monotonic()
            self.bytes_sent += len(data)
            self.frames_sent += len(frames)
            self.frames_written += len(frames)

    def flush(self, timeout: float) -> bool:
        """Wait until every frame queued so far has been written to the socket (or
        ``timeout`` passes); returns whether it was."""
        target = self.frames_queued
        self.write_queued()
        deadline = time.monotonic() + timeout
        while self.frames_written < target:
            if self._closed.is_set() or self.peer_gone or time.monotonic() > deadline:
                return False
            time.sleep(0.001)
        return True

    def goodbye(self) -> None:
        """Flush what is queued, say goodbye, and stop sending (also in answer to the
        goodbye of a peer that leaves: it waits for ours)."""
        self._queue_own(encode_frame(CONTROL, -1, 0, 0, 0, ("bye",)), last=True)
        self._wake.set()

    def _queue_own(self, frame: bytes, last: bool = False) -> None:
        """Queue a frame of the connection's own (a heartbeat, the goodbye: ``last``),
        also to a peer that said goodbye, which waits for ours."""
        with self._pending_lock:
            if self._closing:
                return
            self._pending.append(frame)
            self.frames_queued += 1
            self._closing = last

    def _send_loop(self) -> None:
        heartbeat_every = max(0.05, self.hub.timeout / 4)
        heartbeat = encode_frame(CONTROL, -1, 0, 0, 0, ("hb",))
        wake = self._wake
        while True:
            wake.wait(heartbeat_every)
            wake.clear()
            if not self._pending and time.monotonic() - self._last_write >= heartbeat_every:
                self._queue_own(heartbeat)
            self.write_queued()
            if self._broken is not None:
                if not self._closed.is_set() and not self.peer_gone:
                    self.hub.connection_lost(self, f"send failed: {self._broken}")
                return
            if self._closing and not self._pending:
                break
        if self.peer_gone:      # both goodbyes said: nothing more on this socket
            self.close()

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
                    frame, need = need, size
                    if channel == CONTROL:
                        kind = payload[0] if payload else None
                        if kind == "hb":
                            continue
                        if kind == "credit":        # a receiver consumed what we sent
                            hub.credit(payload[1])
                            continue
                        if kind == "bye":
                            self.peer_gone = True
                            hub.connection_closed(self)
                            return
                        hub.control(self, source, first, last, payload)
                    else:
                        hub.deliver(channel, source, first, last, seq, payload, frame)
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
