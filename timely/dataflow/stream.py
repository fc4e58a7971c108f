"""Stream: the output of an operator, which further operators are fed from.

A Stream names an output port (a Source) in a scope and owns its ``Tee``. Its operator
methods (``map``, ``exchange``, ``unary``, ``state_machine``, ``kafka_sink`` ...) are
offered by the packages that define them (``timely.dataflow.operators``,
``timely.megaphone``, ``timely.connectors.kafka``; see ``Extensible``): each adds an
operator fed by this stream and returns the operator's output stream(s). Opening a
channel costs one channel allocation; nothing here runs per record.
"""
from __future__ import annotations

from typing import Any

from ..progress.location import Source, Target
from .channels import Tee
from .extensible import Extensible


class Stream(Extensible):
    __slots__ = ("scope", "source", "tee", "withdraws")

    def __init__(self, scope: Any, source: Source, tee: Tee) -> None:
        self.scope = scope
        self.source = source
        self.tee = tee
        #: batches on it may take back records given earlier (``timely.dataflow.withdrawal``)
        self.withdraws = False

    def connect_loop(self, handle: Any) -> None:
        """Feed this stream into the feedback edge ``handle`` (from ``scope.feedback``)."""
        handle.connect(self)

    def connect_to(self, target: Target, pact: Any, path: tuple) -> Any:
        """Open a channel from this stream to ``target`` (an input of the operator at
        ``path``), returning the receiving end."""
        worker = self.scope.worker
        channel = worker.new_identifier()
        pusher, puller = pact.connect(worker, channel, path)
        self.tee.pushers.append(pusher)
        self.scope.connect(self.source, target, pact)
        return puller

    def __repr__(self) -> str:
        return f"Stream({self.scope.name!r}, {self.source})"
