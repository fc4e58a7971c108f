"""Checkpoints and crash recovery as random schedules on the real checkpoint code.

The model runs one stateful operator (bins of keyed state, as Megaphone's
``state_machine`` or ``stateful_unary`` keeps them) on W workers (2-4) over a finite
source: a few keyed records per epoch, each in a partition of one source topic, a key
in a bin by a fixed hash. The code under test is the real one: a ``BinLog`` per worker
(``touch`` / ``touch_bin`` / ``applied`` / ``cross`` / ``arrive`` / ``leave`` /
``start`` / ``durable``, the megaphone ``Bin`` wire form for bins on the move), the
real ``Entry`` / ``Commit`` / ``Incarnation`` records and their codec, a real
``Registry`` deciding every new life (``decide`` at a start, ``redecide`` + ``install``
after a crash, as the rollback coordinator does; both call ``restore_point``), and
``fold_bin`` over ``Registry.entries``. The store is ``MemStore``, an in-memory store of
the ``Store`` protocol whose writers are real ``TicketWriter`` s: a write encodes at
once and returns a ticket, the schedule decides when records become durable (in order
per writer) and, at a crash, which suffix of each writer's pending records is lost.

Transitions (picked by a seeded scheduler, weights perturbed per schedule):

- ``apply``: a worker applies some records of the least epoch t it has records at
  (every record of an earlier epoch routed to it applied; bins it holds; at most the
  time of a move it takes part in), calling ``cross(t)`` first, as the eager S does;
- ``cross``: a worker's input frontier reaches X (any X after everything it applied
  and at or before its next record, or the end: ``cross(None)``);
- ``config``: a move of 1-2 bins at a time c no worker has passed; ``ship``: the old
  owner, once it applied everything before c, calls ``cross(c)`` then ``leave(b)`` and
  sends the bin (``Bin.to_wire``); ``arrive``: the new owner calls ``arrive(b, c)``.
  Records of the bin from c on go to the new owner, which applies none (nor crosses
  past c) before the bin is there;
- ``ack``: the store makes some of one writer's pending records durable, in order;
- ``commit``: a worker's commit operator writes ``Commit(inc, L, ...)`` once the
  minimum of every worker's ``durable()`` passes a boundary L above the life's start
  (once every worker's final crossing is durable: the end epoch), naming where its
  partitions hold the epochs from L on;
- ``crash``: some workers die; every writer loses any suffix of its pending records;
  the survivors start a new life (``Registry.redecide``) with the bins spread over
  them; ``restart``: every worker dies and all of them start again (a new ``Registry``,
  ``decide``);
- ``late`` (only with ``CheckpointOptions.late_writes``, beyond the fault model above):
  a pending record of a dead life lands after the next life began, in order per writer.

Properties:

- ``complete``: a restore point's label is complete in its incarnation: the durable
  commits of that incarnation at that label cover every partition (computed here, not
  by ``complete_labels``);
- ``restorable``: a restore never fails (``CheckpointMissing`` / ``CheckpointCorrupt``
  from ``restore_point`` or ``fold_bin``, a position or operator missing);
- ``exactly_once``: every restored bin equals the fold of exactly the records of the
  epochs before the label, the commits' positions are where those epochs end (the
  replay starts at the label), and after the run every key's state is the fold of every
  record;
- ``final``: draining finishes, and then the store restores at the end epoch.

The restore checks run at every crash and restart, and after every transition that
made something durable (a *virtual* crash: every worker dies now and every pending
record is lost, one of the outcomes the fault model allows).

``CHECKPOINT_MUTANTS`` are broken variants, applied by monkeypatching the real code
(or, for ``ship_without_cross``, a step the model's F skips); the tests require each to
be caught. ``python -m timely.verify --checkpoints --steps N --seeds K [--mutation NAME]``
runs long explorations; ``--replay SEED --checkpoints`` prints one schedule's trace.

Not modelled: pending notifications (``Bin.pending``), sinks, parts of large bins and
the size threshold that writes a bin whole (the states are small), processes joining
mid-life, the sources' own ``positions_at`` (the commits' positions are computed here).

Costs: a transition is O(records + bins); a restore check O(entries of the incarnation)
plus a decode of every record once (when it becomes durable). About 10-20 thousand
transitions per second.

>>> report = explore_checkpoints(CheckpointOptions(), seeds=[0], steps=300)
>>> report.violations, report.schedules > 0, report.evaluations["exactly_once"] > 0
([], True, True)
"""
from __future__ import annotations

from .model import CHECKPOINT_PROPERTIES, CheckpointModel, CheckpointOptions
from .mutants import CHECKPOINT_MUTANTS, CheckpointMutant, mutant_applied
from .scheduler import explore_checkpoints, report_text, run_checkpoint_schedule
from .store import MemStore

__all__ = ["CheckpointOptions", "CheckpointMutant", "CHECKPOINT_MUTANTS", "CHECKPOINT_PROPERTIES",
           "MemStore", "CheckpointModel", "run_checkpoint_schedule", "explore_checkpoints",
           "report_text", "mutant_applied"]
