"""What every backend tells its agent about the task: the prompt, the environment of
its processes, and what went wrong before.

Shared by the backends (`orchestrator.backends`) and the teammate (`orchestrator.team`),
which runs checks in the same environment and prints `reason_line` on the console.
"""

from __future__ import annotations

from orchestrator.delivery import MESSAGES_ENV
from orchestrator.model import Task
from orchestrator.procutil import user_environ
from orchestrator.protocols import RunContext

LAST_ERROR_LINES = 30
"""How much of the last attempt's error (a failing check's output tail) a retry is shown."""


def last_failure(task: Task) -> str | None:
    """What went wrong on the task's last attempt, for the prompt of the next one (every
    backend puts it there), or None on a first attempt."""
    if not task.error or not task.error.strip():
        return None
    lines = task.error.strip().splitlines()
    if len(lines) > LAST_ERROR_LINES:
        lines = [lines[0], "…", *lines[-LAST_ERROR_LINES + 2:]]
    which = f" (attempt {task.attempts} of {task.max_attempts})" if task.attempts else ""
    return (f"The previous attempt{which} failed; its work is still in this worktree. "
            "What went wrong:\n" + "\n".join(lines))


def reason_line(error: str) -> str:
    """One line for the console: the error's first line, and its last when that differs
    (the last line of a command's output usually says what went wrong)."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return "failed"
    first, last = lines[0][:200], lines[-1][:200]
    return first if len(lines) == 1 or first == last else f"{first} — {last}"


def build_prompt(task: Task) -> str:
    parts = [task.subject]
    if task.description:
        parts.append(task.description)
    failure = last_failure(task)
    if failure:
        parts.append(failure)
    if task.feedback:
        parts.append("Feedback from review:\n" + "\n".join(f"- {f}" for f in task.feedback))
    return "\n\n".join(parts)


def task_env(ctx: RunContext) -> dict[str, str]:
    """The environment of every process run for a task (backend and checks): the person's
    (`user_environ`: without orchestrator's own virtualenv), the workspace's, the task's."""
    env = user_environ(ctx.layout.root)
    env.update(ctx.workspace.env)
    env.update(
        ORCH_TASK_ID=ctx.task.id,
        ORCH_TASK_SUBJECT=ctx.task.subject,
        ORCH_TASK_DESCRIPTION=ctx.task.description,
        ORCH_PROMPT=build_prompt(ctx.task),
        ORCH_TEAMMATE=ctx.teammate,
    )
    if ctx.messages is not None:
        env[MESSAGES_ENV] = str(ctx.messages)
    return env


def last_lines(text: str, n: int = 20) -> str:
    """The last ``n`` lines of ``text``."""
    return "\n".join(text.rstrip().splitlines()[-n:])
