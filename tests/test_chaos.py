"""Liveness under chaos: the seeds of ``benchmarks/chaos.py`` that once failed, replayed.

Each is the pipeline's dataflow on 3 supervised processes with the seed's schedule of
SIGKILLs and SIGTERMs (see the harness's docstring); it passes only if every process
exits 0 within 30 s of the last fault or epoch and every result is exact and once.

- seed 3, p2p: a replacement joined and was sent SIGTERM at once; it left before the
  rebalancer's commands that moved bins to it arrived, and the bins were lost with it
  (the job never ended). A leaver now waits for the rebalancers' ``Release``.
- seed 6: SIGTERM to process 0 (the coordinator, the rebalancers' driver, sink writer),
  then a SIGKILL while it leaves.
"""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import chaos  # noqa: E402


@pytest.mark.parametrize("seed, mode", [(3, "p2p"), (6, "p2p"), (6, "kafka")])
def test_a_chaos_schedule_that_once_failed_ends_exact(tansu, seed, mode):
    lines: list[str] = []
    result = chaos.run_one(seed, mode, tansu.bootstrap, say=lines.append)
    log = "\n".join(lines + result.get("log", []))
    assert result["faults"], log
    assert result["ended"], log
    assert result["exact"], log
    assert result["crash_loop"] is None, log
