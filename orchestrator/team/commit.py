"""Commit what an agent left uncommitted in a task's worktree."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from orchestrator.board.model import Task
from orchestrator.errors import GitError

TASK_REF = ".task_ref"


def author(teammate: str) -> tuple[str, str]:
    """``("alice (orchestrator)", "alice@orchestrator.local")``: who the commit says made it."""
    return f"{teammate} (orchestrator)", f"{teammate}@orchestrator.local"


def commit_leftovers(worktree: Path, task: Task, teammate: str) -> str | None:
    """Stage everything but ``.task_ref`` and commit it; the new sha, or None if clean."""
    name, email = author(teammate)
    env = dict(os.environ, GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email,
               GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email)
    _git(worktree, env, "add", "-A")
    if (worktree / TASK_REF).exists():  # normally excluded already; never commit it anyway
        _git(worktree, env, "rm", "-q", "--cached", "--ignore-unmatch", "--", TASK_REF)
    staged = subprocess.run(["git", "diff", "--cached", "--quiet"], cwd=worktree, env=env,
                            capture_output=True, check=False)
    if staged.returncode == 0:
        return None
    if staged.returncode != 1:
        raise GitError(f"git diff --cached failed: {staged.stderr.decode().strip()}", task=task.id)
    _git(worktree, env, "commit", "-q", "--no-verify", "-m", f"{task.subject}\n\nTask: {task.id}")
    return _git(worktree, env, "rev-parse", "HEAD")


def _git(cwd: Path, env: dict[str, str], *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise GitError(f"git {args[0]} failed in {cwd}: {out.stderr.strip()}")
    return out.stdout.strip()
