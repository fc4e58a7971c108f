"""Notificator: a ``FrontierNotificator`` bound to the input frontiers of its operator.

``notify_at`` O(1); iterating yields each capability whose time every input frontier has
passed, at what ``FrontierNotificator.next`` costs: O(pending x frontier size) a
capability (see timely.dataflow.operator).
"""
from __future__ import annotations

from typing import Any

from ....progress import MutableAntichain
from ...capability import Capability
from ...operator import FrontierNotificator


class Notificator:
    """A FrontierNotificator bound to an operator's input frontiers.

    ``notify_at(cap)`` asks to be told when the inputs have passed ``cap.time``;
    iterating yields each such capability once (least times first).
    """

    def __init__(self, frontiers: list[MutableAntichain], inner: FrontierNotificator) -> None:
        self._frontiers = frontiers
        self._inner = inner

    def notify_at(self, cap: Capability) -> None:
        self._inner.notify_at(cap)

    def pending(self) -> list[Any]:
        return self._inner.pending()

    def __iter__(self):
        frontiers = self._frontiers
        while True:
            cap = self._inner.next(frontiers)
            if cap is None:
                return
            yield cap
