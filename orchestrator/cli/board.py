"""Board commands: init, add, list (alias board), show, cancel, events.

Each runs intake first, so files dropped into ``.tasks/inbox/`` show up at once. The bodies
of add, list, show and cancel are in `orchestrator.cli.tasks`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Annotated

import typer

from orchestrator.backend_names import BACKENDS
from orchestrator.board import board_paths, init_repo, open_board
from orchestrator.cli import tasks
from orchestrator.cli.app import (
    JsonOpt,
    RepoOpt,
    app,
    open_repo,
    print_json,
)
from orchestrator.cli.output import echo
from orchestrator.controlplane import Event
from orchestrator.model import Status, normalize_task_id


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
    echo(f"initialised {paths['tasks']} (drop tasks into {paths['inbox']})")
    if board_url is not None:
        from orchestrator.board.pg.schema import latest_version, redact_url

        done = f"created the schema ({len(applied)} migrations)" if applied else \
            f"the schema is current (version {latest_version()})"
        echo(f"board: {redact_url(board_url)}: {done}; written to {written}")


@app.command("migrate")
def migrate(repo: RepoOpt = None, json_: JsonOpt = False) -> None:
    """Apply newer schema migrations to the PostgreSQL board (\\[board] url)."""
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
            echo(f"applied {m.version:04d}_{m.name}")
    else:
        echo(f"the schema is current (version {schema.latest_version()})")


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
    tasks.add(subject=subject, description=description, blocked_by=blocked_by,
              priority=priority, backend=backend, agent=agent, no_changes=no_changes,
              plan_first=plan_first, budget_usd=budget_usd, budget_tokens=budget_tokens,
              timeout=timeout, repo=repo, json_=json_)


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
    tasks.list_tasks(status=status, repo=repo, json_=json_)


app.command("list")(list_tasks)
app.command("board", help="Alias of list.")(list_tasks)


@app.command("show")
def show(
    task_id: Annotated[str, typer.Argument(metavar="ID", help="task_007, or just 7.")],
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Show one task in full."""
    tasks.show(task_id=task_id, repo=repo, json_=json_)


@app.command("cancel")
def cancel(
    task_id: Annotated[str, typer.Argument(metavar="ID")],
    repo: RepoOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Cancel a task (a running one loses its lease; its worktree is kept)."""
    tasks.cancel(task_id=task_id, repo=repo, json_=json_)


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
                echo(f"(the last {lines} events; -n 0 prints them all)", err=True)
                newest = newest[1:]
            found = newest
        else:
            found = log.read(since=since, task=task_id)
        for e in found:
            if json_:
                print_json(e.to_dict())
            else:
                echo(_event_line(e))
    finally:
        board.close()


TAIL_ON_TERMINAL = 100
"""``events`` on a terminal shows this many of the newest events (``-n 0``: all)."""


def _event_line(e: Event) -> str:
    rest = " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}"
                    for k, v in e.fields.items())
    return f"{e.seq or '-':>6} {e.ts}  {e.event:<16} {e.task or '-':<9} {e.actor or '-':<8} " \
           f"{rest}".rstrip()
