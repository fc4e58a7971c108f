"""Which twin of a hot path a module uses: the compiled one, unless it is not built or
``TIMELY_PURE_PYTHON=1`` forces the pure-Python twins (one rule for every hot path).

>>> compiled("timely.no_such_module") is None
True
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Optional


def pure_python_forced() -> bool:
    """True when the environment asks for the pure-Python twins."""
    return os.environ.get("TIMELY_PURE_PYTHON", "") in ("1", "true", "yes")


def compiled(module: str) -> Optional[ModuleType]:
    """The compiled module named ``module``, or None (not built, or pure Python forced)."""
    if pure_python_forced():
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None
