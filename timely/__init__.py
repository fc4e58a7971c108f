"""pytimely: timely dataflow for Python.

>>> import timely
>>> timely.execute(2, lambda worker: worker.index)
[0, 1]
"""
from .config import Config, ConfigError
from .dataflow.channels import Exchange, Pipeline
from .dataflow.capability import Capability, CapabilityError
from .dataflow.operators import Captured, InputHandle, ProbeHandle
from .execute import execute, execute_from_args
from .worker import Worker, WorkerAborted

__version__ = "0.1.0"
__all__ = ["Capability", "CapabilityError", "Captured", "Config", "ConfigError",
           "Exchange", "InputHandle", "Pipeline", "ProbeHandle", "Worker", "WorkerAborted",
           "execute", "execute_from_args"]
