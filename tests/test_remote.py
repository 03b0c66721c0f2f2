"""The shared git remote of a team across machines: a bare repository and real clones."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.errors import Conflict, GitError
from orchestrator.worktree.remote import Remote, wip_ref
from tests.helpers import git, make_repo


@pytest.fixture
def clones(tmp_path: Path) -> tuple[Path, Path, Path]:
    return make_clones(tmp_path)


def make_clones(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A bare repository as the shared remote, and two clones of it."""
    seed = make_repo(tmp_path / "seed", {"app.py": "print('hi')\n"})
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(bare)], check=True)
    a, b = tmp_path / "a", tmp_path / "b"
    for c in (a, b):
        subprocess.run(["git", "clone", "-q", str(bare), str(c)], check=True)
    return bare, a, b


def test_a_wip_snapshot_carries_uncommitted_work_to_another_machine(
        clones: tuple[Path, Path, Path]) -> None:
    bare, a, b = clones
    wt = a.parent / "a-wt"
    git(a, "worktree", "add", "-q", "-b", "task/task_001-x", str(wt))
    (wt / "app.py").write_text("print('half done')\n")
    (wt / "new.txt").write_text("untracked\n")
    (wt / ".task_ref").write_text("task_001\n")
    status_before = git(wt, "status", "--porcelain")
    first = Remote(a).snapshot(wt, "task_001")
    assert first is not None
    assert git(wt, "status", "--porcelain") == status_before  # index and files untouched
    assert Remote(a).snapshot(wt, "task_001") is None  # nothing new: no second push
    assert git(bare, "rev-parse", wip_ref("task_001")) == first

    # machine B resumes the task: its branch starts from the snapshot
    assert Remote(b).adopt("task/task_001-x", "task_001") == first
    assert git(b, "show", "task/task_001-x:app.py") == "print('half done')"
    assert git(b, "show", "task/task_001-x:new.txt") == "untracked"
    assert "task_ref" not in git(b, "ls-tree", "-r", "--name-only", "task/task_001-x")
    assert Remote(b).adopt("task/task_001-x", "task_001") is None  # B has it now


def test_finished_branches_travel_and_a_moved_remote_refuses_the_merge(
        clones: tuple[Path, Path, Path]) -> None:
    _, a, b = clones
    git(a, "checkout", "-q", "-b", "task/task_002-y")
    (a / "y.txt").write_text("y\n")
    git(a, "add", "y.txt")
    git(a, "commit", "-qm", "y")
    git(a, "checkout", "-q", "main")
    Remote(a).push_branch("task/task_002-y")
    assert Remote(b).fetch_branches(["task/task_002-y", "task/task_404-none"]) == \
        ["task/task_002-y"]
    assert git(b, "show", "task/task_002-y:y.txt") == "y"

    # A pushes to main; B's main is now behind: merging there is refused before anything
    (a / "z.txt").write_text("z\n")
    git(a, "add", "z.txt")
    git(a, "commit", "-qm", "z")
    Remote(a).push_base("main")
    with pytest.raises(Conflict, match="the remote moved"):
        Remote(b).check_base_current("main")
    git(b, "pull", "-q", "--ff-only")
    Remote(b).check_base_current("main")


def test_a_rejected_push_says_why(clones: tuple[Path, Path, Path]) -> None:
    bare, a, _ = clones
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'main is protected' >&2\nexit 1\n")
    hook.chmod(0o755)
    (a / "w.txt").write_text("w\n")
    git(a, "add", "w.txt")
    git(a, "commit", "-qm", "w")
    with pytest.raises(Conflict, match="rejected"):
        Remote(a).push_base("main")
    git(a, "checkout", "-q", "-b", "task/task_003-z")
    with pytest.raises(GitError, match="push of task/task_003-z to origin was rejected"):
        Remote(a).push_branch("task/task_003-z")
    assert git(a, "rev-parse", "task/task_003-z")  # the work stays on the local branch
