"""``python -m timely.visualize MODULE:FUNCTION [--format mermaid|dot] [-o FILE]``: draw
the dataflow ``FUNCTION(scope)`` of ``MODULE`` without running it (``timely.visualize``).

A spec that is not ``MODULE:FUNCTION``, a module that does not import, or a name that
is not a function there is reported with the usage, exit status 2.

(``timely.visualize`` is a package rather than a module because ``timely`` exports the
function ``visualize`` under the same name: ``python -m`` of a module that the package
has already imported warns, ``python -m`` of a package runs this file.)
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, Callable, Optional

from . import RENDERERS, visualize


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m timely.visualize",
                                description="Draw a dataflow, without running it, as Mermaid or "
                                            "Graphviz DOT text.")
    p.add_argument("spec", metavar="MODULE:FUNCTION",
                   help="a dataflow function f(scope), as worker.dataflow takes, e.g. myflows:wordcount")
    p.add_argument("--format", choices=sorted(RENDERERS), default="mermaid")
    p.add_argument("-o", "--output", metavar="FILE", help="write the text here (default: stdout)")
    return p


def _dataflow_function(spec: str) -> Callable[[Any], Any]:
    """The function ``spec`` names; ValueError saying what is wrong with it."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"{spec!r} is not MODULE:FUNCTION")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import module {module_name!r}: {e}") from None
    function = getattr(module, name, None)
    if function is None:
        raise ValueError(f"module {module_name!r} has no {name!r}")
    if not callable(function):
        raise ValueError(f"{spec!r} is not a dataflow function f(scope) (it is of type "
                         f"{type(function).__name__})")
    return function


def main(argv: Optional[list] = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        build = _dataflow_function(args.spec)
    except ValueError as e:
        parser.error(str(e))
    text = visualize(build, args.format) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
