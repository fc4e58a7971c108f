"""Extensible: how operator families add methods to ``Stream`` and ``Scope``.

Timely (Rust) offers ``stream.map(...)`` through extension traits implemented in each
operator module, so the stream type knows nothing of its operators. Here each family
(``timely.dataflow.operators``, ``timely.megaphone``, ``timely.connectors.kafka``)
calls ``Stream.extend(name=function)`` when its package is imported: ``stream.name(...)``
then calls ``function(stream, ...)``. Imports run one way, from the families down to
``Stream``. Binding costs one ``setattr`` per method at import; a call costs nothing more
than the function's own.

>>> class Box(Extensible):
...     __slots__ = ("value",)
...     def __init__(self, value): self.value = value
>>> def doubled(box): return box.value * 2
>>> Box.extend(doubled=doubled)
>>> Box(21).doubled()
42
>>> Box.extend(doubled=lambda box: 0)
Traceback (most recent call last):
...
TypeError: Box.doubled is offered twice: by doubled and by <lambda>
"""
from __future__ import annotations

from typing import Callable


class Extensible:
    """A class whose methods other modules offer (see the module docstring)."""

    __slots__ = ()

    @classmethod
    def extend(cls, **methods: Callable) -> None:
        """Offer each ``function`` as the method ``name``; a name is offered once (the
        same function again is a no-op, so re-importing a family is harmless)."""
        for name, function in methods.items():
            found = cls.__dict__.get(name)
            if found is not None and found is not function:
                raise TypeError(f"{cls.__name__}.{name} is offered twice: by "
                                f"{getattr(found, '__name__', found)} and by {function.__name__}")
            setattr(cls, name, function)

    @classmethod
    def extend_unavailable(cls, error: ImportError, extra: str, *names: str) -> None:
        """Offer ``names`` as methods that raise an ImportError naming the extra to install
        (a family whose optional dependencies are missing: ``error`` says which)."""
        def unavailable(name: str) -> Callable:
            def method(self, *args, **kwargs):
                raise ImportError(f"{cls.__name__}.{name} needs the optional dependencies of "
                                  f"{extra}: pip install '{extra}' ({error})")
            method.__name__ = name
            return method
        cls.extend(**{name: unavailable(name) for name in names})
