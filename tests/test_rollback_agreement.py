"""The rollback agreement on one process (``timely.rescaling.rollback``), driven by hand.

Protects what the survivors of a crash rely on to agree, with the races the cluster tests
only meet now and then made deterministic here: a survivor that reports a death the
coordinator has not seen (a joiner that finished joining on that survivor just as the
coordinator's rollback expelled it, then died) makes the coordinator roll back too, so
the survivor waiting for a rollback gets one and both go on with the same processes;
stale word from an earlier round changes nothing; the coordinator decides only once every
survivor and its own workers have dropped their dataflows; a joiner admitted while a
rollback is being applied reaches the workers after the rollback, not before.
"""
from __future__ import annotations

import threading
from collections import deque
from types import SimpleNamespace

from timely.rescaling.membership import Membership


class Conn:
    def __init__(self, process: int) -> None:
        self.process = process
        self.joining = False
        self.frames: list = []

    def send_frame(self, channel, source, first, last, seq, payload) -> None:
        self.frames.append(payload)

    def close(self) -> None:
        pass


def coordinator_after_a_rollback():
    """Process 0, coordinator, in round 1 after process 1 died: process 2 is the other
    survivor, process 3 (a joiner it expelled) is not connected."""
    conns = {2: Conn(2)}
    hub = SimpleNamespace(process=0, workers=1, workers_per_process=1, first_index=0, connections=conns,
                          stopping=False, joining=False, events=[deque()], wakes=[threading.Event()],
                          failed=[], restarted=[])
    hub.fail = hub.failed.append
    hub.forget = lambda conn: conns.pop(conn.process, None)
    hub.restart_progress = lambda round_, workers: hub.restarted.append((round_, workers))
    hub.checkpoints = SimpleNamespace(redecide=lambda workers: {}, install=lambda decisions: {})
    m = Membership(hub, threading.RLock())
    m.workers_ready.set()
    m.life, m.dead, m.round = {0, 2}, {1}, 1
    return m, hub, conns[2]


def kinds(m):
    return [(msg.kind, msg.process) for msg in m.rescales[0]]


def test_a_death_only_a_survivor_saw_makes_the_coordinator_roll_back_too():
    m, hub, p2 = coordinator_after_a_rollback()
    m._ready_from(2, 1, [1, 3])          # process 2 dropped its dataflows: process 3 died there
    assert m.recovering and m.dead == {1, 3}
    assert kinds(m) == [("crash", 3)]    # our workers drop theirs too
    m.suspended_locally()                # ... and once they have, the coordinator decides
    rollbacks = [f for f in p2.frames if f[0] == "rollback"]
    assert len(rollbacks) == 1
    _, round_, dead, workers, _ = rollbacks[0]
    assert (round_, sorted(dead), workers) == (2, [1, 3], [0, 2])
    assert not m.recovering and m.round == 2 and m.life == {0, 2}
    assert kinds(m)[-1] == ("rollback", -1) and hub.restarted == [(2, [0, 2])]
    assert hub.failed == []


def test_word_from_an_earlier_round_changes_nothing():
    m, hub, p2 = coordinator_after_a_rollback()
    m._ready_from(2, 0, [1, 3])          # sent before rollback 1: stale
    assert not m.recovering and m.dead == {1} and kinds(m) == [] and p2.frames == []


def test_the_rollback_waits_for_every_survivor_and_our_own_workers():
    m, hub, p2 = coordinator_after_a_rollback()
    m.life, m.dead, m.round = {0, 1, 2}, set(), 0
    m.crashed(1, "process 1 (127.0.0.1:1) disconnected")
    assert m.recovering and kinds(m) == [("crash", 1)]
    m._ready_from(2, 0, [1])             # process 2 is ready; our worker is not yet
    assert p2.frames == []
    m.suspended_locally()
    assert [f[:4] for f in p2.frames] == [("rollback", 1, [1], [0, 2])]
    assert not m.recovering and m.life == {0, 2}


def test_a_join_asked_while_a_rollback_is_applied_reaches_the_workers_after_it():
    """Applying a rollback restarts the progress logs (in Kafka mode, topics created: half
    a second on CI) before it is posted to the workers. A joiner admitted in that window
    had its join applied before the rollback, whose rebuild dropped it again: the joiner
    and the members then disagreed on who reads which Kafka partition, handing one back
    and forth for ever. A join waits until the rollback is posted."""
    m, hub, p2 = coordinator_after_a_rollback()
    hub.timeout, hub.kafka = 0.0, None   # no waiting here: an admission that must wait is refused
    during = []
    hub.restart_progress = lambda round_, workers: during.append(m.admit(3, 4, 0))
    m._apply_rollback((2, [1], [0, 2], {}))
    assert during == [None]              # refused while the rollback was not posted yet
    admit = m.admit(3, 4, 0)
    assert admit is not None
    admit(Conn(3))
    assert kinds(m) == [("rollback", -1), ("join", 3)]
