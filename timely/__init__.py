"""pytimely: timely dataflow for Python.

Importing ``timely`` assembles the package: the operator families, Megaphone's keyed
state and (with the ``[kafka]`` extra) the Kafka connectors offer their methods on
``Stream`` and ``Scope`` (``timely.dataflow.extensible``).

>>> import timely
>>> timely.execute(2, lambda worker: worker.index)
[0, 1]
"""
from . import megaphone  # noqa: F401 - offers stream.state_machine / stateful_unary / stateful_binary
from . import windows  # noqa: F401 - offers stream.window / reduce_window / collect_window
from .config import Config, ConfigError
from .dataflow.capability import Capability, CapabilityError
from .dataflow.channels import Exchange, Pipeline
from .dataflow.operators import Captured, InputHandle, ProbeHandle
from .execute import execute, execute_from_args
from .visualize import visualize
from .worker import Worker, WorkerAborted

try:
    from .connectors import kafka as _kafka  # noqa: F401 - offers scope.kafka_source, stream.kafka_sink / kafka_commit
except ImportError as _missing:          # the [kafka] extra (confluent-kafka, orjson, msgspec) is not installed
    from .dataflow.scope import Scope
    from .dataflow.stream import Stream
    Scope.extend_unavailable(_missing, "pytimely[kafka]", "kafka_source")
    Stream.extend_unavailable(_missing, "pytimely[kafka]", "kafka_sink", "kafka_commit")

__version__ = "0.1.0"
__all__ = ["Capability", "CapabilityError", "Captured", "Config", "ConfigError",
           "Exchange", "InputHandle", "Pipeline", "ProbeHandle", "Worker", "WorkerAborted",
           "execute", "execute_from_args", "visualize"]
