"""Capabilities: the right to send data at a timestamp from an operator's outputs.

A ``Capability`` for time t lets its operator send records with times >= t. Holding it
is recorded as +1 at t in the output's ``internals`` ChangeBatch (see
timely.progress.operate); ``delayed`` mints another at a later time, ``downgrade``
moves this one forward, ``drop`` (or losing the last reference to it) gives it up.
An ``InputCapability`` comes with a received batch: ``retain`` / ``delayed`` turn it
into a Capability for the batch's time or later. Every operation is O(outputs).
"""
from __future__ import annotations

from typing import Any, Sequence

from ..progress.timestamp import less_equal


class CapabilityError(ValueError):
    """A capability was used in a way that would break progress tracking."""


class Capability:
    """The right to send at ``time`` (or later) on the outputs whose internals it holds."""

    __slots__ = ("time", "_internals", "_valid")

    def __init__(self, time: Any, internals: Sequence[Any]) -> None:
        self.time = time
        self._internals = internals
        self._valid = True
        for batch in internals:
            batch.update(time, 1)

    def delayed(self, time: Any) -> "Capability":
        """A new capability for ``time``, which must be >= this one's time."""
        self._check()
        if not less_equal(self.time, time):
            raise CapabilityError(f"cannot delay a capability at {self.time!r} to {time!r}: "
                                  f"not greater or equal")
        return Capability(time, self._internals)

    def downgrade(self, time: Any) -> None:
        """Move this capability to ``time`` (>= its time)."""
        self._check()
        if not less_equal(self.time, time):
            raise CapabilityError(f"cannot downgrade a capability at {self.time!r} to {time!r}")
        for batch in self._internals:
            batch.update(time, 1)
            batch.update(self.time, -1)
        self.time = time

    def drop(self) -> None:
        """Give the capability up (idempotent)."""
        if self._valid:
            self._valid = False
            for batch in self._internals:
                batch.update(self.time, -1)

    def covers(self, internal: Any) -> bool:
        return self._valid and any(b is internal for b in self._internals)

    @property
    def valid(self) -> bool:
        """Held, not dropped."""
        return self._valid

    def disown(self) -> None:
        """Forget the capability without reporting a drop: it was never counted (the
        initial capabilities of a worker that joined a running cluster)."""
        self._valid = False

    def _check(self) -> None:
        if not self._valid:
            raise CapabilityError(f"capability at {self.time!r} was already dropped")

    def __del__(self) -> None:
        self.drop()

    def __repr__(self) -> str:
        return f"Capability({self.time!r}{'' if self._valid else ', dropped'})"


class InputCapability:
    """The capability that comes with a received batch, valid while handling it."""

    __slots__ = ("time", "_internals")

    def __init__(self, time: Any, internals: Sequence[Any]) -> None:
        self.time = time
        self._internals = internals

    def retain(self) -> Capability:
        """A Capability for this batch's time."""
        return Capability(self.time, self._internals)

    def delayed(self, time: Any) -> Capability:
        """A Capability for ``time`` >= this batch's time."""
        if not less_equal(self.time, time):
            raise CapabilityError(f"cannot delay an input capability at {self.time!r} to {time!r}")
        return Capability(time, self._internals)

    def retain_for_output(self, port: int) -> Capability:
        """A Capability for this batch's time on output ``port`` only (timely's
        ``retain_for_output``): holding it does not hold back the other outputs."""
        return Capability(self.time, [self._internals[port]])

    def delayed_for_output(self, time: Any, port: int) -> Capability:
        """A Capability for ``time`` (>= this batch's time) on output ``port`` only."""
        if not less_equal(self.time, time):
            raise CapabilityError(f"cannot delay an input capability at {self.time!r} to {time!r}")
        return Capability(time, [self._internals[port]])

    def covers(self, internal: Any) -> bool:
        return any(b is internal for b in self._internals)

    def __repr__(self) -> str:
        return f"InputCapability({self.time!r})"
