"""OperatorInfo: where an operator is, in its scope and in the cluster (timely's ``OperatorInfo``).

Made once per operator, when it is built: O(1). ``activator(worker)`` returns a function
that schedules the operator again; a call costs one ``activate`` of its path (O(depth)).
"""
from __future__ import annotations

from typing import Any, Callable


class OperatorInfo:
    """Where an operator is: its index in its scope, its path, this worker, peers."""

    __slots__ = ("name", "index", "path", "worker_index", "peers")

    def __init__(self, builder: Any) -> None:
        self.name = builder.name
        self.index = builder.index
        self.path = builder.path
        self.worker_index = builder.scope.worker.index
        self.peers = builder.scope.worker.peers

    def activator(self, worker: Any) -> Callable[[], None]:
        path = self.path
        return lambda: worker.activations.activate(path)
