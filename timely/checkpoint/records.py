"""What a checkpoint store holds, how it is encoded, and how a restore point is found.

A store keeps three kinds of record, written by the workers of a job (see the package
docstring for when):

- ``Incarnation(id, seq, parent, start, members)``: one life of the job. A fresh job is
  incarnation 1 with no parent; a restart or a crash recovery starts a new one from
  ``(parent, start)``, the parent's restore point, and its first checkpoint writes a
  base of every bin, so each incarnation is self-contained once it has one complete
  commit.
- ``Entry(inc, op, bin, label, kind, writer, seq, part, parts, items, deleted,
  pending)``: one bin of one stateful operator, written by worker ``writer`` (``seq``
  numbers that worker's entries of that operator). ``label`` is the least time the state is valid for: the bin
  as it was after every record before ``label`` (and before any later one) was applied.
  ``kind`` is ``"base"`` (the whole bin: ``items`` is every key) or ``"delta"`` (the keys
  changed since the bin's previous entry, ``deleted`` the keys removed); ``pending`` is
  the bin's scheduled notifications, whole. A large bin is cut into ``parts`` records.
- ``Commit(inc, label, worker, positions, sources, ops)``: written once the dataflow's
  frontier has passed ``label`` at the commit operator: every worker's entries up to
  ``label`` are durable and the results of the epochs before it are written. It names
  the source positions (``(topic, partition) -> offset``, where the epochs from
  ``label`` on begin) of the partitions this worker read, every source topic's
  partition count, and the stateful operators with their bin counts. A label is
  *complete* once the commits at it cover every partition of every source.

Restore point: the latest incarnation (in write order) and its latest complete label
after its start; an incarnation with none restores its parent at its start. Restoring
a bin: its latest base at or before the label, then its deltas up to the label, in
label order. Every stored value carries a CRC-32, so a corrupt record is named, never
applied.

Costs: encoding an entry is one msgpack pack (O(keys written)); finding the restore
point O(commits); folding O(entries read).

>>> e = Entry("i1", "Count@(0, 3)", 7, 4, "base", 0, 0, 0, 1, [("a", 1)], [], [])
>>> decode(encode(e)) == e
True
>>> decode(encode(e)[:-1])
Traceback (most recent call last):
...
timely.checkpoint.records.CheckpointCorrupt: a checkpoint record fails its checksum (40 bytes)
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple, Optional

import msgpack

from ..communication.codec import packb


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or restored; the message names what and where."""


class CheckpointCorrupt(CheckpointError):
    """A stored record does not decode, or fails its checksum."""


class CheckpointMissing(CheckpointError):
    """A checkpoint that a commit vouches for is partial: a bin, a part or a source
    position it needs is not in the store."""


@dataclass(frozen=True)
class Incarnation:
    id: str
    seq: int
    parent: Optional[str]
    start: Optional[int]               # the parent's label this life restored from
    members: tuple = ()                # the workers that started it


@dataclass(frozen=True)
class Entry:
    inc: str
    op: str
    bin: int
    label: int
    kind: str                          # "base" | "delta"
    writer: int                        # the worker that wrote it ...
    seq: int                           # ... and its number among that worker's entries of ``op``
    part: int
    parts: int
    items: list
    deleted: list
    pending: list


@dataclass(frozen=True)
class Commit:
    inc: str
    label: int
    worker: int
    positions: dict = field(default_factory=dict)   # (topic, partition) -> offset
    sources: dict = field(default_factory=dict)     # topic -> partitions
    ops: dict = field(default_factory=dict)         # op -> bins


class PackedItems:
    """An entry's ``items`` packed already (``codec.pack_items``): ``count`` pairs as the
    msgpack bytes ``data``. ``encode`` puts the bytes into the record as they are; read
    back (iterated, compared, ``len``) they are the list of ``(key, value)`` pairs they
    stand for, as a decoded entry's ``items`` is.

    >>> from timely.communication.codec import pack_items
    >>> items = PackedItems(*pack_items({"a": 1, "b": 2}, ["a"])[:2])
    >>> items == [("a", 1)], len(items), dict(items)
    (True, 1, {'a': 1})
    """

    __slots__ = ("data", "count")

    def __init__(self, data: bytes, count: int) -> None:
        self.data = data
        self.count = count

    def pairs(self) -> list:
        return list(msgpack.unpackb(self.data, raw=False, use_list=False, strict_map_key=False))

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Any:
        return iter(self.pairs())

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, PackedItems):
            return self.data == other.data
        if isinstance(other, (list, tuple)):
            return self.pairs() == [tuple(p) for p in other]
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedItems({self.pairs()!r})"


_KINDS = {"I": Incarnation, "E": Entry, "C": Commit}
_TAGS = {cls: tag for tag, cls in _KINDS.items()}


def _wire(record: Any) -> tuple:
    if isinstance(record, Commit):
        return ("C", record.inc, record.label, record.worker,
                [(t, p, o) for (t, p), o in sorted(record.positions.items())],
                sorted(record.sources.items()), sorted(record.ops.items()))
    if isinstance(record, Entry):
        return ("E", record.inc, record.op, record.bin, record.label, record.kind, record.writer,
                record.seq, record.part, record.parts, record.items, record.deleted, record.pending)
    if isinstance(record, Incarnation):
        return ("I", record.id, record.seq, record.parent, record.start, list(record.members))
    raise TypeError(f"not a checkpoint record: {record!r}")


def _unwire(t: tuple) -> Any:
    tag = t[0]
    if tag == "C":
        return Commit(t[1], t[2], t[3], {(tp, p): o for tp, p, o in t[4]}, dict(t[5]), dict(t[6]))
    if tag == "E":
        return Entry(t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], list(t[10]), list(t[11]),
                     list(t[12]))
    if tag == "I":
        return Incarnation(t[1], t[2], t[3], t[4], tuple(t[5]))
    raise CheckpointCorrupt(f"unknown checkpoint record kind {tag!r}")


def encode(record: Any) -> bytes:
    """The record's bytes: msgpack (the wire codec's: compiled when built), then its
    CRC-32 (4 bytes, big-endian)."""
    if type(record) is Entry and type(record.items) is PackedItems:
        # the 13 fields' array, its items spliced in packed: the bytes packb(_wire()) gives
        r = record
        head = packb(("E", r.inc, r.op, r.bin, r.label, r.kind, r.writer, r.seq, r.part, r.parts))
        body = b"".join((b"\x9d", head[1:], r.items.data, packb(r.deleted), packb(r.pending)))
    else:
        body = packb(_wire(record))
    return body + zlib.crc32(body).to_bytes(4, "big")


def decode(data: bytes, where: str = "") -> Any:
    """The record ``encode`` made; ``CheckpointCorrupt`` (naming ``where``) if it fails
    its checksum or does not decode."""
    at = f" at {where}" if where else ""
    if len(data) < 5 or zlib.crc32(data[:-4]).to_bytes(4, "big") != data[-4:]:
        raise CheckpointCorrupt(f"a checkpoint record{at} fails its checksum ({len(data)} bytes)")
    try:
        wire = msgpack.unpackb(data[:-4], raw=False, use_list=False, strict_map_key=False)
        return _unwire(wire)
    except CheckpointCorrupt:
        raise
    except Exception as e:  # noqa: BLE001 - any decoding failure is a corrupt record
        raise CheckpointCorrupt(f"a checkpoint record{at} does not decode: {e}") from None


class EntryHead(NamedTuple):
    """What compaction reads of an entry: its life, its bin, its label, whether whole."""
    inc: str
    op: str
    bin: int
    label: int
    kind: str


def entry_head(data: bytes, where: str = "") -> EntryHead:
    """The head of the entry ``encode`` made (checksum checked), without decoding its
    keys: what deciding a compaction needs costs O(1), not O(keys).

    >>> e = Entry("i1", "Count@(0, 3)", 7, 4, "base", 0, 0, 0, 1, [("a", 1)] * 1000, [], [])
    >>> entry_head(encode(e))
    EntryHead(inc='i1', op='Count@(0, 3)', bin=7, label=4, kind='base')
    """
    at = f" at {where}" if where else ""
    if len(data) < 5 or zlib.crc32(data[:-4]).to_bytes(4, "big") != data[-4:]:
        raise CheckpointCorrupt(f"a checkpoint record{at} fails its checksum ({len(data)} bytes)")
    try:
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(data[:-4])
        unpacker.read_array_header()
        tag, inc, op, b, label, kind = (unpacker.unpack() for _ in range(6))
    except Exception as e:  # noqa: BLE001 - any decoding failure is a corrupt record
        raise CheckpointCorrupt(f"a checkpoint record{at} does not decode: {e}") from None
    if tag != "E":
        raise CheckpointCorrupt(f"the checkpoint record{at} is a {tag!r} record where an entry was expected")
    return EntryHead(inc, op, b, label, kind)


def complete_labels(commits: Iterable[Commit]) -> list[int]:
    """The labels whose commits cover every partition of every source (any commit
    makes a label complete for a dataflow without sources), ascending.

    >>> c = lambda w, pos: Commit("i", 5, w, pos, {"t": 2})
    >>> complete_labels([c(0, {("t", 0): 10})]), complete_labels([c(0, {("t", 0): 10}), c(1, {("t", 1): 7})])
    ([], [5])
    """
    by_label: dict[int, list[Commit]] = {}
    for c in commits:
        by_label.setdefault(c.label, []).append(c)
    done = []
    for label, cs in by_label.items():
        sources: dict = {}
        for c in cs:
            sources.update(c.sources)
        covered = {tp for c in cs for tp in c.positions}
        needed = {(t, p) for t, n in sources.items() for p in range(n)}
        if needed <= covered:
            done.append(label)
    return sorted(done)


@dataclass
class RestorePoint:
    """Where a new incarnation starts: ``inc`` at ``label``, with the commits there."""
    inc: Incarnation
    label: int
    commits: list

    def positions(self) -> dict:
        out: dict = {}
        for c in self.commits:
            out.update(c.positions)
        return out

    def ops(self) -> dict:
        out: dict = {}
        for c in self.commits:
            out.update(c.ops)
        return out


def restore_point(incarnations: list[Incarnation], commits: list[Commit]) -> Optional[RestorePoint]:
    """The restore point of a store (see the module docstring); None for a store that
    never completed a checkpoint (a fresh start). ``incarnations`` in write order.

    >>> i1, i2 = Incarnation("a", 1, None, None), Incarnation("b", 2, "a", 5)
    >>> commits = [Commit("a", 5, 0), Commit("a", 9, 0)]
    >>> p = restore_point([i1, i2], commits); (p.inc.id, p.label)
    ('a', 5)
    >>> p = restore_point([i1, i2], commits + [Commit("b", 7, 0)]); (p.inc.id, p.label)
    ('b', 7)
    """
    if not incarnations:
        return None
    by_id = {i.id: i for i in incarnations}
    per_inc: dict[str, list[Commit]] = {}
    for c in commits:
        per_inc.setdefault(c.inc, []).append(c)
    inc = incarnations[-1]
    floor: Optional[int] = None        # the label a child life restored this one at
    while True:
        mine = per_inc.get(inc.id, [])
        labels = complete_labels(mine)
        if floor is not None:
            if floor not in labels:
                raise CheckpointMissing(f"incarnation {inc.id} has no complete checkpoint at {floor}, "
                                        f"where a later life restored it from")
            label = floor
        else:
            later = [b for b in labels if inc.start is None or b > inc.start]
            label = max(later) if later else None
        if label is not None:
            return RestorePoint(inc, label, [c for c in mine if c.label == label])
        if inc.parent is None:
            return None
        parent = by_id.get(inc.parent)
        if parent is None:
            raise CheckpointMissing(f"incarnation {inc.id} restored from incarnation {inc.parent}, "
                                    f"which is not in the store")
        floor, inc = inc.start, parent


def fold_bin(entries: list[Entry], label: int, where: str) -> tuple[dict, dict]:
    """One bin as of ``label`` from its entries (any order; those after ``label`` are
    ignored): ``(state, pending)``. Raises ``CheckpointMissing`` if it has no base at or
    before ``label``, or a part of an entry it needs is missing.

    >>> E = lambda label, kind, items, deleted=(), pending=(): Entry(
    ...     "i", "op", 0, label, kind, 0, label, 0, 1, list(items), list(deleted), list(pending))
    >>> base, d3 = E(0, "base", [("a", 1), ("b", 2)]), E(3, "delta", [("a", 5)], ["b"], [(9, [(0, "x")])])
    >>> fold_bin([d3, base], 3, "bin 0"), fold_bin([d3, base], 2, "bin 0")
    (({'a': 5}, {9: [(0, 'x')]}), ({'a': 1, 'b': 2}, {}))
    >>> fold_bin([d3], 3, "bin 0")
    Traceback (most recent call last):
    ...
    timely.checkpoint.records.CheckpointMissing: bin 0: no base at or before 3 in the store
    """
    groups: dict[tuple, list[Entry]] = {}
    for e in entries:
        if e.label <= label:
            groups.setdefault((e.label, e.kind != "base", e.writer, e.seq), []).append(e)
    order = sorted(groups)
    last_base = max((i for i, key in enumerate(order) if not key[1]), default=None)
    if last_base is None:
        raise CheckpointMissing(f"{where}: no base at or before {label} in the store")
    state: dict = {}
    pending: dict = {}
    for key in order[last_base:]:
        parts = sorted({e.part: e for e in groups[key]}.values(), key=lambda e: e.part)  # a retry's duplicate
        if [p.part for p in parts] != list(range(parts[0].parts)):
            raise CheckpointMissing(f"{where}: the {'delta' if key[1] else 'base'} at {key[0]} has parts "
                                    f"{[p.part for p in parts]} of {parts[0].parts}")
        if not key[1]:
            state = {}
        for p in parts:
            state.update(p.items)
            for k in p.deleted:
                state.pop(k, None)
        pending = {t: [tuple(x) for x in rs] for t, rs in parts[0].pending}
    return state, pending
