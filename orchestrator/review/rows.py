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

import msgspec

from orchestrator.branches.cache import PairCache
from orchestrator.branches.changes import Changes, current_branch
from orchestrator.branches.control import describe_control
from orchestrator.branches.facts import Kept, git_dir, kept_branches, merge_answers
from orchestrator.budget import describe
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.forge import pull_request
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.model import CheckResult, Status, Task, task_number
from orchestrator.review.common import using_board
from orchestrator.review.landing import land_rows
from orchestrator.worktree.remote import Remote


def review_rows(layout: Layout, config: Config, *, board: ControlPlane | None = None,
                now: float | None = None, only: str | None = None) -> list[dict[str, Any]]:
    """One dict per task in review, oldest id first (the shape of ``review --json``);
    ``only``: the row of that task alone (its overlaps still look at every kept branch).

    Git is asked about each pair of commits once (`orchestrator.branches.facts`): a
    board of 2,000 branches in review runs git a few times, not thousands."""
    with using_board(layout, config, board, "cli") as b:
        tasks = b.list()
        shown = [t for t in tasks if t.status is Status.REVIEW and (only is None
                                                                     or t.id == only)]
        lands = land_rows(b, [t.id for t in shown])
    kept, errors, merges = _branches(layout, config, tasks, shown)
    by_id = {t.id: t for t in tasks}
    overlaps = _Overlaps(kept, by_id)
    clock = time.time() if now is None else now
    rows = []
    for task in shown:
        row = _row(task, clock)
        row["land"] = lands.get(task.id)
        row["stacked_on"] = [{"task": b, "status": str(by_id[b].status)}
                             for b in _unmerged(task, by_id)]
        if task.id in kept:
            row.update(_branch(task, *kept[task.id], merges.get(task.id)))
        else:
            row["error"] = errors.get(task.id, f"{task.id} has no branch")
        row["overlaps"] = overlaps.of(task)
        rows.append(row)
    return rows


def _branches(layout: Layout, config: Config, tasks: list[Task], shown: list[Task]
              ) -> tuple[dict[str, Kept], dict[str, str], dict[str, dict[str, Any] | None]]:
    """Every kept branch read (`kept_branches`), and whether those of ``shown`` merge
    cleanly into their target now (`merge_answers`)."""
    remote = Remote.for_config(layout.root, config)
    if remote is not None and shown:  # branches finished on other machines
        remote.fetch_branches([t.branch for t in shown if t.branch])
    repo = Git(layout.root)
    main = current_branch(repo)
    with PairCache(git_dir(repo)) as cache:
        kept, errors = kept_branches(
            repo, [t for t in tasks if not t.status.final and t.branch], main, cache)
        merges = merge_answers(repo, [(t, kept[t.id][0]) for t in shown if t.id in kept],
                               main, cache, kept)
        cache.save()
    return kept, errors, merges


def _branch(task: Task, ch: Changes, facts: dict[str, Any],
            merge: dict[str, Any] | None) -> dict[str, Any]:
    """A kept branch's part of its row: where it starts, what it changes, how it merges."""
    control = facts["control"]
    return dict(base=ch.base_ref, base_commit=ch.base, commits=facts["commits"],
                diffstat={k: facts[k] for k in ("files", "added", "removed")},
                merge=merge, control_files=control,
                warnings=[f"symlink {path} -> {target} points outside the worktree"
                          for path, target in facts["links"]]
                + ([describe_control(control, task.id)] if control else []))


class _Overlaps:
    """Which other kept branches change some of the same files as a task's."""

    def __init__(self, kept: dict[str, Kept], by_id: dict[str, Task]) -> None:
        self.by_id = by_id
        self.touched = {tid: {f["path"] for f in facts["files"]}
                        for tid, (_, facts) in kept.items()}
        self.by_file: dict[str, list[str]] = {}
        for tid, files in self.touched.items():
            for f in files:
                self.by_file.setdefault(f, []).append(tid)

    def of(self, task: Task) -> list[dict[str, Any]]:
        """The overlaps of ``task``, oldest id first (not the tasks it is stacked on or
        under, `_stacked`)."""
        shared: dict[str, set[str]] = {}
        for f in self.touched.get(task.id, set()):
            for other in self.by_file[f]:
                if other != task.id:
                    shared.setdefault(other, set()).add(f)
        return [{"task": other, "status": str(self.by_id[other].status),
                 "files": sorted(files)}
                for other, files in sorted(shared.items(), key=lambda kv: task_number(kv[0]))
                if not _stacked(task, self.by_id[other])]


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
        "usage": msgspec.to_builtins(task.usage), "budget": msgspec.to_builtins(task.budget),
        "spent": describe(task.budget, task.usage),
        "tokens": task.usage.input_tokens + task.usage.output_tokens,
        "attempts": task.attempts, "feedback": task.feedback,
        "age_seconds": _since(task.updated_at, now),
        "pull_request": pull_request(task.forge),
    }


def _checks(checks: CheckResult | None) -> dict[str, Any] | None:
    """The verification result without its output (``orchestrator logs ID`` has that)."""
    if checks is None:
        return None
    return {"passed": checks.passed, "result": checks.result, "command": checks.command,
            "seconds": checks.seconds, "at": checks.at}


def _since(iso: str, now: float) -> float | None:
    try:
        return round(max(0.0, now - datetime.fromisoformat(iso.replace("Z", "+00:00"))
                         .timestamp()), 1)
    except ValueError:
        return None
