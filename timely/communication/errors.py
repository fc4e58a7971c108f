"""The error that stops a process of a cluster: the cluster cannot go on.

``ClusterError`` is raised by the cluster (``timely.communication.cluster``: a peer
died, went silent, or broke the protocol), by Kafka progress
(``timely.communication.kafka``: the progress logs failed) and by the membership
(``timely.rescaling.membership``: a member was lost). It has a module of its own,
below all of them, so that each imports it at its top and none imports another for it.

Costs: none; it is an exception class.
"""
from __future__ import annotations


class ClusterError(RuntimeError):
    """The cluster cannot go on: a peer died, went silent, or broke the protocol."""


class Terminated(ClusterError):
    """This process stopped on SIGTERM because it could not leave the cluster (its state
    cannot move, or it is the last process): ``execute`` exits with status 143, as the
    signal's default action would, once it has stopped."""
