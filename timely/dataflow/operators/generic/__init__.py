"""Generic operators: the builders every other operator family is made of (timely's
``operators/generic``).

``unary`` / ``binary`` hand the user's logic its input ports, with their frontiers, and
its output port; ``unary_notify`` / ``binary_notify`` add a ``Notificator``;
``OperatorInfo`` says where an operator is. ``pipeline_operator`` is the stateless batch
transform that ``map``, ``filter``, ``inspect``, ``exchange`` and ``broadcast`` share, and
``drop_all`` gives up capabilities an operator does not keep. All are built on
timely.dataflow.operator (``OperatorBuilder``, ports, ``FrontierNotificator``); their
costs are in their modules.
"""
from .notificator import Notificator
from .operator import binary, binary_notify, drop_all, pipeline_operator, unary, unary_notify
from .operator_info import OperatorInfo

__all__ = ["Notificator", "OperatorInfo", "binary", "binary_notify", "drop_all",
           "pipeline_operator", "unary", "unary_notify"]
