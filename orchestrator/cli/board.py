"""Board commands: init, add, list (alias board), show, cancel, events.

Each runs intake first, so files dropped into ``.tasks/inbox/`` show up at once.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.agent.todos import progress, render
from orchestrator.board import FileBoard, init_repo, open_board
from orchestrator.board.model import Status, Task, normalize_task_id
from orchestrator.cli.app import JsonOpt, RepoOpt, app, open_repo, print_json, to_jsonable
from orchestrator.events import EventLog

STATUS_STYLE = {
    Status.PENDING: "yellow", Status.IN_PROGRESS: "cyan", Status.REVIEW: "magenta",
    Status.MERGED: "green", Status.FAILED: "red", Status.CANCELLED: "dim",
    Status.DISCARDED: "dim",
}


def _board(repo: Path | None, *, one_task: bool = False) -> FileBoard:
    """The board, with dropped files taken in. ``one_task`` commands (add, show, cancel)
    leave the repair of hand-broken task files to the next list: it scans every file."""
    r = open_repo(repo)
    board = open_board(r.layout, r.config.board, actor="cli")
    board.intake(repair=not one_task)
    return board


def _with_problem(task: Task, problems: dict[str, str]) -> dict[str, Any]:
    return {**to_jsonable(task), "problem": problems.get(task.id)}


@app.command("init")
def init(repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """Create .tasks/ and .worktrees/ and keep them out of git status."""
    r = open_repo(repo, ensure=False)
    layout = init_repo(r.layout.root, r.layout.worktree_root)
    if json_:
        print_json({"root": layout.root, "tasks": layout.tasks,
                    "worktrees": layout.worktree_root})
    else:
        typer.echo(f"initialised {layout.tasks} (drop tasks into {layout.inbox})")


@app.command("add")
def add(
    subject: Annotated[str, typer.Argument(help="What the task is about (one line).")],
    description: Annotated[str, typer.Option("--description", "-d", help="Details.")] = "",
    blocked_by: Annotated[list[str] | None, typer.Option(
        "--blocked-by", "-b", help="A task that must be in review or merged first.")] = None,
    priority: Annotated[int, typer.Option("--priority", "-p", help="Higher runs first.")] = 0,
    backend: Annotated[str | None, typer.Option(help="Agent backend for this task.")] = None,
    agent: Annotated[str | None, typer.Option(
        help="Agent profile (.claude/agents/NAME.md or [agents.NAME]) to run it with.")] = None,
    plan_first: Annotated[bool, typer.Option(
        "--plan-first", help="Read-only until the lead approves the agent's plan "
                             "(orchestrator approve ID).")] = False,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Add a task to the board."""
    if agent is not None:
        from orchestrator.agent.profiles import check_task_profile

        r = open_repo(repo)
        check_task_profile(r.layout.root, r.config, agent)
    with _board(repo, one_task=True) as board:
        extra = {k: v for k, v in (("backend", backend), ("agent", agent)) if v is not None}
        if plan_first:
            extra["plan_first"] = True
        task = board.add(subject, description=description, blocked_by=blocked_by or [],
                         priority=priority, actor="cli", **extra)
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
        from orchestrator.review.watch import watch_board

        r = open_repo(repo)
        watch_board(r.layout, r.config, frames=frames)
        return
    with _board(repo) as board:
        everything = board.list()
        problems = board.problems()
    tasks = [t for t in everything if not status or t.status in status]
    if json_:
        from orchestrator.board.index import TASK_LIST

        rows = TASK_LIST.dump_python(tasks, mode="json")  # one call, not one per task
        for row in rows:
            row["problem"] = problems.get(row["id"])
        sys.stdout.write(json.dumps(rows, default=str) + "\n")
        return
    if not tasks:
        typer.echo("no tasks" + (f" in {', '.join(status)}" if status else ""))
        return
    from rich.console import Console

    from orchestrator.cli.table import draw

    with_todos = any(t.todos for t in tasks)
    headers = ["id", "status", "pri", "subject", "owner", "blocked by",
               *(["todo"] if with_todos else [])]
    rows = []
    for t in tasks:
        state: list[tuple[str, str | None]] = [(str(t.status), STATUS_STYLE[t.status])]
        if t.id in problems:
            state += [(" ", None), ("!", "red")]
        if t.waiting_for:
            state += [(" ", None), (f"(waiting: {_waiting(t)})", "yellow")]
        rows.append([t.id, tuple(state), str(t.priority), t.subject, t.owner or "",
                     ", ".join(t.blocked_by), *([progress(t.todos)] if with_todos else [])])
    console = Console(soft_wrap=False)
    lines = list(draw(console, headers, rows, [h == "status" for h in headers]))
    # Problems of the tasks shown, and of task files too broken to list at all.
    shown = {t.id for t in tasks} | (set(problems) - {t.id for t in everything})
    lines += [f"! {tid}: {problems[tid]}" for tid in sorted(set(problems) & shown)]
    _page(console, lines)


def _page(console: Any, lines: list[str]) -> None:
    """Print ``lines``; on a terminal, more than a screenful goes through the pager
    (``$PAGER``, else ``less``), as ``git log`` does."""
    text = "\n".join(lines) + "\n"
    if console.is_terminal and len(lines) >= console.height:
        import click

        click.echo_via_pager(text, color=True)
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
    with _board(repo, one_task=True) as board:
        task = board.get(task_id)
        problem = board.problem(task.id)
    if json_:
        print_json(_with_problem(task, {task.id: problem} if problem else {}))
        return
    typer.echo(f"{task.id}  {task.status}  {task.subject}")
    if problem:
        typer.echo(f"problem: {problem}")
    if task.waiting_for:
        typer.echo(f"waiting for {_waiting(task)} approval: orchestrator approve {task.id} "
                   f"| orchestrator deny {task.id} -m WHY")
    shown = task.model_dump(mode="json", exclude={"id", "status", "subject", "todos", "plan"},
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


def _waiting(task: Task) -> str:
    """What a waiting task waits for: ``plan`` (request ids ``plan-…``) or ``permission``."""
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
    lines: Annotated[int | None, typer.Option(
        "--lines", "-n", min=0, help="Only the last N events (default: 100 on a terminal, "
        "all when piped; 0: all).")] = None,
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Print the events log (.worktrees/events.jsonl)."""
    r = open_repo(repo)
    log = EventLog(r.layout.events)
    task_id = normalize_task_id(task) if task else None
    if lines is None and not follow and sys.stdout.isatty():
        lines = TAIL_ON_TERMINAL
    records: Iterable[dict[str, Any]]
    if follow or not lines:
        records = log.follow(task_id) if follow else log.read(task_id)
    else:
        records = _tail(log, task_id, lines)
    for rec in records:
        if json_:
            print_json(rec)
        else:
            typer.echo(_event_line(rec))


TAIL_ON_TERMINAL = 100
"""``events`` on a terminal shows this many of the newest events (``-n 0``: all)."""


def _tail(log: EventLog, task_id: str | None, n: int) -> list[dict[str, Any]]:
    """The last ``n`` events (of ``task_id``), oldest first, read from the end of the log;
    a line on stderr says when earlier ones were left out."""
    newest: list[dict[str, Any]] = []
    for rec in log.backwards():
        if task_id is None or rec.get("task") == task_id:
            if len(newest) == n:
                typer.echo(f"(the last {n} events; -n 0 prints them all)", err=True)
                break
            newest.append(rec)
    return newest[::-1]


def _event_line(rec: dict[str, Any]) -> str:
    fixed = ("ts", "event", "task", "actor")
    rest = " ".join(f"{k}={json.dumps(v) if not isinstance(v, str) else v}"
                    for k, v in rec.items() if k not in fixed)
    return f"{rec.get('ts', '')}  {rec.get('event', ''):<16} {rec.get('task') or '-':<9} " \
           f"{rec.get('actor') or '-':<8} {rest}".rstrip()
