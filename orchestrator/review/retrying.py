"""Retrying a task: back to ``pending`` in the same worktree and branch, with feedback.

The feedback is appended to the task's ``feedback`` list, which every backend
puts in the next attempt's prompt (the command backend's ``ORCH_PROMPT``, the
agent's task section). A retry is a fresh round: ``attempts`` starts again at
zero and the last error is cleared, so a task that had failed for good gets
its full ``max_attempts`` again.

A task whose run was stopped for a person (a budget, no progress: `orchestrator.waits`)
is resumed instead (`resume_task`, the feedback as its message): a retry never sends it
back under the same spent budget.
"""

from __future__ import annotations

from typing import Any

from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import Conflict, InvalidInput
from orchestrator.events import TaskRetried
from orchestrator.layout import Layout
from orchestrator.model import Status, Task, check_transition
from orchestrator.review.common import using_board
from orchestrator.review.resuming import MAX_FEEDBACK_CHARS, resume_task


def retry_task(layout: Layout, config: Config, task_id: str, feedback: str | None = None, *,
               actor: str = "cli", board: ControlPlane | None = None,
               also: dict[str, Any] | None = None) -> Task:
    """``review`` or ``failed`` -> ``pending``, the worktree and branch kept; ``also``: more
    fields written in the same step (the forge's link)."""
    note = None if feedback is None else feedback.strip()
    if note is not None and not note:
        raise InvalidInput("the feedback is empty (leave out -m to retry without feedback)")
    if note is not None and len(note) > MAX_FEEDBACK_CHARS:
        raise InvalidInput(f"the feedback is longer than {MAX_FEEDBACK_CHARS} characters")
    with using_board(layout, config, board, actor) as b:
        task = b.get(task_id)
        if task.wait is not None and task.wait.paused:
            return resume_task(layout, config, task.id, feedback=note, actor=actor, board=b)
        if task.status not in (Status.REVIEW, Status.FAILED):
            raise Conflict(f"{task.id} is {task.status}: only a task in review or failed can "
                           "be retried")
        check_transition(task.id, task.status, Status.PENDING)
        extra = {"feedback": [*task.feedback, note]} if note else {}
        task = b.set_status(task.id, Status.PENDING, actor=actor, attempts=0, error=None,
                            **extra, **(also or {}))
        b.events.emit(TaskRetried(feedback=note, branch=task.branch), task.id, actor=actor)
    return task
