"""Names for the places in a dataflow graph where timestamps can be: ports.

An operator's output port is a ``Source`` of timestamped data and its input port a
``Target`` (timely's names). A ``Location`` is either, and sorts as a plain tuple so it
can sit in worklists next to a timestamp.

>>> Location.source(3, 0), Location.target(3, 1).is_source
(Location(node=3, port=0, is_source=True), False)
>>> Location.from_source(Source(2, 1)) == Location.source(2, 1)
True
"""
from __future__ import annotations

from typing import NamedTuple


class Source(NamedTuple):
    """An output port: operator index ``node``, output number ``port``."""

    node: int
    port: int


class Target(NamedTuple):
    """An input port: operator index ``node``, input number ``port``."""

    node: int
    port: int


class Location(NamedTuple):
    """A port of an operator: a Source when ``is_source``, else a Target."""

    node: int
    port: int
    is_source: bool

    @classmethod
    def source(cls, node: int, port: int) -> "Location":
        return cls(node, port, True)

    @classmethod
    def target(cls, node: int, port: int) -> "Location":
        return cls(node, port, False)

    @classmethod
    def from_source(cls, source: Source) -> "Location":
        return cls(source[0], source[1], True)

    @classmethod
    def from_target(cls, target: Target) -> "Location":
        return cls(target[0], target[1], False)
