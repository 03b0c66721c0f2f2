"""Board commands: init, add, list (alias board), show, cancel, events.

Each runs intake first, so files dropped into ``.tasks/inbox/`` show up at once.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.agent.todos import progress, render
from orchestrator.backends import BACKENDS
from orchestrator.board import board_paths, init_repo, open_board
from orchestrator.board.model import Budget, Status, Task, Usage, normalize_task_id
from orchestrator.budget import describe
from orchestrator.cli.app import (
    JsonOpt,
    RepoOpt,
    app,
    open_repo,
    print_json,
    to_jsonable,
)
from orchestrator.controlplane import ControlPlane, Event

STATUS_STYLE = {
    Status.PENDING: "yellow", Status.IN_PROGRESS: "cyan", Status.REVIEW: "magenta",
    Status.MERGED: "green", Status.FAILED: "red", Status.CANCELLED: "dim",
    Status.DISCARDED: "dim",
}
_STATE_CELLS = {s: ((s._value_, style),) for s, style in STATUS_STYLE.items()}
"""The status cell of each status, on a terminal (one tuple shared by every row)."""
_USAGE, _BUDGET, _TODOS = (attrgetter(name) for name in ("usage", "budget", "todos"))


def _board(repo: Path | None, *, one_task: bool = False) -> ControlPlane:
    """The board, with dropped files taken in. ``one_task`` commands (add, show, cancel)
    leave the repair of hand-broken task files to the next list: it scans every file."""
    r = open_repo(repo, lenient=True)
    board = open_board(r.layout, r.board, actor="cli")
    board.intake(repair=not one_task)
    say_rejected(board)
    return board


def say_rejected(board: ControlPlane) -> None:
    """One line on stderr for the dropped files this command's intake rejected (a board
    with no inbox of files has none)."""
    rejected = board.rejected_drops()
    if not rejected:
        return
    from orchestrator.board.intake import rejected_line

    line = rejected_line(rejected)
    if line:
        typer.echo(line, err=True)


def _with_problem(task: Task, problems: dict[str, str]) -> dict[str, Any]:
    return {**to_jsonable(task), "problem": problems.get(task.id)}


@app.command("init")
def init(
    board_url: Annotated[str | None, typer.Option(
        "--board", help="A shared PostgreSQL board (postgresql://USER@HOST/DB) for a team "
                        "across machines: its schema is created or checked, and the URL "
                        "written to orchestrator.toml. The password comes from PGPASSWORD "
                        "or ~/.pgpass.")] = None,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Create the board and the worktree folder, and keep them out of git status.

    The file board is .tasks/, the worktrees go in .worktrees/; with --board URL the board
    is a PostgreSQL database instead."""
    r = open_repo(repo, ensure=False)
    applied: list[str] = []
    written = ""
    if board_url is not None:
        from orchestrator.board.pg import schema
        from orchestrator.settings.registry import Registry

        schema.check_url(board_url)
        applied = [f"{m.version:04d}_{m.name}" for m in schema.migrate(board_url)]
        written = Registry().set(r.layout.root, "board.url", board_url).path.name
    paths = board_paths(init_repo(r.layout.root, r.layout.worktree_root))
    if json_:
        print_json({"root": paths["root"], "tasks": paths["tasks"],
                    "worktrees": paths["worktrees"], "board": board_url,
                    "migrations_applied": applied})
        return
    typer.echo(f"initialised {paths['tasks']} (drop tasks into {paths['inbox']})")
    if board_url is not None:
        from orchestrator.board.pg.schema import latest_version, redact_url

        done = f"created the schema ({len(applied)} migrations)" if applied else \
            f"the schema is current (version {latest_version()})"
        typer.echo(f"board: {redact_url(board_url)}: {done}; written to {written}")


@app.command("migrate")
def migrate(repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """Apply newer schema migrations to the PostgreSQL board ([board] url)."""
    from orchestrator.board.pg import schema
    from orchestrator.errors import ConfigError

    r = open_repo(repo, ensure=False)
    url = r.board.url
    if not url:
        raise ConfigError("this repository uses the file board: nothing to migrate "
                          "(orchestrator init --board URL sets up a PostgreSQL board)")
    applied = schema.migrate(url)
    if json_:
        print_json({"board": schema.redact_url(url), "version": schema.latest_version(),
                    "applied": [f"{m.version:04d}_{m.name}" for m in applied]})
    elif applied:
        for m in applied:
            typer.echo(f"applied {m.version:04d}_{m.name}")
    else:
        typer.echo(f"the schema is current (version {schema.latest_version()})")


@app.command("add")
def add(
    subject: Annotated[str, typer.Argument(help="What the task is about (one line).")],
    description: Annotated[str, typer.Option("--description", "-d", help="Details.")] = "",
    blocked_by: Annotated[list[str] | None, typer.Option(
        "--blocked-by", "-b", help="A task that must be in review or merged first.")] = None,
    priority: Annotated[int, typer.Option("--priority", "-p", help="Higher runs first.")] = 0,
    backend: Annotated[str | None, typer.Option(
        help=f"Agent backend for this task: {', '.join(BACKENDS)}.")] = None,
    agent: Annotated[str | None, typer.Option(
        help="Agent profile to run it with: .claude/agents/NAME.md, or \\[agents.NAME] in "
             "orchestrator.toml.")] = None,
    no_changes: Annotated[bool, typer.Option(
        "--no-changes-expected", help="A run that changes nothing is fine (an investigation, "
                                      "a check); otherwise it fails.")] = False,
    plan_first: Annotated[bool, typer.Option(
        "--plan-first", help="Read-only until the lead approves the agent's plan "
                             "(orchestrator approve ID).")] = False,
    budget_usd: Annotated[str | None, typer.Option(
        "--budget-usd", metavar="USD", help="Dollars the task may spend over all its runs.")
    ] = None,
    budget_tokens: Annotated[str | None, typer.Option(
        "--budget-tokens", metavar="N", help="Tokens (input, output, cache) it may spend.")
    ] = None,
    timeout: Annotated[str | None, typer.Option(
        "--timeout", metavar="DURATION", help="Wall-clock time its runs may take (30m, 1h).")
    ] = None,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Add a task to the board."""
    from orchestrator.board.adding import add_task
    from orchestrator.budget import make_budget

    budget = make_budget(budget_usd, budget_tokens, timeout)
    r = open_repo(repo, lenient=True)
    with open_board(r.layout, r.board, actor="cli") as board:
        board.intake(repair=False)
        say_rejected(board)
        task = add_task(r.layout, r.config if agent else None, board, subject,
                        description=description, blocked_by=blocked_by or [],
                        priority=priority, backend=backend, agent=agent,
                        plan_first=plan_first, expect_changes=not no_changes, budget=budget,
                        actor="cli")
    if json_:
        print_json(task)
    else:
        typer.echo(f"added {task.id}: {task.subject}")


def list_tasks(
    status: Annotated[list[Status] | None, typer.Option(
        "--status", "-s", help="Only tasks in this status (repeatable).")] = None,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
    watch: Annotated[bool, typer.Option(
        "--watch", "-w", help="A live view in columns, with the teammates (Ctrl-C ends it).")
    ] = False,
    frames: Annotated[int | None, typer.Option(hidden=True, min=1)] = None,
) -> None:
    """List the tasks on the board, with any problem that keeps one from starting."""
    if watch:
        from orchestrator.cli.watch import watch_board

        r = open_repo(repo)
        watch_board(r.layout, r.config, frames=frames)
        return
    with _board(repo) as board:
        # the board filters: a shared board of a million tasks sends only those asked for
        tasks = board.list(status or None)
        problems = board.problems()
    if json_:
        from orchestrator.record import encode_with

        out = sys.stdout.buffer  # each task in full, with its problem
        out.write(encode_with(tasks, "problem", (problems.get(t.id) for t in tasks)) + b"\n")
        out.flush()
        return
    if not tasks:
        typer.echo("no tasks" + (f" in {', '.join(status)}" if status else ""))
        return
    from orchestrator.cli.table import Cell, Piped, Terminal, draw_columns

    piped = not sys.stdout.isatty()  # piped: one line per row, never wrapped, no styles
    # column by column, each a comprehension: a board of 50,000 tasks makes 300,000 cells
    states: list[Cell] = [t.status._value_ for t in tasks] if piped else \
        [_STATE_CELLS[t.status] for t in tasks]  # `.value` is a descriptor call per row
    for i, t in enumerate(tasks):
        if t.waiting_for or t.id in problems:
            segments: list[tuple[str, str | None]] = [(t.status._value_,
                                                       STATUS_STYLE[t.status])]
            if t.id in problems:
                segments += [(" ", None), ("!", "red")]
            if t.waiting_for:
                segments += [(" ", None), (f"(waiting: {_waiting(t)})", "yellow")]
            states[i] = tuple(segments)
    columns: list[list[Cell]] = [
        [t.id for t in tasks], states, [str(t.priority) for t in tasks],
        [t.subject for t in tasks], [t.owner or "" for t in tasks],
        [", ".join(t.blocked_by) if t.blocked_by else "" for t in tasks]]
    headers = ["id", "status", "pri", "subject", "owner", "blocked by"]
    nothing, no_limit = Usage(), Budget()
    if any(map(nothing.__ne__, map(_USAGE, tasks))) or \
            any(map(no_limit.__ne__, map(_BUDGET, tasks))):
        headers.append("spent")
        columns.append([describe(t.budget, t.usage) for t in tasks])
    if any(map(_TODOS, tasks)):
        headers.append("todo")
        columns.append([progress(t.todos) for t in tasks])
    from orchestrator.cli.app import PIPED_WIDTH

    console = Piped(PIPED_WIDTH) if piped else Terminal()
    drawn = draw_columns(console, headers, columns, [h == "status" for h in headers])
    lines = list(map(str.rstrip, drawn) if piped else drawn)
    # problems of the tasks shown, and (unfiltered) of task files too broken to list at all
    ids = set(columns[0])
    shown = ids | (set() if status else set(problems) - ids)
    lines += [f"! {tid}: {problems[tid]}" for tid in sorted(set(problems) & shown)]
    _page(console, lines)


def _page(console: Any, lines: list[str]) -> None:
    """Print ``lines``; on a terminal, more than a screenful goes through the pager
    (``$PAGER``, else ``less``), as ``git log`` does."""
    text = "\n".join(lines) + "\n"
    if console.is_terminal and len(lines) >= console.height:
        from orchestrator.cli.app import page

        page(text)
        return
    sys.stdout.write(text)
    sys.stdout.flush()


app.command("list")(list_tasks)
app.command("board", help="Alias of list.")(list_tasks)


@app.command("show")
def show(
    task_id: Annotated[str, typer.Argument(metavar="ID", help="task_007, or just 7.")],
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Show one task in full."""
    import textwrap
    from datetime import UTC, datetime

    with _board(repo, one_task=True) as board:
        task = board.get(task_id)
        problem = board.problem(task.id)
        asked = _asked(board, task) if task.waiting_for else None
    if json_:
        print_json(_with_problem(task, {task.id: problem} if problem else {}))
        return
    typer.echo(f"{task.id}  {task.status}  {task.subject}")
    if problem:
        typer.echo(f"problem: {problem}")
    if task.waiting_for and task.status is Status.FAILED:
        typer.echo(f"waiting: {task.waiting_for}: orchestrator resume {task.id} "
                   f"[--budget-usd N …] | resume {task.id} --review | discard {task.id}")
    elif task.waiting_for:
        typer.echo(f"waiting for {_waiting(task)} approval: orchestrator approve {task.id} "
                   f"| orchestrator deny {task.id} -m WHY")
        if asked:
            typer.echo(textwrap.indent(asked, "  "))
    if task.usage != Usage() or task.budget != Budget():
        typer.echo(f"spent: {describe(task.budget, task.usage)}")
    if task.lease is not None:
        left = task.lease.expires_at - time.time()
        at = datetime.fromtimestamp(task.lease.expires_at, UTC).strftime("%H:%M:%S UTC")
        typer.echo(f"lease: {task.lease.owner}, token {task.lease.token}, expires {at} "
                   f"({f'in {left:.0f}s' if left >= 0 else f'{-left:.0f}s ago'})")
    shown = task.model_dump(mode="json", exclude={"id", "status", "subject", "todos", "plan",
                                                  "lease"},
                            exclude_defaults=True)
    for key, value in shown.items():
        if value not in (None, "", [], {}) and key != "description":
            typer.echo(f"{key}: {json.dumps(value) if isinstance(value, dict | list) else value}")
    if task.todos:
        typer.echo(f"todos ({progress(task.todos)} done):")
        typer.echo(textwrap.indent(render(task.todos), "  "))
    if task.description:
        typer.echo("\n" + task.description)
    if task.plan:
        typer.echo("\napproved plan:\n" + textwrap.indent(task.plan, "  "))


def _asked(board: ControlPlane, task: Task) -> str | None:
    """What a waiting task's agent asked: the tool call, or the plan it submitted."""
    from orchestrator.agent.permission_flow import pending

    for req in pending(board):
        if req.get("request_id") == task.waiting_for:
            if req.get("kind") == "plan_request":
                return "the plan:\n" + str(req.get("plan") or req.get("body") or "")
            return f"asks to run {req.get('body')}"
    return None


def _waiting(task: Task) -> str:
    """What a waiting task waits for: ``plan`` (request ids ``plan-…``), ``permission``, or
    the reason its run was stopped (``budget: $2.00 of $2.00 spent``)."""
    if task.status is Status.FAILED:
        return task.waiting_for or ""
    return "plan" if (task.waiting_for or "").startswith("plan-") else "permission"


@app.command("cancel")
def cancel(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Cancel a task (a running one loses its lease; its worktree is kept)."""
    with _board(repo, one_task=True) as board:
        task = board.cancel(task_id, actor="cli")
    if json_:
        print_json(task)
    else:
        typer.echo(f"cancelled {task.id}: {task.subject}")


@app.command("events")
def events(
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")
                      ] = False,
    task: Annotated[str | None, typer.Option("--task", "-t", help="Only this task's events.")
                    ] = None,
    since: Annotated[int, typer.Option("--since", help="Only events after this seq "
                                       "(each event's position in the log).", min=0)] = 0,
    lines: Annotated[int | None, typer.Option(
        "--lines", "-n", min=0, help="Only the last N events (default: 100 on a terminal, "
        "all when piped; 0: all).")] = None,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Print the board's event log, oldest first, each with its seq.

    On the file board the log is .worktrees/events.jsonl."""
    r = open_repo(repo, lenient=True)
    task_id = normalize_task_id(task) if task else None
    if lines is None and not follow and not since and sys.stdout.isatty():
        lines = TAIL_ON_TERMINAL
    board = open_board(r.layout, r.board, actor="cli")
    try:
        log = board.events
        found: Iterable[Event]
        if follow:
            found = log.follow(since=since, task=task_id)
        elif lines and not since:
            newest = log.tail(lines + 1, task=task_id)  # one more: were earlier ones left out?
            if len(newest) > lines:
                typer.echo(f"(the last {lines} events; -n 0 prints them all)", err=True)
                newest = newest[1:]
            found = newest
        else:
            found = log.read(since=since, task=task_id)
        for e in found:
            if json_:
                print_json(e.to_dict())
            else:
                typer.echo(_event_line(e.to_dict()))
    finally:
        board.close()


TAIL_ON_TERMINAL = 100
"""``events`` on a terminal shows this many of the newest events (``-n 0``: all)."""


def _event_line(rec: dict[str, Any]) -> str:
    fixed = ("seq", "ts", "event", "task", "actor")
    rest = " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                    for k, v in rec.items() if k not in fixed)
    return f"{rec.get('seq') or '-':>6} {rec.get('ts', '')}  {rec.get('event', ''):<16} " \
           f"{rec.get('task') or '-':<9} {rec.get('actor') or '-':<8} {rest}".rstrip()
