"""The progress-tracking core: timestamps, antichains, change batches, reachability.

The hot-path classes (ChangeBatch, MutableAntichain, Tracker) come in two twins: a
compiled Cython one and a pure-Python one. This package exports the compiled twins when
they are built and importable, and the pure-Python ones when they are not or when the
environment sets ``TIMELY_PURE_PYTHON=1``. ``implementation()`` says which is in use.
The pure-Python twins stay importable from their modules (``timely.progress.antichain``
...) and the compiled ones from ``timely.progress._c*``.
"""
from __future__ import annotations

from .._twin import compiled
from . import antichain as _py_antichain
from . import change_batch as _py_change_batch
from . import reachability as _py_reachability
from .antichain import Antichain
from .location import Location, Source, Target
from .reachability import Builder, summarize_outputs
from .timestamp import (TIME_MAX, followed_by, identity_summary, is_identity,
                        less_equal, less_than, minimum, results_in)

_IMPLEMENTATION = "python"
ChangeBatch = _py_change_batch.ChangeBatch
MutableAntichain = _py_antichain.MutableAntichain
Tracker = _py_reachability.Tracker

_compiled = [compiled(f"{__name__}._c{stem}") for stem in ("antichain", "change_batch", "reachability")]
if all(m is not None for m in _compiled):
    MutableAntichain = _compiled[0].MutableAntichain
    ChangeBatch = _compiled[1].ChangeBatch
    Tracker = _compiled[2].Tracker
    _IMPLEMENTATION = "cython"


def implementation() -> str:
    """``"cython"`` when the compiled twins are in use, else ``"python"``."""
    return _IMPLEMENTATION


def twins(name: str) -> dict:
    """Both twins of one hot-path family, by implementation name.

    ``name`` is ``"ChangeBatch"``, ``"MutableAntichain"`` or ``"Tracker"``; the
    ``"cython"`` entry is missing when the extensions are not built.
    """
    modules = {"ChangeBatch": ("change_batch", _py_change_batch),
               "MutableAntichain": ("antichain", _py_antichain),
               "Tracker": ("reachability", _py_reachability)}
    stem, py = modules[name]
    found = {"python": getattr(py, name)}
    try:
        import importlib
        found["cython"] = getattr(importlib.import_module(f"{__name__}._c{stem}"), name)
    except ImportError:
        pass
    return found


__all__ = ["Antichain", "Builder", "ChangeBatch", "Location", "MutableAntichain", "Source",
           "Target", "TIME_MAX", "Tracker", "followed_by", "identity_summary", "implementation",
           "is_identity", "less_equal", "less_than", "minimum", "results_in",
           "summarize_outputs", "twins"]
