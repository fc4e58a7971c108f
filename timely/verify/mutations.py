"""Deliberately broken variants of the protocol, to keep the checker honest.

Each mutation changes one behaviour of the model (``Options.mutation``; the model
implements the change where the behaviour lives) and names the join / leave mode it
needs. A checker that stops catching one of them has lost its teeth:
``tests/test_verify.py`` runs each until the first violation and fails if none comes
within its budget.

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
  from its end instead of from the snapshot's offset;
- ``grant_closed_time``: the bootstrap server grants the joiner a capability at the
  minimum time at every output where nothing it holds is at or below it (a time that
  may be closed already), instead of the times its capabilities imply;
- ``grant_not_strict``: the server also grants at exactly a pointstamp it holds (at or
  above, as ``timely.rescaling.grants`` does today), not only strictly above one;
- ``grant_announced_late``: the server hands the grants to the joiner at once but sends
  the announcement batch only later (``announce_late``, once the joiner installed), so
  it may drop the capabilities that justified them in between;
- ``handover_unordered``: a leaving worker hands over a capability while batches it
  sent, which that capability justifies, are still in flight (and not strictly above
  one it keeps);
- ``handover_not_net_zero``: a leaving worker that hands a capability over also sends
  a -1 batch for it, and the receiver takes it without a +1: the views lose a
  capability that still exists;
- ``record_splits_batch`` (Kafka): a step's record is cut at a size, and the batch that
  straddles the cut goes half in one record and half in the next, both under its
  sequence number: the other processes apply the first half and skip the second as a
  duplicate (a batch must stay whole within one record);
- ``record_last_batch_per_channel`` (Kafka): a step's record keeps one batch per
  channel, the last (the step's batches gathered in a dict): a channel that sent twice
  in one step loses the first batch in the log.

The two races (``grant_not_strict``, ``handover_unordered``) show only under some
delivery orders; their entries fix the schedule shape that makes them likely (a few
workers, many joins or leaves).

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
    leave: bool = False
    description: str = ""
    #: the shape of the schedules that make it show (a race needs a few workers and
    #: many joins or leaves); None: drawn per schedule
    workers: Optional[int] = None
    max_joins: int = 2
    max_leaves: int = 2


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
    "grant_closed_time": Mutation("grant_closed_time", join=True,
                                  description="a joiner granted the minimum time, which nothing "
                                              "held justifies"),
    "grant_not_strict": Mutation("grant_not_strict", join=True, workers=2, max_joins=4,
                                 description="a joiner granted a time the server holds itself, "
                                             "not strictly above one"),
    "grant_announced_late": Mutation("grant_announced_late", join=True,
                                     description="grants announced after the joiner installed, not before"),
    "handover_unordered": Mutation("handover_unordered", leave=True, workers=4, max_leaves=3,
                                   description="a handover while batches the leaver sent, which "
                                               "the capability justifies, are in flight"),
    "handover_not_net_zero": Mutation("handover_not_net_zero", leave=True,
                                      description="a handover sends -1, the receiver takes the "
                                                  "capability silently"),
    "record_splits_batch": Mutation("record_splits_batch", kafka=True,
                                    description="a step's record cut through a batch, both halves "
                                                "under its sequence number"),
    "record_last_batch_per_channel": Mutation("record_last_batch_per_channel", kafka=True,
                                              description="a step's record keeps only each channel's "
                                                          "last batch"),
}


def mutated(key: str, base: Optional[Options] = None) -> Options:
    """Options for mutation ``key`` of ``MUTATIONS`` (joins made frequent)."""
    m = MUTATIONS[key]
    base = base or Options()
    return Options(twin=base.twin, workers=base.workers or m.workers, kind=base.kind,
                   scopes=base.scopes, join=m.join, kafka=m.kafka, leave=m.leave,
                   max_joins=m.max_joins, max_leaves=m.max_leaves, mutation=m.name,
                   rec_limit=base.rec_limit)
