"""Committing what an agent left: the sha comes from the branch's ref file, not a process."""

from __future__ import annotations

from pathlib import Path

from orchestrator.board.model import Task
from orchestrator.team.commit import _head_commit, commit_leftovers
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
