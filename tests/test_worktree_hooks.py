"""Hook isolation: workspaces made by ``worktree.create_command`` and removed by
``worktree.remove_command``, behind the same interface as git worktrees."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
import time
from pathlib import Path

import pytest

from orchestrator.board.eventlog import EventLog
from orchestrator.config import WorktreeConfig
from orchestrator.errors import RunError, UnsafeRemoval
from orchestrator.events import Orphan
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from orchestrator.worktree import HookIsolation, WorktreeManager, open_isolation
from tests.helpers import git

CREATE = '''\
import json, os, shutil, sys
task = json.load(sys.stdin)
dst = os.environ["ORCH_WORKTREE"]
shutil.copytree(os.environ["ORCH_REPO"], dst,
                ignore=shutil.ignore_patterns(".git", ".tasks", ".worktrees"))
with open(sys.argv[1], "a") as log:
    log.write(task["id"] + " " + task["subject"] + "\\n")
print("copied the repository")
print(dst)
'''

REMOVE = '''\
import json, shutil, sys
payload = json.load(sys.stdin)
with open(sys.argv[1], "a") as log:
    log.write(json.dumps({"arg": sys.argv[2], **payload}) + "\\n")
shutil.rmtree(sys.argv[2])
'''


def hook_config(tmp_path: Path, **extra: object) -> WorktreeConfig:
    """Plain directory copies, as a team without git worktrees might make them."""
    (tmp_path / "create.py").write_text(CREATE)
    (tmp_path / "remove.py").write_text(REMOVE)
    py = sys.executable
    return WorktreeConfig(
        create_command=f"{py} {tmp_path / 'create.py'} {tmp_path / 'created.log'}",
        remove_command=f"{py} {tmp_path / 'remove.py'} {tmp_path / 'removed.log'}",
        **extra)  # type: ignore[arg-type]


def hooks(repo: Path, config: WorktreeConfig) -> HookIsolation:
    iso = open_isolation(Layout.at(repo).ensure(), config)
    assert isinstance(iso, HookIsolation)
    return iso


def task(n: int = 1, **fields: object) -> Task:
    return Task(id=f"task_{n:03d}", subject=f"Task {n}", **fields)  # type: ignore[arg-type]


def created(tmp_path: Path) -> list[str]:
    log = tmp_path / "created.log"
    return log.read_text().splitlines() if log.exists() else []


def test_the_factory_picks_git_worktrees_unless_a_create_command_is_set(
        repo: Path, tmp_path: Path) -> None:
    layout = Layout.at(repo).ensure()
    assert isinstance(open_isolation(layout, WorktreeConfig()), WorktreeManager)
    assert isinstance(open_isolation(layout, hook_config(tmp_path)), HookIsolation)


def test_create_gets_the_task_on_stdin_and_its_last_line_is_the_workspace(
        repo: Path, tmp_path: Path) -> None:
    iso = hooks(repo, hook_config(tmp_path, setup=['echo "$ORCH_TASK_ID" > setup.txt']))
    ws = iso.create(task(1))
    assert ws.path == Layout.at(repo).worktree("task_001") and ws.branch is None
    assert (ws.path / "README.md").read_text() == "# sample\n"
    assert created(tmp_path) == ["task_001 Task 1"]
    assert json.loads((ws.path / ".task_ref").read_text())["task"] == "task_001"
    assert ws.env["ORCH_TASK_ID"] == "task_001" and ws.env["ORCH_WORKTREE"] == str(ws.path)
    assert int(ws.env["ORCH_PORT_BASE"]) >= 20000
    assert (ws.path / "setup.txt").read_text() == "task_001\n"
    # a retried task resumes its own workspace: the hook and the setup run once
    (ws.path / "setup.txt").write_text("edited\n")
    again = iso.create(task(1))
    assert again.path == ws.path and created(tmp_path) == ["task_001 Task 1"]
    assert (ws.path / "setup.txt").read_text() == "edited\n"
    evs = [e for e in EventLog(iso.layout.events).read() if e["event"] == "worktree_created"]
    assert [(e["isolation"], e["reused"]) for e in evs] == [("hooks", False), ("hooks", True)]
    assert iso.environment(task(1)) == ws.env


@pytest.mark.parametrize(("command", "message"), [
    ("echo boom >&2; exit 3", "create command failed (exit 3): echo boom >&2; exit 3: boom"),
    ("true", "printed no workspace path"),
    ("echo /nonexistent/place", "which is not a folder"),
    ("pwd", "may not be the repository"),
    ("mkdir -p .tasks/ws && echo .tasks/ws", "may not be the repository"),
])
def test_a_bad_create_command_fails_the_run_with_one_clear_line(
        repo: Path, command: str, message: str) -> None:
    iso = hooks(repo, WorktreeConfig(create_command=command))
    with pytest.raises(RunError, match="^task_001: .*" + message.replace("(", r"\(")
                       .replace(")", r"\)").replace("|", r"\|")):
        iso.create(task(1))
    assert iso.status(task(1)).exists is False


def test_a_hanging_create_command_is_killed_with_its_children(repo: Path) -> None:
    iso = hooks(repo, WorktreeConfig(create_command="sleep 60 & sleep 60", hook_timeout=0.5))
    with pytest.raises(RunError, match=r"timed out after 0\.5s"):
        iso.create(task(1))
    # the leak check of conftest fails the test if either sleep survived


def test_removal_is_fail_closed_and_forced_removal_keeps_a_snapshot(
        repo: Path, tmp_path: Path) -> None:
    iso = hooks(repo, hook_config(tmp_path))
    t = task(1)
    ws = iso.create(t)
    (ws.path / "work.txt").write_text("the agent's work\n")
    with pytest.raises(UnsafeRemoval, match="never saved"):
        iso.remove(t)
    iso.keep(t)  # review: the folder is snapshotted
    [kept] = [e for e in EventLog(iso.layout.events).read() if e["event"] == "worktree_kept"]
    snap = Path(kept["snapshot"])
    assert snap.parent == repo / ".tasks" / "snapshots" / "task_001"
    with tarfile.open(snap) as tar:
        names = tar.getnames()
        member = tar.extractfile("task_001/work.txt")
        assert member is not None and member.read() == b"the agent's work\n"
    assert "task_001/.task_ref" not in names
    assert iso.removal_risks(t) == [] and iso.status(t).dirty is False
    (ws.path / "work.txt").write_text("changed after review\n")
    assert iso.status(t).dirty is True
    with pytest.raises(UnsafeRemoval, match="changed since the last snapshot"):
        iso.remove(t)
    assert ws.path.exists()
    forced = iso.remove(t, force=True)
    assert forced is not None and not ws.path.exists()
    with tarfile.open(forced) as tar:
        member = tar.extractfile("task_001/work.txt")
        assert member is not None and member.read() == b"changed after review\n"
    [call] = [json.loads(line) for line in (tmp_path / "removed.log").read_text().splitlines()]
    assert call["arg"] == call["path"] == str(ws.path) and call["force"] is True
    assert call["task_id"] == "task_001" and call["task"]["subject"] == "Task 1"
    [removed] = [e for e in EventLog(iso.layout.events).read() if e["event"] == "worktree_removed"]
    assert removed["snapshot"] == forced and removed["forced"] is True
    assert iso.remove(t) is None  # already gone: nothing to do


def test_the_remove_command_may_refuse(repo: Path, tmp_path: Path) -> None:
    config = hook_config(tmp_path)
    config.remove_command = "echo 'workspace is busy' >&2; exit 1"
    iso = hooks(repo, config)
    t = task(1)
    ws = iso.create(t)
    iso.keep(t)
    with pytest.raises(UnsafeRemoval, match=r"refused \(exit 1\).*workspace is busy"):
        iso.remove(t)
    assert ws.path.exists() and iso.status(t).exists


def test_without_a_remove_command_only_folders_in_the_worktree_root_are_deleted(
        repo: Path, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    iso = hooks(repo, WorktreeConfig(
        create_command=f'mkdir -p "$ORCH_WORKTREE" {outside} && echo "$ORCH_WORKTREE"'))
    t = task(1)
    ws = iso.create(t)
    iso.keep(t)
    assert iso.remove(t) is None and not ws.path.exists()
    far = hooks(repo, WorktreeConfig(create_command=f"echo {outside}"))
    far.create(task(2))
    far.keep(task(2))
    with pytest.raises(UnsafeRemoval, match="outside the worktree root"):
        far.remove(task(2))
    assert outside.exists()


def test_a_git_clone_workspace_is_checked_like_a_worktree(repo: Path) -> None:
    iso = hooks(repo, WorktreeConfig(
        create_command='git clone -q "$ORCH_REPO" "$ORCH_WORKTREE" && echo "$ORCH_WORKTREE"'))
    t = task(1)
    ws = iso.create(t)
    assert ws.branch == "main" and ws.base_commit == git(repo, "rev-parse", "HEAD")
    assert git(ws.path, "status", "--porcelain") == ""  # .task_ref is excluded in the clone
    assert iso.removal_risks(t) == []
    (ws.path / "new.txt").write_text("x")
    assert any("1 uncommitted" in r for r in iso.removal_risks(t))
    git(ws.path, "add", "-A")
    git(ws.path, "commit", "-qm", "work in the clone")
    [risk] = iso.removal_risks(t)
    assert "is in no branch or ref of" in risk
    with pytest.raises(UnsafeRemoval):
        iso.remove(t)
    snap = iso.remove(t, force=True)
    assert snap and Path(snap).exists() and not ws.path.exists()


def test_reconcile_forgets_vanished_workspaces_and_reports_orphans(
        repo: Path, tmp_path: Path) -> None:
    iso = hooks(repo, hook_config(tmp_path))
    live, gone = task(1, status=Status.IN_PROGRESS), task(2, status=Status.IN_PROGRESS)
    iso.create(live)
    ws = iso.create(gone)
    iso.keep(gone)
    shutil.rmtree(ws.path)
    (iso.layout.worktree_root / "stray").mkdir()
    report = iso.reconcile([live, gone])
    assert report.pruned == [str(ws.path)]
    assert "is gone; the next run makes a new one" in report.problems["task_002"]
    assert "last snapshot in" in report.problems["task_002"]
    assert report.orphans == [Orphan(path=str(iso.layout.worktree_root / "stray"), branch="",
                                     reason="no task's workspace")]
    assert iso.status(gone).exists is False
    again = iso.create(gone)  # the next run gets a fresh workspace from the hook
    assert again.path.exists() and created(tmp_path)[-1] == "task_002 Task 2"


def test_the_exclude_line_is_never_written_through_a_link_in_the_workspace(
        repo: Path, tmp_path: Path) -> None:
    """Issue 29 item 6: a hook workspace's git folder is the agent's; an
    ``info/exclude`` it made a link to a host file (or a FIFO) is left alone."""
    host = tmp_path / "host-file"
    host.write_text("the person's file\n")
    make = ('git clone -q "$ORCH_REPO" "$ORCH_WORKTREE" && rm -f "$ORCH_WORKTREE/.git/info/'
            f'exclude" && ln -s {host} "$ORCH_WORKTREE/.git/info/exclude" && echo "$ORCH_WORKTREE"')
    iso = hooks(repo, WorktreeConfig(create_command=make))
    ws = iso.create(task(1))
    assert host.read_text() == "the person's file\n"
    fifo = ('git clone -q "$ORCH_REPO" "$ORCH_WORKTREE" && rm -f "$ORCH_WORKTREE/.git/info/'
            'exclude" && mkfifo "$ORCH_WORKTREE/.git/info/exclude" && echo "$ORCH_WORKTREE"')
    started = time.monotonic()
    hooks(repo, WorktreeConfig(create_command=fifo)).create(task(2))
    assert time.monotonic() - started < 20
    assert (ws.path / ".task_ref").is_file()
