"""Committing what an agent left: the sha comes from the branch's ref file, not a process."""

from __future__ import annotations

from pathlib import Path

from orchestrator.model import Task
from orchestrator.team.commit import _head_commit, commit_leftovers, idle_maintenance
from tests.helpers import git


def _worktree(repo: Path) -> Path:
    (repo / "a.txt").write_text("a\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-qm", "a")
    wt = repo.parent / "wt"
    git(repo, "worktree", "add", "-q", "-b", "task/task_001-x", str(wt))
    (wt / ".task_ref").write_text("{}\n")  # excluded, never committed
    git(repo, "pack-refs", "--all")  # the branch's ref is packed until the next commit
    return wt


def test_commit_reports_the_new_commit_and_none_when_clean(repo: Path) -> None:
    wt = _worktree(repo)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("/.task_ref\n")  # as init_repo does
    (wt / "b.txt").write_text("b\n")
    task = Task(id="task_001", subject="Add b")
    sha = commit_leftovers(wt, task, "alice")
    assert sha == git(wt, "rev-parse", "HEAD")
    assert git(wt, "show", "-s", "--format=%an|%s", "HEAD") == "alice (orchestrator)|Add b"
    assert git(wt, "show", "--name-only", "--format=", "HEAD") == "b.txt"
    assert commit_leftovers(wt, task, "alice") is None  # nothing left to commit


def test_the_head_commit_is_read_only_where_git_keeps_a_branch_ref_file(repo: Path) -> None:
    wt = _worktree(repo)
    assert _head_commit(repo) is None  # the main checkout: git is asked instead
    git(wt, "checkout", "-q", "--detach")
    assert _head_commit(wt) is None  # a detached HEAD: asked too


def _packs(repo: Path) -> int:
    return len(list((repo / ".git" / "objects" / "pack").glob("*.pack")))


def test_a_task_commit_leaves_git_maintenance_to_the_idle_teammate(repo: Path) -> None:
    """git would run `maintenance run --auto` after every commit (here: packs past
    gc.autoPackLimit are merged); a task's commit does not, `idle_maintenance` does."""
    wt = _worktree(repo)
    for i in range(3):
        (repo / f"p{i}.txt").write_text(f"{i}\n")
        git(repo, "add", f"p{i}.txt")
        git(repo, "commit", "-qm", f"p{i}")
        git(repo, "repack", "-q")
    for key, value in (("gc.autoPackLimit", "2"), ("gc.autoDetach", "false"),
                       ("maintenance.autoDetach", "false")):
        git(repo, "config", key, value)
    before = _packs(repo)
    assert before > 2
    (wt / "b.txt").write_text("b\n")
    assert commit_leftovers(wt, Task(id="task_001", subject="Add b"), "alice")
    assert _packs(repo) == before  # no maintenance on the task's path
    idle_maintenance(repo)
    assert _packs(repo) == 1
