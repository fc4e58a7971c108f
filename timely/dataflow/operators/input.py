"""Input: records fed into a dataflow from the worker's own code (``scope.new_input``).

``send`` is O(1): records are buffered at the current time and handed on as one batch
every 4096; ``send_batch`` hands its records on as one batch (O(records) to list them);
``advance_to`` and ``close`` flush, then downgrade or drop the input's one capability,
O(1), and activate the operator. ``held`` says whether the dataflow's exchange credit
is used up (O(channels over their credit), none in the common case): a program that
steps while it is keeps slow receivers' queues bounded.

When the program's ``build`` returns, every input it left open is closed
(``close_left_open``), as timely closes an ``InputHandle`` when it is dropped: a dataflow
whose input nobody can feed any more would otherwise never complete.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable, Optional

from ..capability import Capability
from ..stream import Stream
from .generic import OperatorInfo


class InputHandle:
    """Feeds records into a dataflow from the worker's own code.

    ``send`` buffers records at the current time; ``advance_to`` promises no more
    records before a later time; ``close`` promises none at all. Every worker has its
    own handle, and the dataflow completes only when every worker closed its input.
    """

    def __init__(self, scope: Any) -> None:
        builder = scope.operator("Input")
        builder.set_notify(False)
        self._out, self.stream = builder.new_output()
        self._activate = OperatorInfo(builder).activator(scope.worker)
        self._worker = scope.worker
        self._dataflow = scope.path[0]
        self._cap: Optional[Capability] = None
        self._buffer: list = []
        self.closed = False
        #: the time the input was at when it closed: every record sent was before it
        self.closed_at: Any = None

        def constructor(caps):
            self._cap = caps[0]
            return None
        builder.build(constructor)
        scope.worker.checkpoint_context.add_input(self)
        if scope.worker.stall is not None:
            scope.worker.stall.waits(builder.path, self._waits)

    def _waits(self) -> Optional[str]:
        if self.closed:
            return None
        return "an input the program has not closed: it must advance_to a later time or close it"

    def restart_at(self, time: Any) -> None:
        """The dataflow was restored from a checkpoint at ``time``: every record before it
        is in the restored state, so the input starts there (``time()`` says so)."""
        cap = self._cap
        if cap is not None and cap.valid and cap.time < time:
            cap.downgrade(time)

    def time(self) -> Any:
        """The time records are sent at now (on a joining worker, after
        ``worker.bootstrap()``: the time its bootstrap worker granted, or later)."""
        if self._cap is None:
            raise ValueError("the input is closed")
        return self._cap.time

    def _holds(self) -> None:
        cap = self._cap
        if cap.is_pending:
            raise ValueError("this worker is joining a running cluster: call worker.bootstrap() "
                             "before sending input")
        if not cap.valid:
            raise ValueError("this worker joined a running cluster and was granted no capability "
                             "for this input: its bootstrap worker held none that reaches it")

    epoch = time

    @property
    def held(self) -> bool:
        """Whether this dataflow has used its exchange credit toward a worker of another
        process (``timely.communication.credit``): a receiver is that far behind. A
        program feeding records faster than they are consumed steps the worker while it
        is (``worker.step_while(lambda: handle.held)``) instead of sending more, and the
        receivers' queues stay bounded."""
        return self._worker.credit_exhausted(self._dataflow)

    def send(self, record: Any) -> None:
        if self.closed:
            raise ValueError("cannot send: the input is closed")
        self._holds()
        self._buffer.append(record)
        if len(self._buffer) >= 4096:
            self.flush()

    def send_batch(self, records: Iterable[Any]) -> None:
        if self.closed:
            raise ValueError("cannot send: the input is closed")
        self._holds()
        self.flush()
        records = list(records)
        if records:
            self._out.give_batch(self._cap, records)
            self._activate()

    def flush(self) -> None:
        if self._buffer:
            records, self._buffer = self._buffer, []
            self._out.give_batch(self._cap, records)
            self._activate()

    def advance_to(self, time: Any) -> None:
        """Send later records at ``time`` (which must not be earlier than ``time()``)."""
        if self.closed:
            raise ValueError("cannot advance: the input is closed")
        if not self._cap.valid:        # a joined worker granted nothing: no capability to move
            return
        self.flush()
        if time != self._cap.time:
            self._cap.downgrade(time)
            self._activate()

    def close(self) -> None:
        """No more records, at any time (idempotent)."""
        if not self.closed:
            self.flush()
            self.closed = True
            self.closed_at = self._cap.time if self._cap.valid else None
            if self._cap.valid:
                self._cap.drop()
                self._activate()
            self._cap = None


def close_left_open(worker: Any) -> list[InputHandle]:
    """Close the inputs of ``worker``'s dataflows that are still open, and say so; returns
    them. Called when the program's ``build`` has returned: nothing can feed them now."""
    left = [h for ctx in worker.checkpoint_contexts.values() for h in ctx.inputs
            if isinstance(h, InputHandle) and not h.closed]
    if left:
        logging.getLogger("timely.worker").info(
            "worker %d: build returned with %d input(s) still open, at times %s: closing them "
            "(as timely closes a dropped InputHandle)", worker.index, len(left),
            [h._cap.time if h._cap is not None and h._cap.valid else None for h in left])
        for handle in left:
            handle.close()
    return left


def new_input(scope: Any) -> tuple[InputHandle, Stream]:
    handle = InputHandle(scope)
    return handle, handle.stream
