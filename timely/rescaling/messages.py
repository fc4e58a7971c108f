"""The messages by which a worker learns that the cluster changed.

The membership (``timely.rescaling.membership``) appends a ``RescaleMessage`` to every
local worker's queue (``Membership.rescales``) when a process starts joining
(``"join"``, naming the worker that bootstraps it), finishes joining (``"joined"``), is
lost before it finished (``"lost"``), starts leaving (``"leave"``), needs no more
broadcasts (``"quiesce"``) or has left (``"left"``), and when a member died
(``"crash"``: every worker drops its dataflows and waits) and the survivors agreed where
they go on from (``"rollback"``: ``payload`` holds the round, the live workers and the
identifier base; every worker rebuilds its dataflows from their checkpoints); each
worker applies it at the start of its next step (``Worker._apply_rescale``).

Costs: a message is a small slotted object, made once per change and shared by the
process's workers.
"""
from __future__ import annotations


class RescaleMessage:
    """Process ``process`` (workers ``first..last``) joined (``kind == "join"``, with its
    ``bootstrap`` worker), finished joining (``"joined"``), was lost before it finished
    (``"lost"``), is leaving (``"leave"``), needs no more broadcasts (``"quiesce"``) or
    has left (``"left"``); applied by each worker at the start of its next step."""

    __slots__ = ("kind", "process", "first", "last", "bootstrap", "payload")

    def __init__(self, kind: str, process: int, first: int, last: int, bootstrap: int = -1,
                 payload: object = None) -> None:
        self.kind, self.process, self.first, self.last, self.bootstrap = kind, process, first, last, bootstrap
        self.payload = payload

    def __repr__(self) -> str:
        return f"RescaleMessage({self.kind}, process {self.process}, workers {self.first}..{self.last})"
