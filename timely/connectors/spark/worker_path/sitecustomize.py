"""Run at the start-up of a session's Python workers, the driver's and the executors'
(``session`` puts this directory first on their path): pyspark is imported from the
installed package, with its cached bytecode, rather than from Spark's ``pyspark.zip``.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's zip) first on every
Python worker's path, and Python never caches bytecode for a module imported from a
zip: each worker process compiled pyspark's sources anew, 1.0-1.3 s of CPU against
0.3 s from the installed package (measured here), and a local job starts about seven
of them (a data source's lookup, create, plan, write and commit daemons, the UDF
daemons), a few seconds of CPU while its first job runs. ``session`` runs the
workers with the driver's Python and packages, so the installed pyspark is the zip's
version: the zips leave the path when pyspark is found without them. Any other
``sitecustomize`` on the path then runs as it would have.
"""
import importlib.machinery
import importlib.util
import os
import sys


def _spark_zip(entry: str) -> bool:
    name = os.path.basename(entry)
    return name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith("-src.zip"))


def _without_spark_zips() -> None:
    path = list(sys.path)
    sys.path[:] = [p for p in path if not _spark_zip(p)]      # the stdlib's zip entry stays
    if importlib.util.find_spec("pyspark") is None:     # only the zip has it: keep Spark's path
        sys.path[:] = path


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    others = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


_without_spark_zips()
_chain()
