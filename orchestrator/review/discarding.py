"""Discarding a task's kept work: fail-closed, as every worktree removal.

The worktree and branch are removed only when nothing would be lost; otherwise
the refusal says what (uncommitted changes). Committed work on the task's branch
is no reason to refuse — a person who reviewed it and discards it means it — it is
saved under ``refs/orchestrator/snapshots/<task>`` and the result says so. With
``force`` uncommitted work is first saved there too (a commit holding the worktree's
content, with the branch tip as a parent), so even a forced discard can be undone by
hand. The task becomes ``discarded``.

Across machines (a PostgreSQL board and a shared remote) the task's work-in-progress
snapshot ref, ``refs/orchestrator/wip/<task>``, goes too, here and on the remote: no
machine resumes a discarded task from it.

A cancelled task keeps its worktree and branch (it may have commits); discarding it
cleans them up the same way (fail-closed, ``force`` snapshots first), and it stays
``cancelled``: what happened to the task does not change, only its leftovers go.
"""

from __future__ import annotations

from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.events import Discarded
from orchestrator.layout import Layout
from orchestrator.model import Status, Task, check_transition
from orchestrator.record import Record
from orchestrator.review.common import using_board


class DiscardResult(Record):
    task: Task
    snapshot: str | None = None
    """The snapshot ref that keeps the discarded work (forced discards only)."""
    kept_ignored: str | None = None
    """Where the worktree's gitignored files were moved (None: it had none)."""


def discard_task(layout: Layout, config: Config, task_id: str, force: bool = False, *,
                 actor: str = "cli", board: ControlPlane | None = None) -> DiscardResult:
    """Remove a task's worktree and branch (fail-closed) and mark it ``discarded``.

    Allowed from ``review`` and ``failed``, and for a ``cancelled`` task's leftovers (it
    stays cancelled); `UnsafeRemoval` when work would be lost and ``force`` is not given
    (nothing is changed then)."""
    from orchestrator.worktree import open_isolation

    with using_board(layout, config, board, actor) as b:
        task = b.get(task_id)
        if task.status is not Status.CANCELLED:
            check_transition(task.id, task.status, Status.DISCARDED)
        manager = open_isolation(layout, config.worktree, b, actor="review")
        snapshot = manager.remove(task, force=force, keep_commits=True)
        from orchestrator.worktree.remote import Remote

        remote = Remote.for_config(layout.root, config)
        if remote is not None:
            remote.drop_wip(task.id)
        if task.status is not Status.CANCELLED:
            task = b.set_status(task.id, Status.DISCARDED, actor=actor)
        b.events.emit(Discarded(branch=task.branch, snapshot=snapshot, forced=force), task.id,
                      actor=actor)
    kept = getattr(manager, "kept_ignored", None)
    return DiscardResult(task=task, snapshot=snapshot,
                         kept_ignored=str(kept) if kept is not None else None)
