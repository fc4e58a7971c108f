"""A TCP proxy in front of a broker whose network can be cut, for outage tests and runs.

``TcpProxy(target).start()`` listens on a free 127.0.0.1 port and relays every
connection to ``target`` ("host:port"), a thread per direction. ``cut()`` is the
network going away: every relayed connection is closed and new ones are refused (the
listening socket is closed), while the broker behind keeps running with its data;
``restore()`` listens again on the same port. A broker must advertise the proxy's
address (``TansuBroker.start(advertise=...)``), or its clients, told the broker's own
address in the metadata, would connect around the proxy.

Costs: two threads and two sockets per relayed connection; a copy of every byte.

>>> p = TcpProxy("127.0.0.1:1").start(); p.cut(); p.restore(); p.stop()
"""
from __future__ import annotations

import socket
import threading
from typing import Optional


class TcpProxy:
    """See the module docstring."""

    def __init__(self, target: str, port: int = 0) -> None:
        host, _, port_text = target.rpartition(":")
        self.target = (host, int(port_text))
        self.port = port
        self.cuts = 0
        self._listener: Optional[socket.socket] = None
        self._pairs: set = set()
        self._lock = threading.Lock()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "TcpProxy":
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True, name="proxy-accept").start()
        return self

    def cut(self) -> None:
        """Close every relayed connection and refuse new ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            pairs, self._pairs = self._pairs, set()
            self.cuts += 1
        if listener is not None:
            _close(listener)
        for a, b in pairs:
            _close(a)
            _close(b)

    def restore(self) -> None:
        """Accept connections again, on the same port."""
        if self._listener is None:
            self.start()

    def stop(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return                              # cut or stopped
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._listener is not listener:   # cut meanwhile
                    _close(client)
                    _close(upstream)
                    return
                self._pairs.add((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._relay, args=(src, dst, (client, upstream)),
                                 daemon=True, name="proxy-relay").start()

    def _relay(self, src: socket.socket, dst: socket.socket, pair: tuple) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._pairs.discard(pair)
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
