"""Resuming a task that waits for a person after its run was stopped (a budget spent,
no progress): with a raised limit it goes back to ``pending`` in the same worktree and
branch (and, for the built-in loop and Claude Code, the same conversation); or it goes
to review as it is. ``discard`` throws it away.
"""

from __future__ import annotations

from typing import Any

from orchestrator import budget
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import Conflict, InvalidInput
from orchestrator.events import TaskResumed
from orchestrator.layout import Layout
from orchestrator.model import Status, Task, check_transition
from orchestrator.review.common import using_board

MAX_FEEDBACK_CHARS = 20_000


def resume_task(layout: Layout, config: Config, task_id: str, *, usd: Any = None,
                tokens: Any = None, timeout: Any = None, review: bool = False,
                feedback: str | None = None, actor: str = "cli",
                board: ControlPlane | None = None) -> Task:
    """A waiting task -> ``pending`` with its budget raised (or -> ``review`` as it is)."""
    note = None if feedback is None else feedback.strip()
    if note is not None and not 0 < len(note) <= MAX_FEEDBACK_CHARS:
        raise InvalidInput(f"the feedback must be 1 to {MAX_FEEDBACK_CHARS} characters")
    with using_board(layout, config, board, actor) as b:
        task = b.get(task_id)
        wait = task.wait
        if task.status is not Status.FAILED or wait is None or not wait.paused:
            raise Conflict(f"{task.id} is {task.status} and "
                           + (f"waits for {wait.text}: {' | '.join(wait.commands(task.id))}"
                              if wait else "waits for nothing")
                           + "; only a task stopped for a budget or for making no progress "
                           "can be resumed" + ("" if wait else
                                               f" (orchestrator retry {task.id} for a failed one)"))
        raised = budget.make_budget(usd, tokens, timeout, base=task.budget)
        fields: dict[str, Any] = {"wait": None, "error": None, "budget": raised}
        if note:
            fields["feedback"] = [*task.feedback, note]
        if review:
            if not task.branch:
                raise Conflict(f"{task.id} has no branch: nothing to review")
            check_transition(task.id, task.status, Status.REVIEW)
            task = b.set_status(task.id, Status.REVIEW, actor=actor, **fields)
        else:
            still = budget.reached(raised, task.usage)
            if still:
                raise InvalidInput(f"{task.id}: {still}; raise the limit to resume it: "
                                   f"orchestrator resume {task.id} --budget-usd N (or "
                                   "--budget-tokens, --timeout), or --review")
            task = b.set_status(task.id, Status.PENDING, actor=actor, attempts=0, **fields)
        b.events.emit(TaskResumed(to=str(task.status), budget=raised,
                                  feedback=note), task.id, actor=actor)
    return task
