"""SharedProgress and the Operate protocol: what a scope knows about each child.

Every child of a scope (an operator, or a nested scope) shares one ``SharedProgress``
with its parent. The parent writes ``frontiers`` (changes to what may still arrive at
each input); the child writes ``consumeds`` (messages taken from each input),
``internals`` (capabilities gained or dropped at each output) and ``produceds``
(messages sent from each output). All four are ChangeBatches per port, so writing costs
O(1) per update and the parent drains them once per step.

A child implements ``Operate``: its shape (``inputs``, ``outputs``), its internal path
summaries and initial capabilities (``get_internal_summary``), and ``schedule()``, which
does some work and returns True while the child is incomplete.
"""
from __future__ import annotations

from typing import Any, Protocol

from . import ChangeBatch


class SharedProgress:
    """Per-port progress exchanged between a child and its parent scope."""

    __slots__ = ("frontiers", "consumeds", "internals", "produceds")

    def __init__(self, inputs: int, outputs: int) -> None:
        self.frontiers = [ChangeBatch() for _ in range(inputs)]
        self.consumeds = [ChangeBatch() for _ in range(inputs)]
        self.internals = [ChangeBatch() for _ in range(outputs)]
        self.produceds = [ChangeBatch() for _ in range(outputs)]


class Operate(Protocol):
    """The protocol a scope's children implement (see the module docstring)."""

    name: str = "operator"
    inputs: int = 0
    outputs: int = 0
    #: schedule this child whenever one of its input frontiers changes
    notify: bool = True

    def get_internal_summary(self) -> tuple[list[list[list[Any]]], SharedProgress]:
        """``summary[input][output]`` (summaries of internal paths) and the SharedProgress
        through which the child reports, its initial capabilities already in ``internals``."""
        ...

    def set_external_summary(self) -> None:
        """Called once the parent scope is built (a scope uses it to seed its frontiers)."""
        ...

    def schedule(self) -> bool:
        """Run; return True while the child is incomplete (must be scheduled again)."""
        ...
