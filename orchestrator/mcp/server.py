"""``orchestrator mcp``: the board served over MCP (stdio), so any MCP client can lead.

    claude mcp add orchestrator -- orchestrator mcp          (from inside the repository)
    claude mcp add orchestrator -- orchestrator mcp -C /path/to/repo

Tools: add_task, list_tasks, get_task, cancel_task, review, diff, merge, discard,
events. Arguments are named as in the task model (``subject``, ``description``,
``blocked_by``, ``priority``, ``id``). Every error we raise on purpose (unknown
task, refused transition, bad id) comes back as an MCP tool error with its one
line of text; the server keeps running. A boolean argument must be a JSON boolean:
``"true"`` (a string) is refused, not taken as true. Every answer and error is masked
like the web board's (`orchestrator.secrets.redact`): a secret of the server's
environment that reached a task, an event or a diff comes back as ``***``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from orchestrator.board import open_board
from orchestrator.budget import describe, make_budget
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import InvalidInput, OrchestratorError
from orchestrator.forge import pull_request
from orchestrator.mcp.handshake import INSTRUCTIONS, SERVER_NAME, FirstLine
from orchestrator.model import Status, Task
from orchestrator.record import describe_error, to_dict
from orchestrator.repo import Repo, to_jsonable
from orchestrator.review import diff_text, discard_task, merge_task, review_rows
from orchestrator.review.resuming import resume_task
from orchestrator.review.retrying import retry_task
from orchestrator.secrets import redact
from orchestrator.waits import as_dict

ACTOR = "mcp"
MAX_DIFF_BYTES = 1 << 20
F = TypeVar("F", bound=Callable[..., Any])

TaskId = Annotated[str | int, Field(description="The task id: task_007 (or just 7).")]

def _tool_errors(fn: F) -> F:
    """Our own errors become MCP tool errors with their one line of text; answers and
    errors are masked."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return _masked(fn(*args, **kwargs))
        except OrchestratorError as exc:
            raise ToolError(redact(str(exc))) from exc
    return wrapper  # type: ignore[return-value]


def _masked(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    return json.loads(redact(json.dumps(value, default=str)))


class BoardServer(MCPServer):
    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        """Arguments that do not fit the schema get one clear line, not pydantic's report."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(redact(f"{name}: invalid arguments: {describe_error(cause)}")
                                ) from cause
            raise


def _json(task: Task) -> dict[str, Any]:
    return to_dict(task)


def _summary(task: Task, problems: dict[str, str]) -> dict[str, Any]:
    row = {"id": task.id, "status": task.status.value, "subject": task.subject,
           "priority": task.priority, "blocked_by": task.blocked_by, "owner": task.owner,
           "branch": task.branch, "attempts": task.attempts,
           "spent": describe(task.budget, task.usage),
           "wait": None if task.wait is None else as_dict(task.wait, task.id),
           "pull_request": pull_request(task.forge)}
    if task.id in problems:
        row["problem"] = problems[task.id]
    return row


def build_server(repo: Repo) -> tuple[MCPServer, ControlPlane]:
    """The MCP server over ``repo``'s board (close the board when done serving)."""
    board = open_board(repo.layout, repo.board, actor=ACTOR)
    layout = repo.layout
    server = BoardServer(SERVER_NAME, instructions=INSTRUCTIONS, log_level="WARNING")

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
        from orchestrator.adding import add_task as add

        task = add(layout, None, board, subject, description=description,
                   blocked_by=[str(b) for b in blocked_by], priority=priority,
                   budget=make_budget(budget_usd, budget_tokens, timeout), actor=ACTOR)
        return _json(task)

    @server.tool()
    @_tool_errors
    def list_tasks(
        status: Annotated[Status | list[Status] | None, Field(
            description="Only tasks in this status, or in these statuses (default: all).")
        ] = None,
    ) -> dict[str, Any]:
        """The tasks on the board (id order), with any problem that keeps one from starting,
        and the dropped files this call's intake rejected."""
        board.intake()
        problems = board.problems()
        out: dict[str, Any] = {"tasks": [_summary(t, problems)
                                         for t in board.list(status or None)]}
        rejected = board.rejected_drops()
        if rejected:
            out["rejected"] = rejected
        return out

    @server.tool()
    @_tool_errors
    def get_task(id: TaskId) -> dict[str, Any]:
        """One task in full: description, status, lease, branch, checks, usage, feedback."""
        board.intake()
        task = board.get(str(id))
        return {**to_jsonable(task), "problem": board.problems().get(task.id),
                "wait": None if task.wait is None else as_dict(task.wait, task.id),
                "pull_request": pull_request(task.forge)}

    @server.tool()
    @_tool_errors
    def cancel_task(id: TaskId) -> dict[str, Any]:
        """Cancel a task that is not final; a running one loses its lease (worktree kept)."""
        return _json(board.cancel(str(id), actor=ACTOR))

    @server.tool()
    @_tool_errors
    def review() -> dict[str, Any]:
        """Tasks awaiting review: branch, diffstat, checks, cost, and overlapping files."""
        return {"tasks": review_rows(layout, repo.config, board=board)}

    @server.tool()
    @_tool_errors
    def diff(
        id: TaskId,
        stat: Annotated[bool, Field(description="Only the per-file summary.",
                                    strict=True)] = False,
    ) -> str:
        """The task's changes: git diff from the commit it started at to its branch (at
        most 1 MiB: a longer diff ends with a line saying it was cut)."""
        return diff_text(layout, repo.config, board.get(str(id)).id, stat=stat, board=board,
                         limit=MAX_DIFF_BYTES)

    @server.tool()
    @_tool_errors
    def merge(
        id: TaskId,
        strategy: Annotated[Literal["merge", "squash", "rebase"], Field(
            description="How the branch lands on the base branch.")] = "merge",
        with_blockers: Annotated[bool, Field(
            description="A task stacked on unmerged blockers: merge them first, in order.",
            strict=True)] = False,
    ) -> dict[str, Any]:
        """Merge a reviewed task's branch (refused when it would conflict, or when it is
        stacked on unmerged blockers unless with_blockers)."""
        result = merge_task(layout, repo.config, board.get(str(id)).id, strategy,
                            actor=ACTOR, board=board, with_blockers=with_blockers)
        return {"result": to_jsonable(result)}

    @server.tool()
    @_tool_errors
    def answer(
        id: Annotated[str, Field(description="The request id, or the task id whose "
                                             "permission or plan request to answer.")],
        approve: Annotated[bool, Field(description="True approves, False denies.",
                                       strict=True)],
        message: Annotated[str, Field(description="A note or the reason (the agent sees it).",
                                      max_length=20_000)] = "",
    ) -> dict[str, Any]:
        """Answer a task's permission or plan request (its wait: permission, plan)."""
        from orchestrator.agent import permission_flow

        return permission_flow.answer(board, str(id), approved=approve, message=message,
                                      actor=ACTOR)

    @server.tool()
    @_tool_errors
    def resume(
        id: TaskId,
        budget_usd: Annotated[float | None, Field(
            description="The task's new dollar limit (a budget wait).", gt=0)] = None,
        to_review: Annotated[bool, Field(description="Send it to review as it is instead.",
                                         strict=True)] = False,
        message: Annotated[str | None, Field(description="A message for the agent.",
                                             max_length=20_000)] = None,
    ) -> dict[str, Any]:
        """Resume a task stopped for a budget or for no progress (its wait's actions)."""
        return _json(resume_task(layout, repo.config, board.get(str(id)).id, usd=budget_usd,
                                 review=to_review, feedback=message, actor=ACTOR, board=board))

    @server.tool()
    @_tool_errors
    def retry(
        id: TaskId,
        feedback: Annotated[str | None, Field(description="Feedback for the next attempt.",
                                              max_length=20_000)] = None,
    ) -> dict[str, Any]:
        """Send a task in review or failed back to its agent, with feedback."""
        return _json(retry_task(layout, repo.config, board.get(str(id)).id, feedback,
                                actor=ACTOR, board=board))

    @server.tool()
    @_tool_errors
    def discard(
        id: TaskId,
        force: Annotated[bool, Field(
            description="Discard even unsaved work (a snapshot ref is kept first).",
            strict=True)] = False,
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
        if event is None:
            found = board.events.tail(limit, task=task_id)
        else:
            found = [e for e in board.events.read(task=task_id) if e.event == event][-limit:]
        return {"events": [e.to_dict() for e in found]}

    return server, board


def serve(repo: Repo, first: FirstLine | None = None, *, http: str | None = None,
          token_file: Path | None = None) -> None:
    """Serve the board over stdio until the client closes the connection, or over
    streamable HTTP at ``http`` (``HOST:PORT``, see `orchestrator.mcp.http`).

    On stdio, ``first`` is the line `orchestrator.mcp.handshake.answer_initialize` read
    (and maybe answered) before the SDK was imported. A line that is not JSON gets
    JSON-RPC's parse error (-32700), one that is JSON but no JSON-RPC message an invalid
    request (-32600), and the server goes on."""
    if http is None and token_file is not None:
        raise InvalidInput("--token-file goes with --http")
    if http is not None:
        from orchestrator.mcp.http import parse_address, read_token

        read_token(token_file, parse_address(http)[0])  # refuse before opening anything
    server, board = build_server(repo)
    try:
        if http is None:
            import anyio

            anyio.run(_serve_stdio, server, first)
        else:
            from orchestrator.mcp.http import serve_http

            serve_http(server, http, token_file)
    finally:
        board.close()


async def _serve_stdio(server: MCPServer, first: FirstLine | None) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        lowlevel = server._lowlevel_server
        reader = _AnswerBadLines(read_stream, write_stream, first)
        writer = _DropAnswer(write_stream, first.answered if first else None)
        await lowlevel.run(reader, writer, lowlevel.create_initialization_options())


class _Wrapped:
    """A stream of the SDK's stdio transport with some of its methods replaced."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:  # close, aclose, clone, last_context …
        return getattr(self._inner, name)

    async def __aenter__(self) -> Any:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


class _DropAnswer(_Wrapped):
    """The write stream, without the SDK's answer to the request answered already."""

    def __init__(self, inner: Any, request_id: str | int | None) -> None:
        super().__init__(inner)
        self._id = request_id

    async def send(self, item: Any) -> None:
        if self._id is not None and getattr(item.message, "id", None) == self._id \
                and not hasattr(item.message, "method"):
            self._id = None
            return
        await self._inner.send(item)


class _AnswerBadLines(_Wrapped):
    """The read stream: the first line (read before the SDK was imported) replayed, then
    the transport's; each line it could not parse (an exception item, which the SDK
    would only log) is answered with a JSON-RPC error."""

    def __init__(self, inner: Any, write: Any, first: FirstLine | None = None) -> None:
        super().__init__(inner)
        self._write = write
        self._replay = first.line if first is not None and first.line.strip() else None

    def __aiter__(self) -> _AnswerBadLines:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def receive(self) -> Any:
        from mcp.shared.message import SessionMessage
        from mcp_types import INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError

        while True:
            if self._replay is not None:
                item = _parse(self._replay)
                self._replay = None
            else:
                item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            bad_json = isinstance(item, ValidationError) and any(
                e["type"] == "json_invalid" for e in item.errors())
            error = (ErrorData(code=PARSE_ERROR, message="Parse error: not JSON") if bad_json
                     else ErrorData(code=INVALID_REQUEST,
                                    message="Invalid request: not a JSON-RPC message"))
            await self._write.send(SessionMessage(JSONRPCError(jsonrpc="2.0", id=None,
                                                               error=error)))


def _parse(line: bytes) -> Any:
    """A line as the SDK's stdio transport reads it: a message, or the exception."""
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    try:
        return SessionMessage(jsonrpc_message_adapter.validate_json(line, by_name=False))
    except Exception as exc:
        return exc
