"""A kept task's changes: where they are measured from, the files, the diffstat, the diff.

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

from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane, Event
from orchestrator.errors import Conflict, GitError
from orchestrator.events import Merged
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.review.common import using_board


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


def commit_count(repo: Git, ch: Changes) -> int:
    return int(repo.out("rev-list", "--count", f"{ch.base}..{ch.tip}"))


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


def diff_output(repo: Git, ch: Changes, *, stat: bool = False, color: bool = False,
                limit: int | None = None) -> str:
    """``limit``: at most that many bytes, then a `CUT` line (`Git.run`)."""
    args = ["diff", f"--color={'always' if color else 'never'}"]
    if stat:
        args.append("--stat")
    return repo.run(*args, ch.base, ch.tip, limit=limit).stdout


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


def diff_text(layout: Layout, config: Config, task_id: str, *, stat: bool = False,
              color: bool = False, board: ControlPlane | None = None,
              limit: int | None = None) -> str:
    """``git diff`` of the task's changes against its base (``--stat`` with ``stat``; at
    most ``limit`` bytes, for the faces that show it: the web board, the MCP server)."""
    with using_board(layout, config, board, "cli") as b:
        task = b.get(task_id)
    from orchestrator.worktree.remote import Remote

    remote = Remote.for_config(layout.root, config)
    tip = None
    if remote is not None and task.branch:  # it may have been finished on another machine
        remote.fetch_branches([task.branch])
        if remote.behind(task.branch):  # a stale worktree here holds the branch back
            tip = remote.remote_ref(task.branch)
    return diff_output(Git(layout.root), changes(Git(layout.root), task, tip_ref=tip),
                       stat=stat, color=color, limit=limit)


def merged_text(layout: Layout, config: Config, task_id: str, *, stat: bool = False,
                board: ControlPlane | None = None, limit: int | None = None
                ) -> tuple[str, Event]:
    """What a merged task brought into its target, from its ``merged`` event (the branch is
    gone by then): the diff of the merge commit against its first parent (``merge``,
    ``squash``), else of the branch tip it landed against where it started. Returns the
    diff and the event; `Conflict` when there is no merge to show."""
    with using_board(layout, config, board, "cli") as b:
        task = b.get(task_id)
        found = [(e, m) for e in b.events.read(task=task.id) if isinstance(m := e.decode(), Merged)]
    if not found:
        raise Conflict(f"{task.id} is {task.status}: no merge of it is recorded")
    event, merged = found[-1]
    repo = Git(layout.root)
    commit, tip = merged.commit, merged.tip
    parents = repo.run("rev-list", "--parents", "-n", "1", commit, check=False).stdout.split()
    if len(parents) >= 2 and merged.strategy in ("merge", "squash", "forge"):
        old, new = parents[1], commit
    elif tip and task.base_commit:
        old, new = task.base_commit, tip
    else:
        raise Conflict(f"{task.id}: its merge {commit[:12] or '?'} is not in this repository")
    args = ["diff", "--color=never", *(["--stat"] if stat else []), old, new]
    out = repo.run(*args, check=False, limit=limit)
    if out.returncode != 0:
        raise Conflict(f"{task.id}: its merge {commit[:12]} is not in this repository "
                       f"({out.stderr.strip()})")
    return out.stdout, event
