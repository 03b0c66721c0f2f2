"""``orchestrator board --watch``: the board as columns, live, with the teammates.

Columns: pending / in progress / waiting for input / review / merged / failed
(waiting for input is a task that waits for a person, ``wait``).
Below them, each teammate and its current task, from the state files the team
runtime writes (`orchestrator.team.status.team_status`).

The view is redrawn when the board's change feed (`ControlPlane.wait_for_change`) says
something changed, and only when the drawing differs (the feed's periodic
rescan also picks up teammate state): no clock ticks, no disk polling loop.
On a terminal it is a rich ``Live`` display; piped, each new frame is printed
in turn. Ctrl-C ends it.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.layout import Layout
from orchestrator.model import Status, Task, column_of
from orchestrator.review.common import using_board
from orchestrator.team.status import team_status

COLUMNS: tuple[tuple[str, str], ...] = (
    ("pending", "yellow"), ("in progress", "cyan"), ("waiting for input", "bold red"),
    ("review", "magenta"), ("merged", "green"), ("failed", "red"),
)
MAX_PER_COLUMN = 12
SUBJECT_CHARS = 28


def render(tasks: list[Task], team: dict[str, Any], problems: dict[str, str]) -> RenderableType:
    """One frame: the columns, the teammates, and what is hidden or stuck."""
    by_column: dict[str, list[Task]] = {name: [] for name, _ in COLUMNS}
    hidden = 0
    for task in tasks:
        col = column_of(task)
        if col is None:
            hidden += 1
        else:
            by_column[col].append(task)
    board = Table(expand=True, show_lines=False)
    for name, style in COLUMNS:
        board.add_column(f"{name} ({len(by_column[name])})", header_style=style, ratio=1)
    cells = []
    for name, _ in COLUMNS:
        items = by_column[name][-MAX_PER_COLUMN:] if name == "merged" else \
            by_column[name][:MAX_PER_COLUMN]
        text = Text()
        for task in items:
            text.append(task.id, style="bold")
            text.append(f" {_cut(task.subject)}\n")
            extra = _detail(task, problems)
            if extra:
                text.append(f"  {extra}\n", style="dim")
        more = len(by_column[name]) - len(items)
        if more:
            text.append(f"… {more} more", style="dim")
        text.rstrip()
        cells.append(text)
    board.add_row(*cells)
    return Group(board, _team(team, hidden))


def _detail(task: Task, problems: dict[str, str]) -> str:
    if task.id in problems:
        return f"! {problems[task.id]}"
    if task.wait:
        return f"awaits {task.wait.label}"
    if task.status is Status.IN_PROGRESS and task.owner:
        return f"@{task.owner}"
    if task.status is Status.FAILED and task.error:
        return _cut(task.error.splitlines()[0], 40)
    if task.status is Status.PENDING and task.blocked_by:
        return f"after {', '.join(task.blocked_by)}"
    return ""


def _team(team: dict[str, Any], hidden: int) -> Text:
    text = Text()
    text.append("team: ", style="bold")
    text.append(f"running, pid {team['pid']}" if team.get("running") else "not running")
    for mate in team.get("teammates", []):
        text.append(f"\n  {mate['name']:<10} {mate['state']:<8}")
        if mate.get("task"):
            text.append(f" {mate['task']}")
    for req in team.get("permission_requests", []):
        rid = req.get("request_id")
        text.append(f"\n{req.get('from')} asks: {_cut(str(req.get('body', '')), 60)}  "
                    f"(orchestrator approve|deny {rid})", style="bold red")
    if hidden:
        text.append(f"\n({hidden} discarded or cancelled not shown)", style="dim")
    return text


def frame(layout: Layout, board: ControlPlane) -> RenderableType:
    team = team_status(layout, board)
    for mate in team["teammates"]:
        mate.pop("seconds", None)  # a frame changes when the team does, not with the clock
    return render(board.list(), team, board.problems())


def render_text(renderable: RenderableType, width: int = 140) -> str:
    """A frame as plain text (for tests and for piped output)."""
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def watch_board(layout: Layout, config: Config, *, frames: int | None = None,
                console: Console | None = None, board: ControlPlane | None = None) -> int:
    """Show the board until Ctrl-C (or ``frames`` distinct frames); how many were drawn."""
    console = console or Console()
    drawn = 0
    last = None
    try:
        with using_board(layout, config, board, "cli") as b, _display(console) as show:
            while frames is None or drawn < frames:
                view = frame(layout, b)
                text = render_text(view, console.width)
                if text != last:
                    show(view, text)
                    last, drawn = text, drawn + 1
                if frames is None or drawn < frames:
                    b.wait_for_change(config.board.rescan_seconds)
    except KeyboardInterrupt:
        pass
    return drawn


@contextlib.contextmanager
def _display(console: Console) -> Iterator[Callable[[RenderableType, str], None]]:
    """On a terminal, a rich Live view redrawn in place; else each frame printed in turn."""
    if console.is_terminal:
        with Live(console=console, auto_refresh=False) as live:
            yield lambda view, _text: live.update(view, refresh=True)
        return

    def show(_view: RenderableType, text: str) -> None:
        console.print(text, end="", markup=False, highlight=False)
        console.rule()

    yield show


def _cut(text: str, n: int = SUBJECT_CHARS) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
