"""Megaphone: keyed state that migrates live between workers (seed 003 §3.5).

Keys hash to bins (``bins``), a routing table maps bins to workers, and timestamped
commands (``control``) change the table. The F operator (``routing``) routes each
record by the configuration in force at its time and ships moving bins; the S operator
(``state``) holds the bins (``bin_states``) and applies records in time order (its hot
path: ``apply``); the rebalancer (``rebalance``) issues the commands when the cluster
changes.

Importing the package offers ``stream.state_machine``, ``stream.stateful_unary`` and
``stream.stateful_binary`` (see ``timely.dataflow.extensible``).
"""
from ..dataflow.stream import Stream
from .bin_states import StatefulError
from .state import state_machine, stateful_binary, stateful_unary

Stream.extend(state_machine=state_machine, stateful_unary=stateful_unary, stateful_binary=stateful_binary)

__all__ = ["StatefulError", "state_machine", "stateful_binary", "stateful_unary"]
