"""Stream: the output of an operator, and the methods that build on it.

A Stream names an output port (a Source) in a scope and owns its ``Tee``. Each method
adds an operator fed by this stream and returns the operator's output stream(s); the
operators themselves are in ``timely.dataflow.operators``.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from ..progress.location import Source, Target
from .channels import Tee


class Stream:
    __slots__ = ("scope", "source", "tee")

    def __init__(self, scope: Any, source: Source, tee: Tee) -> None:
        self.scope = scope
        self.source = source
        self.tee = tee

    def connect_to(self, target: Target, pact: Any, path: tuple) -> Any:
        """Open a channel from this stream to ``target`` (an input of the operator at
        ``path``), returning the receiving end."""
        worker = self.scope.worker
        channel = worker.new_identifier()
        pusher, puller = pact.connect(worker, channel, path)
        self.tee.pushers.append(pusher)
        self.scope.connect(self.source, target)
        return puller

    # ---- record-at-a-time operators, batched ---------------------------------------------
    def map(self, fn: Callable[[Any], Any]) -> "Stream":
        from . import operators
        return operators.map(self, fn)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]]) -> "Stream":
        from . import operators
        return operators.flat_map(self, fn)

    def filter(self, predicate: Callable[[Any], bool]) -> "Stream":
        from . import operators
        return operators.filter(self, predicate)

    def map_batch(self, fn: Callable[[list], list]) -> "Stream":
        from . import operators
        return operators.map_batch(self, fn)

    def inspect(self, fn: Callable[[Any], Any]) -> "Stream":
        from . import operators
        return operators.inspect(self, fn)

    def inspect_batch(self, fn: Callable[[Any, list], Any]) -> "Stream":
        from . import operators
        return operators.inspect_batch(self, fn)

    # ---- routing ------------------------------------------------------------------------
    def exchange(self, key: Callable[[Any], Any]) -> "Stream":
        from . import operators
        return operators.exchange(self, key)

    def broadcast(self) -> "Stream":
        from . import operators
        return operators.broadcast(self)

    def concat(self, *others: "Stream") -> "Stream":
        from . import operators
        return operators.concat(self, *others)

    def partition(self, parts: int, route: Callable[[Any], tuple[int, Any]]) -> list["Stream"]:
        from . import operators
        return operators.partition(self, parts, route)

    # ---- scopes and loops ---------------------------------------------------------------
    def enter(self, inner: Any) -> "Stream":
        from . import operators
        return operators.enter(self, inner)

    def leave(self) -> "Stream":
        from . import operators
        return operators.leave(self)

    def connect_loop(self, handle: Any) -> None:
        handle.connect(self)

    # ---- observing ----------------------------------------------------------------------
    def probe(self) -> Any:
        from . import operators
        return operators.probe(self)

    def probe_with(self, handle: Any) -> "Stream":
        from . import operators
        return operators.probe_with(self, handle)

    def capture(self) -> Any:
        from . import operators
        return operators.capture(self)

    # ---- generic builders ---------------------------------------------------------------
    def unary(self, pact: Any, name: str, constructor: Callable, notify: bool = True) -> "Stream":
        from . import operators
        return operators.unary(self, pact, name, constructor, notify)

    def unary_notify(self, pact: Any, name: str, init: Iterable[Any], logic: Callable) -> "Stream":
        from . import operators
        return operators.unary_notify(self, pact, name, init, logic)

    def binary(self, other: "Stream", pact1: Any, pact2: Any, name: str, constructor: Callable,
               notify: bool = True) -> "Stream":
        from . import operators
        return operators.binary(self, other, pact1, pact2, name, constructor, notify)

    def binary_notify(self, other: "Stream", pact1: Any, pact2: Any, name: str,
                      init: Iterable[Any], logic: Callable) -> "Stream":
        from . import operators
        return operators.binary_notify(self, other, pact1, pact2, name, init, logic)

    # ---- keyed state that migrates (Megaphone) ----------------------------------------------
    def state_machine(self, fold: Callable[[Any, Any, Any], tuple], control: Optional["Stream"] = None,
                      name: str = "StateMachine", bins: int = 256) -> "Stream":
        """``fold(key, value, state) -> (new_state, outputs)`` over ``(key, value)``
        records, in time order, per key; see ``timely.megaphone.state``."""
        from ..megaphone import state
        return state.state_machine(self, fold, control, name, bins)

    def stateful_unary(self, control: Optional["Stream"], key: Callable[[Any], Any], name: str,
                       logic: Callable, bins: int = 256) -> "Stream":
        """``logic(time, records, state, notificator, output)`` per bin and time."""
        from ..megaphone import state
        return state.stateful_unary(self, control, key, name, logic, bins)

    def stateful_binary(self, other: "Stream", control: Optional["Stream"], key1: Callable[[Any], Any],
                        key2: Callable[[Any], Any], name: str, logic: Callable,
                        bins: int = 256) -> "Stream":
        """``logic(time, records1, records2, state, notificator, output)`` per bin and time."""
        from ..megaphone import state
        return state.stateful_binary(self, other, control, key1, key2, name, logic, bins)

    # ---- Kafka (timely.connectors.kafka) ----------------------------------------------------
    def kafka_sink(self, brokers: Any, topic: str, **options: Any) -> "Stream":
        """Write this stream's records to ``topic`` by epoch, each epoch followed by its
        markers; the result's frontier passes an epoch once the broker acknowledged it."""
        from ..connectors import kafka
        return kafka.kafka_sink(self, brokers, topic, **options)

    def kafka_commit(self, *sources: "Stream") -> None:
        """Commit the offsets of ``sources`` (kafka_source streams) as this stream's
        frontier passes their epochs."""
        from ..connectors import kafka
        kafka.kafka_commit(self, *sources)

    def __repr__(self) -> str:
        return f"Stream({self.scope.name!r}, {self.source})"
