"""A worker's allocator in cluster mode: channels to local threads and to other processes.

``ClusterAllocator.allocate`` gives a worker, per channel, one pusher per worker of the
cluster: a deque for a worker of this process (``timely.communication.thread``), a frame
on the connection for a worker of another process (``_RemotePusher``).
``allocate_broadcast`` (progress batches) has one pusher per remote process instead: one
frame that the receiving hub hands to all its workers (``_ProcessPusher``); in Kafka
progress mode, the worker's progress log (its step's record, appended by
``flush_sends``) and this process's workers, directly. A process that joins is
back-filled into every channel allocated so far (``add_process``); one that is gone gets
pushers that drop what they are given (``_DeadPusher``, ``remove_process``): nothing was
routed to it.

With exchange credit on (``Config.exchange_credit``), a push to a remote worker counts
its bytes in the channel's window (``_CreditedPusher``), and every data puller
acknowledges what it consumed of such frames (``timely.communication.credit``).

Costs: ``allocate`` builds O(workers of the cluster) pushers, once per channel. A push
to a remote worker is one msgpack encoding and one queued frame (and two integer
updates, with credit); a progress batch is encoded once per remote process, whatever
its number of workers. ``add_process`` and
``remove_process`` are O(channels x workers per process).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ..codec import encode_frame
from ..credit import CREDITED, Credit, CreditedPuller, acknowledgements
from ..errors import ClusterError
from ..thread import LocalPusher, QueuePuller, ThreadAllocator, ThreadPusher
from .connection import CONTROL, Connection

if TYPE_CHECKING:
    from ...rescaling.messages import RescaleMessage
    from .hub import ClusterHub


class _RemotePusher:
    """Sends to one worker of another process."""

    __slots__ = ("_conn", "_channel", "_source", "_target")

    def __init__(self, conn: Connection, channel: int, source: int, target: int) -> None:
        self._conn, self._channel, self._source, self._target = conn, channel, source, target

    def push(self, message: Any) -> None:
        # written by the worker at the end of its step (ClusterAllocator.flush_sends)
        self._conn.defer(encode_frame(self._channel, self._source, self._target, self._target, 0, message))


class _CreditedPusher(_RemotePusher):
    """Sends to one worker of another process, counting the bytes in its credit window."""

    __slots__ = ("_credit", "_window")

    def __init__(self, conn: Connection, channel: int, source: int, target: int, credit: Credit) -> None:
        super().__init__(conn, channel, source, target)
        self._credit = credit
        self._window = credit.window(channel, source, target)

    def push(self, message: Any) -> None:
        frame = encode_frame(self._channel, self._source, self._target, self._target, CREDITED, message)
        self._conn.defer(frame)
        self._credit.sent(self._window, len(frame))


class _ProcessPusher:
    """Sends once to every worker of another process (progress batches)."""

    __slots__ = ("_conn", "_channel", "_source", "_first", "_last")

    def __init__(self, conn: Connection, channel: int, source: int, first: int, last: int) -> None:
        self._conn, self._channel, self._source, self._first, self._last = conn, channel, source, first, last

    def push(self, message: Any) -> None:
        frame = encode_frame(self._channel, self._source, self._first, self._last, 0, message)
        conn = self._conn
        conn.progress_frames += 1
        conn.progress_bytes += len(frame)
        conn.defer(frame)


class _DeadPusher:
    """Stands for a worker that is gone (a joiner lost mid-join): nothing was routed to it."""

    __slots__ = ()

    def push(self, message: Any) -> None:
        pass


class ClusterAllocator(ThreadAllocator):
    """A worker's allocator in cluster mode: local threads plus remote processes."""

    def __init__(self, hub: ClusterHub, local: int) -> None:
        super().__init__(hub, local)
        self.hub: ClusterHub = hub
        self.peers = hub.processes * hub.workers_per_process
        self._per_worker: dict[int, list] = {}     # channel -> pushers per global worker
        self._per_process: dict[int, list] = {}    # channel -> pushers per process/local worker
        self._processes = list(range(hub.processes))
        self._gone: set[int] = set()           # processes whose places hold dead pushers
        limit = hub.config.exchange_credit
        #: this worker's windows to workers of other processes (None: no credit)
        self.credit: Optional[Credit] = Credit(limit, hub.windows) if limit else None
        self._consumed: list = []               # pullers with something to acknowledge

    def flush_sends(self) -> None:
        """Write what this process's workers queued for other processes (the end of a
        step, and before parking): the step's acknowledgements of credit first, in Kafka
        progress mode this worker's progress record, then one ``sendall`` per connection
        with frames queued."""
        if self._consumed:
            self._acknowledge()
        kafka = self.hub.kafka
        if kafka is not None:
            kafka.flush(self.index)
        for conn in list(self.hub.connections.values()):
            if conn.has_queued:
                conn.write_queued()

    def _acknowledge(self) -> None:
        """Tell each sending process what this worker's inputs consumed of its frames."""
        for process, entries in acknowledgements(self._consumed, self.index, self.hub.workers_per_process).items():
            conn = self._remote(process)
            if conn is not None:
                conn.defer(encode_frame(CONTROL, self.index, 0, 0, 0, ("credit", entries)))

    def _remote(self, process: int) -> Optional[Connection]:
        return self.hub.connections.get(process)

    def _worker_pushers(self, channel: int, process: int) -> list:
        w = self.hub.workers_per_process
        if process == self.hub.process:
            queues = self.hub.queues(channel)
            return [LocalPusher(q, self._events, channel) if i == self.local else
                    ThreadPusher(q, self.hub.events[i], self.hub.wakes[i], channel)
                    for i, q in enumerate(queues)]
        conn = self._remote(process)
        if conn is None:
            return [_DeadPusher() for _ in range(w)]
        if self.credit is not None:
            return [_CreditedPusher(conn, channel, self.index, process * w + i, self.credit) for i in range(w)]
        return [_RemotePusher(conn, channel, self.index, process * w + i) for i in range(w)]

    def allocate(self, channel: int) -> tuple[list, QueuePuller]:
        """Pushers to every worker of the cluster; this worker's puller, which
        acknowledges what it consumed of credited frames (whatever this process's own
        setting: its senders' decides)."""
        pushers: list = []
        for process in self._processes:
            pushers.extend(self._worker_pushers(channel, process))
        self._per_worker[channel] = pushers
        return pushers, CreditedPuller(self.hub.queues(channel)[self.local], channel,
                                       self.hub.ledger(channel, self.local), self._consumed)

    def allocate_broadcast(self, channel: int) -> tuple[list, QueuePuller]:
        """Pushers that reach every worker, one per remote process (progress batches);
        in Kafka progress mode, the worker's progress log and this process's workers."""
        if self.hub.kafka is not None:
            pushers = self.hub.kafka.pushers(channel) + self._worker_pushers(channel, self.hub.process)
            return pushers, QueuePuller(self.hub.queues(channel)[self.local])
        pushers: list = []
        for process in self._processes:
            pushers.extend(self._broadcast_pushers(channel, process))
        self._per_process[channel] = pushers
        return pushers, QueuePuller(self.hub.queues(channel)[self.local])

    def _broadcast_pushers(self, channel: int, process: int) -> list:
        w = self.hub.workers_per_process
        if process == self.hub.process:
            return self._worker_pushers(channel, process)
        conn = self._remote(process)
        if conn is None:
            return [_DeadPusher()]
        return [_ProcessPusher(conn, channel, self.index, process * w, process * w + w - 1)]

    def add_process(self, process: int) -> dict[int, list]:
        """Back-fill every channel allocated so far with pushers to ``process`` (in the
        places of a process that had gone, if it comes back: a replacement after a crash);
        returns, per broadcast channel, the pushers added (the progcasters' new links)."""
        returning = process in self._gone
        if process in self._processes and not returning:
            return {}
        w = self.hub.workers_per_process
        if returning:
            self._gone.discard(process)
        else:
            self._processes.append(process)
            self.peers = max(self.peers, (process + 1) * w)
        for channel, pushers in self._per_worker.items():
            new = self._worker_pushers(channel, process)
            if returning:
                pushers[process * w:process * w + w] = new
            else:
                pushers.extend(new)
        added = {}
        for channel, pushers in self._per_process.items():
            new = self._broadcast_pushers(channel, process)
            if returning:
                at = sum(w if p == self.hub.process else 1 for p in self._processes[:self._processes.index(process)])
                pushers[at:at + 1] = new
            else:
                pushers.extend(new)
            added[channel] = new
        return added

    def processes(self) -> list[int]:
        """The processes this worker has places for in its channels (live or not)."""
        return list(self._processes)

    def remove_process(self, process: int) -> None:
        """Forget a process that is gone (a joiner lost before it finished joining, one
        that left, one that died): its places in every channel hold dead pushers."""
        self._gone.add(process)
        w = self.hub.workers_per_process
        if self.credit is not None:         # nothing more will be acknowledged from there
            self.credit.forget(lambda window: window.target // w == process)
        for channel, pushers in self._per_worker.items():
            for g in range(process * w, process * w + w):
                if g < len(pushers):
                    pushers[g] = _DeadPusher()
        for channel, pushers in self._per_process.items():
            for i, p in enumerate(pushers):
                if isinstance(p, _ProcessPusher) and p._first == process * w:
                    pushers[i] = _DeadPusher()

    def control_send(self, process: int, first: int, last: int, payload: Any) -> None:
        conn = self._remote(process)
        if conn is None:
            raise ClusterError(f"no connection to process {process}")
        kafka = self.hub.kafka
        if kafka is not None:       # the progress this worker sent first goes first (grants)
            kafka.flush(self.index)
        conn.send_frame(CONTROL, self.index, first, last, 0, payload)

    def control_puller(self) -> QueuePuller:
        return QueuePuller(self.hub.queues(CONTROL)[self.local])

    def rescales(self) -> list[RescaleMessage]:
        pending = self.hub.membership.rescales[self.local]
        out = []
        while pending:
            out.append(pending.popleft())
        return out
