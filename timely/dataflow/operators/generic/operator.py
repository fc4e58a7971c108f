"""The generic operators: ``unary``, ``binary`` and their ``_notify`` variants, and the
pipeline operator the record transforms are made of.

The user's logic reads its input ports and writes its output ports
(timely.dataflow.operator): the engine adds O(1) per batch pulled or given, plus the
channel's routing; the logic costs what it does. ``pipeline_operator`` (``map``,
``filter``, ``inspect``, ``exchange``, ``broadcast``) calls its transform once per received
batch and holds no capability: the input it consumed in the same step justifies its
output. ``drop_all`` gives up an operator's initial capabilities, O(outputs).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from ...channels import Pipeline
from ...operator import FrontierNotificator, OutputPort
from ...stream import Stream
from .notificator import Notificator
from .operator_info import OperatorInfo


def drop_all(caps: list) -> None:
    """Give up every capability in ``caps`` (an operator that holds none of its own)."""
    for cap in caps:
        cap.drop()


def pipeline_operator(stream: Stream, name: str, transform: Callable[[Any, list, OutputPort], None],
                      pact: Any = None) -> Stream:
    """An operator that calls ``transform(time, records, output)`` for each batch received
    over ``pact`` (default ``Pipeline``), holding no capability."""
    builder = stream.scope.operator(name)
    builder.set_notify(False)
    port = builder.new_input(stream, pact or Pipeline())
    out, result = builder.new_output()

    def constructor(caps):
        drop_all(caps)
        batches = port.batches

        def logic():
            for time, records in batches():
                transform(time, records, out)
        return logic
    builder.build(constructor)
    return result


def unary(stream: Stream, pact: Any, name: str, constructor: Callable, notify: bool = True) -> Stream:
    """``constructor(capability, info)`` returns ``logic(input, output)``; ``input``
    yields ``(InputCapability, records)`` and has ``input.frontier``."""
    builder = stream.scope.operator(name)
    builder.set_notify(notify)
    port = builder.new_input(stream, pact or Pipeline())
    out, result = builder.new_output()
    info = OperatorInfo(builder)

    def build(caps):
        logic = constructor(caps[0], info)
        return lambda: logic(port, out)
    builder.build(build)
    return result


def binary(stream: Stream, other: Stream, pact1: Any, pact2: Any, name: str,
           constructor: Callable, notify: bool = True) -> Stream:
    """``constructor(capability, info)`` returns ``logic(input1, input2, output)``."""
    builder = stream.scope.operator(name)
    builder.set_notify(notify)
    p1 = builder.new_input(stream, pact1 or Pipeline())
    p2 = builder.new_input(other, pact2 or Pipeline())
    out, result = builder.new_output()
    info = OperatorInfo(builder)

    def build(caps):
        logic = constructor(caps[0], info)
        return lambda: logic(p1, p2, out)
    builder.build(build)
    return result


def _notify_logic(caps: list, init: Iterable[Any]) -> FrontierNotificator:
    notificator = FrontierNotificator()
    for t in init:
        notificator.notify_at(caps[0].delayed(t))
    drop_all(caps)
    return notificator


def unary_notify(stream: Stream, pact: Any, name: str, init: Iterable[Any], logic: Callable) -> Stream:
    """``logic(input, output, notificator)``, notified at each time in ``init`` and at
    the capabilities it asks for."""
    builder = stream.scope.operator(name)
    port = builder.new_input(stream, pact or Pipeline())
    out, result = builder.new_output()

    def build(caps):
        notificator = Notificator([port.frontier], _notify_logic(caps, init))
        return lambda: logic(port, out, notificator)
    builder.build(build)
    return result


def binary_notify(stream: Stream, other: Stream, pact1: Any, pact2: Any, name: str,
                  init: Iterable[Any], logic: Callable) -> Stream:
    builder = stream.scope.operator(name)
    p1 = builder.new_input(stream, pact1 or Pipeline())
    p2 = builder.new_input(other, pact2 or Pipeline())
    out, result = builder.new_output()

    def build(caps):
        notificator = Notificator([p1.frontier, p2.frontier], _notify_logic(caps, init))
        return lambda: logic(p1, p2, out, notificator)
    builder.build(build)
    return result
