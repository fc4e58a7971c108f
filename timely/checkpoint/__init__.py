"""Checkpoints: keyed state that survives restarts and crashes, exactly.

Timely is fail-stop; pytimely is not. The unit of durable state is the Megaphone bin,
because bins already move between workers. A checkpoint needs no barriers: the
frontier passing a time at a stateful operator is already a consistent cut.

- ``binlog``: each stateful operator writes, per bin, what changed since its last entry
  (a delta), and the whole bin from time to time (a base), whenever it crosses a
  checkpoint boundary (every ``--checkpoint-interval`` epochs). A checkpoint costs what
  changed, never the state's size.
- ``tracked``: ``TrackedDict``, how a logic that mutates a bin's dict tells which keys.
- ``commit``: the commit operator. Once its frontier passes a boundary every worker's
  state for it is durable: it records the sources' positions there, then the consumer
  group's offsets commit (``kafka_commit``). Offsets and state never disagree.
- ``records`` / ``store`` / ``kafka_store``: what is stored, and where: a Kafka cluster
  (the default, under the job's own topics: ``kafka_layout``, read by ``kafka_reads``,
  compacted by ``kafka_forget``) or a local directory (SQLite).
- ``registry`` / ``context``: one store per process; the incarnation every process of
  the cluster agrees on; and the restore at start-up (every bin as of the last complete
  checkpoint, onto whoever owns it now; sources read on from there).

``--checkpoint auto|kafka|dir:PATH|off`` (``Config.checkpoint``) chooses; ``auto``, the
default, is on for a dataflow that reads with ``kafka_source`` and commits with
``kafka_commit``. An operator opts in by keeping its state in Megaphone's
``stateful_unary`` / ``stateful_binary`` / ``state_machine`` (any keyed computation fits:
the logic gets the bin's dict and a notificator), whose bins are what is checkpointed.
"""
from .records import CheckpointCorrupt, CheckpointError, CheckpointMissing

__all__ = ["CheckpointCorrupt", "CheckpointError", "CheckpointMissing"]
