"""Cluster mode: worker threads in several processes, connected over TCP.

One TCP connection per pair of processes, each with a send thread and a receive thread
(as in timely), authenticated by a mutual HMAC challenge on the cluster secret. A
message to a remote worker is one frame on the connection to its process, written by
the worker itself when its step ends (the send thread writes control frames and
heartbeats); a progress
batch crosses each process boundary once, whatever the number of remote workers. A
peer that dies, goes silent past ``Config.timeout`` or breaks the protocol stops every
worker of this process with a ``ClusterError`` naming it (fail-stop).

The modules, from the wire up:

- ``connection``: the wire framing (``CONTROL``, the hello), ``handshake``, and
  ``Connection`` with its send and receive threads;
- ``hub``: ``ClusterHub``, this process's side of the cluster: listening, connecting,
  admitting, delivering frames, detecting failures, shutdown;
- ``allocator``: ``ClusterAllocator``, a worker's channels to local threads and to
  other processes;
- ``start``: ``execute_cluster``, one process from start to end, and ``secret_from``;
- ``forked``: ``execute_forked``, ``-w N`` on one machine as a loopback cluster of N
  forked processes (``workers_as_processes`` says when).

Who is in the cluster, and how processes join and leave it, is the hub's
``membership`` (``timely.rescaling.membership``); ``ClusterError`` is in
``timely.communication.errors``. Each module states its costs; importing this package
only gathers the names below.
"""
from ..errors import ClusterError
from .allocator import ClusterAllocator
from .connection import CONTROL, Connection, handshake
from .hub import ClusterHub
from .start import execute_cluster, secret_from
from .forked import execute_forked, workers_as_processes

__all__ = ["CONTROL", "ClusterAllocator", "ClusterError", "ClusterHub", "Connection", "execute_cluster",
           "execute_forked", "handshake", "secret_from", "workers_as_processes"]
