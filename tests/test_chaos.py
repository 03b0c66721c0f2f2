"""Chaos (issue 10): `scripts/chaos.py` at a small size, and its checker on broken states.

The run kills teammates and the lead with SIGKILL, freezes a teammate past its
lease and restarts the daemon while 3 teammates work through 30 tasks; the
checker must then count nothing lost, nothing done twice, nothing left over.
The checker is also run on repositories broken on purpose, so a pass means
something.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.board import FileBoard, init_repo, open_board
from orchestrator.config import WorktreeConfig
from orchestrator.controlplane import Event
from orchestrator.events import (
    AnyEvent,
    Committed,
    LeaseExpired,
    TaskAbandoned,
    TaskClaimed,
    TaskCompleted,
    TaskStatusSet,
    fields_of,
)
from orchestrator.worktree import WorktreeManager, binding
from scripts.chaos import audit, event_status
from tests.helpers import git

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_chaos_small_every_task_once_nothing_lost_nothing_left(tmp_path: Path) -> None:
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "chaos.py"), "--tasks", "30", "--teammates",
         "3", "--mate-kills", "3", "--lead-kills", "1", "--stops", "1", "--restarts", "1",
         "--lease", "2", "--task-seconds", "0.5", "--seed", "7", "--repo", str(tmp_path),
         "--json"],
        capture_output=True, text=True, timeout=380, check=False)
    assert res.stdout, res.stderr
    out = json.loads(res.stdout)
    problems = {k: out[k] for k in ("lost", "not_in_review", "unexpected", "completed_twice",
                                    "commits_not_one", "wrong_work", "bad_event_lines",
                                    "false_abandons", "events_inconsistent",
                                    "orphan_worktrees", "missing_worktrees",
                                    "leftover_processes", "unfenced_stops", "faults_skipped",
                                    "stalled")
                if out[k]}
    assert not problems, problems
    assert res.returncode == 0 and out["ok"]
    faults = out["faults"]
    assert faults["mate_kills"] == 3 and faults["lead_kills"] == 1 and faults["restarts"] == 1
    assert len(faults["stops"]) == 1
    assert out["worktrees"] == 30 and out["recovery"]["task_completed"] == 30
    # the kills really hit: teammates were restarted, work was requeued or released
    assert out["recovery"]["teammate_started"] >= 3 + 3 * 3
    assert out["recovery"]["task_claimed"] > 30


def _in_review(board: FileBoard, wm: WorktreeManager, files: dict[str, str] | None = None,
               commits: int = 1) -> str:
    """A task taken to review the teammate's way; by default its work is its own file."""
    t = board.claim("alice", task_id=board.add("work").id)
    assert t is not None
    ws = wm.create(t)
    board.update(t.id, t.fence, **binding(ws))
    for i in range(commits):
        for name, text in (files or {f"work_{t.id}.txt": f"{t.id}\n"}).items():
            (ws.path / name).write_text(text + "x" * i)
        git(ws.path, "add", "-A")
        git(ws.path, "commit", "-q", "-m", f"commit {i}")
    board.complete(t.id, t.fence)
    return t.id


CHECKS = ("lost", "not_in_review", "unexpected", "completed_twice", "commits_not_one",
          "wrong_work", "bad_event_lines", "false_abandons", "events_inconsistent",
          "orphan_worktrees", "missing_worktrees")


def test_audit_passes_a_clean_run_and_counts_each_kind_of_damage(repo: Path) -> None:
    layout = init_repo(repo)
    with open_board(layout) as board:
        wm = WorktreeManager(layout, WorktreeConfig(), board)
        good = _in_review(board, wm)
        clean = audit(repo, [good])
        assert not any(clean[k] for k in CHECKS), clean
        two = _in_review(board, wm, commits=2)
        other = _in_review(board, wm, {"elsewhere.txt": "x\n"})
        stuck = board.add("never claimed").id
        board.events.emit(TaskCompleted(token=1), good)  # a second completion
        board.events.emit(TaskAbandoned(token=1, reason="lease lost"), two,
                          actor="alice")  # after handing back
        extra = board.add("nobody asked for this").id
        board.cancel(extra)
        # the events say so, the board not
        board.events.emit(TaskClaimed(owner="cli", token=9, attempt=1), extra)
    git(repo, "worktree", "add", "-q", str(layout.worktree_root / "stray"), "-b", "stray")
    with layout.events.open("ab") as fh:
        fh.write(b'{"ts": "torn\n')
    res = audit(repo, [good, two, other, stuck, "task_099"])
    assert res["lost"] == ["task_099"]
    assert res["not_in_review"] == {stuck: "pending"}
    assert res["unexpected"] == [extra]
    assert res["completed_twice"] == {good: 2}
    assert res["commits_not_one"] == {two: 2}
    assert set(res["wrong_work"]) == {two, other}  # two's file holds more than its id
    assert len(res["bad_event_lines"]) == 1
    assert res["false_abandons"] == [f"{two} token 1"]
    assert res["events_inconsistent"] == {extra: {"board": "cancelled", "events": "in_progress"}}
    assert res["orphan_worktrees"] == [str((layout.worktree_root / "stray").resolve())]
    assert not res["missing_worktrees"]


def test_event_status_follows_every_status_changing_event() -> None:
    def status(kind: AnyEvent) -> str | None:
        name, fields = fields_of(kind)
        return event_status(Event.from_dict({"event": name, **fields}))

    assert status(TaskClaimed(owner="a", token=1, attempt=1)) == "in_progress"
    assert status(LeaseExpired(owner="a", token=1, reason="r", attempts=3,
                               status="failed")) == "failed"
    assert status(TaskStatusSet(from_="failed", to="review")) == "review"
    assert status(Committed(sha="abc", branch="b")) is None
    assert event_status(Event.from_dict({"event": "task_claimed"})) is None  # does not fit


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_chaos_across_three_machines_every_branch_on_the_remote_once(tmp_path: Path) -> None:
    """`--machines`: three clones on one PostgreSQL board, one of each fault (a machine
    killed, one stopped past its leases, the database restarted and down, the remote
    refusing pushes, a full disk, a clock 5 minutes off)."""
    pytest.importorskip("psycopg")
    from tests.pg import pg_bin

    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed")
    res = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "chaos.py"), "--machines", "3", "--teammates",
         "2", "--tasks", "24", "--lease", "3", "--outage", "6", "--seed", "3", "--json"],
        capture_output=True, text=True, timeout=380, check=False)
    assert res.stdout, res.stderr
    out = json.loads(res.stdout)
    assert out["ok"] and res.returncode == 0, out["total"]
    assert [f["fault"] for f in out["faults"]] and {f["fault"] for f in out["faults"]} == {
        "kill", "stop", "db-restart", "db-outage", "remote-ro", "disk-full", "clock"}
    assert all(f["lost"] == f["twice"] == f["stale_accepted"] == 0 for f in out["faults"])
