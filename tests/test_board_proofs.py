"""The board's promises under pressure: many processes, and random sequences of operations."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from orchestrator.board import open_board
from orchestrator.errors import InvalidTransition, LeaseLost
from orchestrator.fsutil import atomic_write
from orchestrator.layout import Layout
from orchestrator.model import Status, Task, format_task_id
from orchestrator.record import to_json

CLAIM_SCRIPT = """
import json, sys
from orchestrator.board import open_board
from orchestrator.config import BoardConfig
from orchestrator.layout import Layout
owner = sys.argv[2]
claimed = []
# fsync off: this proves the locking, not the disk (scripts/bench/board.py measures that).
with open_board(Layout.at(sys.argv[1]), BoardConfig(fsync=False), actor=owner) as board:
    board.list()  # the initial scan, before the race starts
    sys.stdout.write("ready\\n"); sys.stdout.flush()
    sys.stdin.readline()  # start together
    while (task := board.claim(owner, lease_seconds=600)) is not None:
        claimed.append([task.id, task.lease.token])
print(json.dumps(claimed))
"""


@pytest.mark.slow
def test_eight_processes_claim_two_thousand_tasks_exactly_once(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path).ensure()
    total = 2000
    for n in range(1, total + 1):  # written directly: the test is about claiming
        task = Task(id=format_task_id(n), subject=f"task {n}", priority=n % 7)
        atomic_write(layout.task_file(task.id), to_json(task), durable=False)
    procs = [subprocess.Popen([sys.executable, "-c", CLAIM_SCRIPT, str(tmp_path), f"w{i}"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for i in range(8)]
    for p in procs:
        assert p.stdout.readline() == "ready\n"
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    results = {f"w{i}": json.loads(p.communicate(timeout=110)[0]) for i, p in enumerate(procs)}
    assert all(p.returncode == 0 for p in procs)
    claimed = [tid for got in results.values() for tid, _ in got]
    assert len(claimed) == total and len(set(claimed)) == total
    assert sum(1 for got in results.values() if got) >= 2  # they really competed
    with open_board(layout) as board:
        tasks = board.list()
        assert len(tasks) == total
        owner_of = {tid: w for w, got in results.items() for tid, _ in got}
        for t in tasks:
            assert t.status is Status.IN_PROGRESS and t.fence == 1
            assert t.lease is not None and t.lease.token == 1 and t.owner == owner_of[t.id]
        assert board.claim("late") is None


class BoardMachine(RuleBasedStateMachine):
    """Model: id -> (status, token, expires_at, attempts, owner)."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="board-sm-"))
        self.board = open_board(Layout.at(self.dir))
        self.model: dict[str, dict] = {}
        self.old_tokens: list[tuple[str, int]] = []

    def teardown(self) -> None:
        self.board.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _in(self, status: Status) -> list[str]:
        return sorted(t for t, m in self.model.items() if m["status"] is status)

    def _requeue(self, tid: str) -> None:
        m = self.model[tid]
        self.old_tokens.append((tid, m["token"]))
        m["attempts"] += 1
        m["status"] = Status.PENDING if m["attempts"] < 2 else Status.FAILED
        m["owner"] = None

    @rule(priority=st.integers(0, 2))
    def add(self, priority: int) -> None:
        t = self.board.add("t", priority=priority, max_attempts=2)
        self.model[t.id] = dict(status=Status.PENDING, token=0, expires=0.0, attempts=0,
                                owner=None, priority=priority)

    @rule(owner=st.sampled_from(["a", "b", "c"]))
    def claim(self, owner: str) -> None:
        pending = self._in(Status.PENDING)
        expected = min(pending, key=lambda t: (-self.model[t]["priority"], t), default=None)
        got = self.board.claim(owner, lease_seconds=30)
        assert (got.id if got else None) == expected
        if got is not None:
            m = self.model[got.id]
            assert got.lease.token == m["token"] + 1
            m.update(status=Status.IN_PROGRESS, token=got.lease.token,
                     expires=got.lease.expires_at, owner=owner)

    @precondition(lambda self: self._in(Status.IN_PROGRESS))
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(self._in(Status.IN_PROGRESS)))
        t = self.board.renew(tid, self.model[tid]["token"], lease_seconds=60)
        self.model[tid]["expires"] = t.lease.expires_at

    @precondition(lambda self: self._in(Status.IN_PROGRESS))
    @rule(data=st.data(), ok=st.booleans())
    def finish(self, data: st.DataObject, ok: bool) -> None:
        tid = data.draw(st.sampled_from(self._in(Status.IN_PROGRESS)))
        m = self.model[tid]
        if ok:
            self.board.complete(tid, m["token"])
            self.old_tokens.append((tid, m["token"]))
            m.update(status=Status.REVIEW, owner=None)
        else:
            self.board.fail(tid, m["token"], "boom")
            self._requeue(tid)

    @rule(delta=st.sampled_from([0.0, 45.0, 120.0]))
    def expire(self, delta: float) -> None:
        now = time.time() + delta
        expected = sorted(t for t in self._in(Status.IN_PROGRESS)
                          if self.model[t]["expires"] <= now)
        got = sorted(t.id for t in self.board.requeue_expired(now=now))
        assert got == expected
        for tid in got:
            self._requeue(tid)

    @rule(owner=st.sampled_from(["a", "b", "c"]))
    def owner_died(self, owner: str) -> None:
        expected = sorted(t for t in self._in(Status.IN_PROGRESS)
                          if self.model[t]["owner"] == owner)
        got = sorted(t.id for t in self.board.requeue_owner(owner, reason="died"))
        assert got == expected
        for tid in got:
            self._requeue(tid)

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        tid = data.draw(st.sampled_from(sorted(self.model)))
        m = self.model[tid]
        if m["status"].final:
            with pytest.raises(InvalidTransition):
                self.board.cancel(tid)
            return
        if m["status"] is Status.IN_PROGRESS:
            self.old_tokens.append((tid, m["token"]))
        self.board.cancel(tid)
        m.update(status=Status.CANCELLED, owner=None)

    @precondition(lambda self: self.old_tokens)
    @rule(data=st.data())
    def stale_write_is_refused(self, data: st.DataObject) -> None:
        tid, token = data.draw(st.sampled_from(self.old_tokens))
        before = self.board.get(tid)
        with pytest.raises(LeaseLost):
            self.board.complete(tid, token)
        assert self.board.get(tid) == before

    @invariant()
    def no_task_lost_and_one_live_lease(self) -> None:
        tasks = {t.id: t for t in self.board.list()}
        assert set(tasks) == set(self.model)
        for tid, t in tasks.items():
            m = self.model[tid]
            assert t.status is m["status"] and t.attempts == m["attempts"]
            assert t.fence == m["token"]
            if t.status is Status.IN_PROGRESS:
                assert t.lease is not None and t.lease.token == t.fence
                assert t.owner == m["owner"] == t.lease.owner
            else:
                assert t.lease is None and t.owner is None


BoardMachine.TestCase.settings = settings(
    max_examples=20, stateful_step_count=20, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_board_state_machine = BoardMachine.TestCase
