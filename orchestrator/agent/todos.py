"""How a task's todo list reads to a person (``show``, ``board``, the tool's answer).

Kept apart from the ``todo_write`` tool so the CLI can show a list without
importing the agent's tools.
"""

from __future__ import annotations

from orchestrator.model import Todo, TodoStatus

MARKS = {TodoStatus.PENDING: "[ ]", TodoStatus.IN_PROGRESS: "[>]", TodoStatus.DONE: "[x]"}


def render(todos: list[Todo]) -> str:
    """The list as a person reads it: ``[x] done``, ``[>] in progress``, ``[ ] pending``."""
    return "\n".join(f"{MARKS[t.status]} {t.content}" for t in todos)


def progress(todos: list[Todo]) -> str:
    """``2/5`` (done of all), or empty when there is no list."""
    if not todos:
        return ""
    return f"{sum(t.status is TodoStatus.DONE for t in todos)}/{len(todos)}"
