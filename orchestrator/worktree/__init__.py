"""The execution plane: a git worktree per task (`WorktreeManager`)."""

from orchestrator.worktree.manager import WorktreeManager, binding
from orchestrator.worktree.reconcile import GcReport, ReconcileReport

__all__ = ["GcReport", "ReconcileReport", "WorktreeManager", "binding"]
