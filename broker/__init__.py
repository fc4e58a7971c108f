"""broker: a Kafka-backed progress log for pytimely, independent of timely itself.

Each worker appends its progress batches — opaque ``(key, delta)`` updates, tagged with
a channel and a per-channel sequence number — to its own log, one Kafka record per
batch, so a batch stays atomic without transactions. A snapshot of a log's prefix is
the fold of its batches (deltas summed per opaque key, per channel), written to a
snapshot topic; a reader finds the latest snapshot of a worker through a consumer-group
offset (one group per worker) and tails the log from the offset the snapshot covers.
One subscriber per process feeds every worker thread of that process; its read
position in each log is a log sequence number carried by every record, never a broker
end-offset query. The Kafka client is confluent-kafka (``broker.client``).

Nothing here imports ``timely``: the fold only sums integer deltas per key, which is
what makes compaction possible without the circular dependency seed 003 §3.3 feared.
"""
from .client import BrokerError, BrokerLostError
from .log import ProgressLog, Topics, fold
from .subscriber import Subscriber

__all__ = ["BrokerError", "BrokerLostError", "ProgressLog", "Subscriber", "Topics", "fold"]
