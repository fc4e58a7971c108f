"""The epoch contract between Kafka writers and readers (Spark jobs, dataflows, anyone).

A data record carries its epoch in the header ``epoch`` (decimal ASCII). After all of an
epoch's records in a partition, its writer appends one epoch-end marker to that
partition: headers ``epoch`` and ``marker: epoch_end``, an empty value, and (from
pytimely's writers) ``offsets: "<first>-<end>"``, the offsets ``[first, end)`` that hold
the epoch's records in this partition. Epochs in a partition never go back.

A reader trusts markers, never the broker's end offsets: an epoch of a partition is
complete when its marker has been read, and only then are its records handed on. The
offset range makes replays harmless: records of an epoch that a crashed writer left
half-written (no marker), or that a retried writer wrote again, fall outside the range
of the marker that completes the epoch and are dropped (and counted). A record or marker
of an epoch already complete in its partition (the last one or any before it) is a late
copy and is dropped (and counted): a retried writer's, or a zombie's, a writer that was
replaced while paused and, resumed, sent what its client still held. An error there would
make the partition unreadable for good, to every reader. A record or marker of an epoch
before one still pending is the contract broken, and an ``EpochOrderError``.

Optional header ``rows: N``: the value is an array of N events, not one event (a writer
may pack events to go past the per-record cost of Kafka clients; see FACTS.md).

``PartitionEpochs`` is one partition's reader state: ``record`` is O(1) per record, a
marker costs O(records of its epoch). A reader may hand records on before their
marker (``early`` / ``hand_on``): the marker then returns only the rest, and lists in
``withdrawn`` the records handed on that it does not count. ``Format`` (de)serializes
values: ``json`` (the default: orjson encodes, msgspec decodes, as fast as orjson here and exact for integers
past 64 bits, which orjson turns into floats; ``kafka_source``'s ``fields`` decode with
it too) and ``msgpack``; ``decode_each`` decodes a batch of values (small ones
in one parse), never raising, and ``flatten`` turns the items of the records that count
into events, naming the first bad one: O(bytes) and O(records).

>>> p = PartitionEpochs("clicks", 0)
>>> p.record(0, [("epoch", b"3")], b'{"user": 1}')
[]
>>> p.record(1, marker_headers(3, 0, 1), b"")
[(3, [(0, b'{"user": 1}', None)])]
>>> p.completed, p.bound(), p.commit_offset()
(3, 4, 2)
>>> JSON.decode([b'{"user": 1}', b'[2, 3]'], [None, 2], "clicks", 0, [0, 1])
[{'user': 1}, 2, 3]
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional, Sequence, Union

import msgpack
import msgspec
import orjson

EPOCH = "epoch"
MARKER = "marker"
EPOCH_END = b"epoch_end"
OFFSETS = "offsets"
#: values per Kafka record our writers pack by default (the ``rows`` header): the
#: Spark writer without a key column, kafka_sink without a key function
PACKED_ROWS = 100
ROWS = "rows"

Headers = Optional[Sequence[tuple[str, Optional[bytes]]]]


class ContractError(ValueError):
    """A record that breaks the epoch contract; names its topic, partition and offset."""

    def __init__(self, topic: str, partition: int, offset: int, problem: str) -> None:
        super().__init__(f"{topic}[{partition}] offset {offset}: {problem}")
        self.topic, self.partition, self.offset = topic, partition, offset


class EpochOrderError(ContractError):
    """A record or marker whose epoch goes back in time in its partition."""


class DecodeError(ContractError):
    """A value that does not decode with the configured format."""


def data_headers(epoch: int, rows: Optional[int] = None) -> list[tuple[str, bytes]]:
    """The headers of a data record of ``epoch`` (holding ``rows`` events if packed).

    >>> data_headers(12), data_headers(3, rows=100)
    ([('epoch', b'12')], [('epoch', b'3'), ('rows', b'100')])
    """
    headers = [(EPOCH, str(epoch).encode())]
    if rows is not None:
        headers.append((ROWS, str(rows).encode()))
    return headers


def marker_headers(epoch: int, first: Optional[int] = None, end: Optional[int] = None) -> list[tuple[str, bytes]]:
    """The headers of the epoch-end marker of ``epoch``, naming offsets ``[first, end)``.

    >>> marker_headers(4, 10, 20)
    [('epoch', b'4'), ('marker', b'epoch_end'), ('offsets', b'10-20')]
    """
    headers = [(EPOCH, str(epoch).encode()), (MARKER, EPOCH_END)]
    if first is not None:
        headers.append((OFFSETS, f"{first}-{end}".encode()))
    return headers


# ---- one partition's reader state ---------------------------------------------------------
class PartitionEpochs:
    """What a reader knows of one partition: the last complete epoch, the records of
    epochs not yet complete, and where a consumer group may commit."""

    __slots__ = ("topic", "partition", "completed", "pending", "last_epoch", "commit_points",
                 "duplicates", "late", "orphans", "position", "resume", "given", "held", "withdrawn")

    def __init__(self, topic: str, partition: int, completed: Optional[int] = None) -> None:
        self.topic = topic
        self.partition = partition
        #: the last epoch whose marker was read (None: none yet)
        self.completed = completed
        #: epoch -> [(offset, value, rows)] of records read but not yet complete
        self.pending: dict[int, list] = {}
        self.last_epoch: Optional[int] = completed
        #: (epoch, offset after its marker), oldest first, not yet handed to ``commit_upto``
        self.commit_points: list[tuple[int, int]] = []
        self.duplicates = 0
        #: of those, copies of an epoch before the last complete one (a zombie writer's)
        self.late = 0
        self.orphans = 0
        self.position: Optional[int] = None
        #: the offset just past the marker of ``completed``: where another reader of this
        #: partition starts to see exactly the epochs after it (None: no marker read)
        self.resume: Optional[int] = None
        #: epoch -> how many of its pending records were handed on before its marker
        #: (``hand_on``)
        self.given: dict[int, int] = {}
        #: epochs whose other records wait for their marker (``hold_back``)
        self.held: set[int] = set()
        #: ``(epoch, records)`` handed on early that the marker did not count (orphans):
        #: the reader withdraws them, then clears the list
        self.withdrawn: list[tuple[int, list]] = []

    def bound(self) -> Optional[int]:
        """No epoch below this will still complete here (None: nothing read yet)."""
        if self.pending:
            return min(self.pending)
        return None if self.completed is None else self.completed + 1

    def _fail(self, offset: int, problem: str, cls: type = ContractError) -> None:
        raise cls(self.topic, self.partition, offset, problem)

    def _epoch(self, offset: int, raw: Optional[bytes]) -> int:
        if raw is None or not raw.isdigit():
            self._fail(offset, f"header 'epoch' must be a decimal epoch, got {raw!r}")
        return int(raw)

    def _late_copy(self, epoch: int, completed: int) -> None:
        """A record or marker of a complete epoch: dropped, counted (see the module)."""
        self.duplicates += 1
        if epoch < completed:
            self.late += 1

    def record(self, offset: int, headers: Headers, value: Optional[bytes]) -> list[tuple[int, list]]:
        """Take the record at ``offset``; returns the epochs it completed, each as
        ``(epoch, [(offset, value, rows), ...])`` in offset order."""
        self.position = offset + 1
        epoch_raw = marker = offsets = rows = None
        for name, raw in headers or ():
            if name == EPOCH:
                epoch_raw = raw
            elif name == MARKER:
                marker = raw
            elif name == OFFSETS:
                offsets = raw
            elif name == ROWS:
                rows = raw
        if epoch_raw is None:
            self._fail(offset, "record has no 'epoch' header (is the topic written by the epoch "
                               "contract? use epochs='ingestion' for topics without markers)")
        epoch = self._epoch(offset, epoch_raw)
        completed = self.completed
        if marker is None:
            if completed is not None and epoch <= completed:
                self._late_copy(epoch, completed)
                return []
            if self.last_epoch is not None and epoch < self.last_epoch:
                self._fail(offset, f"record of epoch {epoch} after a record of epoch {self.last_epoch}",
                           EpochOrderError)
            self.last_epoch = epoch
            n = None
            if rows is not None:
                if not rows.isdigit():
                    self._fail(offset, f"header 'rows' must be a count, got {rows!r}")
                n = int(rows)
            found = self.pending.get(epoch)
            if found is None:
                self.pending[epoch] = [(offset, value, n)]
            else:
                found.append((offset, value, n))
            return []
        if marker != EPOCH_END:
            self._fail(offset, f"unknown marker {marker!r} (expected {EPOCH_END!r})")
        if completed is not None and epoch <= completed:
            self._late_copy(epoch, completed)
            return []
        if self.last_epoch is not None and epoch < self.last_epoch:
            # records of a later epoch were read: bound() already promised this epoch away
            self._fail(offset, f"marker of epoch {epoch} after a record of epoch {self.last_epoch}: "
                               "the marker goes back in time", EpochOrderError)
        first = end = None
        if offsets is not None:
            try:
                a, b = offsets.split(b"-")
                first, end = int(a), int(b)
            except ValueError:
                self._fail(offset, f"header 'offsets' must be '<first>-<end>', got {offsets!r}")
        done = []
        for e in sorted(k for k in self.pending if k <= epoch):
            records = self.pending.pop(e)
            given = self.given.pop(e, 0)
            self.held.discard(e)
            if first is not None:
                # The marker names exactly its epoch's records; anything else left pending
                # was written by a writer that crashed before its marker (withdrawn, if it
                # was handed on early).
                lo, hi = (first, end) if e == epoch else (0, 0)
                out = [r for r in records[:given] if not lo <= r[0] < hi]
                if out:
                    self.withdrawn.append((e, out))
                kept = [r for r in records[given:] if lo <= r[0] < hi]
                self.orphans += len(out) + len(records) - given - len(kept)
                records = kept
            else:
                records = records[given:]
            if records:
                done.append((e, records))
        self.completed = epoch
        self.last_epoch = epoch
        self.resume = offset + 1
        self.commit_points.append((epoch, offset + 1))
        return done

    def early(self, epoch: int) -> list:
        """The pending records of ``epoch`` not yet handed on before its marker (``[]``
        once ``hold_back`` was called for it)."""
        records = self.pending.get(epoch)
        if not records or epoch in self.held:
            return []
        return records[self.given.get(epoch, 0):]

    def hand_on(self, epoch: int, n: int) -> None:
        """The first ``n`` records ``early`` returned were handed on before the epoch's
        marker: the marker returns only the records after them, and puts those of them
        it does not count in ``withdrawn``.

        >>> p = PartitionEpochs("clicks", 0)
        >>> for offset in (0, 1, 2):
        ...     _ = p.record(offset, [("epoch", b"5")], b"%d" % offset)
        >>> [r[1] for r in p.early(5)]
        [b'0', b'1', b'2']
        >>> p.hand_on(5, 3); p.early(5), p.record(3, [("epoch", b"5")], b"3")
        ([], [])
        >>> p.record(4, marker_headers(5, 1, 4), b"")     # a retry wrote 1-3: 0 is an orphan
        [(5, [(3, b'3', None)])]
        >>> [(e, [r[0] for r in rs]) for e, rs in p.withdrawn], p.orphans
        ([(5, [0])], 1)
        """
        if n:
            self.given[epoch] = self.given.get(epoch, 0) + n

    def hold_back(self, epoch: int) -> None:
        """The rest of ``epoch``'s records wait for its marker (one of them did not
        decode: whether that matters, only the marker says)."""
        if epoch in self.pending:
            self.held.add(epoch)

    def handed_early(self) -> list[tuple[int, list]]:
        """``(epoch, records)`` handed on early of each epoch still pending, oldest
        first: what a reader that gives the partition away withdraws."""
        out = []
        for e in sorted(self.pending):
            n = self.given.get(e, 0)
            if n:
                out.append((e, self.pending[e][:n]))
        return out

    def commit_offset(self, upto: Optional[int] = None) -> Optional[int]:
        """The offset to commit once every epoch ``<= upto`` (default: all complete ones)
        has been processed: just past the last such marker; None if there is none."""
        found = None
        for epoch, after in self.commit_points:
            if upto is not None and epoch > upto:
                break
            found = after
        return found

    def forget_commits(self, upto: int) -> None:
        """Drop the commit points of epochs ``<= upto`` (they were committed)."""
        self.commit_points = [p for p in self.commit_points if p[0] > upto]


# ---- value formats ------------------------------------------------------------------------
#: values are parsed in one joined array when they average at most this many bytes
_JOIN_BELOW = 512


def parse_as_one(values: list) -> bool:
    """Whether a reader should parse ``values`` as one joined array (``json_array``):
    they are all present and small, so the per-call cost would be most of each one's;
    large ones (packed) parse one by one, which keeps each parse in the CPU's caches.

    >>> parse_as_one([b'{"a": 1}', b"2"]), parse_as_one([b"1", None]), parse_as_one([b"x" * 600])
    (True, False, False)
    """
    return bool(values) and all(values) and sum(map(len, values)) <= _JOIN_BELOW * len(values)


def json_array(values: list[bytes]) -> bytes:
    """The JSON array whose items are ``values``, joined as they are."""
    return b"[" + b",".join(values) + b"]"


class Undecodable:
    """What stands for a value that did not decode (or an event without the fields a
    reader wants) until its record is known to count: ``problem`` says why, ``value``
    is the record's value as read."""

    __slots__ = ("problem", "value")

    def __init__(self, problem: str, value: Any = None) -> None:
        self.problem, self.value = problem, value

    def __repr__(self) -> str:
        return f"Undecodable({self.problem!r})"


class Format:
    """A value (de)serializer: ``dumps(event) -> bytes`` and ``loads(bytes) -> event``;
    ``decode`` takes a batch of values at once (packed ones flattened), in two steps a
    reader may take apart: ``decode_each`` as records arrive, ``flatten`` once the
    records are known to count."""

    def __init__(self, name: str, dumps: Callable[[Any], bytes], loads: Callable[[bytes], Any],
                 loads_array: Optional[Callable[[list[bytes]], list]] = None,
                 dumps_many: Optional[Callable[[list], bytes]] = None, packs: bool = False,
                 join_many: Optional[Callable[[list], Optional[bytes]]] = None) -> None:
        self.name = name
        #: our writers pack values of this format by default (``PACKED_ROWS`` per record)
        self.packs = packs
        self.dumps = dumps
        self.loads = loads
        self._loads_array = loads_array
        #: one value holding a list of events (a record with header ``rows: len(events)``)
        self.dumps_many = dumps_many or dumps
        #: ``values -> packed value`` made of the values as they are (no decode, no
        #: encode), or None when some value is not exactly one value of the format
        self.join_many = join_many

    def decode(self, values: list, rows: list, topic: str, partition: int, offsets: list) -> list:
        """The events in ``values`` (``rows[i]`` not None: value i packs that many)."""
        return self.flatten(self.decode_each(values), rows, topic, partition, offsets)

    def decode_each(self, values: list) -> list:
        """One item per value: what it decodes to (for a packed value, its list of
        events), or an ``Undecodable`` saying why not. Never raises: whether a bad value
        matters is known only later (a record outside its marker's range does not).

        >>> items = JSON.decode_each([b'{"a": 1}', b"[1, 2]", b"{"])
        >>> items[:2], items[2].problem.split(":")[0]
        ([{'a': 1}, [1, 2]], 'value does not decode as json')
        """
        present = values if all(values) else [v for v in values if v]
        items: Optional[list] = None
        if self._loads_array is not None and parse_as_one(present):
            try:
                items = self._loads_array(present)
            except Exception:  # noqa: BLE001 - find the culprit values below
                items = None
            # a bad value can still join into valid JSON (b"1,2" gives two events)
            if items is not None and len(items) != len(present):
                items = None
        if items is not None and len(present) == len(values):
            return items
        loads = self.loads
        out: list = []
        decoded = iter(items) if items is not None else None
        for value in values:
            if decoded is not None and value:
                out.append(next(decoded))
                continue
            try:
                out.append(loads(value))
            except Exception as exc:  # noqa: BLE001 - any decoder error is the record's
                out.append(Undecodable(f"value does not decode as {self.name}: {type(exc).__name__}: {exc}; "
                                       f"value starts {bytes(value or b'')[:40]!r}", value))
        return out

    @staticmethod
    def flatten(items: list, rows: list, topic: str, partition: int, offsets: list) -> list:
        """The events of ``items`` (from ``decode_each``; ``rows[i]`` not None: item i
        is a packed value of that many); the first bad one raises a ``DecodeError``
        naming its offset."""
        if rows.count(None) == len(rows) and Undecodable not in map(type, items):
            return items
        out: list = []
        for item, n, offset in zip(items, rows, offsets):
            if type(item) is Undecodable:
                raise DecodeError(topic, partition, offset, item.problem)
            if n is None:
                out.append(item)
            elif isinstance(item, list) and len(item) == n:
                out.extend(item)
            else:
                raise DecodeError(topic, partition, offset,
                                  f"header 'rows: {n}' but the value holds "
                                  f"{len(item) if isinstance(item, list) else 'no array'}")
        return out

    def __repr__(self) -> str:
        return f"Format({self.name!r})"


_json_decoder = msgspec.json.Decoder()


def _json_loads(value: bytes) -> Any:
    # a function, not the bound method: Spark pickles a Format with its writer's options
    return _json_decoder.decode(value)


def _json_array(values: list[bytes]) -> list:
    # One parse for the whole batch: the per-call overhead is most of a small record's cost.
    return _json_decoder.decode(json_array(values))


_raw_items = msgspec.json.Decoder(list[msgspec.Raw])


def _json_join(values: list) -> Optional[bytes]:
    """The JSON array of ``values`` (all str or all bytes) as they are, if each is
    exactly one JSON value; otherwise None. One validating parse that builds no objects:
    the array must have one item per value, each as long as its value (in bytes), which
    leaves no room for a value to hold two items or part of one, nor whitespace around
    one.

    >>> _json_join(['{"a": 1}', "[2, 3]", '"é"']), _json_join(["1,[2", "3]"]), _json_join([b" 1"])
    (b'[{"a": 1},[2, 3],"\xc3\xa9"]', None, None)
    """
    try:
        if type(values[0]) is str and not all(map(str.isascii, values)):
            values = [v.encode() for v in values]
        if type(values[0]) is str:
            joined = ("[" + ",".join(values) + "]").encode()
        else:
            joined = json_array(values)
        items = _raw_items.decode(joined)
    except (TypeError, IndexError, AttributeError, UnicodeError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    if len(items) != len(values) or list(map(len, items)) != list(map(len, values)):
        return None
    return joined


def _msgpack_loads(value: bytes) -> Any:
    return msgpack.unpackb(value, raw=False, strict_map_key=False)


JSON = Format("json", orjson.dumps, _json_loads, _json_array, packs=True, join_many=_json_join)
MSGPACK = Format("msgpack", msgpack.packb, _msgpack_loads, packs=True)
def _raw_cannot_pack(events: list) -> bytes:
    raise ValueError("value format 'raw' cannot pack several values into one record "
                     "(rows_per_message / rowsPerMessage): use json or msgpack")


RAW = Format("raw", bytes, bytes, dumps_many=_raw_cannot_pack)
FORMATS = {f.name: f for f in (JSON, MSGPACK, RAW)}


def format_of(spec: Union[str, Format]) -> Format:
    """A Format by name (``json``, ``msgpack``, ``raw``), or the one given.

    >>> format_of("msgpack").name
    'msgpack'
    >>> format_of("yaml")
    Traceback (most recent call last):
    ...
    ValueError: unknown value format 'yaml': use one of json, msgpack, raw or a timely.connectors.epochs.Format
    """
    if isinstance(spec, Format):
        return spec
    found = FORMATS.get(spec)
    if found is None:
        raise ValueError(f"unknown value format {spec!r}: use one of {', '.join(FORMATS)} "
                         f"or a timely.connectors.epochs.Format")
    return found


def complete_epochs(states: Iterable[PartitionEpochs]) -> Optional[int]:
    """The last epoch complete in every one of ``states`` (None if some has none)."""
    least = None
    for state in states:
        if state.completed is None:
            return None
        least = state.completed if least is None else min(least, state.completed)
    return least
