"""Commit what an agent left uncommitted in a task's worktree."""

from __future__ import annotations

from pathlib import Path

from orchestrator.beneath import read_text_beneath
from orchestrator.errors import GitError, SecretLeak
from orchestrator.git import Git
from orchestrator.model import Task
from orchestrator.sandbox.git_confine import SHA_RE
from orchestrator.secrets import commit_leaks, secret_names, text_leaks
from orchestrator.worktree.safety import MAX_TASK_REF, worktree_git_dir

TASK_REF = ".task_ref"

NO_AUTO_MAINTENANCE = ("-c", "maintenance.auto=false")
"""A task's commit does not start ``git maintenance run --auto``: that is a process more
on every task's path; a teammate runs it when it goes idle instead (`idle_maintenance`)."""


def author(teammate: str) -> tuple[str, str]:
    """``("alice (orchestrator)", "alice@orchestrator.local")``: who the commit says made it."""
    return f"{teammate} (orchestrator)", f"{teammate}@orchestrator.local"


def commit_leftovers(worktree: Path, task: Task, teammate: str,
                     base: str | None = None, *, wip: bool = False) -> str | None:
    """Stage everything but ``.task_ref`` and commit it; the new sha, or None if clean.
    ``wip``: the run was stopped before it finished (the subject says ``WIP:``).

    Refused (`SecretLeak`, the index reset) when a file that differs from ``base`` (the
    task's start; default HEAD) — staged now or committed by the agent — holds the value
    of a known secret (`orchestrator.secrets`).

    Two git processes when there is something to commit (add, commit): whether anything
    is staged is asked only when the commit is refused, and the new commit is read from
    the branch's ref file.
    """
    check_head(worktree, task)
    name, email = author(teammate)
    env = dict(GIT_AUTHOR_NAME=name, GIT_AUTHOR_EMAIL=email,
               GIT_COMMITTER_NAME=name, GIT_COMMITTER_EMAIL=email)
    added = _git(worktree, env, "add", "-A", "--verbose")
    if f"'{TASK_REF}'" in added:  # excluded by info/exclude, so staged only when tracked
        _git(worktree, env, "rm", "-q", "--cached", "--ignore-unmatch", "--", TASK_REF)
    message = f"{'WIP: ' if wip else ''}{task.subject}\n\nTask: {task.id}"
    refuse_leaks(worktree, env, base, message)
    wt = Git(worktree)
    commit = wt.run(*NO_AUTO_MAINTENANCE, "commit", "-q", "--no-verify", "-m", message,
                    env=env, check=False)
    if commit.returncode != 0:
        if wt.ok("diff", "--cached", "--quiet"):
            return None  # nothing to commit
        error = commit.stderr.strip() or commit.stdout.strip()
        raise GitError(f"git commit failed in {worktree}: {error}", task=task.id)
    return _head_commit(worktree) or _git(worktree, env, "rev-parse", "HEAD")


def check_head(worktree: Path, task: Task) -> None:
    """`GitError` unless the worktree's ``.git`` leads back to it and its HEAD is the
    task's branch: an agent outside the sandbox (or a person) may have pointed them at
    another repository or at ``main``, and this commit must not follow."""
    dot_git = worktree / ".git"
    if not dot_git.is_file():
        return  # a checkout of its own (not a linked worktree): nothing shared to protect
    git_dir = worktree_git_dir(worktree)
    if git_dir is None:
        raise GitError(f"{dot_git} does not lead back to this worktree; not committing",
                       task=task.id)
    if task.branch:
        try:
            head = read_text_beneath(git_dir, "HEAD", MAX_TASK_REF).strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise GitError(f"cannot read the worktree's HEAD: {exc}", task=task.id) from exc
        if head != f"ref: refs/heads/{task.branch}":
            raise GitError(f"the worktree's HEAD is not on the task's branch {task.branch} "
                           f"({head[:100]}); not committing", task=task.id)


def refuse_leaks(worktree: Path, env: dict[str, str], base: str | None,
                 message: str = "") -> None:
    """`SecretLeak` when a file the task adds or changes holds a known secret value in
    its content or its name, or a commit message of the task does (the agent's commits
    since ``base``, and ``message``, the one about to be made)."""
    known = secret_names()
    if not known:
        return
    names = _git(worktree, env, "diff", "--cached", "--name-only", "-z", "--no-renames",
                 "--diff-filter=d", base or "HEAD", "--")
    leaks = commit_leaks(worktree, [n for n in names.split("\0") if n], known)
    messages = _git(worktree, env, "log", "-z", "--format=%B", f"{base}..HEAD") if base else ""
    leaks += text_leaks("a commit message of the task", messages + "\0" + message, known)
    if leaks:
        _git(worktree, env, "reset", "-q")
        raise SecretLeak("refused to commit: " + "; ".join(leaks[:5]) + (
            f" (and {len(leaks) - 5} more)" if len(leaks) > 5 else "")
            + ". Remove the value (not only the variable name) and run the task again.")


def _head_commit(worktree: Path) -> str | None:
    """The commit HEAD names, read from its branch's ref file (git writes the ref loose on
    every commit): a process less per task. None when that is not how the repository
    keeps it (the main checkout, a detached HEAD, a reftable repository)."""
    git_dir = worktree_git_dir(worktree)
    if git_dir is None:
        return None
    try:
        head = read_text_beneath(git_dir, "HEAD", MAX_TASK_REF).strip()
        common = (git_dir / read_text_beneath(git_dir, "commondir", MAX_TASK_REF).strip()
                  ).resolve()
        if not head.startswith("ref: refs/heads/"):
            return None
        sha = (common / head.removeprefix("ref: ")).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return sha if SHA_RE.fullmatch(sha) else None


def idle_maintenance(repo: Path) -> None:
    """``git maintenance run --auto`` (packs loose objects past git's thresholds; quick
    when there is nothing to do), what git would have run after each commit."""
    Git(repo).run("maintenance", "run", "--auto", "--quiet", check=False)


def _git(cwd: Path, env: dict[str, str], *args: str) -> str:
    out = Git(cwd).run(*args, env=env, check=False)
    if out.returncode != 0:
        raise GitError(f"git {args[0]} failed in {cwd}: {out.stderr.strip()}")
    return out.stdout.strip()
