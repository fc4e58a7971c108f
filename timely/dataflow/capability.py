"""Capabilities: the right to send data at a timestamp from an operator's outputs.

A ``Capability`` for time t lets its operator send records with times >= t. Holding it
is recorded as +1 at t in the output's ``internals`` ChangeBatch (see
timely.progress.operate); ``delayed`` mints another at a later time, ``downgrade``
moves this one forward, ``drop`` (or losing the last reference to it) gives it up.
An ``InputCapability`` comes with a received batch: ``retain`` / ``delayed`` turn it
into a Capability for the batch's time or later. ``Capabilities`` moves the capabilities
of several outputs together (a record stream and a hand-off loop). Every operation is
O(outputs).

A worker that joins a running cluster builds its dataflows before it knows where the
computation stands, so the capabilities its operators receive then are *pending*
(seed 003 §3.2.1): they can be kept, delayed, downgraded or dropped, but not used to
send, and nothing is counted for them. ``worker.bootstrap()`` adopts them at the times
its bootstrap worker granted and announced (``timely.rescaling.grants``): what the
pending operations asked for is then counted in one step, so it reaches the others in
one atomic progress batch.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..progress.timestamp import less_equal


class CapabilityError(ValueError):
    """A capability was used in a way that would break progress tracking."""


class Capability:
    """The right to send at ``time`` (or later) on the outputs whose internals it holds."""

    __slots__ = ("time", "_internals", "_valid", "_pending")

    def __init__(self, time: Any, internals: Sequence[Any]) -> None:
        self.time = time
        self._internals = internals
        self._valid = True
        #: None once counted; on a joining worker ``(key, root)`` until adopted
        self._pending: Any = None
        for batch in internals:
            batch.update(time, 1)

    @classmethod
    def pending(cls, time: Any, internals: Sequence[Any], key: Any, registry: list,
                root: bool = True) -> "Capability":
        """A capability of a joining worker, not counted until adopted (module docstring);
        ``key`` names the operator output, ``registry`` collects it for adoption."""
        cap = cls.__new__(cls)
        cap.time = time
        cap._internals = internals
        cap._valid = True
        cap._pending = (key, root, registry)
        registry.append(cap)
        return cap

    @property
    def is_pending(self) -> bool:
        """Held by a joining worker that has not bootstrapped yet: not usable to send."""
        return self._pending is not None

    def delayed(self, time: Any) -> "Capability":
        """A new capability for ``time``, which must be >= this one's time."""
        self._check()
        if not less_equal(self.time, time):
            raise CapabilityError(f"cannot delay a capability at {self.time!r} to {time!r}: "
                                  f"not greater or equal")
        if self._pending is not None:
            key, _, registry = self._pending
            return Capability.pending(time, self._internals, key, registry, root=False)
        return Capability(time, self._internals)

    def downgrade(self, time: Any) -> None:
        """Move this capability to ``time`` (>= its time)."""
        self._check()
        if not less_equal(self.time, time):
            raise CapabilityError(f"cannot downgrade a capability at {self.time!r} to {time!r}")
        if self._pending is None:
            for batch in self._internals:
                batch.update(time, 1)
                batch.update(self.time, -1)
        self.time = time

    def drop(self) -> None:
        """Give the capability up (idempotent)."""
        if self._valid:
            self._valid = False
            if self._pending is None:
                for batch in self._internals:
                    batch.update(self.time, -1)

    def adopt(self, granted: Any) -> bool:
        """Count a pending capability now that the bootstrap worker granted (and
        announced) one capability at ``granted`` for its output, or none (``None``).
        A root, the capability the operator was built with, is the granted one: kept at
        the time it was downgraded to (if that is later), or dropped. One it was delayed
        to is minted from it at its own time, or given up if that time is before the
        grant. Returns whether the capability is held."""
        _, root, _ = self._pending
        self._pending = None
        wanted = self.time
        if granted is None or (not root and not less_equal(granted, wanted)):
            self._valid = False
            return False
        if root:
            self.time = granted
            if not self._valid:
                for batch in self._internals:
                    batch.update(granted, -1)
                return False
            if wanted != granted and less_equal(granted, wanted):
                self.downgrade(wanted)
            return True
        if self._valid:
            for batch in self._internals:
                batch.update(wanted, 1)
        return self._valid

    def covers(self, internal: Any) -> bool:
        return self._valid and self._pending is None and any(b is internal for b in self._internals)

    @property
    def valid(self) -> bool:
        """Held, not dropped."""
        return self._valid

    def _check(self) -> None:
        if not self._valid:
            raise CapabilityError(f"capability at {self.time!r} was already dropped")

    def __del__(self) -> None:
        self.drop()

    def __repr__(self) -> str:
        return f"Capability({self.time!r}{'' if self._valid else ', dropped'})"


class Capabilities:
    """Capabilities of one operator's outputs at one time, moved together: usable where
    a ``Capability`` is (``time``, ``covers``, ``downgrade``, ``drop``)."""

    __slots__ = ("caps",)

    def __init__(self, caps: Sequence[Capability]) -> None:
        self.caps = list(caps)

    @property
    def time(self) -> Any:
        return self.caps[0].time

    @property
    def is_pending(self) -> bool:
        return any(c.is_pending for c in self.caps)

    def covers(self, internal: Any) -> bool:
        return any(c.covers(internal) for c in self.caps)

    def downgrade(self, time: Any) -> None:
        for c in self.caps:
            c.downgrade(time)

    def drop(self) -> None:
        for c in self.caps:
            c.drop()


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
