"""Live rescaling: processes join and leave a running cluster (seed 003 §3).

- ``membership``: who is in the cluster, and the join/leave protocol of a process's hub;
- ``hub_interface``: what the membership needs of that hub (``MembershipHub``);
- ``messages``: the ``RescaleMessage`` by which each worker learns of a change;
- ``bootstrap``: a joining worker's progress state; ``grants``: its capabilities;
- ``leave``: the order of a leave, and what each of its steps waits for.

Each module states its costs; importing this package imports none of them.
"""
