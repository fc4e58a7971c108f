"""The Allocator interface: how a worker gets channels to its peers.

``allocate(channel)`` returns one ``Pusher`` per worker (indexed by worker, including
this one) and this worker's ``Puller``: messages pushed by one sender to one receiver
arrive in order (FIFO per pair), and messages from different senders interleave.
Every worker allocates the same channels in the same order, so a channel is named by
the number of channels allocated before it. Pushing to another worker records the
channel in that worker's ``events``, which the worker turns into operator activations.

Implementations: ``ThreadAllocator`` (workers as threads of one process, messages are
Python objects handed over through deques: no copying, no serialization); the cluster
allocator (processes over TCP) implements the same interface.
"""
from __future__ import annotations

from typing import Any, Protocol


class Pusher(Protocol):
    def push(self, message: Any) -> None:
        """Send ``message``; O(1)."""
        ...


class Puller(Protocol):
    def pull(self) -> Any:
        """The next message, or None when there is none yet."""
        ...

    def drain(self) -> list[Any]:
        """Every message received so far, in order per sender."""
        ...


class Allocator(Protocol):
    index: int
    peers: int

    def allocate(self, channel: int) -> tuple[list[Pusher], Puller]:
        ...

    def events(self) -> list[int]:
        """Channels that received messages since last asked."""
        ...

    def await_events(self, timeout: float | None) -> None:
        """Block until a message arrives for this worker, or ``timeout`` passes (after
        ``flush_sends``)."""
        ...

    def flush_sends(self) -> None:
        """Send what this worker's pushes left queued (the worker calls it at the end of
        every step: a push to another process may wait until then)."""
        ...
