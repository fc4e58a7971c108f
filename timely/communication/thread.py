"""Channels between worker threads of one process.

A ``ProcessHub`` owns, for every channel, one deque per receiving worker; all senders
append to it (``deque.append`` is atomic under the GIL), so per-sender FIFO order holds
and nothing is copied or serialized. Pushing to another worker also records the channel
in that worker's event deque (and wakes it, when it is another thread). Costs: push O(1), pull O(1).

>>> hub = ProcessHub(2)
>>> a, b = hub.allocator(0), hub.allocator(1)
>>> (pushers_a, _), (_, puller_b) = a.allocate(0), b.allocate(0)
>>> pushers_a[1].push("hello"); puller_b.drain(), b.events()
(['hello'], [0])
"""
from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable


class LocalPusher:
    """Push to this worker's own queue: an event, but no wake-up."""

    __slots__ = ("_queue", "_events", "_channel")

    def __init__(self, queue: deque, events: deque, channel: int) -> None:
        self._queue = queue
        self._events = events
        self._channel = channel

    def push(self, message: Any) -> None:
        self._queue.append(message)
        self._events.append(self._channel)


class ThreadPusher:
    """Push to another worker thread's queue, and tell that worker."""

    __slots__ = ("_queue", "_events", "_wake", "_channel")

    def __init__(self, queue: deque, events: deque, wake: threading.Event, channel: int) -> None:
        self._queue = queue
        self._events = events
        self._wake = wake
        self._channel = channel

    def push(self, message: Any) -> None:
        self._queue.append(message)
        self._events.append(self._channel)
        self._wake.set()


class QueuePuller:
    __slots__ = ("_queue",)

    def __init__(self, queue: deque) -> None:
        self._queue = queue

    def pull(self) -> Any:
        try:
            return self._queue.popleft()
        except IndexError:
            return None

    def drain(self) -> list[Any]:
        q = self._queue
        out = []
        pop = q.popleft
        while q:
            out.append(pop())
        return out

    def __len__(self) -> int:
        return len(self._queue)


class ProcessHub:
    """The shared state of ``workers`` threads: queues per channel, events, wake-ups."""

    def __init__(self, workers: int, first_index: int = 0) -> None:
        self.workers = workers
        self.first_index = first_index
        self._queues: dict[int, list[deque]] = {}
        self._lock = threading.Lock()
        self._agreed: dict[str, Any] = {}
        self._agree_lock = threading.Lock()
        self.events = [deque() for _ in range(workers)]
        self.wakes = [threading.Event() for _ in range(workers)]
        self.abort = threading.Event()
        self.error: BaseException | None = None
        self.kafka = None           # KafkaProgress, in Kafka progress mode
        #: a ProgressTrace (``--progress-trace``), set by whoever starts the workers
        self.trace: Any = None
        #: checkpoint stores and the incarnation the workers agree on (a
        #: timely.checkpoint.registry.Registry, set by whoever starts the workers)
        self.checkpoints: Any = None

    def close_clients(self) -> None:
        """Close what this process opened outside the dataflows: the Kafka progress
        transport and the checkpoint stores (each flushes what it still holds, bounded),
        and write the progress trace, if one was kept."""
        if self.kafka is not None:
            self.kafka.close()
        if self.checkpoints is not None:
            self.checkpoints.close()
        if self.trace is not None:
            self.trace.dump()

    def agree(self, key: str, decide: Callable[[], Any]) -> Any:
        """One value for ``key`` for every worker of the computation: decided here, once
        (a cluster decides on its lowest process and tells the others)."""
        with self._agree_lock:
            found = self._agreed.get(key)
            if found is None:
                found = self._agreed[key] = decide()
            return found

    def fail(self, error: BaseException) -> None:
        """Stop every worker of this process with ``error`` (fail-stop)."""
        if self.error is None:
            self.error = error
        self.abort.set()
        for wake in self.wakes:
            wake.set()

    def queues(self, channel: int) -> list[deque]:
        with self._lock:
            found = self._queues.get(channel)
            if found is None:
                found = self._queues[channel] = [deque() for _ in range(self.workers)]
            return found

    def allocator(self, local: int) -> "ThreadAllocator":
        return ThreadAllocator(self, local)


class ThreadAllocator:
    """The Allocator of one worker thread (see timely.communication.allocator)."""

    def __init__(self, hub: ProcessHub, local: int) -> None:
        self.hub = hub
        self.local = local
        self.index = hub.first_index + local
        self.peers = hub.workers
        self._events = hub.events[local]
        self._wake = hub.wakes[local]

    def allocate(self, channel: int) -> tuple[list, QueuePuller]:
        queues = self.hub.queues(channel)
        pushers: list = []
        for w, q in enumerate(queues):
            if w == self.local:
                pushers.append(LocalPusher(q, self._events, channel))
            else:
                pushers.append(ThreadPusher(q, self.hub.events[w], self.hub.wakes[w], channel))
        return pushers, QueuePuller(queues[self.local])

    def allocate_broadcast(self, channel: int) -> tuple[list, QueuePuller]:
        """Pushers reaching every worker: one per worker thread (with the Kafka log's
        first, in Kafka progress mode)."""
        pushers, puller = self.allocate(channel)
        if self.hub.kafka is not None:
            pushers = self.hub.kafka.pushers(channel) + pushers
        return pushers, puller

    def allocate_local(self, channel: int) -> tuple[LocalPusher, QueuePuller]:
        """A channel from this worker to itself only (a pipeline): no other worker sees it."""
        queue: deque = deque()
        return LocalPusher(queue, self._events, channel), QueuePuller(queue)

    def events(self) -> list[int]:
        ev = self._events
        out = []
        pop = ev.popleft
        while ev:
            out.append(pop())
        return out

    def has_events(self) -> bool:
        return bool(self._events)

    def flush_sends(self) -> None:
        """Write what waits to be sent to other processes: in Kafka progress mode, the
        step's progress record; nothing else within one process (see
        ``ClusterAllocator``)."""
        kafka = self.hub.kafka
        if kafka is not None:
            kafka.flush(self.index)

    def await_events(self, timeout: float | None) -> None:
        self.flush_sends()
        if self._events:
            return
        wake = self._wake
        wake.clear()
        if not self._events:      # re-check: a push may have landed before the clear
            wake.wait(timeout)

    def wake(self) -> None:
        self._wake.set()
