"""The watermark: how event time maps to timely times, and when a window can close.

A windowed operator reads event times from its records, but it learns what can still
arrive from the dataflow's frontier, which is in timely times (epochs). The rule that
joins them: every record whose event time is ``x`` is expected at the epoch
``epoch_of(x)``, a non-decreasing function; once the frontier has passed epoch ``e``,
no record of an event time in epoch ``e`` or before is expected any more (the
watermark is the start of the frontier's epoch). So an instant ``x`` is behind the
watermark once the frontier has passed ``last_before(x)``: the greatest epoch that may
hold an event time below ``x``.

- ``Epochs(length, origin)``: ``epoch_of(x) = floor((x - origin) / length)``, with
  ``last_before`` computed exactly (``ceil((x - origin) / length) - 1``). ``Epochs()``
  (length 1, origin 0) is the identity for integer event times: times *are* event
  times, and the default.
- any other function ``epoch_of(x) -> int`` (non-decreasing): ``last_before(x)`` is the
  epoch of the greatest float below ``x`` (``math.nextafter``).

Costs: O(1) per call; the window operator calls ``last_before`` once per distinct window
end of a batch and ``epoch_of`` once per session record.

>>> clock = Epochs(60, origin=0)
>>> clock.epoch_of(59), clock.epoch_of(60), clock.last_before(60), clock.last_before(90)
(0, 1, 0, 1)
>>> as_clock(lambda x: int(x // 60)).last_before(60)
0
>>> Epochs().epoch_of(7), Epochs().last_before(7)
(7, 6)
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Optional, Union

#: the types an event time may have, checked per record without a call
NUMBER_TYPES = (int, float)


class Epochs:
    """``epoch_of(x) = floor((x - origin) / length)``: event times in ``length``-wide
    epochs from ``origin`` (the identity for ints when ``length`` is 1 and ``origin``
    0)."""

    __slots__ = ("length", "origin")

    def __init__(self, length: Union[int, float] = 1, origin: Union[int, float] = 0) -> None:
        self.length = check_number(length, "Epochs: length", positive=True)
        self.origin = check_number(origin, "Epochs: origin")

    def epoch_of(self, x: Any) -> int:
        """The epoch at which a record of event time ``x`` is expected."""
        return int((x - self.origin) // self.length)

    __call__ = epoch_of

    def last_before(self, x: Any) -> int:
        """The greatest epoch that may hold an event time below ``x``."""
        return -int((self.origin - x) // self.length) - 1

    def __repr__(self) -> str:
        return f"Epochs({self.length!r}, origin={self.origin!r})"


class FunctionEpochs:
    """A user's ``epoch_of(x) -> int`` (non-decreasing); ``last_before(x)`` is the
    epoch of the greatest float below ``x``."""

    __slots__ = ("function",)

    def __init__(self, function: Callable[[Any], int]) -> None:
        self.function = function

    def epoch_of(self, x: Any) -> int:
        e = self.function(x)
        if type(e) is not int:
            if not isinstance(e, numbers.Integral) or isinstance(e, bool):
                raise TypeError(f"epoch_of({x!r}) returned {e!r}, not an int epoch")
            e = int(e)
        return e

    __call__ = epoch_of

    def last_before(self, x: Any) -> int:
        return self.epoch_of(math.nextafter(float(x), -math.inf))

    def __repr__(self) -> str:
        return f"FunctionEpochs({self.function!r})"


Clock = Union[Epochs, FunctionEpochs]


def as_clock(epoch_of: Optional[Union[Epochs, Callable[[Any], int]]]) -> Clock:
    """The clock of a window operator's ``epoch_of`` argument: None is ``Epochs()``
    (event times are timely times), an ``Epochs`` is itself, a function is wrapped."""
    if epoch_of is None:
        return Epochs()
    if isinstance(epoch_of, (Epochs, FunctionEpochs)):
        return epoch_of
    if not callable(epoch_of):
        raise TypeError(f"epoch_of must be an Epochs or a function event time -> epoch, got {epoch_of!r}")
    return FunctionEpochs(epoch_of)


def check_number(value: Any, what: str, positive: bool = False, non_negative: bool = False) -> Any:
    """``value`` if it is a finite real number (not a bool), else a ValueError or
    TypeError naming ``what``; ``positive``/``non_negative`` bound it.

    >>> check_number(0, "Tumbling: length", positive=True)
    Traceback (most recent call last):
    ...
    ValueError: Tumbling: length must be > 0, got 0
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{what} must be > 0, got {value!r}")
    if non_negative and value < 0:
        raise ValueError(f"{what} must be >= 0, got {value!r}")
    return value
