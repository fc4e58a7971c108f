"""The cluster job of ``benchmarks/scalein.py``: ``_migration_job.py migration`` with the leave logged.

``python benchmarks/_scalein_job.py [migration options] [timely options]`` runs
``_migration_job.migration`` unchanged (WordCount over ``state_machine``: worker 0 loads
``--load`` distinct keys, prints ``steady at WALLTIME``, then injects ``--rate``
epochs/s, recording per-epoch latency and, with ``--joins 1``, waits until the
rebalancer's migration after the next change of the routed workers (here: a leave)
has ended; every other original worker closes its input at once; every worker prints
its final state). The only difference: the log lines of a leave (``timely.cluster``:
``leave requested``, ``leaves the cluster``, ``holds no keyed state any more``, ``has
drained and leaves``; ``timely.worker``: the rescale messages applied, ``has
drained``; ``timely.megaphone``: ``ships N bins (K keys) at T``, the rebalancer's
steps) are printed at INFO, each prefixed with its wall-clock time (``%(created)``),
so the benchmark can split a leave into its phases.
"""
from __future__ import annotations

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _migration_job  # noqa: E402

LOGGERS = ("timely.cluster", "timely.worker", "timely.megaphone")


def main(argv: list[str]) -> None:
    # configured before _migration_job.migration's own basicConfig, which is then a no-op
    logging.basicConfig(level=logging.WARNING, format="%(created).6f %(name)s: %(message)s")
    for name in LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    _migration_job.migration(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
