"""The fast table renderer draws what rich's Table draws, on random tables and widths."""

from __future__ import annotations

import io
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from orchestrator.board import open_board
from orchestrator.cli.table import Cell, Piped, draw
from orchestrator.layout import Layout
from tests.helpers import run_on_terminal

ANSI = re.compile(r"\x1b\[[0-9;]*m")
WORDS = ["fix", "login", "a", "refactor", "the", "database-migration-tool", "ünïcödé", "日本語",
         "x" * 30, "tests", "CI", "🙂", "and", "then", "some", "more"]


def rich_lines(headers: list[str], rows: list[list[Cell]], no_wrap: list[bool], width: int,
               terminal: bool) -> list[str]:
    table = Table(box=None, pad_edge=False)
    for h, nw in zip(headers, no_wrap, strict=True):
        table.add_column(h, no_wrap=nw)
    for row in rows:
        table.add_row(*[c if isinstance(c, str) else
                        "".join(f"[{s}]{t}[/]" if s else t for t, s in c) for c in row])
    buf = io.StringIO()
    Console(file=buf, width=width, soft_wrap=False, force_terminal=terminal,
            color_system="standard" if terminal else None).print(table)
    return buf.getvalue().splitlines()


def ours(headers: list[str], rows: list[list[Cell]], no_wrap: list[bool], width: int,
         terminal: bool) -> list[str]:
    console = Console(file=io.StringIO(), width=width, soft_wrap=False, force_terminal=terminal,
                      color_system="standard" if terminal else None)
    return list(draw(console, headers, rows, no_wrap))


def random_table(rng: random.Random, n: int) -> tuple[list[str], list[list[Cell]], list[bool]]:
    headers = ["id", "status", "pri", "subject", "owner", "blocked by"]
    rows: list[list[Cell]] = []
    for i in range(n):
        status: Cell = ((rng.choice(["pending", "in_progress", "review"]), "yellow"),)
        if rng.random() < 0.3:
            status = (*status, (" ", None), ("!", "red"))
        subject = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(1, 12)))
        rows.append([f"task_{i:03d}", status, str(rng.randrange(-5, 100)), subject,
                     rng.choice(["", "w1", "teammate-seven"]),
                     ", ".join(f"task_{rng.randrange(999):03d}" for _ in range(rng.randrange(3)))])
    return headers, rows, [h == "status" for h in headers]


@pytest.mark.parametrize("width", [50, 80, 120, 200])
def test_plain_output_is_rich_output(width: int) -> None:
    rng = random.Random(width)
    for n in (1, 3, 40):
        headers, rows, no_wrap = random_table(rng, n)
        assert ours(headers, rows, no_wrap, width, False) == \
            rich_lines(headers, rows, no_wrap, width, False)


@pytest.mark.parametrize("width", [50, 80, 120, 200])
def test_piped_output_without_rich_console_is_rich_output(width: int) -> None:
    """`Piped` (no rich.console import) draws what rich draws, wrapping included."""
    rng = random.Random(width + 1)
    for n in (1, 3, 40):
        headers, rows, no_wrap = random_table(rng, n)
        rows.append(["task_999", "plain", "1", "naïve café ünïcödé " * 3, "", "\tx"])
        assert list(draw(Piped(width), headers, rows, no_wrap)) == \
            rich_lines(headers, rows, no_wrap, width, False)


@pytest.mark.parametrize("width", [80, 160])
def test_terminal_output_has_rich_text_and_colours(width: int) -> None:
    headers, rows, no_wrap = random_table(random.Random(7), 30)
    mine = ours(headers, rows, no_wrap, width, True)
    theirs = rich_lines(headers, rows, no_wrap, width, True)
    assert [ANSI.sub("", line) for line in mine] == [ANSI.sub("", line) for line in theirs]
    assert "\x1b[1m" in mine[0]  # bold header
    assert any("\x1b[33m" in line for line in mine) and any("\x1b[31m!" in line for line in mine)


def test_rich_markup_in_a_subject_is_text() -> None:
    console = Console(file=io.StringIO(), width=80, soft_wrap=False)
    [_, row] = draw(console, ["id", "subject"], [["task_001", "[red]not markup[/red]"]],
                    [False, False])
    assert "[red]not markup[/red]" in row


@pytest.mark.parametrize("width", [40, 60, 80])
def test_plain_ascii_wrapping_is_rich_wrapping(width: int) -> None:
    """The fast word wrap (ASCII words that fit) against rich, spaces doubled and trailing."""
    rng = random.Random(width * 3)
    rows: list[list[Cell]] = []
    for i in range(200):
        words = [rng.choice(["a", "fix", "login", "page", "refactor", "x" * 12, "y" * 20])
                 for _ in range(rng.randrange(1, 15))]
        subject = "".join(w + rng.choice([" ", " ", "  "]) for w in words)
        rows.append([f"task_{i:03d}", ((("pending", "yellow"),)), subject.rstrip()
                     if i % 3 else " " + subject, "teammate"])
    headers, no_wrap = ["id", "status", "subject", "owner"], [False, True, False, False]
    assert ours(headers, rows, no_wrap, width, False) == \
        rich_lines(headers, rows, no_wrap, width, False)


def test_a_long_table_goes_through_the_pager_on_a_terminal_only(repo: Path,
                                                                tmp_path: Path) -> None:
    with open_board(Layout.at(repo)) as board:
        for i in range(30):
            board.add(f"task number {i}")
    paged = tmp_path / "paged.txt"
    env = {"PAGER": f"tee {paged}", "COLUMNS": "100", "LINES": "20"}
    out = run_on_terminal(repo, ["list"], env)
    text = paged.read_text()
    assert ANSI.sub("", text.splitlines()[0]).split() == ["id", "status", "pri", "subject", "owner",
                                            "blocked", "by"]
    assert "task_030" in text and "task number 29" in out and "\x1b[33mpending" in text
    paged.unlink()
    piped = subprocess.run([sys.executable, "-m", "orchestrator", "list"], cwd=repo,
                           env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert not paged.exists() and len(piped.stdout.splitlines()) == 31
    assert "\x1b" not in piped.stdout
    run_on_terminal(repo, ["list"], {**env, "LINES": "40"}, rows=40)  # fits: printed, not paged
    assert not paged.exists()
    for pager in ("less '", "cat", "no-such-pager"):  # broken quoting, cat, none: printed
        out = run_on_terminal(repo, ["list"], {**env, "PAGER": pager})
        assert "task number 29" in out and "Traceback" not in out, pager


ENVS = [{}, {"FORCE_COLOR": "1"}, {"FORCE_COLOR": ""}, {"TTY_COMPATIBLE": "1"},
        {"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"}, {"FORCE_COLOR": "1", "NO_COLOR": "1"},
        {"FORCE_COLOR": "1", "TERM": "dumb"}, {"FORCE_COLOR": "1", "TERM": "xterm-256color"},
        {"FORCE_COLOR": "1", "TERM": "xterm-kitty", "COLUMNS": "77"},
        {"FORCE_COLOR": "1", "COLORTERM": "truecolor", "LINES": "12", "COLUMNS": "x"},
        {"FORCE_COLOR": "1", "TERM": "UNKNOWN", "LINES": "30"}, {"COLUMNS": "0", "LINES": "7"}]


@pytest.mark.parametrize("env", ENVS, ids=[" ".join(f"{k}={v}" for k, v in e.items()) or "none"
                                           for e in ENVS])
def test_the_terminal_stand_in_finds_what_rich_finds(env: dict[str, str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`list` on a terminal draws with `Terminal`, not rich's Console: both must agree on
    whether it is a terminal, its size and its colours, and so on the styled lines."""
    from orchestrator.cli.table import Terminal

    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR", "TERM", "COLORTERM", "COLUMNS",
                 "LINES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    ours_, theirs = Terminal(), Console(soft_wrap=False)
    assert (ours_.is_terminal, ours_.no_color, ours_.width, ours_.height, ours_.color_system) == \
        (theirs.is_terminal, theirs.no_color, theirs.width, theirs.height, theirs._color_system)
    headers, rows, no_wrap = random_table(random.Random(len(env)), 30)
    assert list(draw(ours_, headers, rows, no_wrap)) == list(draw(theirs, headers, rows, no_wrap))
