"""What the membership needs of the hub it serves: the interface, not ``ClusterHub``.

``Membership`` (``timely.rescaling.membership``, with ``Rollbacks``,
``timely.rescaling.rollback``) keeps who is in the cluster for one process; the hub
(``timely.communication.cluster.hub``) keeps the sockets, builds the membership and
hands itself over. The layers point one way: the hub imports the membership, and the
membership knows the hub only as a ``MembershipHub`` and its connections only as
``MemberConnection``s, which the hub and ``Connection`` implement as they are (no
registration: ``typing.Protocol``, structural).

- ``MembershipHub``: the hub's shape (process and worker numbering, the timeout, the
  connections, the local workers' wake-ups, failing and stopping, the Kafka progress
  and checkpoint registries a rollback restarts);
- ``MemberConnection``: a connection's (its peer, whether that peer is still joining,
  sending a control frame, goodbye and close).

Costs: none at run time; the protocols are only types.
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Mapping, Optional, Protocol


class MemberConnection(Protocol):
    """A connection to one peer process, as the membership uses it."""

    #: the peer's process index
    process: int
    #: the peer is a joiner that has not finished joining (the membership clears it)
    joining: bool

    def send_frame(self, channel: int, source: int, first: int, last: int, seq: int, obj: Any) -> None: ...

    def flush(self, timeout: float) -> bool: ...

    def goodbye(self) -> None: ...

    def close(self) -> None: ...


class MembershipHub(Protocol):
    """One process's hub, as its membership uses it (``ClusterHub`` implements it)."""

    process: int
    #: local workers, the first one's index, and workers per process in the cluster
    workers: int
    first_index: int
    workers_per_process: int
    #: this process joins a running cluster (and has not finished joining)
    joining: bool
    timeout: float
    #: the job's ``Config`` (``address_of``)
    config: Any
    #: per local worker: its event queue and its wake-up
    events: list[deque]
    wakes: list[threading.Event]
    abort: threading.Event
    error: Optional[BaseException]
    #: ``KafkaProgress`` in Kafka progress mode, else None (``subscribe``, ``departed``,
    #: ``final_positions``)
    kafka: Any
    #: the process's checkpoint ``Registry`` (``redecide``, ``install``)
    checkpoints: Any

    @property
    def connections(self) -> Mapping[int, MemberConnection]: ...

    @property
    def stopping(self) -> bool: ...

    def forget(self, conn: Any) -> None: ...

    def fail(self, error: BaseException) -> None: ...

    def kill(self) -> None: ...

    def restart_progress(self, round_: int, workers: list[int]) -> None: ...
