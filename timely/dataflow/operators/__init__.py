"""The operator library: sources, record transforms, routing, loops, observation, and
the generic ``unary`` / ``binary`` builders with frontiers and notifications.

Every operator moves batches: a transform costs one call of the user's function per
record plus O(1) per batch; routing operators cost what their contract costs (see
timely.dataflow.channels). Received batches are shared, read-only lists: build a new
list rather than mutating one you received.

Each family is a module of its own, named as timely's (``map``, ``exchange``, ``input``,
``probe``, ``generic`` ...); importing this package offers their operators as methods of
``Stream`` and ``Scope`` (see ``Extensible``).

>>> import timely
>>> def build(worker):
...     out = worker.dataflow(lambda s: s.to_stream(range(5)).map(lambda x: x * x).capture())
...     worker.step_while(lambda: not out.done())
...     return out.records()
>>> timely.execute(1, build)
[[0, 1, 4, 9, 16]]
"""
from __future__ import annotations

from ..scope import Scope
from ..stream import Stream
from .broadcast import broadcast
from .capture import Captured, capture
from .concat import concat
from .count import accumulate, count
from .enterleave import enter, leave
from .exchange import exchange
from .feedback import LoopHandle, feedback
from .filter import filter
from .generic import Notificator, OperatorInfo, binary, binary_notify, unary, unary_notify
from .input import InputHandle, new_input
from .inspect import inspect, inspect_batch
from .map import flat_map, map, map_batch
from .partition import partition
from .probe import ProbeHandle, probe, probe_with
from .to_stream import to_stream

Stream.extend(map=map, flat_map=flat_map, filter=filter, map_batch=map_batch, inspect=inspect,
              inspect_batch=inspect_batch, exchange=exchange, broadcast=broadcast, concat=concat,
              partition=partition, enter=enter, leave=leave, probe=probe, probe_with=probe_with,
              capture=capture, accumulate=accumulate, count=count, unary=unary,
              unary_notify=unary_notify, binary=binary, binary_notify=binary_notify)
Scope.extend(new_input=new_input, to_stream=to_stream, feedback=feedback)

__all__ = ["Captured", "InputHandle", "LoopHandle", "Notificator", "OperatorInfo", "ProbeHandle",
           "accumulate", "binary", "binary_notify", "broadcast", "capture", "concat", "count", "enter",
           "exchange", "feedback", "filter", "flat_map", "inspect", "inspect_batch", "leave", "map", "map_batch",
           "new_input", "partition", "probe", "probe_with", "to_stream", "unary", "unary_notify"]
