"""Where checkpoints live: the store interface, and the local-directory store (SQLite).

A store holds the records of ``timely.checkpoint.records`` for one namespace (a job's
dataflow). Every process of the job opens it; each worker writes through its own
``Writer``, asynchronously: ``write`` encodes the record at once (the state may change
right after) and returns a ticket, and the record is durable once ``durable(ticket)``
says so. Readers see every record written before they read, in write order per writer.

``DirStore`` (``--checkpoint dir:PATH``) keeps a namespace in ``PATH/NAMESPACE.sqlite``,
in WAL mode, so the processes of a job on one machine (or a shared file system) write
it side by side and a record survives the process that wrote it (SIGKILL included). A
thread per process writes, one transaction per batch of records: ``write`` costs an
encode and a queue append; durability follows within a transaction's time.
``timely.checkpoint.kafka_store.KafkaStore`` keeps the same records in Kafka topics.

>>> import tempfile
>>> from timely.checkpoint.records import Commit, Incarnation
>>> with tempfile.TemporaryDirectory() as d:
...     store = DirStore(d, "job")
...     store.start(Incarnation("a", 1, None, None, (0,)))
...     w = store.writer(0, "a")
...     ticket = w.write(Commit("a", 3, 0))
...     w.flush(10)
...     r = store.read()
...     store.close()
True
>>> [i.id for i in r.incarnations], [c.label for c in r.commits]
(['a'], [3])
"""
from __future__ import annotations

import os
import queue
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional, Protocol

from .records import CheckpointError, Commit, Entry, Incarnation, decode, encode, entry_head


@dataclass
class Contents:
    """What a read of a store found: every incarnation (write order) and commit, and
    the entries of the incarnations asked for that ``want(op, bin)`` accepts."""
    incarnations: list = field(default_factory=list)
    commits: list = field(default_factory=list)
    entries: list = field(default_factory=list)


class Writer(Protocol):
    def write(self, record: Any) -> int:
        """Encode ``record`` now and send it; returns its ticket."""
        ...

    def durable(self, ticket: int) -> bool:
        """Every record up to ``ticket`` is durable (raises the store's error if a
        write failed)."""
        ...

    def hold(self) -> Any:
        """A context: the records written inside go to the store together when it
        exits (a checkpoint's entries in one request where the store pays per request)."""
        ...

    def flush(self, timeout: float) -> bool:
        """Wait until every record written so far is durable; whether it was."""
        ...


class Store(Protocol):
    namespace: str

    def start(self, incarnation: Incarnation) -> None:
        """Write an incarnation record and wait until it is durable."""
        ...

    def read(self, incs: Optional[Iterable[str]] = None,
             want: Optional[Callable[[str, int], bool]] = None, heads: bool = False) -> Contents:
        """Every incarnation and commit; the entries of ``incs`` (None: none) that
        ``want(op, bin)`` accepts (None: all), as ``EntryHead``s if ``heads`` (their
        keys not decoded)."""
        ...

    def writer(self, worker: int, inc: str) -> Writer:
        ...

    def forget(self, keep: set, obsolete: Callable[[Entry], bool]) -> int:
        """Delete what a restore can no longer need: every incarnation not in ``keep``
        and the entries whose head (``EntryHead``: inc, op, bin, label, kind)
        ``obsolete`` accepts; returns how many records went."""
        ...

    def close(self) -> None:
        ...


class _Tickets:
    """Tickets of one writer: issued in order, made durable in any order."""

    def __init__(self) -> None:
        self.issued = 0
        self._open: set[int] = set()
        self._lock = threading.Lock()
        self.error: Optional[BaseException] = None

    def issue(self) -> int:
        with self._lock:
            self.issued += 1
            self._open.add(self.issued)
            return self.issued

    def done(self, ticket: int) -> None:
        with self._lock:
            self._open.discard(ticket)

    def fail(self, error: BaseException) -> None:
        self.error = error

    def durable(self, ticket: int) -> bool:
        if self.error is not None:
            raise self.error
        with self._lock:
            return not self._open or min(self._open) > ticket

    def all_durable(self) -> bool:
        return self.durable(self.issued)


def wait_durable(tickets: _Tickets, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not tickets.all_durable():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL, inc TEXT NOT NULL, worker INTEGER, op TEXT, bin INTEGER, label INTEGER,
    data BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS records_by_inc ON records (inc, kind);
"""


class TicketWriter:
    """What every store's writer shares: its tickets, ``durable`` and ``flush``."""

    def __init__(self, worker: int, inc: str) -> None:
        self.worker = worker
        self.inc = inc
        self.tickets = _Tickets()
        self.bytes = 0                 # encoded bytes written (instruments)
        self._held = 0                 # depth of ``hold`` contexts open

    def durable(self, ticket: int) -> bool:
        return self.tickets.durable(ticket)

    @contextmanager
    def hold(self) -> Iterator[None]:
        """See ``Writer.hold``; reentrant."""
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            if not self._held:
                self._release()

    def _release(self) -> None:
        """Send what ``hold`` kept back (a store whose writing thread batches keeps nothing)."""

    def flush(self, timeout: float) -> bool:
        return wait_durable(self.tickets, timeout)


class _DirWriter(TicketWriter):
    def __init__(self, store: "DirStore", worker: int, inc: str) -> None:
        super().__init__(worker, inc)
        self._store = store

    def write(self, record: Any) -> int:
        ticket = self.tickets.issue()
        row = _row(record)
        self.bytes += len(row[-1])
        self._store._queue.put((self.tickets, ticket, row))
        return ticket


def _row(record: Any) -> tuple:
    data = encode(record)
    if isinstance(record, Entry):
        return ("E", record.inc, record.writer, record.op, record.bin, record.label, data)
    if isinstance(record, Commit):
        return ("C", record.inc, record.worker, None, None, record.label, data)
    if isinstance(record, Incarnation):
        return ("I", record.id, None, None, None, record.start, data)
    raise TypeError(f"not a checkpoint record: {record!r}")


class DirStore:
    """A namespace's checkpoints in ``directory/namespace.sqlite`` (see the module)."""

    def __init__(self, directory: str, namespace: str) -> None:
        self.namespace = namespace
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise CheckpointError(f"cannot create the checkpoint directory {directory!r}: {e}") from None
        self.path = os.path.join(directory, f"{namespace}.sqlite")
        self._db = self._connect()
        self._db.executescript(_SCHEMA)
        self._queue: "queue.SimpleQueue[Optional[tuple]]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._write_loop, daemon=True, name="timely-checkpoint-dir")
        self._thread.start()

    def _connect(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            return db
        except sqlite3.Error as e:
            raise CheckpointError(f"cannot open the checkpoint store {self.path!r}: {e}") from None

    def _write_loop(self) -> None:
        db = self._connect()
        while True:
            item = self._queue.get()
            if item is None:
                db.close()
                return
            batch = [item]
            while len(batch) < 1024:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                batch.append(more)
            try:
                db.execute("BEGIN IMMEDIATE")
                db.executemany("INSERT INTO records (kind, inc, worker, op, bin, label, data) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?)", [row for _, _, row in batch])
                db.execute("COMMIT")
            except sqlite3.Error as e:
                error = CheckpointError(f"writing checkpoints to {self.path!r}: {e}")
                for tickets, _, _ in batch:
                    tickets.fail(error)
                continue
            for tickets, ticket, _ in batch:
                tickets.done(ticket)

    def start(self, incarnation: Incarnation) -> None:
        w = _DirWriter(self, -1, incarnation.id)
        w.write(incarnation)
        if not w.flush(60):
            raise CheckpointError(f"the incarnation record of {self.namespace!r} was not written "
                                  f"to {self.path!r} within 60 s")

    def writer(self, worker: int, inc: str) -> _DirWriter:
        return _DirWriter(self, worker, inc)

    def read(self, incs: Optional[Iterable[str]] = None,
             want: Optional[Callable[[str, int], bool]] = None, heads: bool = False) -> Contents:
        out = Contents()
        decoded = entry_head if heads else decode
        where = f"{self.path}, row"
        rows = self._db.execute("SELECT seq, kind, op, bin, data FROM records WHERE kind != 'E' ORDER BY seq")
        for seq, kind, _, _, data in rows:
            record = decode(data, f"{where} {seq}")
            (out.incarnations if kind == "I" else out.commits).append(record)
        for inc in list(incs or ()):
            rows = self._db.execute("SELECT seq, op, bin, data FROM records WHERE inc = ? AND kind = 'E' "
                                    "ORDER BY seq", (inc,))
            for seq, op, b, data in rows:
                if want is None or want(op, b):
                    out.entries.append(decoded(data, f"{where} {seq}"))
        return out

    def forget(self, keep: set, obsolete: Callable[[Entry], bool]) -> int:
        gone = 0
        with self._db:
            marks = ",".join("?" * len(keep))
            cur = self._db.execute(f"DELETE FROM records WHERE inc NOT IN ({marks})", tuple(keep))
            gone += cur.rowcount
            doomed = [seq for seq, data in self._db.execute(
                f"SELECT seq, data FROM records WHERE kind = 'E' AND inc IN ({marks})", tuple(keep))
                if obsolete(entry_head(data, f"{self.path}, row {seq}"))]
            for i in range(0, len(doomed), 500):
                chunk = doomed[i:i + 500]
                self._db.execute(f"DELETE FROM records WHERE seq IN ({','.join('?' * len(chunk))})", chunk)
            gone += len(doomed)
        return gone

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(10)
        self._db.close()
