"""``todo_write``: the agent's todo list, kept on the task so a person sees where it stands.

Each call replaces the whole list (as Claude Code's TodoWrite does): items with
``content`` and ``status`` (``pending``, ``in_progress``, ``done``; ``completed``
is taken for ``done``). The list is written to the task's ``todos`` with the
run's lease token, so a teammate that lost its lease cannot overwrite it, and
`orchestrator show ID` and `orchestrator board` display it.

The tool is ``read_only``: it changes no file of the project, so it works in
``plan`` mode and never asks (a ``TodoWrite`` deny rule still turns it off).
"""

from __future__ import annotations

from typing import Any

import msgspec

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.todos import progress, render
from orchestrator.agent.tools.common import obj, prop
from orchestrator.errors import OrchestratorError
from orchestrator.model import Todo, TodoStatus

MAX_TODOS = 100
STATUS_ALIASES = {"completed": TodoStatus.DONE}


class TodoWriteTool:
    name = "todo_write"
    read_only = True
    description = (
        "Keep a todo list for this task, shown to the people watching the board. Send the "
        "whole list each time (it replaces the previous one). Use it for work of three or "
        "more steps: add the steps, mark one in_progress while you work on it, mark it done "
        "as soon as it is finished."
    )
    input_schema = obj(
        ["todos"],
        todos=prop("array", "The complete list, in order.", items=obj(
            ["content", "status"],
            content=prop("string", "What is to be done, one line."),
            status=prop("string", "Where the item stands.",
                        enum=[*(s.value for s in TodoStatus), *STATUS_ALIASES]),
        )),
    )

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        board, token = ctx.board, ctx.token
        if board is None or ctx.task_id is None or token is None:
            return self.error("no task board in this run")
        items = args["todos"]
        if len(items) > MAX_TODOS:
            return self.error(f"at most {MAX_TODOS} items, got {len(items)}")
        todos = []
        for i, item in enumerate(items):
            content = " ".join(str(item["content"]).split())
            if not content:
                return self.error(f"todos[{i}]: content is empty")
            if len(content) > 500:
                return self.error(f"todos[{i}]: content is longer than 500 characters")
            status = STATUS_ALIASES.get(item["status"]) or TodoStatus(item["status"])
            todos.append(Todo(content=content, status=status))
        try:
            board.update(ctx.task_id, token, todos=msgspec.to_builtins(todos))
        except OrchestratorError as exc:
            return self.error(str(exc))
        if not todos:
            return ToolResult("todo list cleared")
        return ToolResult(f"todo list saved ({progress(todos)} done):\n{render(todos)}")

    def error(self, message: str) -> ToolResult:
        return ToolResult(f"{self.name}: {message}", is_error=True)
