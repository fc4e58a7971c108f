"""MemStore: the checkpoint store of the model, in memory, durable when the schedule says."""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Optional

from ...checkpoint.records import CheckpointError, Commit, Incarnation, decode, encode
from ...checkpoint.store import Contents, TicketWriter

NAMESPACE = "verify"      # the store namespace of every schedule


class MemWriter(TicketWriter):
    """One worker's writer: records wait in ``pending`` until the store acknowledges them."""

    def __init__(self, store: "MemStore", worker: int, inc: str) -> None:
        super().__init__(worker, inc)
        self.bytes = 0                       # encoded bytes written (BinLog's instruments read it)
        self.store = store
        self.pending: deque = deque()        # (ticket, bytes, record)
        self.dead = False

    def write(self, record: Any) -> int:
        if self.dead:
            raise CheckpointError(f"worker {self.worker} writes after it died")
        ticket = self.tickets.issue()
        data = encode(record)
        self.bytes += len(data)
        self.pending.append((ticket, data, record))
        return ticket

    def flush(self, timeout: float) -> bool:
        return self.tickets.all_durable()


class MemStore:
    """A checkpoint store in memory (``timely.checkpoint.store.Store``) whose durability
    the schedule decides. Durable records are decoded (the real codec) as they land."""

    namespace = NAMESPACE

    def __init__(self) -> None:
        self.incarnations: list = []
        self.commits: list = []
        self.entries: dict = {}              # inc -> [Entry], in durable order
        self.version = 0                     # records landed

    def _land(self, data: bytes) -> None:
        record = decode(data, f"{self.namespace} record {self.version}")
        self.version += 1
        if isinstance(record, Incarnation):
            self.incarnations.append(record)
        elif isinstance(record, Commit):
            self.commits.append(record)
        else:
            self.entries.setdefault(record.inc, []).append(record)

    def start(self, incarnation: Incarnation) -> None:
        self._land(encode(incarnation))

    def read(self, incs: Optional[Any] = None,
             want: Optional[Callable[[str, int], bool]] = None, heads: bool = False) -> Contents:
        # an Entry has every field an EntryHead has: heads asks for less, and gets it all
        out = Contents(list(self.incarnations), list(self.commits))
        for inc in list(incs or ()):
            out.entries.extend(e for e in self.entries.get(inc, ()) if want is None or want(e.op, e.bin))
        return out

    def writer(self, worker: int, inc: str) -> MemWriter:
        return MemWriter(self, worker, inc)

    def forget(self, keep: set, obsolete: Callable) -> int:
        """As ``DirStore.forget``: drop every record of the incarnations not in ``keep``,
        and the entries of those kept that ``obsolete`` accepts; returns how many went."""
        before = len(self.incarnations) + len(self.commits) + sum(map(len, self.entries.values()))
        self.incarnations = [i for i in self.incarnations if i.id in keep]
        self.commits = [c for c in self.commits if c.inc in keep]
        self.entries = {inc: [e for e in es if not obsolete(e)] for inc, es in self.entries.items() if inc in keep}
        return before - len(self.incarnations) - len(self.commits) - sum(map(len, self.entries.values()))

    def close(self) -> None:
        pass

    def ack(self, writer: MemWriter, n: int) -> list:
        """The first ``n`` pending records of ``writer`` become durable; returns them."""
        done = []
        for _ in range(min(n, len(writer.pending))):
            ticket, data, record = writer.pending.popleft()
            self._land(data)
            writer.tickets.done(ticket)
            done.append(record)
        return done

    def crash(self, writer: MemWriter, keep: int, late: int = 0) -> tuple:
        """``writer`` dies: its first ``keep`` pending records land, the next ``late`` stay
        pending (they land later, ``ack``), the rest are lost."""
        kept = len(self.ack(writer, keep))
        lost = max(0, len(writer.pending) - late)
        for _ in range(lost):
            writer.pending.pop()
        writer.dead = True
        return kept, lost
