"""Discarding a task's kept work: fail-closed, as every worktree removal.

The worktree and branch are removed only when nothing would be lost; otherwise
the refusal says what (uncommitted changes, commits not in the base). With
``force`` the work is first saved under ``refs/orchestrator/snapshots/<task>``
(a commit holding the worktree's content, with the branch tip as a parent), so
even a forced discard can be undone by hand. The task becomes ``discarded``.
"""

from __future__ import annotations

from pydantic import BaseModel

from orchestrator.board.model import Status, Task, check_transition
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.layout import Layout
from orchestrator.review.common import using_board


class DiscardResult(BaseModel):
    task: Task
    snapshot: str | None = None
    """The snapshot ref that keeps the discarded work (forced discards only)."""


def discard_task(layout: Layout, config: Config, task_id: str, force: bool = False, *,
                 actor: str = "cli", board: ControlPlane | None = None) -> DiscardResult:
    """Remove a task's worktree and branch (fail-closed) and mark it ``discarded``.

    Allowed from ``review`` and ``failed``; `UnsafeRemoval` when work would be lost and
    ``force`` is not given (nothing is changed then)."""
    from orchestrator.worktree import open_isolation

    with using_board(layout, config, board, actor) as b:
        task = b.get(task_id)
        check_transition(task.id, task.status, Status.DISCARDED)
        manager = open_isolation(layout, config.worktree, b, actor="review")
        snapshot = manager.remove(task, force=force)
        task = b.set_status(task.id, Status.DISCARDED, actor=actor)
        b.events.emit("discarded", task.id, actor=actor, branch=task.branch, snapshot=snapshot,
                      forced=force)
    return DiscardResult(task=task, snapshot=snapshot)
