"""The wire format between processes: length-prefixed frames with a msgpack payload.

A frame is a fixed 28-byte header — channel, source worker, first and last target
worker, sequence number, payload length (network byte order) — followed by the
payload. Payloads are msgpack, and every msgpack array decodes as a tuple: timestamps
and most records are tuples, and decoding to tuples is as fast as msgpack goes (a
per-tuple extension type was 25x slower). So records crossing a process boundary
should be msgpack types, and a list inside a record arrives as a tuple. Frames longer
than ``MAX_FRAME`` are refused. Encoding and decoding cost O(payload).

Two twins do the msgpack work. The pure one, ``py_packb`` and ``PyDecoder``, calls the
msgpack library. The compiled one, ``timely.communication._ccodec``, produces the same
bytes and the same values for the types records are made of, and hands anything else
to the library. Its ``Decoder`` interns short ASCII strings, so a key that crosses
again and again is one string object on the receiving side. Each receiving thread
keeps its own decoder (``new_decoder()``); ``decode_payload`` without one uses a
shared pure decoder.

>>> frame = encode_frame(3, 0, 1, 1, 7, (4, ["a", (1, 2)]))
>>> header = decode_header(frame[:HEADER.size])
>>> header, decode_payload(frame[HEADER.size:])
((3, 0, 1, 1, 7, 8), (4, ('a', (1, 2))))
"""
from __future__ import annotations

import struct
from itertools import repeat
from typing import Any, Callable, Iterable, Optional

import msgpack

from .._twin import compiled

HEADER = struct.Struct("!IiIIQI")
CONTROL = 0xFFFFFFFF          # the channel of control frames (heartbeats, goodbyes, rescaling)
MAX_FRAME = 256 * 1024 * 1024


class FrameError(ValueError):
    """A frame that is malformed, oversized, or names something that does not exist."""


def _default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"cannot send a {type(obj).__name__} between processes: {obj!r:.80}")


def py_packb(obj: Any) -> bytes:
    """``obj`` as msgpack, by the library (the pure twin of ``_ccodec.packb``)."""
    return msgpack.packb(obj, default=_default, use_bin_type=True)


def py_pack_items(state: dict, keys: Optional[Iterable] = None) -> tuple[bytes, int, list]:
    """``(packed, count, missing)``: ``py_packb`` of the ``(key, state[key])`` pairs for
    each of ``keys`` that the dict ``state`` holds (every item, in its order, when ``keys``
    is None; a value ``GONE`` counts as missing: a TrackedDict's record of a deletion),
    how many pairs, and the keys it does not hold, in the order of ``keys``;
    one lookup per key through dict's own ``get`` (a ``TrackedDict``'s would mark them).
    The pure twin of ``_ccodec.pack_items``, which packs the pairs without building them.

    >>> packed, count, missing = py_pack_items({"a": 1, "b": 2}, ["b", "gone"])
    >>> PyDecoder().decode(packed), count, missing
    ((('b', 2),), 1, ['gone'])
    """
    if not isinstance(state, dict):
        raise TypeError(f"pack_items reads a dict, not {type(state).__name__}")
    if keys is None:
        keys, values = list(dict.keys(state)), list(dict.values(state))
    else:
        keys = list(keys)
        values = list(map(dict.get, repeat(state, len(keys)), keys, repeat(GONE, len(keys))))
    items = [(k, v) for k, v in zip(keys, values) if v is not GONE]
    missing = [k for k, v in zip(keys, values) if v is GONE] if len(items) < len(keys) else []
    return py_packb(items), len(items), missing


class PyDecoder:
    """msgpack payloads to values, by the library (the pure twin of ``_ccodec.Decoder``)."""

    __slots__ = ()

    def decode(self, data: Any) -> Any:
        return msgpack.unpackb(data, use_list=False, raw=False, strict_map_key=False)


_compiled = compiled("timely.communication._ccodec")
IMPLEMENTATION = "python" if _compiled is None else "cython"
packb: Callable[[Any], bytes] = py_packb if _compiled is None else _compiled.packb
_Decoder = PyDecoder if _compiled is None else _compiled.Decoder
pack_items: Callable[..., tuple[bytes, int, list]] = py_pack_items if _compiled is None else _compiled.pack_items
#: a value ``pack_items`` takes for the key's absence (both twins share the one object)
GONE: Any = object() if _compiled is None else _compiled.GONE
_SHARED = PyDecoder()


def new_decoder() -> Any:
    """A decoder for one receiving thread (the compiled twin's keeps per-thread state)."""
    return _Decoder()


def decode_payload(data: Any, decoder: Any = None) -> Any:
    try:
        return (decoder or _SHARED).decode(data)
    except Exception as e:  # msgpack raises several types for garbage
        raise FrameError(f"payload is not valid msgpack: {e}") from None


def encode_frame(channel: int, source: int, first: int, last: int, seq: int, obj: Any) -> bytes:
    payload = packb(obj)
    if len(payload) > MAX_FRAME:
        raise FrameError(f"frame of {len(payload)} bytes exceeds the {MAX_FRAME}-byte limit")
    return HEADER.pack(channel, source, first, last, seq, len(payload)) + payload


def decode_header(data: bytes) -> tuple[int, int, int, int, int, int]:
    channel, source, first, last, seq, length = HEADER.unpack(data)
    if length > MAX_FRAME:
        raise FrameError(f"frame announces {length} bytes, more than the {MAX_FRAME}-byte limit")
    if first > last:
        raise FrameError(f"frame targets workers {first}..{last}: an empty range")
    return channel, source, first, last, seq, length
