"""Exchange: records moved to the worker their key routes to (``key % peers`` for a
non-negative int key, as in timely; the stable hash otherwise): the ``Exchange`` contract
of timely.dataflow.channels; its partition is timely.dataflow.exchange.

O(records + peers) per batch for the routing, one key call per record; the operator
itself passes batches on unchanged.
"""
from __future__ import annotations

from typing import Any, Callable

from ..channels import Exchange
from ..stream import Stream
from .generic import pipeline_operator


def exchange(stream: Stream, key: Callable[[Any], Any]) -> Stream:
    return pipeline_operator(stream, "Exchange", lambda t, rs, out: out.give_unchecked(t, rs),
                             Exchange(key))
