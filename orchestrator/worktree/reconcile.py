"""Housekeeping of the execution plane: reconcile after a crash, gc, the overview.

Functions over a `WorktreeManager`, which keeps their methods one line each.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from orchestrator.errors import InvalidInput, NotFound, RunError, UnsafeRemoval
from orchestrator.events import UNSET, Orphan, UnsetType, WorktreesReconciled
from orchestrator.git import list_worktrees
from orchestrator.model import Status, Task
from orchestrator.procutil import busy_reason
from orchestrator.worktree.safety import dirty_paths
from orchestrator.worktree.shared import CacheRow, tree_bytes

if TYPE_CHECKING:
    from orchestrator.worktree import Workspaces
    from orchestrator.worktree.manager import WorktreeManager

GC_STATUSES = frozenset({Status.MERGED, Status.DISCARDED, Status.CANCELLED})


@dataclass
class ReconcileReport:
    pruned: list[str]
    """Stale worktree metadata pruned (folders deleted by hand)."""
    cleared: list[str]
    """Half-made worktrees of a killed ``git worktree add``, removed with their lock."""
    recreated: list[str]
    """Task ids whose missing worktree was re-created from their branch."""
    orphans: list[Orphan]
    """Worktrees and folders with no task: reported, never touched."""
    problems: dict[str, str]
    """Task id -> why its worktree could not be restored."""

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)  # type: ignore[no-any-return]

    def event(self, isolation: str | UnsetType = UNSET) -> WorktreesReconciled | None:
        """The event that records what changed (None: nothing did)."""
        if not any(self.to_dict().values()):
            return None
        return WorktreesReconciled(
            isolation=isolation, pruned=self.pruned or UNSET, cleared=self.cleared or UNSET,
            recreated=self.recreated or UNSET, orphans=self.orphans or UNSET,
            problems=self.problems or UNSET)


class WorkspaceStatus(msgspec.Struct, omit_defaults=True):
    """What is on disk for a task, or for an orphan folder (``task`` None, with the
    ``reason``): ``dirty`` and ``changes`` None when they could not be told, ``ahead`` the
    commits not on its bases (None: not known)."""

    task: str | None
    status: str
    branch: str | None
    path: str
    exists: bool
    branch_exists: bool
    dirty: bool | None
    changes: int | None
    ahead: int | None
    disk_bytes: int
    reason: str | None = None


class GcRow(msgspec.Struct, omit_defaults=True):
    """A worktree `gc` removed (or would), or skipped with the ``reason``; ``kept_ignored``:
    where its gitignored files were kept."""

    task: str
    status: str
    path: str
    branch: str | None
    freed_bytes: int
    kept_ignored: str | None = None
    reason: str | None = None


@dataclass
class GcReport:
    removed: list[GcRow]
    """Removed (or, with ``dry_run``, would be removed)."""
    skipped: list[GcRow]
    """Left in place, each with the ``reason``."""
    dry_run: bool
    cache: list[CacheRow] = field(default_factory=list)
    """Shared-folder cache entries no checkout uses any more, removed."""
    freed_bytes: int = 0
    """Disk space given back (or that would be), worktrees and cache entries together."""

    def add_cache(self, rows: list[CacheRow]) -> None:
        self.cache.extend(rows)
        self.freed_bytes += sum(r.freed_bytes for r in rows)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


def reconcile(m: WorktreeManager, tasks: list[Task]) -> ReconcileReport:
    """Compare ``git worktree list`` with the board: clear what a killed ``git worktree add``
    left, prune stale metadata, re-create the missing worktrees of live tasks from their
    branches, report orphans without touching them, free the ports of gone worktrees."""
    report = ReconcileReport([], [], [], [], {})
    with m.lock:
        m.ensure_excluded()
        report.cleared = clear_half_made(m)
        entries = list_worktrees(m.repo)
        report.pruned = [str(e.path) for e in entries if e.prunable]
        if report.pruned:
            m.prune()
        registered = {e.path.resolve() for e in entries if not e.prunable}
        for task in tasks:
            if task.status.final or not (task.worktree or task.branch):
                continue
            if m.layout.worktree(task.id).resolve() in registered:
                continue
            try:
                m.restore(task)
            except (RunError, InvalidInput, NotFound) as exc:
                report.problems[task.id] = str(exc)
            else:
                report.recreated.append(task.id)
        report.orphans = _orphans(m, {t.id for t in tasks})
    for task_id in m.ports.live():
        if not m.layout.worktree(task_id).exists():
            m.ports.free(task_id)
    if (event := report.event()) is not None:
        m.events.emit(event, None)
    return report


def gc(m: Workspaces, tasks: list[Task], dry_run: bool = False) -> GcReport:
    """Remove the worktrees and branches of merged, discarded and cancelled tasks when
    nothing would be lost; every other one is skipped with the reason."""
    report = GcReport(removed=[], skipped=[], dry_run=dry_run)
    for task in tasks:
        if task.status not in GC_STATUSES:
            continue
        path = m.path_for(task)
        row = GcRow(task.id, str(task.status), str(path), task.branch, 0)
        try:
            if not m.exists(task):
                continue
            row.branch = m.branch_for(task)
            row.freed_bytes = disk_use(path) if path.exists() else 0
            busy = busy_reason(path) if path.exists() else None
            reasons = [busy] if busy else m.removal_risks(task)
            if reasons:
                raise UnsafeRemoval("; ".join(reasons))
            if not dry_run:
                m.remove(task)  # checks again, under the lock
                kept = getattr(m, "kept_ignored", None)
                if kept is not None:
                    row.kept_ignored = str(kept)
        except (UnsafeRemoval, RunError, InvalidInput) as exc:
            hint = (f" (orchestrator discard {task.id} removes it, keeping its commits in a "
                    "snapshot; --force also for uncommitted changes)"
                    if isinstance(exc, UnsafeRemoval) and task.status is Status.CANCELLED
                    else "")
            row.reason = str(exc) + hint
            report.skipped.append(row)
        else:
            report.removed.append(row)
            report.freed_bytes += row.freed_bytes
    return report


def overview(m: WorktreeManager, tasks: list[Task]) -> list[WorkspaceStatus]:
    """One row per task that has a worktree or a branch, then one per orphan folder."""
    rows = []
    for task in tasks:
        if task.worktree or task.branch or m.path_for(task).exists():
            row = m.status(task)
            if row.exists or row.branch_exists:
                rows.append(row)
    for orphan in _orphans(m, {t.id for t in tasks}):
        path = Path(orphan.path)
        dirty = None
        if orphan.branch:
            with contextlib.suppress(RunError):
                dirty = dirty_paths(path)
        rows.append(WorkspaceStatus(
            None, "orphan", orphan.branch or None, str(path), True, bool(orphan.branch),
            None if dirty is None else bool(dirty), None if dirty is None else len(dirty),
            None, disk_use(path), orphan.reason))
    return rows


def clear_half_made(m: WorktreeManager, only: Path | None = None) -> list[str]:
    """Worktrees a killed creation left behind, all of ours or just the one at ``only``:
    one killed inside ``git worktree add`` (still locked "initializing"), or, as an earlier
    version made worktrees, between a detached add and its checkout or inside that
    checkout (detached, no index yet). Called under the lock, so no creation of ours is running;
    their folders hold nothing but a partial checkout, and the branch (with any work)
    stays."""
    cleared = []
    admin_root = m.common_dir() / "worktrees"
    for admin in sorted(admin_root.iterdir()) if admin_root.is_dir() else []:
        try:
            folder = Path((admin / "gitdir").read_text().strip()).parent
            head = (admin / "HEAD").read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            continue
        try:
            reason = (admin / "locked").read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            reason = ""
        detached_unfilled = not head.startswith("ref:") and not (admin / "index").exists()
        if not (reason == "initializing" or detached_unfilled) or not m.manages(folder):
            continue
        if only is not None and folder.resolve() != only.resolve():
            continue
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(admin, ignore_errors=True)
        cleared.append(str(folder))
    return cleared


def _orphans(m: WorktreeManager, known: set[str]) -> list[Orphan]:
    """Worktrees of no task, and folders in the worktree root git does not know."""
    managed = {e.path.resolve(): e for e in list_worktrees(m.repo)
               if not e.prunable and m.manages(e.path)}
    orphans = [Orphan(path=str(p), branch=e.branch or "", reason="no task with this id")
               for p, e in sorted(managed.items()) if p.name not in known]
    root = m.layout.worktree_root
    for d in sorted(root.iterdir()) if root.is_dir() else []:
        if d.is_dir() and d.resolve() not in managed:
            orphans.append(Orphan(path=str(d), branch="", reason="not a registered worktree"))
    return orphans


def disk_use(path: Path) -> int:
    """Bytes on disk that the worktree at ``path`` holds alone: symlinks are not followed
    and files hard-linked from the shared-folder cache do not count."""
    return tree_bytes(path, own=True)
