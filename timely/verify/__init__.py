"""Executable checks of the progress protocol's safety (seed 002), run on our classes.

Seed 002 proves timely's progress tracking safe in Isabelle as transition systems:
the exchange protocol (§4: ``perf_op``, ``send_upd``, ``recv_upd`` with capabilities,
data, message queues, ``temp`` and ``glob``), local propagation (§5) and the combined
protocol (§6). This package turns those models into a random exploration whose
workers are made of our real classes — ``ChangeBatch`` (either twin), ``Progcaster``
(send / recv / apply with its sequence checks, accumulate / state / install), the
``Tracker`` built by ``Builder``, and for joining workers (seed 003 §3.4) the real
``BootstrapServer``, ``run_client`` and ``run_kafka_client`` — and checks the
paper's invariants after every transition, so that a change that breaks safety fails
``tests/test_verify.py``.

Modules:

- ``oracle``: the independent ``implied_frontier`` oracle (shared with
  ``tests/test_reachability.py``);
- ``order``: random dataflow graphs, the could-result-in order, pointstamp bitsets;
- ``model``: configurations and transitions (``Model``, ``Options``);
- ``properties``: the checked properties (``Checker``, ``Violation``);
- ``scheduler``: the seeded random scheduler (``run_schedule``, ``explore``);
- ``mutations``: broken variants the checker must catch;
- ``accounting``: the progress accounting checks of a real run (``--check-progress``);
- ``checkpoints``: checkpoints and crash recovery (``timely.checkpoint``: BinLog,
  commits, ``restore_point``, ``fold_bin``) as random schedules with crashes, checked at
  every restore, with its own mutants (``CHECKPOINT_MUTANTS``);
- ``sink``: a Kafka sink partition changing writer at epoch boundaries (the real
  ``KafkaSinkState`` over an in-memory log, read by the real ``PartitionEpochs``), with
  crashes, and its mutants (``SINK_MUTANTS``);
- ``__main__``: ``python -m timely.verify --steps N --seeds K [--join] [--kafka] [--leave]``,
  ``python -m timely.verify --checkpoints --steps N --seeds K [--mutant NAME]``.

>>> from timely.verify import Options, run_schedule
>>> result = run_schedule(Options(twin="python", join=True), seed=1, steps=150)
>>> result.violation is None, result.transitions > 0, result.states > result.transitions
(True, True, True)
"""
from __future__ import annotations

from .checkpoints import (CHECKPOINT_MUTANTS, CheckpointOptions, explore_checkpoints,
                          run_checkpoint_schedule)
from .model import Model, Options
from .mutations import MUTATIONS, mutated
from .properties import PROPERTIES, Checker, Violation
from .scheduler import Report, ScheduleResult, explore, run_schedule
from .sink import SINK_MUTANTS, explore_sink, run_sink_schedule

__all__ = ["Model", "Options", "MUTATIONS", "mutated", "PROPERTIES", "Checker", "Violation",
           "Report", "ScheduleResult", "explore", "run_schedule", "CheckpointOptions",
           "CHECKPOINT_MUTANTS", "explore_checkpoints", "run_checkpoint_schedule",
           "SINK_MUTANTS", "explore_sink", "run_sink_schedule"]
