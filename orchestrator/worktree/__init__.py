"""The execution plane: one isolated workspace per task.

`open_isolation` picks the backend from the configuration: git worktrees
(`WorktreeManager`, the default) or the user's create/remove commands
(`HookIsolation`, when ``worktree.create_command`` is set). Both offer `Workspaces`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from orchestrator.config import WorktreeConfig
from orchestrator.controlplane import ControlPlane
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.protocols import Isolation
from orchestrator.worktree.hooks import HookIsolation
from orchestrator.worktree.manager import WorktreeManager, binding
from orchestrator.worktree.reconcile import GcReport, ReconcileReport, WorkspaceStatus

if TYPE_CHECKING:
    from orchestrator.sandbox import Sandbox


@runtime_checkable
class Workspaces(Isolation, Protocol):
    """`Isolation` plus what the lead and the CLI need to look after workspaces."""

    layout: Layout

    def path_for(self, task: Task) -> Path: ...
    def branch_for(self, task: Task) -> str | None: ...
    def owned_branch(self, task: Task) -> str | None:
        """The branch the orchestrator made for the task, which its task file must name
        (`UnsafeRemoval` otherwise): what merge and removal may act on."""
        ...
    def exists(self, task: Task) -> bool: ...
    def status(self, task: Task) -> WorkspaceStatus: ...
    def removal_risks(self, task: Task) -> list[str]: ...
    def environment(self, task: Task) -> dict[str, str]:
        """The workspace variables of the task's processes, without allocating anything."""
        ...
    def overview(self, tasks: list[Task]) -> list[WorkspaceStatus]: ...
    def gc(self, tasks: list[Task], dry_run: bool = False) -> GcReport: ...
    def reconcile(self, tasks: list[Task]) -> ReconcileReport: ...


def open_isolation(layout: Layout, config: WorktreeConfig, board: ControlPlane | None = None, *,
                   actor: str = "worktree", sandbox: Sandbox | None = None) -> Workspaces:
    """The configured isolation backend: hooks when ``create_command`` is set, else git
    worktrees; setup commands run in ``sandbox`` (the tasks')."""
    if config.create_command:
        return HookIsolation(layout, config, board, actor=actor, sandbox=sandbox)
    return WorktreeManager(layout, config, board, actor=actor, sandbox=sandbox)


__all__ = [
    "GcReport",
    "HookIsolation",
    "ReconcileReport",
    "WorkspaceStatus",
    "Workspaces",
    "WorktreeManager",
    "binding",
    "open_isolation",
]
