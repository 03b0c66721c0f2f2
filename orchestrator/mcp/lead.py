"""What a lead does over MCP, built from the board and git: the review queue and diffs.

Kept small and separate so that the review module (merge, discard, retry, file
overlaps with checks and costs) can replace it: `review_queue` lists tasks in
``review`` with branch, diffstat, checks, cost and which other kept branches touch
the same files; `task_diff` is ``git diff <base_commit>..<branch>``. Merging and
discarding are the review module's: `review_operation` calls
``orchestrator.review.<name>`` when that module provides it, else says it is not
available yet.
"""

from __future__ import annotations

import importlib
import subprocess
from typing import Any

from orchestrator.board.model import Status, Task
from orchestrator.errors import Conflict, GitError
from orchestrator.layout import Layout
from orchestrator.protocols import Board

MAX_DIFF_CHARS = 200_000


class NotAvailable(Conflict):
    """An operation whose implementation (the review module) is not installed yet."""


def _git(layout: Layout, *args: str) -> str:
    out = subprocess.run(["git", *args], cwd=layout.root, capture_output=True, text=True,
                         check=False)
    if out.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {out.stderr.strip() or 'failed'}")
    return out.stdout


def diff_range(layout: Layout, task: Task) -> str:
    """``base..branch`` for a task's kept work; the base is the commit it started from
    (or, when unrecorded, where its branch left the current HEAD)."""
    if not task.branch:
        raise Conflict(f"{task.id} has no branch yet (status {task.status})")
    base = task.base_commit or _git(layout, "merge-base", "HEAD", task.branch).strip()
    return f"{base}..{task.branch}"


def diffstat(layout: Layout, task: Task) -> dict[str, Any]:
    files: list[dict[str, Any]] = []
    for line in _git(layout, "diff", "--numstat", diff_range(layout, task)).splitlines():
        added, removed, path = line.split("\t", 2)
        files.append({"path": path, "added": None if added == "-" else int(added),
                      "removed": None if removed == "-" else int(removed)})
    return {"files": files, "added": sum(f["added"] or 0 for f in files),
            "removed": sum(f["removed"] or 0 for f in files)}


def review_queue(board: Board, layout: Layout) -> list[dict[str, Any]]:
    """Tasks awaiting review, oldest id first, with what a reviewer looks at first."""
    rows: list[dict[str, Any]] = []
    for task in board.list(Status.REVIEW):
        row: dict[str, Any] = {
            "id": task.id, "subject": task.subject, "branch": task.branch,
            "worktree": task.worktree, "checks": task.checks, "cost_usd": task.usage.cost_usd,
            "attempts": task.attempts,
        }
        try:
            row["diffstat"] = diffstat(layout, task)
        except (GitError, Conflict) as exc:
            row["diffstat"] = None
            row["error"] = str(exc)
        rows.append(row)
    touched = {r["id"]: {f["path"] for f in r["diffstat"]["files"]}
               for r in rows if r["diffstat"]}
    for row in rows:
        mine = touched.get(row["id"], set())
        row["overlaps"] = {other: sorted(mine & files) for other, files in touched.items()
                           if other != row["id"] and mine & files}
    return rows


def task_diff(board: Board, layout: Layout, task_id: str, *, stat: bool = False) -> str:
    task = board.get(task_id)
    args = ["diff", "--stat"] if stat else ["diff"]
    text = _git(layout, *args, diff_range(layout, task))
    if len(text) > MAX_DIFF_CHARS:
        cut = len(text) - MAX_DIFF_CHARS
        text = text[:MAX_DIFF_CHARS] + f"\n[... {cut} more characters: ask for stat=true " \
                                       f"or run git diff {diff_range(layout, task)}]\n"
    return text or f"(no changes on {task.branch})"


def review_operation(name: str, **kwargs: Any) -> Any:
    """Call ``orchestrator.review.<name>(**kwargs)``; `NotAvailable` until it exists."""
    try:
        module = importlib.import_module("orchestrator.review")
    except ModuleNotFoundError as exc:
        if exc.name not in ("orchestrator.review",):
            raise
        module = None
    func = getattr(module, name, None) if module is not None else None
    if func is None:
        raise NotAvailable(f"{name} is not available yet: it needs the review module "
                           f"(orchestrator.review.{name}); use git on the task's branch meanwhile")
    return func(**kwargs)
