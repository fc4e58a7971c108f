"""Scopes: where operators live while a dataflow is being built.

The root scope of a dataflow has the worker's timestamp (an int epoch by default).
``region`` nests a scope with the same timestamp; ``iterative`` nests one whose
timestamp gains an inner coordinate (a loop counter): ``t`` outside is ``(t, 0)``
inside, and leaving drops the coordinate again. Each nested scope becomes a Subgraph,
a single child of its parent, with its own Tracker and progress channel. Sources and
loops (``new_input``, ``to_stream``, ``feedback``, ``kafka_source``) are offered by the
packages that define them, as ``Stream``'s operators are (see ``Extensible``).

Building is not a hot path; nothing here runs per record.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..progress.location import Source, Target
from ..progress.subgraph import SubgraphBuilder
from ..progress.timestamp import identity_summary
from .extensible import Extensible
from .operator import OperatorBuilder


def _to_inner(outer_is_int: bool) -> Callable[[Any], Any]:
    if outer_is_int:
        return lambda t: (t, 0)
    return lambda t: t + (0,)


def _to_outer(outer_is_int: bool) -> Callable[[Any], Any]:
    if outer_is_int:
        return lambda t: t[0]
    return lambda t: t[:-1]


class Scope(Extensible):
    """A scope under construction (see the module docstring)."""

    def __init__(self, worker: Any, name: str, path: tuple, minimum: Any,
                 parent: Optional["Scope"] = None, iterative: bool = False) -> None:
        self.worker = worker
        self.name = name
        self.path = path
        self.minimum = minimum
        self.parent = parent
        self.is_iterative = iterative
        self.subgraph = SubgraphBuilder(name, path, minimum)
        outer_is_int = parent is not None and type(parent.minimum) is int
        if iterative:
            self.to_inner = _to_inner(outer_is_int)
            self.to_outer = _to_outer(outer_is_int)
        else:
            self.to_inner = self.to_outer = _identity

    @property
    def index(self) -> int:
        """This scope's index among its parent's children."""
        return self.path[-1]

    @property
    def peers(self) -> int:
        return self.worker.peers

    # ---- children -----------------------------------------------------------------------
    def allocate_child_id(self) -> int:
        return self.subgraph.allocate_child_id()

    def add_child(self, operator: Any, index: int) -> None:
        self.subgraph.add_child(operator, index)

    def connect(self, source: Source, target: Target, pact: Any = None) -> None:
        self.subgraph.connect(source, target, pact)

    def operator(self, name: str) -> OperatorBuilder:
        """An OperatorBuilder for a new operator in this scope."""
        return OperatorBuilder(self, name)

    # ---- nested scopes ------------------------------------------------------------------
    def region(self, build: Callable[["Scope"], Any], name: str = "Region") -> Any:
        """Build a nested scope with the same timestamp; returns what ``build`` returns."""
        return self._nest(build, name, iterative=False)

    def iterative(self, build: Callable[["Scope"], Any], name: str = "Iterative") -> Any:
        """Build a nested scope whose timestamp gains a loop counter coordinate."""
        return self._nest(build, name, iterative=True)

    def _nest(self, build: Callable[["Scope"], Any], name: str, iterative: bool) -> Any:
        index = self.allocate_child_id()
        outer_is_int = type(self.minimum) is int
        minimum = _to_inner(outer_is_int)(self.minimum) if iterative else self.minimum
        child = Scope(self.worker, name, self.path + (index,), minimum, parent=self,
                      iterative=iterative)
        result = build(child)
        if iterative:
            summary_to_outer = (lambda s: s[0]) if outer_is_int else (lambda s: s[:-1])
        else:
            summary_to_outer = _identity
        subgraph = child.subgraph.build(self.worker, to_outer=child.to_outer,
                                        to_inner=child.to_inner,
                                        summary_to_outer=summary_to_outer)
        self.add_child(subgraph, index)
        return result

    # ---- loops --------------------------------------------------------------------------
    def loop_variable(self, step: int = 1):
        """In an iterative scope: a feedback whose summary advances the loop counter
        (``scope.feedback`` is offered by ``timely.dataflow.operators``)."""
        if not self.is_iterative:
            raise ValueError(f"loop_variable needs an iterative scope; {self.name!r} is not one")
        summary = identity_summary(self.minimum)[:-1] + (step,)
        return self.feedback(summary)

    def __repr__(self) -> str:
        return f"Scope({self.name!r}, path={self.path})"


def _identity(x: Any) -> Any:
    return x
