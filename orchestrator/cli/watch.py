"""``orchestrator board --watch``: the board as columns, live, with the teammates.

Columns: pending / in progress / waiting for input / review / merged / failed
(waiting for input is a task that waits for a person, ``wait``), drawn by the one table
renderer of the CLI (`orchestrator.cli.table`): a line per task, and one below it for
what holds it. Below them, each teammate and its current task, from the state files the
team runtime writes (`orchestrator.team.status.team_status`).

The view is redrawn when the board's change feed (`ControlPlane.wait_for_change`) says
something changed, and only when the drawing differs (the feed's periodic
rescan also picks up teammate state): no clock ticks, no disk polling loop.
On a terminal each frame replaces the last in place (the screen is cleared and the
frame drawn from its top); piped, each new frame is printed in turn under a rule.
Ctrl-C ends it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any, TextIO

from orchestrator.cli.output import PIPED_WIDTH, plain
from orchestrator.cli.table import Cell, Piped, Screen, Terminal, draw_columns
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.layout import Layout
from orchestrator.model import Status, Task, column_of
from orchestrator.review.common import using_board
from orchestrator.team.status import team_status

COLUMNS: dict[str, str] = {
    "pending": "yellow", "in progress": "cyan", "waiting for input": "bold red",
    "review": "magenta", "merged": "green", "failed": "red",
}
"""The columns and the style of their task ids."""
MAX_PER_COLUMN = 12
SUBJECT_CHARS = 28
CLEAR = "\x1b[H\x1b[2J"
"""Cursor home, clear the screen: where a terminal's next frame is drawn."""


def render(tasks: list[Task], team: dict[str, Any], problems: dict[str, str],
           console: Screen) -> list[str]:
    """One frame's lines: the columns, the teammates, and what is hidden or stuck."""
    by_column: dict[str, list[Task]] = {name: [] for name in COLUMNS}
    hidden = 0
    for task in tasks:
        col = column_of(task)
        if col is None:
            hidden += 1
        else:
            by_column[col].append(task)
    cells: list[list[Cell]] = []
    for name, style in COLUMNS.items():
        shown = by_column[name]
        items = shown[-MAX_PER_COLUMN:] if name == "merged" else shown[:MAX_PER_COLUMN]
        column: list[Cell] = []
        for task in items:
            column.append(((task.id, f"bold {style}"), (f" {_cut(task.subject)}", None)))
            extra = _detail(task, problems)
            if extra:
                column.append(((f"  {extra}", "dim"),))
        if len(shown) > len(items):
            column.append(((f"… {len(shown) - len(items)} more", "dim"),))
        cells.append(column)
    height = max(map(len, cells))
    columns = [column + [""] * (height - len(column)) for column in cells]
    headers = [f"{name} ({len(by_column[name])})" for name in COLUMNS]
    return [*draw_columns(console, headers, columns, [False] * len(headers)),
            *_team(team, hidden, console)]


def _detail(task: Task, problems: dict[str, str]) -> str:
    if task.id in problems:
        return f"! {_cut(problems[task.id], 60)}"
    if task.wait:
        return f"awaits {task.wait.label}"
    if task.status is Status.IN_PROGRESS and task.owner:
        return f"@{task.owner}"
    if task.status is Status.FAILED and task.error:
        return _cut(task.error.splitlines()[0], 40)
    if task.status is Status.PENDING and task.blocked_by:
        return f"after {', '.join(task.blocked_by)}"
    return ""


def _team(team: dict[str, Any], hidden: int, console: Screen) -> Iterator[str]:
    """The teammates under a bold ``team:`` heading, a request for a person in red."""
    rows: list[Cell] = [
        plain(f"  {m['name']:<10} {m['state']:<8}" + (f" {m['task']}" if m.get("task") else ""))
        for m in team.get("teammates", [])]
    rows += [((plain(f"{r.get('from')} asks: {_cut(str(r.get('body', '')), 60)}  "
                     f"(orchestrator approve|deny {r.get('request_id')})"), "bold red"),)
             for r in team.get("permission_requests", [])]
    if hidden:
        rows.append(((f"({hidden} discarded or cancelled not shown)", "dim"),))
    head = "team: " + (f"running, pid {team['pid']}" if team.get("running") else "not running")
    return draw_columns(console, [head], [rows], [False])


def frame(layout: Layout, board: ControlPlane, console: Screen) -> list[str]:
    team = team_status(layout, board)
    for mate in team["teammates"]:
        mate.pop("seconds", None)  # a frame changes when the team does, not with the clock
    return render(board.list(), team, board.problems(), console)


def watch_board(layout: Layout, config: Config, *, frames: int | None = None,
                console: Screen | None = None, out: TextIO | None = None,
                board: ControlPlane | None = None) -> int:
    """Show the board until Ctrl-C (or ``frames`` distinct frames); how many were drawn."""
    out = out or sys.stdout
    if console is None:
        console = Terminal() if out.isatty() else Piped(PIPED_WIDTH)
    drawn = 0
    last = None
    try:
        with using_board(layout, config, board, "cli") as b:
            b.wait_for_change(0)  # the feed listens before the first frame is read
            while frames is None or drawn < frames:
                lines = frame(layout, b, console)
                if lines != last:
                    _show(out, console, lines)
                    last, drawn = lines, drawn + 1
                if frames is None or drawn < frames:
                    b.wait_for_change(config.board.rescan_seconds)
    except KeyboardInterrupt:
        pass
    if console.is_terminal and drawn:
        out.write("\n")  # the shell's prompt below the last frame
    return drawn


def _show(out: TextIO, console: Screen, lines: list[str]) -> None:
    if console.is_terminal:  # what fits on the screen, from its top
        out.write(CLEAR + "\n".join(lines[:max(console.height - 1, 1)]))
    else:
        out.write("".join(f"{line.rstrip()}\n" for line in lines) + "─" * 40 + "\n")
    out.flush()


def _cut(text: str, n: int = SUBJECT_CHARS) -> str:
    text = " ".join(plain(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"
