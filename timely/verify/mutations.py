"""Deliberately broken variants of the protocol, to keep the checker honest.

Each mutation changes one behaviour of the model (``Options.mutation``; the model
implements the change where the behaviour lives) and names the join mode it needs. A
checker that stops catching one of them has lost its teeth: ``tests/test_verify.py``
runs each until the first violation and fails if none comes within its budget.

- ``split_batch``: a progress batch is sent as two, its retirements first and its
  productions after (seed 004: "we must keep these batches intact");
- ``unjustified_send``: ``send_upd`` sends any part of temp, not only parts whose
  remainder is ``justified`` by the sender's capabilities (seed 002 §4);
- ``unsupported_positive``: an operation creates a capability that no held one is at
  or below (breaks the capability rules of §4);
- ``dropped_range``: the bootstrap server's answer to a range request loses its last
  batch (seed 003 §3.4 step 8);
- ``bootstrap_seq_off_by_one``: the bootstrap state claims one more batch per sender
  than it holds (``last_seq + 1``: the "next" number for the "last"); with ``kafka``,
  the snapshot's last sequence number is one too high. The real Progcaster does not
  notice: the joiner silently lacks one batch per sender;
- ``marker_off_by_one``: the marker on a new link carries ``seq - 1``;
- ``skip_snapshot_tail``: a Kafka joiner installs the snapshots but tails each log
  from its end instead of from the snapshot's offset.

Costs: none beyond the model's.

>>> m = mutated("skip_snapshot_tail")
>>> m.mutation, m.join, m.kafka
('skip_snapshot_tail', True, True)
>>> mutated("bootstrap_seq_off_by_one_kafka").mutation
'bootstrap_seq_off_by_one'
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .model import Options

__all__ = ["Mutation", "MUTATIONS", "mutated"]


@dataclass(frozen=True)
class Mutation:
    name: str              # the model's Options.mutation
    join: bool = False
    kafka: bool = False
    description: str = ""


#: test name -> mutation (the Kafka variant of the off-by-one has its own name)
MUTATIONS: dict[str, Mutation] = {
    "split_batch": Mutation("split_batch", description="a progress batch split in two, retirements first"),
    "unjustified_send": Mutation("unjustified_send",
                                 description="send_upd without the justified-remainder rule"),
    "unsupported_positive": Mutation("unsupported_positive",
                                     description="a capability created out of nothing"),
    "dropped_range": Mutation("dropped_range", join=True,
                              description="a range answer loses its last batch"),
    "bootstrap_seq_off_by_one": Mutation("bootstrap_seq_off_by_one", join=True,
                                         description="bootstrap state says last_seq + 1"),
    "bootstrap_seq_off_by_one_kafka": Mutation("bootstrap_seq_off_by_one", join=True, kafka=True,
                                               description="Kafka snapshot says last_seq + 1"),
    "marker_off_by_one": Mutation("marker_off_by_one", join=True, description="marker carries seq - 1"),
    "skip_snapshot_tail": Mutation("skip_snapshot_tail", join=True, kafka=True,
                                   description="Kafka joiner tails from the log end, not the snapshot"),
}


def mutated(key: str, base: Optional[Options] = None) -> Options:
    """Options for mutation ``key`` of ``MUTATIONS`` (joins made frequent)."""
    m = MUTATIONS[key]
    base = base or Options()
    return Options(twin=base.twin, workers=base.workers, kind=base.kind, scopes=base.scopes,
                   join=m.join, kafka=m.kafka, max_joins=2, mutation=m.name,
                   rec_limit=base.rec_limit)
