"""Megaphone: keyed state that migrates live between workers (seed 003 §3.5).

Keys hash to bins (``bins``), a routing table maps bins to workers, and timestamped
commands (``control``) change the table. The F operator (``routing``) routes each
record by the configuration in force at its time and ships moving bins; the S operator
(``state``) holds the bins and applies records in time order; the rebalancer
(``rebalance``) issues the commands when the cluster changes.
"""
