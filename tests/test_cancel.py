"""Cancel stops the running agent at once; nothing removes a workspace a process runs in."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from orchestrator.board import open_board
from orchestrator.board.tasklogs import read_jsonl
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.procutil import pid_alive, processes_in
from tests.test_team_support import (
    add_tasks,
    cli,
    events,
    finish,
    start,
    team_cleanup,
    team_env,
    wait_until,
    working_on,
)


def test_cancel_stops_the_running_agent_promptly_and_says_cancelled(repo: Path) -> None:
    [task] = add_tasks(repo, 1)
    with team_cleanup(repo):
        # a long lease: only noticing the cancellation on the board stops it in time
        proc = start(repo, "--burst", "-n", "1", "--command", "sleep 120",
                     env=team_env(board_lease_seconds=120))
        st = wait_until(lambda: working_on(repo, task.id), 60, "the agent to start")
        worktree = repo / ".worktrees" / task.id
        assert processes_in(worktree)
        cancelled_at = time.monotonic()
        assert cli(repo, "cancel", task.id).returncode == 0
        wait_until(lambda: not pid_alive(st["backend_pgid"]), 10, "the agent to be stopped")
        assert time.monotonic() - cancelled_at < 10
        code, out = finish(proc, 60)
    assert code == 0, out
    log = read_jsonl(Layout.at(repo).logs / f"{task.id}.jsonl")
    assert [r["reason"] for r in log if r["kind"] == "abandoned"] == ["cancelled"]
    [ev] = [e for e in events(repo, "task_abandoned") if e["task"] == task.id]
    assert ev["reason"] == "cancelled"
    assert "lease lost" not in out
    with open_board(Layout.at(repo)) as board:
        assert board.get(task.id).status is Status.CANCELLED
    assert not processes_in(worktree)


def test_no_removal_touches_a_workspace_a_process_runs_in(repo: Path) -> None:
    from orchestrator.config import Config
    from orchestrator.worktree import WorktreeManager, binding

    kept, stopped = add_tasks(repo, 2)
    paths = []
    with open_board(Layout.at(repo)) as board:
        for task in (kept, stopped):
            claimed = board.claim("alice", task_id=task.id)
            assert claimed is not None and claimed.lease is not None
            ws = WorktreeManager(Layout.at(repo), Config.load(repo).worktree,
                                 board).create(claimed)
            board.update(task.id, claimed.lease.token, **binding(ws))
            paths.append(ws.path)
        board.complete(kept.id, board.get(kept.id).lease.token)  # type: ignore[union-attr]
        board.cancel(stopped.id)
    lingering = [subprocess.Popen(["sleep", "60"], cwd=p / ".") for p in paths]
    try:
        wait_until(lambda: all(processes_in(p) for p in paths), 10, "the processes")
        for args in (["gc"], ["gc", "--dry-run"], ["discard", kept.id, "--force"]):
            out = cli(repo, *args)
            assert "a process still runs in" in out.stdout + out.stderr, (args, out)
            assert "would remove" not in out.stdout
            assert all(p.is_dir() for p in paths)
    finally:
        for proc in lingering:
            proc.kill()
            proc.wait()
    out = cli(repo, "gc")
    assert out.returncode == 0 and not paths[1].exists(), out.stdout + out.stderr
    out = cli(repo, "discard", kept.id, "--force")
    assert out.returncode == 0 and not paths[0].exists(), out.stdout + out.stderr
