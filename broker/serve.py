"""python -m broker serve [--port P]: a Kafka broker in the foreground, for trying pytimely out.

Starts Tansu (``broker.tansu.TansuBroker``: in-memory storage, 127.0.0.1 only), prints
one line with its address once it listens, and runs until Ctrl-C (SIGINT) or SIGTERM,
which stop the Tansu process by its PID and exit 0. Everything written to it is lost
when it stops. A busy port, or Tansu dying on its own, is an error (exit 2) that says
so. The broker starts in well under a second and holds ~30 MiB when fresh, more as
topics fill (FACTS.md); this process only waits on it.
"""
from __future__ import annotations

import argparse
import signal
import sys
from typing import TextIO

from .tansu import PortBusy, TansuBroker

DEFAULT_PORT = 9092


class _Stop(Exception):
    """SIGTERM arrived."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Stop


def serve(port: int = DEFAULT_PORT, out: TextIO = sys.stdout) -> int:
    """Run a broker on 127.0.0.1:``port`` until SIGINT or SIGTERM; returns the exit status
    (0 when stopped by a signal; 2, with the reason on stderr, when it cannot start or
    dies on its own)."""
    try:
        broker = TansuBroker()
    except RuntimeError as exc:
        print(f"broker: {exc}", file=sys.stderr)
        return 2
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        try:
            broker.start(port)
        except PortBusy as exc:
            print(f"broker: {exc}: stop whatever holds it, or choose another port with --port",
                  file=sys.stderr)
            return 2
        except RuntimeError as exc:
            print(f"broker: cannot serve on 127.0.0.1:{port}: {exc}", file=sys.stderr)
            return 2
        print(f"broker: serving Kafka at {broker.bootstrap} (in memory: everything is lost "
              f"when it stops; Ctrl-C stops it)", file=out, flush=True)
        code = broker.proc.wait()
        print(f"broker: Tansu (pid {broker.proc.pid}) exited by itself with status {code}",
              file=sys.stderr)
        return 2
    except (KeyboardInterrupt, _Stop):
        broker.stop()
        print("broker: stopped", file=out, flush=True)
        return 0
    finally:
        broker.stop()                       # by PID; a no-op once stopped
        signal.signal(signal.SIGTERM, previous)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """The ``serve`` subcommand's arguments, for ``python -m broker``."""
    p = sub.add_parser("serve", help="run a Kafka broker (Tansu, in memory) on 127.0.0.1 until Ctrl-C",
                       description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"the port to listen on (default {DEFAULT_PORT})")
