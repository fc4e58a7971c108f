"""Helpers for tests that run real cluster processes (see timely.launch.LocalCluster)."""
from __future__ import annotations


def wait_for_line(proc, pattern, timeout=20.0):
    """Wait until ``proc`` printed a line matching ``pattern``; fail with its output if it
    exits or the time runs out first."""
    if not proc.wait_for(pattern, timeout):
        raise AssertionError(f"{proc.label} never printed /{pattern}/:\n{proc.output()}")
