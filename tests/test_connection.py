"""One connection between two processes: who writes a frame, in what order, and what a
failed write does.

Protects what every cluster run relies on: frames a worker queues while it steps are
on the wire once it flushes (no hand-off to the send thread), in the order they were
queued together with control frames from other threads; a goodbye is the last frame;
and a write that fails under a worker does not raise into its step but is reported,
once, as a lost connection by the send thread.
"""
from __future__ import annotations

import socket
import threading

import pytest

from timely.communication.cluster.connection import Connection, read_frame
from timely.communication.codec import CONTROL, encode_frame


class Hub:
    """What a Connection needs of its hub; records what it is told."""

    def __init__(self) -> None:
        self.process = 0
        self.timeout = 30.0
        self.lost: list[str] = []
        self.told = threading.Event()

    def connection_lost(self, conn, why: str) -> None:
        self.lost.append(why)
        self.told.set()

    def connection_closed(self, conn) -> None:
        pass


def data(n: int) -> bytes:
    return encode_frame(7, 0, 1, 1, 0, [("record", n)])


@pytest.fixture
def pair():
    """Two ends of a TCP connection on 127.0.0.1."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        a = socket.create_connection(server.getsockname())
        b, _ = server.accept()
    yield a, b
    a.close()
    b.close()


def test_a_workers_frames_are_written_by_its_own_flush_in_queue_order(pair):
    a, b = pair
    conn = Connection(Hub(), 1, a, joining=False)      # threads not started: no send thread
    conn.defer(data(1))
    conn.send_frame(CONTROL, -1, 0, 0, 0, ("members", [0, 1]))     # from another thread
    conn.defer(data(2))
    b.setblocking(False)
    with pytest.raises(BlockingIOError):
        b.recv(1)                                       # deferred: nothing written yet
    assert conn.has_queued and conn.frames_written == 0
    conn.write_queued()
    assert not conn.has_queued and conn.frames_written == conn.frames_queued == 3
    frames = [read_frame(b, 5) for _ in range(3)]
    assert [(f[0], f[5]) for f in frames] == [(7, (("record", 1),)), (CONTROL, ("members", (0, 1))),
                                              (7, (("record", 2),))]


def test_goodbye_is_the_last_frame_and_nothing_is_queued_after_it(pair):
    a, b = pair
    conn = Connection(Hub(), 1, a, joining=False)
    conn.defer(data(1))
    conn.goodbye()
    conn.defer(data(2))                                 # after our goodbye: dropped
    conn.write_queued()
    assert read_frame(b, 5)[5] == (("record", 1),)
    assert read_frame(b, 5)[5] == ("bye",)
    conn.write_queued()
    b.setblocking(False)
    with pytest.raises(BlockingIOError):
        b.recv(1)
    assert conn.frames_queued == conn.frames_written == 2


class BrokenSocket:
    """A socket whose writes fail and whose reads wait until it is closed."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.writes = 0

    def settimeout(self, timeout) -> None:
        pass

    def setsockopt(self, *args) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")

    def recv_into(self, view) -> int:
        self.closed.wait()
        return 0

    def shutdown(self, how) -> None:
        self.closed.set()

    def close(self) -> None:
        self.closed.set()


def test_a_failed_write_under_a_worker_is_reported_once_by_the_send_thread():
    hub, sock = Hub(), BrokenSocket()
    conn = Connection(hub, 1, sock, joining=False)
    conn.start()
    conn.defer(data(1))
    conn.write_queued()                     # the worker's flush: must not raise
    assert hub.told.wait(30), "the failed write was never reported"
    assert len(hub.lost) == 1 and hub.lost[0].startswith("send failed: "), hub.lost
    conn.defer(data(2))                     # a broken connection queues nothing more
    conn.write_queued()
    assert not conn.has_queued and sock.writes == 1
    conn.close()


class _StartedByTheAcceptor(threading.Event):
    """A connection's ``started`` whose first wait lets the acceptor start it: the
    moment a worker that finished at once shuts its hub down between the acceptor
    publishing the connection and starting it."""

    def __init__(self, conn) -> None:
        super().__init__()
        self.conn = conn

    def wait(self, timeout=None) -> bool:
        if not self.is_set():
            self.conn.start()
        return super().wait(timeout)


def test_shutdown_says_goodbye_on_a_connection_the_acceptor_has_not_started_yet(pair):
    from timely.communication.cluster.hub import ClusterHub
    from timely.config import Config
    a, b = pair
    hub = ClusterHub(Config(workers=1, processes=2, process=0), b"secret", 2, 2)
    conn = Connection(hub, 1, a, joining=False)
    conn.started = _StartedByTheAcceptor(conn)
    hub.connections[1] = conn               # published; the acceptor starts it next
    # (it joined the connection's threads before they started: RuntimeError)
    closing = threading.Thread(target=hub.shutdown)
    closing.start()
    assert read_frame(b, 30)[5] == ("bye",)  # the goodbye went out
    b.sendall(encode_frame(CONTROL, -1, 0, 0, 0, ("bye",)))     # the peer's, as a peer answers
    closing.join(30)
    assert not closing.is_alive(), "shutdown did not return once the peer said goodbye"
