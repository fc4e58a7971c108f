"""Helpers for tests that run real cluster processes (see timely.launch.LocalCluster)."""
from __future__ import annotations

import json
import os
import time
from collections import Counter


def wait_for_line(proc, pattern, timeout=20.0):
    """Wait until ``proc`` printed a line matching ``pattern``; fail with its output if it
    exits or the time runs out first."""
    if not proc.wait_for(pattern, timeout):
        raise AssertionError(f"{proc.label} never printed /{pattern}/:\n{proc.output()}")


def wait_until(cond, timeout=90.0):
    """Poll ``cond`` until it holds. The timeout only bounds a failure: under load an
    admin round trip to Tansu (a snapshot index, a topic creation) has taken seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def kafka_scale_results(directory, written: dict, log: str) -> dict:
    """What tests/jobs/kafka_scale_job.py's processes wrote to ``directory``, by worker,
    checked: every event of ``written`` read once, and the final per-user counts exact."""
    results = []
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as f:
            results.extend(json.load(f))
    read = Counter(tuple(r) for res in results for r in res["read"])
    twice = [k for k, n in read.items() if n > 1]
    assert not twice, f"read twice: {twice[:5]}\n{log}"
    assert set(read) == set(written), f"missing {sorted(set(written) - set(read))[:5]}\n{log}"
    final: dict = {}
    for res in results:
        for user, total in res["counts"]:
            final[user] = max(final.get(user, 0), total)
    assert final == dict(Counter(v["user"] for v in written.values())), log
    return {res["worker"]: res for res in results}
