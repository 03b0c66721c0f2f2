"""Board tools: what an agent may see and do on the task board.

They use the run's injected ``board`` (any `orchestrator.protocols.Board`),
``teammate`` (the sender and actor name) and ``task_id``. An agent reads the
board and files follow-up tasks (recorded with ``metadata.parent``); it never
changes the status of a task — that is the teammate's and the lead's job.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.adding import add_task
from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.tools.common import obj, prop
from orchestrator.errors import OrchestratorError
from orchestrator.model import Status, Task
from orchestrator.record import to_dict

MAX_LISTED = 200
_SHOWN_FIELDS = ("id", "subject", "status", "priority", "blocked_by", "owner", "branch",
                 "description", "feedback", "error")


class _BoardTool:
    name = ""
    read_only = True

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        board = ctx.board
        if board is None:
            return ToolResult(f"{self.name}: no task board in this run", is_error=True)
        try:
            return ToolResult(self.act(board, args, ctx))
        except OrchestratorError as exc:
            return ToolResult(f"{self.name}: {exc}", is_error=True)

    def act(self, board: Any, args: dict[str, Any], ctx: ToolContext) -> str:
        raise NotImplementedError


def _line(t: Task) -> str:
    blocked = f" (blocked by {', '.join(t.blocked_by)})" if t.blocked_by else ""
    return f"{t.id} [{t.status}] {t.subject}{blocked}"


class TaskListTool(_BoardTool):
    name = "task_list"
    description = "List the tasks on the team's board: id, status, subject, blockers."
    input_schema = obj([], status=prop("string", "Only tasks in this status.",
                                       enum=[s.value for s in Status]))

    def act(self, board: Any, args: dict[str, Any], ctx: ToolContext) -> str:
        tasks = board.list(Status(args["status"]) if "status" in args else None)
        if not tasks:
            return "no tasks"
        lines = [_line(t) for t in tasks[:MAX_LISTED]]
        if len(tasks) > MAX_LISTED:
            lines.append(f"({len(tasks) - MAX_LISTED} more; filter by status)")
        return "\n".join(lines)


class TaskGetTool(_BoardTool):
    name = "task_get"
    description = "Show one task in full: description, status, blockers, feedback."
    input_schema = obj(["task_id"], task_id=prop("string", "The task id, e.g. task_007."))

    def act(self, board: Any, args: dict[str, Any], ctx: ToolContext) -> str:
        task = board.get(args["task_id"])
        data = to_dict(task)
        return json.dumps({k: data[k] for k in _SHOWN_FIELDS if data.get(k) not in (None, [])},
                          indent=1, ensure_ascii=False)


class TaskCreateTool(_BoardTool):
    name = "task_create"
    read_only = False
    description = (
        "File a follow-up task on the board for the team (work found that is outside this "
        "task). It starts once its blockers are done."
    )
    input_schema = obj(
        ["subject"],
        subject=prop("string", "One line saying what is to be done."),
        description=prop("string", "The details a teammate needs to do it."),
        blocked_by=prop("array", "Ids of tasks that must be done first.",
                        items=prop("string", "A task id.")),
        priority=prop("integer", "Higher runs first (default 0)."),
    )

    def act(self, board: Any, args: dict[str, Any], ctx: ToolContext) -> str:
        if ctx.layout is None:
            raise OrchestratorError("task_create needs the project (this run has none)")
        meta = {"parent": ctx.task_id} if ctx.task_id else {}
        task = add_task(ctx.layout, None, board, args["subject"],
                        description=args.get("description", ""),
                        blocked_by=args.get("blocked_by", []), priority=args.get("priority", 0),
                        actor=ctx.teammate or "agent", metadata=meta)
        return f"created {_line(task)}"


class SendMessageTool(_BoardTool):
    name = "send_message"
    read_only = False
    description = "Send a message to the lead (`lead`) or a teammate by name."
    input_schema = obj(
        ["to", "body"],
        to=prop("string", "Recipient: `lead` or a teammate's name."),
        body=prop("string", "The message."),
    )

    def act(self, board: Any, args: dict[str, Any], ctx: ToolContext) -> str:
        sender = ctx.teammate or "agent"
        msg = board.mailboxes.send(args["to"], sender, args["body"], task=ctx.task_id)
        return f"sent message {msg.id} to {args['to']}"
