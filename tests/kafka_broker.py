"""The test broker: Tansu (see broker/tansu.py), re-exported for the fixtures."""
from broker.tansu import TansuBroker, tansu_binary

__all__ = ["TansuBroker", "tansu_binary"]
