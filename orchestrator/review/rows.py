"""The review table: every task in ``review``, what a reviewer looks at first, and overlaps.

An overlap is another kept branch (any task not merged, discarded or cancelled
that has a branch: in review, retried, running or failed) that changes some of
the same files; merging one of them will likely make the other conflict. Each
row also says whether the branch merges cleanly into the target right now
(``git merge-tree``, nothing touched).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from orchestrator.budget import describe
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import Conflict, GitError
from orchestrator.forge import pull_request
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from orchestrator.review.common import using_board
from orchestrator.review.control import control_changes, describe_control
from orchestrator.review.diff import (
    Changes,
    changes,
    commit_count,
    current_branch,
    diffstat,
    merge_conflicts,
    outside_links,
)
from orchestrator.review.landing import land_rows
from orchestrator.worktree.remote import Remote


def review_rows(layout: Layout, config: Config, *, board: ControlPlane | None = None,
                now: float | None = None) -> list[dict[str, Any]]:
    """One dict per task in review, oldest id first (the shape of ``review --json``)."""
    with using_board(layout, config, board, "cli") as b:
        tasks = b.list()
        lands = land_rows(b, [t.id for t in tasks if t.status is Status.REVIEW])
    remote = Remote.for_config(layout.root, config)
    if remote is not None:  # branches finished on other machines
        remote.fetch_branches([t.branch for t in tasks
                               if t.branch and t.status is Status.REVIEW])
    repo = Git(layout.root)
    main = current_branch(repo)
    kept: dict[str, tuple[Changes, dict[str, Any]]] = {}
    errors: dict[str, str] = {}
    for task in tasks:
        if task.status.final or not task.branch:
            continue
        try:
            ch = changes(repo, task)
            kept[task.id] = (ch, diffstat(repo, ch))
        except (Conflict, GitError) as exc:
            errors[task.id] = str(exc)
    touched = {tid: {f["path"] for f in stat["files"]} for tid, (_, stat) in kept.items()}
    status_of = {t.id: t.status for t in tasks}
    by_id = {t.id: t for t in tasks}
    rows = []
    for task in tasks:
        if task.status is not Status.REVIEW:
            continue
        row = _row(task, time.time() if now is None else now)
        row["land"] = lands.get(task.id)
        row["stacked_on"] = [{"task": b, "status": str(status_of[b])}
                             for b in _unmerged(task, by_id)]
        if task.id in kept:
            ch, stat = kept[task.id]
            control = control_changes(repo, ch.base, ch.tip, (f["path"] for f in stat["files"]))
            row.update(base=ch.base_ref, base_commit=ch.base, commits=commit_count(repo, ch),
                       diffstat=stat, merge=_mergeable(repo, ch, main or task.base),
                       control_files=control,
                       warnings=[f"symlink {path} -> {target} points outside the worktree"
                                 for path, target in outside_links(repo, ch)]
                       + ([describe_control(control, task.id)] if control else []))
        else:
            row["error"] = errors.get(task.id, f"{task.id} has no branch")
        mine = touched.get(task.id, set())
        row["overlaps"] = [
            {"task": other, "status": str(status_of[other]), "files": sorted(mine & files)}
            for other, files in touched.items()
            if other != task.id and mine & files and not _stacked(task, by_id[other])
        ]
        rows.append(row)
    return rows


def _unmerged(task: Task, by_id: dict[str, Task]) -> list[str]:
    """Its blockers, and theirs, not merged: what a merge of it brings along (as
    `orchestrator.review.merging.unmerged_blockers`, from the tasks at hand)."""
    out: dict[str, None] = {}
    todo = list(task.blocked_by)
    while todo:
        b = todo.pop()
        t = by_id.get(b)
        if t is None or b in out or b == task.id or t.status is Status.MERGED:
            continue
        out[b] = None
        todo.extend(t.blocked_by)
    return sorted(out)


def _stacked(a: Task, b: Task) -> bool:
    """Whether one task is built on the other (a blocker's branch is its base): their
    branches share the blocker's changes by design, which is no overlap."""
    return (a.id in b.blocked_by or b.id in a.blocked_by
            or (a.branch is not None and a.branch == b.base)
            or (b.branch is not None and b.branch == a.base))


def _row(task: Task, now: float) -> dict[str, Any]:
    return {
        "id": task.id, "subject": task.subject, "branch": task.branch,
        "worktree": task.worktree, "base": task.base, "base_commit": task.base_commit,
        "commits": None, "diffstat": None, "merge": None, "warnings": [], "control_files": [],
        "checks": _checks(task.checks), "cost_usd": round(task.usage.cost_usd, 6),
        "usage": task.usage.model_dump(), "budget": task.budget.model_dump(),
        "spent": describe(task.budget, task.usage),
        "tokens": task.usage.input_tokens + task.usage.output_tokens,
        "attempts": task.attempts, "feedback": task.feedback,
        "age_seconds": _since(task.updated_at, now),
        "pull_request": pull_request(task.forge),
    }


def _checks(checks: dict[str, Any] | None) -> dict[str, Any] | None:
    """The verification result without its output (``orchestrator logs ID`` has that)."""
    if not checks:
        return None
    return {k: checks.get(k) for k in ("passed", "result", "command", "seconds", "at")}


def _mergeable(repo: Git, ch: Changes, target: str | None) -> dict[str, Any] | None:
    if not target:
        return None
    target_commit = repo.commit_of(f"refs/heads/{target}")
    if target_commit is None:
        return None
    try:
        _, conflicts = merge_conflicts(repo, target_commit, ch.tip)
    except GitError as exc:
        return {"into": target, "clean": None, "conflicts": [], "error": str(exc)}
    return {"into": target, "clean": not conflicts, "conflicts": conflicts}


def _since(iso: str, now: float) -> float | None:
    try:
        return round(max(0.0, now - datetime.fromisoformat(iso.replace("Z", "+00:00"))
                         .timestamp()), 1)
    except ValueError:
        return None
