"""The worktree manager across real processes: concurrency, kill -9, no leaked git."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from orchestrator.board import init_repo, open_board
from orchestrator.config import WorktreeConfig
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from orchestrator.worktree import WorktreeManager, binding
from tests.helpers import child_pids, cmdline, git

ROOT = Path(__file__).resolve().parent.parent

CREATE = """
import json, sys, time
from pathlib import Path
from orchestrator.model import Task
from orchestrator.config import WorktreeConfig
from orchestrator.layout import Layout
from orchestrator.worktree import WorktreeManager

repo, go, setup, numbers = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4:]
m = WorktreeManager(Layout.at(repo), WorktreeConfig(setup=setup))
deadline = time.monotonic() + 60
while not go.exists() and time.monotonic() < deadline:
    time.sleep(0.01)
for n in numbers:
    ws = m.create(Task(id=f"task_{int(n):03d}", subject=f"parallel {n}"))
    print(json.dumps({"task": ws.task_id, "path": str(ws.path), "port": ws.env["ORCH_PORT_BASE"]}))
"""


def spawn(repo: Path, numbers: list[int], go: Path, setup: list[str] | None = None,
          ) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CREATE, str(repo), str(go), json.dumps(setup or []),
         *map(str, numbers)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )


def wait_for(path: Path, proc: subprocess.Popen[str], seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def kill_group(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def test_four_processes_create_sixteen_worktrees_at_once(repo: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    procs = [spawn(repo, list(range(i * 4 + 1, i * 4 + 5)), go) for i in range(4)]
    go.touch()
    made = []
    for p in procs:
        out, err = p.communicate(timeout=110)
        assert p.returncode == 0, err
        made += [json.loads(line) for line in out.splitlines()]
    assert len(made) == 16
    assert len({m["port"] for m in made}) == 16
    listed = git(repo, "worktree", "list", "--porcelain")
    for m in made:
        assert f"worktree {m['path']}\n" in listed + "\n"
        assert git(Path(m["path"]), "status", "--porcelain") == ""
    assert "locked" not in listed and "prunable" not in listed


def test_threads_of_one_process_share_a_manager_safely(repo: Path) -> None:
    m = WorktreeManager(Layout.at(repo).ensure(), WorktreeConfig())
    tasks = [Task(id=f"task_{n:03d}", subject=f"thread {n}") for n in range(1, 9)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        spaces = list(pool.map(m.create, tasks))
    assert len({ws.env["ORCH_PORT_BASE"] for ws in spaces}) == 8
    assert all(git(ws.path, "status", "--porcelain") == "" for ws in spaces)
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(m.remove, tasks)) == [None] * 8
    assert git(repo, "worktree", "list").count("\n") == 0


@pytest.mark.parametrize("branch_exists", [False, True],
                         ids=["new-branch-worktree-add-b", "existing-branch-worktree-add"])
def test_kill_9_during_the_checkout_of_a_new_worktree_then_reconcile(
        repo: Path, tmp_path: Path, branch_exists: bool) -> None:
    """Killed while the files are checked out, inside ``git worktree add -b`` for a new
    branch or ``git worktree add`` for one that exists: the worktree is locked
    "initializing" (with no index yet). Reconcile clears both."""
    layout = init_repo(repo)
    started = tmp_path / "checkout-started"
    # a smudge filter that blocks makes the kill land inside the checkout
    (repo / ".gitattributes").write_text("*.txt filter=slow\n")
    (repo / "big.txt").write_text("content\n")
    git(repo, "add", ".gitattributes", "big.txt")
    git(repo, "commit", "-qm", "slow files")
    git(repo, "config", "filter.slow.smudge", f"touch {started}; sleep 60; cat")
    git(repo, "config", "filter.slow.clean", "cat")
    with open_board(layout) as board:
        task = board.add("Survive a crash")
        if branch_exists:
            git(repo, "branch", "task/task_001-parallel-1", "main")  # what spawn() names it
        claimed = board.claim("alice", task_id=task.id, lease_seconds=30)
        assert claimed is not None
        go = tmp_path / "go"
        go.touch()
        proc = spawn(repo, [1], go)
        wait_for(started, proc)
        admin = repo / Path(git(repo, "rev-parse", "--git-common-dir")) / "worktrees" / "task_001"
        assert "initializing" in (admin / "locked").read_text()
        assert not (admin / "index").exists()
        kill_group(proc)
        git(repo, "config", "--unset", "filter.slow.smudge")

        report = WorktreeManager(layout, WorktreeConfig(), board).reconcile(board.list())
        assert report.cleared == [str(layout.worktree("task_001"))]
        assert not layout.worktree("task_001").exists()
        listed = git(repo, "worktree", "list", "--porcelain")
        assert "task_001" not in listed and "locked" not in listed
        assert git(repo, "status", "--porcelain") == ""  # the repository is usable

        # the lease of the killed worker expires; the task is claimable again and its
        # worktree can be created (from the branch, when the killed one had made it)
        assert [t.id for t in board.requeue_expired(now=time.time() + 60)] == [task.id]
        again = board.claim("bob", lease_seconds=30)
        assert again is not None and again.id == task.id and again.lease is not None
        m = WorktreeManager(layout, WorktreeConfig(), board)
        ws = m.create(again)
        board.update(again.id, again.lease.token, **binding(ws))
        assert (ws.path / "big.txt").read_text() == "content\n"
        assert git(ws.path, "status", "--porcelain") == ""
        assert git(ws.path, "rev-parse", "--abbrev-ref", "HEAD") == ws.branch
        assert board.get(task.id).worktree == str(ws.path)


def test_a_creation_killed_after_its_detached_add_is_made_again(repo: Path) -> None:
    """Killed between ``worktree add --detach --no-checkout`` and ``checkout -b`` (how an
    earlier version made a worktree): the next create (no reconcile in between) clears it
    and makes the worktree."""
    layout = init_repo(repo)
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", "a")
    with open_board(layout) as board:
        task = board.add("Half made")
        m = WorktreeManager(layout, WorktreeConfig(), board)
        path = layout.worktree(task.id)
        git(repo, "worktree", "add", "--quiet", "--no-checkout", "--detach", str(path), "main")
        ws = m.create(task)
    assert ws.path == path and (path / "a.txt").read_text() == "a\n"
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD") == ws.branch
    assert git(path, "status", "--porcelain") == ""


def test_kill_9_during_setup_then_the_retry_sets_up_again(repo: Path, tmp_path: Path) -> None:
    hang, pid_file = tmp_path / "hang", tmp_path / "setup.pid"
    hang.touch()
    setup = [f"if [ -e {hang} ]; then echo $$ > {pid_file}; sleep 60; fi; touch set-up"]
    go = tmp_path / "go"
    go.touch()
    proc = spawn(repo, [1], go, setup)
    wait_for(pid_file, proc)
    kill_group(proc)
    os.killpg(int(pid_file.read_text()), signal.SIGKILL)  # setup runs in its own group
    hang.unlink()
    m = WorktreeManager(Layout.at(repo), WorktreeConfig(setup=setup))
    m.reconcile([])
    ws = m.create(Task(id="task_001", subject="parallel 1"))
    assert (ws.path / "set-up").exists()
    assert git(ws.path, "status", "--porcelain") == "?? set-up"


def test_no_git_process_is_left_after_100_create_remove_cycles(repo: Path) -> None:
    m = WorktreeManager(Layout.at(repo).ensure(), WorktreeConfig())
    t = Task(id="task_001", subject="cycle")
    for _ in range(100):
        m.create(t)
        assert m.remove(t) is None
    assert [cmdline(p) for p in child_pids() if "git" in cmdline(p)] == []
    assert not m.layout.worktree("task_001").exists()
    assert git(repo, "worktree", "list").count("\n") == 0
    assert m.ports.live() == {}


def test_status_of_a_task_is_read_without_a_lock(repo: Path) -> None:
    m = WorktreeManager(Layout.at(repo).ensure(), WorktreeConfig())
    t = Task(id="task_001", subject="read", status=Status.REVIEW)
    m.create(t)
    with m.lock:  # a creation elsewhere holds the lock: reading still works
        assert m.status(t).exists
