"""A kept task's changes: where they are measured from, the files, the diffstat, the links,
whether they merge cleanly.

A task's changes are its branch against the point where it left its base: the
merge base of the branch with the task's base branch (``task.base``, e.g.
``main`` or the branch of the blocker it was stacked on), or with the branch
checked out in the main working tree when that base is gone, or else the
recorded ``base_commit``. Measuring from the merge base keeps the diff to the
task's own work even after the agent merged the base branch back in (which is
how a retried task resolves a conflict).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from orchestrator.errors import Conflict, GitError
from orchestrator.git import Git
from orchestrator.model import Task


def current_branch(repo: Git) -> str | None:
    """The branch checked out in ``repo``'s working tree, None when HEAD is detached."""
    out = repo.run("symbolic-ref", "-q", "--short", "HEAD", check=False)
    return out.stdout.strip() or None if out.returncode == 0 else None


@dataclass(frozen=True)
class Changes:
    """A task's kept work: its branch, the tip, and the commit its changes start from."""

    task_id: str
    branch: str
    tip: str
    base: str
    """The commit the changes are measured from."""
    base_ref: str
    """What that commit was found from (a branch name, or the recorded base commit)."""


_UNKNOWN = "\0"


def changes(repo: Git, task: Task, main: str | None = _UNKNOWN, *,
            tip_ref: str | None = None) -> Changes:
    """The task's branch and its base; `Conflict` when it has no branch (never ran) or the
    branch is gone. ``main``: the branch of the main working tree, when the caller knows.
    ``tip_ref``: where the branch's newest state is, when not at the branch here."""
    if not task.branch:
        raise Conflict(f"{task.id} has no branch yet (status {task.status}): nothing to review")
    if main == _UNKNOWN:
        main = current_branch(repo)
    candidates = [c for c in (task.base, main) if c]
    tip, *commits = repo.commits(tip_ref or f"refs/heads/{task.branch}", *candidates)
    if tip is None:
        raise Conflict(f"{task.id}: its branch {task.branch} is missing (deleted by hand?)")
    for ref, commit in zip(candidates, commits, strict=True):
        if commit is None:
            continue
        fork = repo.run("merge-base", commit, tip, check=False)
        if fork.returncode == 0:
            return Changes(task.id, task.branch, tip, fork.stdout.strip(), ref)
    if task.base_commit and repo.commit_of(task.base_commit):
        return Changes(task.id, task.branch, tip, task.base_commit, task.base_commit[:12])
    raise Conflict(f"{task.id}: cannot tell where {task.branch} started (its base "
                   f"{task.base or task.base_commit or '?'} is gone)")


def diffstat(repo: Git, ch: Changes) -> dict[str, Any]:
    """``{files: [{path, added, removed}], added, removed}``; binary files count None lines."""
    out = repo.out("diff", "--numstat", "--no-renames", "-z", ch.base, ch.tip)
    files: list[dict[str, Any]] = []
    for rec in out.split("\0"):
        if not rec:
            continue
        added, removed, path = rec.split("\t", 2)
        files.append({"path": path, "added": None if added == "-" else int(added),
                      "removed": None if removed == "-" else int(removed)})
    return {"files": files, "added": sum(f["added"] or 0 for f in files),
            "removed": sum(f["removed"] or 0 for f in files)}


def outside_links(repo: Git, ch: Changes) -> list[tuple[str, str]]:
    """(path, target) of each symlink the task's changes add or change whose target is
    outside the worktree (absolute, or climbing out with ``..``). They are committed like
    any file (git stores a link as its target text); review shows them as warnings."""
    out = repo.run("diff", "--raw", "-z", "--no-renames", "--no-abbrev", ch.base, ch.tip).stdout
    fields = out.split("\0")
    links = []
    for meta, path in zip(fields[::2], fields[1::2], strict=False):
        parts = meta.lstrip(":").split()
        if len(parts) == 5 and parts[1] == "120000" and parts[4] in ("A", "M", "T"):
            links.append((path, parts[3]))
    if not links:
        return []
    blobs = repo.run("cat-file", "--batch", input="".join(f"{sha}\n" for _, sha in links))
    targets, rest = [], blobs.stdout
    for _ in links:
        header, _, rest = rest.partition("\n")
        size = int(header.split()[2]) if len(header.split()) == 3 else 0
        targets.append(rest[:size])
        rest = rest[size + 1:]
    return [(path, target) for (path, _), target in zip(links, targets, strict=True)
            if _escapes(path, target)]


def _escapes(path: str, target: str) -> bool:
    if not target or target.startswith("/"):
        return True
    inside = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return inside == ".." or inside.startswith("../")


def merge_conflicts(repo: Git, target: str, tip: str) -> tuple[str | None, list[str]]:
    """``git merge-tree --write-tree`` of ``tip`` into ``target`` (commits), touching no
    working tree or index: (the merged tree, []) when clean, (None, files) on conflicts."""
    out = repo.run("merge-tree", "--write-tree", "--name-only", "--no-messages", target, tip,
                   check=False)
    lines = out.stdout.splitlines()
    if out.returncode == 0 and lines:
        return lines[0], []
    if out.returncode == 1:
        return None, sorted({f for f in lines[1:] if f})
    raise GitError(f"git merge-tree failed: {out.stderr.strip() or out.stdout.strip()}")
