"""Launch a local cluster of processes: free loopback ports, a hostfile, a fresh secret.

Used by ``make run`` (the rescaling demo), the cluster tests and the benchmarks. Each
process runs ``python PROGRAM -n N -p I -w W -h HOSTFILE ...`` with the secret in its
environment; ``join`` adds a process with ``-j B --nn N``. Output lines are collected
with the time they were read. Processes are stopped by PID (never by name), and
``close`` reaps every one of them.

>>> ports = free_ports(3); len(set(ports)) == 3 and all(p in _listening_ports() for p in ports)
True
"""
from __future__ import annotations

import os
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional, Sequence


def _listening_ports() -> range:
    """Where to look for ports a process will listen on later: below the range the
    kernel hands out to outgoing connections (``ip_local_port_range``), from 10,000.
    A port found free inside that range can be taken by any connection made before the
    process that is to listen on it binds it (a joiner's or a replacement's port stays
    reserved for seconds while Spark and the Kafka clients connect): the bind fails.
    Off Linux, or when that range starts too low, the whole unprivileged range."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            first = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        first = 0
    return range(10_000, first) if first > 12_000 else range(1024, 65536)


def _bindable(port: int) -> Optional[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None
    return sock


def free_port_range(n: int) -> int:
    """A port p such that p .. p + n - 1 were all free on 127.0.0.1 a moment ago (what
    ``--metrics-port`` needs: process i serves on p + i), below the ephemeral ports."""
    ports = _listening_ports()
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(ports.start, ports.stop - n)
        socks = []
        try:
            for i in range(n):
                sock = _bindable(port + i)
                if sock is None:
                    break
                socks.append(sock)
            else:
                return port
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {n} consecutive free ports on 127.0.0.1 in {ports.start}..{ports.stop - 1}")


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports that were free on 127.0.0.1 a moment ago, below the
    ephemeral ports (see ``_listening_ports``)."""
    ports = _listening_ports()
    rng = random.Random()
    socks: list = []
    try:
        for _ in range(200 * n):
            if len(socks) == n:
                break
            sock = _bindable(rng.randrange(ports.start, ports.stop))
            if sock is not None:
                socks.append(sock)
        if len(socks) < n:
            raise RuntimeError(f"no {n} free ports on 127.0.0.1 in {ports.start}..{ports.stop - 1}")
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class Process:
    """One launched process and the lines it printed (with arrival times). ``session``:
    start it in a session (and process group) of its own, so that ``signal_group`` reaches
    what it starts too (a shell and its commands)."""

    def __init__(self, index: int, argv: list[str], env: dict, start: float, label: str,
                 cwd: Optional[str] = None, session: bool = False) -> None:
        self.index = index
        self.label = label
        self.lines: list[tuple[float, str]] = []
        self.session = session
        self.popen = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, bufsize=1, cwd=cwd, start_new_session=session)
        self._start = start
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.popen.stdout:
            self.lines.append((time.monotonic() - self._start, line.rstrip("\n")))

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait(self, timeout: float) -> int:
        code = self.popen.wait(timeout=timeout)
        self._reader.join(timeout=5)
        return code

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to this process's group (its PID: started with ``session``), if it
        still has members."""
        if not self.session:
            raise ValueError(f"{self.label} was not started in a session of its own")
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def output(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def wait_for(self, pattern: str, timeout: float) -> bool:
        """Wait until this process has printed a line matching ``pattern`` (``re.search``);
        False if it exits or ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        while not any(re.search(pattern, line) for _, line in self.lines):
            if self.popen.poll() is not None:
                self._reader.join(timeout=5)        # its last lines, read after it exited
                return any(re.search(pattern, line) for _, line in self.lines)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)
        return True


class LocalCluster:
    """A hostfile for ``slots`` processes on loopback, and the processes started on it."""

    def __init__(self, program: str | Sequence[str], slots: int, workers: int = 1,
                 extra: Sequence[str] = (), env: Optional[dict] = None,
                 python: str = sys.executable) -> None:
        """``program``: a script, or a script and the arguments that come first."""
        self.program = [program] if isinstance(program, str) else list(program)
        self.slots = slots
        self.workers = workers
        self.extra = list(extra)
        self.python = python
        self.ports = free_ports(slots)
        self._dir = tempfile.TemporaryDirectory(prefix="timely-cluster-")
        self.hostfile = os.path.join(self._dir.name, "hosts")
        with open(self.hostfile, "w") as f:
            f.write("".join(f"127.0.0.1:{p}\n" for p in self.ports))
        self.secret = secrets.token_hex(16)
        self.env = {**os.environ, **(env or {}), "TIMELY_CLUSTER_SECRET": self.secret,
                    "PYTHONUNBUFFERED": "1"}
        self.processes: list[Process] = []
        self.start_time = time.monotonic()
        self.events: list[tuple[float, str]] = []
        self.join_walltimes: list[float] = []

    def _argv(self, n: int, index: int, more: Sequence[str]) -> list[str]:
        return [self.python, *self.program, "-n", str(n), "-p", str(index), "-w", str(self.workers),
                "-h", self.hostfile, *self.extra, *more]

    def start(self, processes: int, *more: str) -> list[Process]:
        """Start processes 0..processes-1 of a cluster of that size."""
        for index in range(processes):
            self.processes.append(Process(index, self._argv(processes, index, more), self.env,
                                          self.start_time, f"p{index}"))
        return self.processes

    def restart(self, index: int, processes: int, *more: str) -> Process:
        """Start process ``index`` again with the arguments it was started with (a
        replacement for one that died: it finds the cluster running and joins it)."""
        self.events.append((time.monotonic() - self.start_time, f"process {index} restarts"))
        proc = Process(index, self._argv(processes, index, more), self.env, self.start_time, f"p{index}'")
        self.processes[index] = proc
        return proc

    def join(self, original: int, bootstrap: int = 0, *more: str, secret: Optional[str] = None) -> Process:
        """Start the next process as a joiner (``-j bootstrap --nn index+1``)."""
        index = len(self.processes)
        env = dict(self.env)
        if secret is not None:
            env["TIMELY_CLUSTER_SECRET"] = secret
        self.events.append((time.monotonic() - self.start_time, f"process {index} joins"))
        self.join_walltimes.append(time.time())
        proc = Process(index, self._argv(original, index, ["-j", str(bootstrap), "--nn", str(index + 1), *more]),
                       env, self.start_time, f"p{index}")
        self.processes.append(proc)
        return proc

    def wait(self, timeout: float) -> list[int]:
        deadline = time.monotonic() + timeout
        codes = []
        for proc in self.processes:
            codes.append(proc.wait(max(0.1, deadline - time.monotonic())))
        return codes

    def interleaved(self) -> list[str]:
        """Every process's lines and the join events, in the order they happened."""
        rows = [(t, f"[{t:7.3f}s {p.label}] {line}") for p in self.processes for t, line in p.lines]
        rows += [(t, f"[{t:7.3f}s ----] === {what} ===") for t, what in self.events]
        return [text for _, text in sorted(rows)]

    def kill(self, proc: Process, sig: int = signal.SIGKILL) -> None:
        if proc.popen.poll() is None:
            os.kill(proc.pid, sig)

    def close(self) -> None:
        """Stop (by PID) and reap every process still running."""
        for proc in self.processes:
            if proc.popen.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
        for proc in self.processes:
            try:
                proc.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self._dir.cleanup()

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
