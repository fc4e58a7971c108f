"""TrackedDict: a bin's state that remembers which keys may have changed, and to what.

``stateful_unary`` and ``stateful_binary`` hand their logic a bin's dict to read and
mutate as it likes, so an incremental checkpoint must learn from the dict itself which
keys changed. A ``TrackedDict`` is a ``dict`` that records, in ``changed``, every key
written, deleted, or read (``d[k]``, ``get``, ``setdefault``, ``pop``: a value read may
be mutated in place, so a read counts as a possible change, unless the value is a
scalar or a tuple of scalars, which nothing can change in place), with the value object the
dict holds for it after that access, or ``codec.GONE`` once it holds none. A checkpoint
packs ``changed`` as it is: the very objects the bin holds (so an in-place mutation
after the access is in them), with no second lookup in the bin, whose memory has gone
cold by then (measured: 0.35 against 1.1 us per key). Reading through ``values()`` or
``items()`` hands out every value, so it marks the whole bin (``changed is None``) and
the next checkpoint writes the bin whole. Iterating keys, ``len`` and ``in`` mark
nothing. Values must be changed through the dict (or be read from it in the same
epoch): a reference kept elsewhere and mutated later is not seen.

Costs: a tracked access is the dict operation plus one dict store: about 0.1 us in the
pure twin, a few tens of ns in the compiled one (``timely.checkpoint._ctracked``, used
when built; ``TIMELY_PURE_PYTHON=1`` forces the pure twin, ``PyTrackedDict`` is always
it); untracked ones cost what a dict's cost.

>>> d = TrackedDict({"a": 1, "b": [2]})
>>> d["c"] = 3; d.get("b").append(4); del d["a"]; "b" in d
True
>>> changed = d.take_changed()
>>> sorted(changed), changed["b"], changed["a"] is GONE, d.changed
(['a', 'b', 'c'], [2, 4], True, {})
>>> _ = list(d.items()); d.changed is None
True
"""
from __future__ import annotations

from typing import Any, Optional

from .._twin import compiled
from ..communication.codec import GONE

_MISSING = object()
_SCALARS = (int, str, float, bytes, bool, type(None))


def _immutable(value: Any) -> bool:
    """A value no logic can change in place: a scalar, or a tuple of scalars."""
    t = type(value)
    return t in _SCALARS or t is tuple and all(type(x) in _SCALARS for x in value)


class TrackedDict(dict):
    """A dict that records the keys that may have changed (see the module docstring)."""

    __slots__ = ("changed",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.changed: Optional[dict] = {}

    def _mark(self, key: Any, value: Any) -> Any:
        changed = self.changed
        if changed is not None:
            changed[key] = value
        return value

    def mark_all(self) -> None:
        """Every key may have changed: the next checkpoint writes the bin whole."""
        self.changed = None

    def take_changed(self) -> Optional[dict]:
        """The keys marked since the last call, each with the value the dict holds for it
        (``GONE``: none), or None (all of them); and start afresh."""
        changed, self.changed = self.changed, {}
        return changed

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self._mark(key, value)

    def __delitem__(self, key: Any) -> None:
        dict.__delitem__(self, key)
        self._mark(key, GONE)

    def __getitem__(self, key: Any) -> Any:
        value = dict.__getitem__(self, key)
        return value if _immutable(value) else self._mark(key, value)

    def get(self, key: Any, default: Any = None) -> Any:
        value = dict.get(self, key, _MISSING)
        if value is _MISSING:
            return default
        return value if _immutable(value) else self._mark(key, value)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        return self._mark(key, dict.setdefault(self, key, default))

    def pop(self, key: Any, *default: Any) -> Any:
        value = dict.pop(self, key, _MISSING)
        if value is _MISSING:
            return dict.pop(self, key, *default)      # the default, or dict's KeyError
        self._mark(key, GONE)
        return value

    def popitem(self) -> tuple:
        key, value = dict.popitem(self)
        self._mark(key, GONE)
        return key, value

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def __ior__(self, other: Any) -> "TrackedDict":
        self.update(other)
        return self

    def clear(self) -> None:
        self.mark_all()
        dict.clear(self)

    def values(self):  # type: ignore[override]
        self.mark_all()
        return dict.values(self)

    def items(self):  # type: ignore[override]
        self.mark_all()
        return dict.items(self)

    def copy(self) -> dict:
        return dict(dict.items(self))

    def __reduce__(self) -> tuple:
        return (dict, (dict(dict.items(self)),))


# The pure twin stays importable as ``PyTrackedDict``; the compiled one replaces the
# public name when it is built (see timely._twin).
PyTrackedDict = TrackedDict
_compiled = compiled("timely.checkpoint._ctracked")
IMPLEMENTATION = "python" if _compiled is None else "cython"
if _compiled is not None:
    TrackedDict = _compiled.TrackedDict  # type: ignore[misc]
