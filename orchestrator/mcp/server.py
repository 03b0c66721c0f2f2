"""``orchestrator mcp``: the board served over MCP (stdio), so any MCP client can lead.

    claude mcp add orchestrator -- orchestrator mcp          (from inside the repository)
    claude mcp add orchestrator -- orchestrator mcp -C /path/to/repo

Tools: add_task, list_tasks, get_task, cancel_task, review, diff, merge, discard,
events. Arguments are named as in the task model (``subject``, ``description``,
``blocked_by``, ``priority``, ``id``). Every error we raise on purpose (unknown
task, refused transition, bad id) comes back as an MCP tool error with its one
line of text; the server keeps running.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from orchestrator.board import FileBoard, open_board
from orchestrator.board.index import describe_error
from orchestrator.board.model import Budget, Status, Task
from orchestrator.budget import describe, make_budget
from orchestrator.cli.app import Repo, to_jsonable
from orchestrator.errors import OrchestratorError
from orchestrator.events import EventLog
from orchestrator.review import diff_text, discard_task, merge_task, review_rows

ACTOR = "mcp"
F = TypeVar("F", bound=Callable[..., Any])

TaskId = Annotated[str | int, Field(description="The task id: task_007 (or just 7).")]
INSTRUCTIONS = """\
The orchestrator task board of one git repository. Teammate agents claim pending
tasks, each in its own git worktree and branch, and leave finished work in
`review`. Add tasks with add_task (blocked_by makes one wait for others), watch
them with list_tasks / get_task / events, and review finished work with review and
diff, then merge or discard it."""


def _tool_errors(fn: F) -> F:
    """Our own errors become MCP tool errors with their one line of text."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except OrchestratorError as exc:
            raise ToolError(str(exc)) from exc
    return wrapper  # type: ignore[return-value]


class BoardServer(MCPServer):
    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        """Arguments that do not fit the schema get one clear line, not pydantic's report."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(f"{name}: invalid arguments: {describe_error(cause)}") from cause
            raise


def _summary(task: Task, problems: dict[str, str]) -> dict[str, Any]:
    row = {"id": task.id, "status": task.status.value, "subject": task.subject,
           "priority": task.priority, "blocked_by": task.blocked_by, "owner": task.owner,
           "branch": task.branch, "attempts": task.attempts,
           "spent": describe(task.budget, task.usage), "waiting_for": task.waiting_for}
    if task.id in problems:
        row["problem"] = problems[task.id]
    return row


def build_server(repo: Repo) -> tuple[MCPServer, FileBoard]:
    """The MCP server over ``repo``'s board (close the board when done serving)."""
    board = open_board(repo.layout, repo.config.board, actor=ACTOR)
    layout = repo.layout
    server = BoardServer("orchestrator", instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool()
    @_tool_errors
    def add_task(
        subject: Annotated[str, Field(description="What the task is about (one line).",
                                      min_length=1, max_length=500)],
        description: Annotated[str, Field(description="Details, acceptance criteria.")] = "",
        blocked_by: Annotated[list[TaskId], Field(
            description="Tasks that must be in review or merged before this one starts.")] = [],  # noqa: B006
        priority: Annotated[int, Field(description="Higher runs first; ties go to the lower id.",
                                       ge=-1000, le=1000)] = 0,
        budget_usd: Annotated[float | None, Field(
            description="Dollars it may spend over all its runs.")] = None,
        budget_tokens: Annotated[int | None, Field(description="Tokens it may spend.")] = None,
        timeout: Annotated[str | None, Field(
            description="Wall-clock time its runs may take: 30m, 1h, 90s.")] = None,
    ) -> dict[str, Any]:
        """Add a task to the board; it is pending until a teammate claims it."""
        limits = make_budget(budget_usd, budget_tokens, timeout)
        extra: dict[str, Any] = {"budget": limits} if limits != Budget() else {}
        task = board.add(subject, description=description, blocked_by=[str(b) for b in blocked_by],
                         priority=priority, actor=ACTOR, **extra)
        return to_jsonable(task)

    @server.tool()
    @_tool_errors
    def list_tasks(
        status: Annotated[list[Status] | None, Field(
            description="Only tasks in these statuses (default: all).")] = None,
    ) -> dict[str, Any]:
        """The tasks on the board (id order), with any problem that keeps one from starting."""
        board.intake()
        problems = board.problems()
        return {"tasks": [_summary(t, problems) for t in board.list(status or None)]}

    @server.tool()
    @_tool_errors
    def get_task(id: TaskId) -> dict[str, Any]:
        """One task in full: description, status, lease, branch, checks, usage, feedback."""
        board.intake()
        task = board.get(str(id))
        return {**to_jsonable(task), "problem": board.problems().get(task.id)}

    @server.tool()
    @_tool_errors
    def cancel_task(id: TaskId) -> dict[str, Any]:
        """Cancel a task that is not final; a running one loses its lease (worktree kept)."""
        return to_jsonable(board.cancel(str(id), actor=ACTOR))

    @server.tool()
    @_tool_errors
    def review() -> dict[str, Any]:
        """Tasks awaiting review: branch, diffstat, checks, cost, and overlapping files."""
        return {"tasks": review_rows(layout, repo.config, board=board)}

    @server.tool()
    @_tool_errors
    def diff(
        id: TaskId,
        stat: Annotated[bool, Field(description="Only the per-file summary.")] = False,
    ) -> str:
        """The task's changes: git diff from the commit it started at to its branch."""
        return diff_text(layout, repo.config, board.get(str(id)).id, stat=stat, board=board)

    @server.tool()
    @_tool_errors
    def merge(
        id: TaskId,
        strategy: Annotated[Literal["merge", "squash", "rebase"], Field(
            description="How the branch lands on the base branch.")] = "merge",
    ) -> dict[str, Any]:
        """Merge a reviewed task's branch (refused when it would conflict)."""
        result = merge_task(layout, repo.config, board.get(str(id)).id, strategy,
                            actor=ACTOR, board=board)
        return {"result": to_jsonable(result)}

    @server.tool()
    @_tool_errors
    def discard(
        id: TaskId,
        force: Annotated[bool, Field(
            description="Discard even unsaved work (a snapshot ref is kept first).")] = False,
    ) -> dict[str, Any]:
        """Discard a task's work: remove its worktree and branch (fail-closed)."""
        result = discard_task(layout, repo.config, board.get(str(id)).id, force,
                              actor=ACTOR, board=board)
        return {"result": to_jsonable(result)}

    @server.tool()
    @_tool_errors
    def events(
        task: Annotated[TaskId | None, Field(description="Only this task's events.")] = None,
        event: Annotated[str | None, Field(
            description="Only this event type (task_created, task_claimed, merged …).")] = None,
        limit: Annotated[int, Field(description="The last N matching events.",
                                    ge=1, le=1000)] = 50,
    ) -> dict[str, Any]:
        """The tail of the audit log (events.jsonl), oldest first."""
        task_id = board.get(str(task)).id if task is not None else None
        found = [e for e in EventLog(layout.events).read(task_id)
                 if event is None or e.get("event") == event]
        return {"events": found[-limit:]}

    return server, board


def serve(repo: Repo) -> None:
    """Serve the board over stdio until the client closes the connection."""
    server, board = build_server(repo)
    try:
        server.run("stdio")
    finally:
        board.close()
