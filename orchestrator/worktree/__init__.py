"""The execution plane: a git worktree per task (`WorktreeManager`)."""

from orchestrator.worktree.manager import GcReport, ReconcileReport, WorktreeManager, binding

__all__ = ["GcReport", "ReconcileReport", "WorktreeManager", "binding"]
