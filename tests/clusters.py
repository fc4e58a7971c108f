"""Helpers for tests that run real cluster processes (see timely.launch.LocalCluster)."""
from __future__ import annotations

import re
import time


def wait_for_line(proc, pattern, timeout=20.0):
    """Wait until ``proc`` printed a line matching ``pattern``; fail with its output if it
    exits or the time runs out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(re.search(pattern, line) for _, line in proc.lines):
            return
        if proc.popen.poll() is not None:
            break
        time.sleep(0.02)
    raise AssertionError(f"{proc.label} never printed /{pattern}/:\n{proc.output()}")
