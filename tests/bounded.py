"""Run a computation under a time limit, so that a hang fails a test instead of the suite."""
from __future__ import annotations

import threading
from typing import Any, Callable

import pytest

import timely


def bounded(fn: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Run ``fn()`` in a thread; fail if it does not return in time; re-raise its error."""
    box: dict = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"did not return within {timeout} s (hang)")
    if "error" in box:
        raise box["error"]
    return box["result"]


def execute_bounded(config: Any, build: Callable, timeout: float = 30.0) -> list:
    """``timely.execute(config, build)`` under ``bounded``. A worker count runs that many
    worker threads: these tests look at the workers' own objects (probes, handles, the
    worker) once ``execute`` returns, which only threads share; a ``Config`` runs as it
    says (``tests/test_forked.py`` runs workers as processes)."""
    if isinstance(config, int):
        config = timely.Config(workers=config, worker_mode="threads")
    return bounded(lambda: timely.execute(config, build), timeout)
