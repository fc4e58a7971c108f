"""The Kafka checkpoint store's layout: a namespace's topics, and its records' keys.

``KafkaStore`` (``timely.checkpoint.kafka_store``) keeps namespace ``NS`` (already
``[A-Za-z0-9._-]``) in these topics:

- ``NS.inc`` (1 partition): the Incarnation records (key ``b"I"``), in write order, a
  marker (key ``b"F/" + id``, empty value) for each incarnation ``forget`` dropped, and
  one (key ``b"D/" + topic``, value: when) for each topic it doomed;
  Kafka cannot delete single records (Tansu has neither ``delete_records`` nor
  compaction), so ``read`` hides a marked incarnation instead.
- ``NS.INC.W.SEG`` (1 partition each): the chain of segments in which worker ``W``
  writes its Entry (key ``b"E/" + op + b"/" + bin``) and Commit (key ``b"C"``) records
  of incarnation ``INC`` (an id without dots), in write order; the entries a writer
  held (a crossing's, one per bin changed) go as one group record (key ``b"G"``, value:
  the msgpack array of their encodings, up to ``GROUP_BYTES``). A writer closes each
  segment it leaves with an end marker (key ``b"S"``, empty value). An entry's key lets
  a reader skip it without decoding it (in a group, its head is decoded); a value is
  ``records.encode(record)`` (msgpack + CRC-32).

Topics are created without retention (``retention.ms`` and ``retention.bytes`` -1): a
broker's time-based default (Apache Kafka's: 7 days) would expire a bin's only base.

Costs: naming or parsing a topic or a key is O(its length); decoding a record or a
group O(its bytes). Nothing here talks to the broker.

>>> segment_topic("job.count", "2-ab12cd34", 3, 0)
'job.count.2-ab12cd34.3.0'
>>> parse_segment("job.count", "job.count.2-ab12cd34.3.0"), parse_segment("job", "job.count.2-ab12cd34.3.0")
(('2-ab12cd34', 3, 0), None)
>>> record_key(Commit("2-ab12cd34", 5, 3)), entry_bin(b"E/Count@(0, 3)/17")
(b'C', ('Count@(0, 3)', 17))
"""
from __future__ import annotations

import re
from typing import Any, Optional

import msgpack

from .records import CheckpointCorrupt, CheckpointError, Commit, Entry, decode

#: checkpoint topics keep everything until ``forget`` deletes them whole
_KEEP = {"retention.ms": "-1", "retention.bytes": "-1"}

#: the largest record a writer sends (an entry of 4096 large keys; Tansu took 9 MiB)
MAX_RECORD_BYTES = 16 << 20
_INCARNATION, _FORGOTTEN, _COMMIT, _ENTRY, _END = b"I", b"F/", b"C", b"E/", b"S"
_GROUP = b"G"               # value: the msgpack array of several entries' encodings
#: a group of held entries closes at this many bytes (a record stays far below Tansu's cap)
GROUP_BYTES = 1 << 20
_DOOMED = b"D/"             # + a topic name; value: when it was doomed (unix seconds)
_ID = re.compile(r"[A-Za-z0-9_-]+")


def segment_topic(namespace: str, inc: str, worker: int, segment: int) -> str:
    return f"{namespace}.{inc}.{worker}.{segment}"


def parse_segment(namespace: str, topic: str) -> Optional[tuple[str, int, int]]:
    """``(inc, worker, segment)`` of a segment topic of ``namespace``, else None (an
    incarnation id has no dots, so a namespace never reads another's topics)."""
    if not topic.startswith(namespace + "."):
        return None
    parts = topic[len(namespace) + 1:].split(".")
    if len(parts) != 3 or not _ID.fullmatch(parts[0]) or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return parts[0], int(parts[1]), int(parts[2])


def record_key(record: Any) -> bytes:
    if isinstance(record, Entry):
        return b"%s%s/%d" % (_ENTRY, record.op.encode(), record.bin)
    if isinstance(record, Commit):
        return _COMMIT
    raise TypeError(f"a checkpoint writer takes entries and commits, not {record!r}")


def entry_bin(key: bytes) -> tuple[str, int]:
    """``(op, bin)`` from an entry's key."""
    op, _, b = key[len(_ENTRY):].rpartition(b"/")
    return op.decode(), int(b)


def _check_id(inc: str) -> str:
    if not isinstance(inc, str) or not _ID.fullmatch(inc):
        raise CheckpointError(f"incarnation id {inc!r}: a Kafka checkpoint store takes letters, digits, "
                              f"'_' and '-' only")
    return inc


def _key_bin(key: bytes, at: str) -> tuple[str, int]:
    try:
        return entry_bin(key)
    except ValueError:
        raise CheckpointCorrupt(f"a checkpoint record at {at} has an unreadable key {key!r}") from None


def _group(value: Optional[bytes], at: str) -> list:
    """The encoded entries of a group record (each with its own checksum)."""
    try:
        values = msgpack.unpackb(value or b"", raw=False, use_list=True)
    except Exception as e:  # noqa: BLE001 - any decoding failure is a corrupt record
        raise CheckpointCorrupt(f"the checkpoint group record at {at} does not decode: {e}") from None
    if not isinstance(values, list) or not all(isinstance(v, bytes) for v in values):
        raise CheckpointCorrupt(f"the checkpoint group record at {at} is not a list of entries")
    return values


def _decoded(value: Optional[bytes], at: str, kind: type) -> Any:
    record = decode(value or b"", at)
    if not isinstance(record, kind):
        raise CheckpointCorrupt(f"the checkpoint record at {at} is a {type(record).__name__} where its key "
                                f"says {kind.__name__}")
    return record
