"""The board commands that read or change one task or list them: add, list, show, cancel
and status, as plain functions.

Their typer commands (`orchestrator.cli.board`, `orchestrator.cli.team`) call these.
Nothing here imports typer or rich.
"""

from __future__ import annotations

import json
import sys
import textwrap
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from orchestrator.agent.todos import progress, render
from orchestrator.board import open_board
from orchestrator.budget import describe
from orchestrator.cli.output import PIPED_WIDTH, echo, page_lines, plain, print_json
from orchestrator.controlplane import ControlPlane
from orchestrator.model import Budget, ForgeLink, Lease, Status, Task, Usage
from orchestrator.repo import open_repo, to_jsonable

if TYPE_CHECKING:
    from orchestrator.cli.table import Cell

STATUS_STYLE = {
    Status.PENDING: "yellow", Status.IN_PROGRESS: "cyan", Status.REVIEW: "magenta",
    Status.MERGED: "green", Status.FAILED: "red", Status.CANCELLED: "dim",
    Status.DISCARDED: "dim",
}
_STATE_CELLS = {s: ((s._value_, style),) for s, style in STATUS_STYLE.items()}
"""The status cell of each status, on a terminal (one tuple shared by every row)."""
_USAGE, _BUDGET, _TODOS = (attrgetter(name) for name in ("usage", "budget", "todos"))
_SHOWN_ABOVE = frozenset({"id", "status", "subject", "description", "todos", "plan", "lease",
                          "wait", "waiting_for", "forge", "usage", "budget"})


def open_with_intake(repo: Path | None, *, one_task: bool = False) -> ControlPlane:
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
    from orchestrator.board import rejected_line

    line = rejected_line(rejected)
    if line:
        echo(line, err=True)


def _with_problem(task: Task, problems: dict[str, str]) -> dict[str, Any]:
    return {**to_jsonable(task), "problem": problems.get(task.id)}



def add(subject: str, description: str = "", blocked_by: list[str] | None = None,
        priority: int = 0, backend: str | None = None, agent: str | None = None,
        no_changes: bool = False, plan_first: bool = False, budget_usd: str | None = None,
        budget_tokens: str | None = None, timeout: str | None = None,
        repo: Path | None = None, json_: bool = False) -> None:
    """``orchestrator add``."""
    from orchestrator.adding import add_task
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
        echo(f"added {task.id}: {task.subject}")


def list_tasks(status: list[Status] | None = None, repo: Path | None = None,
               json_: bool = False) -> None:
    """``orchestrator list`` (its ``--watch`` is `orchestrator.cli.watch`)."""
    with open_with_intake(repo) as board:
        # the board filters: a shared board of a million tasks sends only those asked for
        tasks = board.list(status or None)
        problems = board.problems()
    if json_:
        out = sys.stdout.buffer  # each task in full (asdict: its defaults too), with its problem
        out.write(msgspec.json.encode([{**msgspec.structs.asdict(t), "problem": problems.get(t.id)}
                                       for t in tasks]) + b"\n")
        out.flush()
        return
    if not tasks:
        echo("no tasks" + (f" in {', '.join(status)}" if status else ""))
        return
    from orchestrator.cli.table import Piped, Terminal, draw_columns

    piped = not sys.stdout.isatty()  # piped: one line per row, never wrapped, no styles
    columns = _columns(tasks, problems, piped)
    console = Piped(PIPED_WIDTH) if piped else Terminal()
    drawn = draw_columns(console, [h for h, _ in columns], [c for _, c in columns],
                         [h == "status" for h, _ in columns])
    lines = list(map(str.rstrip, drawn) if piped else drawn)
    # problems of the tasks shown, and (unfiltered) of task files too broken to list at all
    ids = {t.id for t in tasks}
    shown = ids | (set() if status else set(problems) - ids)
    lines += [plain(f"! {tid}: {problems[tid]}") for tid in sorted(set(problems) & shown)]
    page_lines(console, lines)


def _columns(tasks: list[Task], problems: dict[str, str],
             piped: bool) -> list[tuple[str, list[Cell]]]:
    """The table of `list_tasks`, each column with its header. Column by column, each a
    comprehension: a board of 50,000 tasks makes 300,000 cells."""
    return [("id", [t.id for t in tasks]), ("status", _states(tasks, problems, piped)),
            ("pri", [str(t.priority) for t in tasks]),
            ("subject", [plain(t.subject) for t in tasks]),
            ("owner", [t.owner or "" for t in tasks]),
            ("blocked by", [", ".join(t.blocked_by) if t.blocked_by else "" for t in tasks]),
            *_optional_columns(tasks)]


def _states(tasks: list[Task], problems: dict[str, str], piped: bool) -> list[Cell]:
    """The status column: each status in its style, with a mark for a task's problem and
    what it waits for."""
    states: list[Cell] = [t.status._value_ for t in tasks] if piped else \
        [_STATE_CELLS[t.status] for t in tasks]  # `.value` is a descriptor call per row
    for i, t in enumerate(tasks):
        if t.wait or t.id in problems:
            segments: list[tuple[str, str | None]] = [(t.status._value_,
                                                       STATUS_STYLE[t.status])]
            if t.id in problems:
                segments += [(" ", None), ("!", "red")]
            if t.wait:
                segments += [(" ", None), (f"(waiting: {t.wait.label})", "yellow")]
            states[i] = tuple(segments)
    return states


def _optional_columns(tasks: list[Task]) -> list[tuple[str, list[Cell]]]:
    """The columns shown when some task has something in them: spent, todo, pull request."""
    columns: list[tuple[str, list[Cell]]] = []
    nothing, no_limit = Usage(), Budget()
    if any(map(nothing.__ne__, map(_USAGE, tasks))) or \
            any(map(no_limit.__ne__, map(_BUDGET, tasks))):
        columns.append(("spent", [describe(t.budget, t.usage) for t in tasks]))
    if any(map(_TODOS, tasks)):
        columns.append(("todo", [progress(t.todos) for t in tasks]))
    if any(t.forge is not None and t.forge.pr is not None for t in tasks):
        from orchestrator.forge import pull_request, pull_request_cell

        columns.append(("pull request", [pull_request_cell(pull_request(t.forge))
                                         for t in tasks]))
    return columns


def _show_forge(link: ForgeLink) -> None:
    from orchestrator.forge import pull_request, pull_request_cell

    pr = pull_request(link)
    if link.pr is not None:
        echo(plain(f"pull request: {pull_request_cell(pr)}  {link.url or ''}"))
    if link.issue is not None:
        echo(f"issue: #{link.issue}")
    if link.note:
        echo(plain(f"forge: {link.note}"))


def show(task_id: str, repo: Path | None = None, json_: bool = False) -> None:
    """``orchestrator show``: the task's head line, what it waits for, its spending, pull
    request, lease and other fields, then its todos, description and plan."""
    with open_with_intake(repo, one_task=True) as board:
        task = board.get(task_id)
        problem = board.problem(task.id)
        asked = _asked(board, task) if task.wait and task.wait.ident else None
        now = board.now() if task.lease is not None else 0.0  # the clock leases expire by
    if json_:
        print_json(_with_problem(task, {task.id: problem} if problem else {}))
        return
    _show_head(task, problem, asked)
    _show_spent(task)
    if task.forge is not None:
        _show_forge(task.forge)
    if task.lease is not None:
        _show_lease(task.lease, now)
    _show_body(task)


def _show_head(task: Task, problem: str | None, asked: str | None) -> None:
    echo(f"{task.id}  {task.status}  {task.subject}")
    if problem:
        echo(f"problem: {problem}")
    if task.wait:
        echo(plain(f"waiting for {task.wait.text}: {' | '.join(task.wait.commands(task.id))}"))
        if asked:
            echo(textwrap.indent(asked, "  "))


def _show_spent(task: Task) -> None:
    if task.usage == Usage() and task.budget == Budget():
        return
    u = task.usage
    echo(f"spent: {describe(task.budget, task.usage)} ({u.input_tokens} in, "
         f"{u.output_tokens} out, {u.cache_read_tokens} cache read, "
         f"{u.cache_write_tokens} cache write tokens)")


def _show_lease(lease: Lease, now: float) -> None:
    from datetime import UTC, datetime

    left = lease.expires_at - now
    at = datetime.fromtimestamp(lease.expires_at, UTC).strftime("%H:%M:%S UTC")
    echo(f"lease: {lease.owner}, token {lease.token}, expires {at} "
         f"({f'in {left:.0f}s' if left >= 0 else f'{-left:.0f}s ago'})")


def _show_body(task: Task) -> None:
    """Every other field that is set, then the todos, the description and the plan."""
    for key, value in msgspec.to_builtins(task).items():  # Task leaves out its defaults
        if value not in (None, "", [], {}) and key not in _SHOWN_ABOVE:
            echo(f"{key}: {json.dumps(value) if isinstance(value, dict | list) else value}")
    if task.todos:
        echo(f"todos ({progress(task.todos)} done):")
        echo(textwrap.indent(render(task.todos), "  "))
    if task.description:
        echo("\n" + task.description)
    if task.plan:
        echo("\napproved plan:\n" + textwrap.indent(task.plan, "  "))


def cancel(task_id: str, repo: Path | None = None, json_: bool = False) -> None:
    """``orchestrator cancel``."""
    with open_with_intake(repo, one_task=True) as board:
        task = board.cancel(task_id, actor="cli")
    if json_:
        print_json(task)
    else:
        echo(f"cancelled {task.id}: {task.subject}")


def status(json_out: bool = False, repo: Path | None = None) -> None:
    """``orchestrator status``."""
    from orchestrator.team import status as team

    r = open_repo(repo, lenient=True)
    board = open_board(r.layout, r.board, actor="cli")
    try:
        totals = board.summary()
        st = team.team_status(r.layout, board, totals.counts, team.spending(totals, board))
    finally:
        board.close()
    if json_out:
        print_json(st)
    else:
        echo(team.format_status(st))


def _asked(board: ControlPlane, task: Task) -> str | None:
    """What a waiting task's agent asked: the tool call, or the plan it submitted."""
    from orchestrator.agent.permission_flow import pending

    for req in pending(board):
        if task.wait and req.get("request_id") == task.wait.ident:
            if req.get("kind") == "plan_request":
                return "the plan:\n" + str(req.get("plan") or req.get("body") or "")
            return f"asks to run {req.get('body')}"
    return None

