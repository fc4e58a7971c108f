"""Enter and leave: streams crossing into a nested scope and back out (timely's
``enterleave``).

A batch crossing costs one time conversion (``t`` outside is ``(t, 0)`` inside an
iterative scope; leaving drops the inner coordinate, see timely.dataflow.scope), and
entering one activation of the nested scope; the records are not copied.
"""
from __future__ import annotations

from typing import Any, Callable

from ...progress.location import Source, Target
from ..channels import Tee
from ..stream import Stream


class _Ingress:
    """Pushes batches from the parent scope into a nested one, converting the time."""

    __slots__ = ("_tee", "_to_inner", "_activate")

    def __init__(self, tee: Tee, to_inner: Callable, activate: Callable) -> None:
        self._tee = tee
        self._to_inner = to_inner
        self._activate = activate

    def give(self, time: Any, records: list) -> None:
        self._tee.give(self._to_inner(time), records)
        self._activate()


class _Egress:
    __slots__ = ("_tee", "_to_outer")

    def __init__(self, tee: Tee, to_outer: Callable) -> None:
        self._tee = tee
        self._to_outer = to_outer

    def give(self, time: Any, records: list) -> None:
        self._tee.give(self._to_outer(time), records)


def enter(stream: Stream, inner: Any) -> Stream:
    if inner.parent is not stream.scope:
        raise ValueError(f"cannot enter scope {inner.name!r} from {stream.scope.name!r}: "
                         f"it is not a child of the stream's scope")
    port, counter = inner.subgraph.new_input()
    tee = Tee(counter)   # records entering are counted at child 0's output, then harvested
    worker = inner.worker
    path = inner.path
    stream.tee.pushers.append(_Ingress(tee, inner.to_inner, lambda: worker.activations.activate(path)))
    stream.scope.connect(stream.source, Target(inner.index, port))
    return Stream(inner, Source(0, port), tee)


def leave(stream: Stream) -> Stream:
    inner = stream.scope
    outer = inner.parent
    if outer is None:
        raise ValueError("cannot leave the root scope of a dataflow")
    port = inner.subgraph.new_output()
    inner.connect(stream.source, Target(0, port))
    tee = Tee(None)      # the scope reports these as produced, through its tracker
    stream.tee.pushers.append(_Egress(tee, inner.to_outer))
    return Stream(outer, Source(inner.index, port), tee)
