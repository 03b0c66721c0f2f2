"""Tables drawn as rich draws ``Table(box=None, pad_edge=False)``, in time linear in the rows.

rich measures every cell of every column and renders each cell through its layout
engine: 17 s for 10,000 rows. Here the widths come from one pass over the plain
text (rich's own width rules decide only when the table is wider than the console,
from one representative row per extreme), and each line is joined as a string.
The output is rich's: cells left-justified, two spaces between columns, lines padded
to the table's width, the header bold and cells styled on a terminal, plain when piped;
a cell wider than its column wraps at words (a single long word is cut with ``…``).
``tests/test_cli_table.py`` checks it against rich on random tables.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, TypeAlias, cast

from rich.cells import cell_len

if TYPE_CHECKING:
    from rich.console import Console

Segment = tuple[str, str | None]
"""A run of text and its rich style (None: unstyled)."""
Cell = str | tuple[Segment, ...]
"""Plain text, or styled segments (their text joined is the cell's text)."""
GAP = 2


def cell_text(cell: Cell) -> str:
    """The text of a cell, without its styles."""
    return cell if isinstance(cell, str) else "".join(t for t, _ in cell)


class Piped:
    """What `draw` needs of a console when the output is piped: a width, no terminal, no
    colour. Using it instead of rich's Console spares importing rich.console (a tenth of a
    second) for plain text; rich is brought in only for a cell that must be wrapped."""

    is_terminal = False
    no_color = True
    height = 0

    def __init__(self, width: int) -> None:
        self.width = width
        self._rich: Console | None = None

    def rich(self) -> Console:
        if self._rich is None:
            from rich.console import Console

            self._rich = Console(soft_wrap=False, width=self.width, no_color=True)
        return self._rich


class Terminal:
    """What `draw` and the pager need of rich's ``Console(soft_wrap=False)`` on a terminal,
    found as rich finds it (terminal or not from TTY_COMPATIBLE, FORCE_COLOR and isatty;
    the size from COLUMNS and LINES, else the terminal's; colours from NO_COLOR, TERM and
    COLORTERM), without importing rich.console: the real one is made only when a cell
    must be wrapped or the table is wider than the screen. Tests hold it to rich's."""

    def __init__(self) -> None:
        from rich.color import ColorSystem

        env = os.environ
        compatible, force = env.get("TTY_COMPATIBLE", ""), env.get("FORCE_COLOR")
        self.is_terminal = (compatible == "1" if compatible in ("0", "1") else
                            force != "" if force is not None else _isatty(sys.stdout))
        self.no_color = env.get("NO_COLOR", "") != ""
        dumb = self.is_terminal and env.get("TERM", "").lower() in ("dumb", "unknown")
        self.color_system: ColorSystem | None = None
        if self.is_terminal and not dumb:
            if env.get("COLORTERM", "").strip().lower() in ("truecolor", "24bit"):
                self.color_system = ColorSystem.TRUECOLOR
            else:
                colors = env.get("TERM", "").strip().lower().rpartition("-")[2]
                self.color_system = (ColorSystem.EIGHT_BIT if colors in ("kitty", "256color")
                                     else ColorSystem.STANDARD)
        columns, lines = env.get("COLUMNS", ""), env.get("LINES", "")
        self.width = int(columns) if columns.isdigit() else 0
        self.height = int(lines) if lines.isdigit() else 0
        if not (columns.isdigit() and lines.isdigit()):  # as rich: both set win, even dumb
            size = (80, 25) if dumb else _terminal_size()
            self.width = self.width if columns.isdigit() and not dumb else size[0] or 80
            self.height = self.height if lines.isdigit() and not dumb else size[1] or 25
        self._rich: Console | None = None

    def rich(self) -> Console:
        if self._rich is None:
            from rich.console import Console

            self._rich = Console(soft_wrap=False)
        return self._rich


Screen: TypeAlias = "Console | Piped | Terminal"
"""Where a table is drawn: rich's console, or a stand-in for it."""


def _terminal_size() -> tuple[int, int]:
    for fd in (0, 1, 2):
        with contextlib.suppress(ValueError, OSError):
            return tuple(os.get_terminal_size(fd))  # type: ignore[return-value]
    return (0, 0)


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def _real(console: Screen) -> Console:
    return console if not isinstance(console, Piped | Terminal) else console.rich()


def draw(console: Screen, headers: Sequence[str], rows: Sequence[Sequence[Cell]],
         no_wrap: Sequence[bool]) -> Iterator[str]:
    """The table's lines (without newlines), styled when ``console`` is a terminal."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in headers]
    return draw_columns(console, headers, columns, no_wrap)


def draw_columns(console: Screen, headers: Sequence[str],
                 columns: Sequence[Sequence[Cell]], no_wrap: Sequence[bool]) -> Iterator[str]:
    """`draw` of a table given column by column (one sequence of cells per header, all
    of one length): the common case, where every cell fits on one line, is done a column
    at a time by built-ins, without a Python step per cell."""
    texts: list[Sequence[str]] = [
        cast("Sequence[str]", col) if set(map(type, col)) <= {str} else _plain_column(col)
        for col in columns]
    widths = _widths(console, headers, texts, no_wrap)
    styled = console.is_terminal and not console.no_color
    render = _Render(console) if styled else None
    header: list[Cell] = [((h, "bold"),) for h in headers]
    yield from _row(console, header, list(headers), widths, no_wrap, render, header=True)
    if _all_fit(texts, widths):  # no cell needs wrapping: each row is one line
        padded = [list(map(str.ljust, text, repeat(w, len(text)))) if col is text or
                  render is None else _styled_column(col, w, render)
                  for col, text, w in zip(columns, texts, widths, strict=True)]
        yield from map(_JOIN.join, zip(*padded, strict=True))
        return
    for row, text in zip(zip(*columns, strict=True), zip(*texts, strict=True), strict=True):
        yield from _row(console, row, text, widths, no_wrap, render)


def _plain_column(cells: Sequence[Cell]) -> list[str]:
    """The plain text of each cell, each distinct cell joined once (a status column holds
    a handful of distinct cells however long the table)."""
    texts = {cell: cell_text(cell) for cell in set(cells)}
    return list(map(texts.__getitem__, cells))


def _styled_column(cells: Sequence[Cell], width: int, render: _Render) -> list[str]:
    """A column's cells (each one ASCII line, at most ``width``) padded to ``width``, each
    distinct cell rendered and padded once: a status column holds a handful of distinct
    cells however long the table."""
    done: dict[Cell, str] = {}
    for cell in set(cells):
        if isinstance(cell, str):
            done[cell] = cell.ljust(width)
        else:
            shown = "".join(render(text, style) for text, style in cell)
            done[cell] = shown + " " * (width - len(cell_text(cell)))
    return list(map(done.__getitem__, cells))


def _all_fit(texts: Sequence[Sequence[str]], widths: list[int]) -> bool:
    """Every cell is one line of ASCII (no tab: rich expands those) within its width."""
    for column, width in zip(texts, widths, strict=True):
        joined = "".join(column)
        if not joined.isascii() or "\n" in joined or "\t" in joined or \
                max(map(len, column), default=0) > width:
            return False
    return True


def _widths(console: Screen, headers: Sequence[str], texts: Sequence[Sequence[str]],
            no_wrap: Sequence[bool]) -> list[int]:
    """Column widths; ``texts`` holds the columns' plain texts."""
    longest = [cell_len(h) for h in headers]
    for i, column in enumerate(texts):  # built-ins do the loops
        if column:
            measure = len if "".join(column).isascii() else cell_len
            longest[i] = max(longest[i], max(map(measure, column)))
    if sum(longest) + GAP * (len(headers) - 1) <= console.width:
        return longest
    # Wider than the console: rich decides the widths. They depend only on each column's
    # longest cell and longest word, so a table of the rows holding those decides the same.
    from rich.table import Table
    from rich.text import Text

    n = len(headers)
    top = [(-1, 0)] * n  # per column: (length, row) of the longest cell
    top_word = [(-1, 0)] * n  # and of the longest word
    for r, row in enumerate(zip(*texts, strict=True)):
        for i, text in enumerate(row):
            length = len(text) if text.isascii() else cell_len(text)
            if length > top[i][0]:
                top[i] = (length, r)
            if length > top_word[i][0]:  # a cell's longest word is at most its length
                word = max(map(len if text.isascii() else cell_len, text.split()), default=0)
                if word > top_word[i][0]:
                    top_word[i] = (word, r)
    extremes = {r for length, r in (*top, *top_word) if length >= 0}
    table = Table(box=None, pad_edge=False)
    for i, h in enumerate(headers):
        table.add_column(h, no_wrap=no_wrap[i])
    for r in sorted(extremes):
        table.add_row(*(Text(column[r]) for column in texts))
    real = _real(console)
    padded = table._calculate_column_widths(real, real.options)
    return [w - table._get_padding_width(i) for i, w in enumerate(padded)]


def _lines(console: Screen, text: str, width: int, no_wrap: bool) -> list[str]:
    """A cell's text in lines of at most ``width`` cells, wrapped and cropped as rich's
    Table does it (left, ellipsis, tab size 8): rich itself does it, but for plain ASCII
    words that all fit, where its greedy fill is done here at a fraction of the cost."""
    if "\n" not in text and "\t" not in text and \
            (len(text) if text.isascii() else cell_len(text)) <= width:
        return [text]
    if not no_wrap and text.isascii() and "\t" not in text and "\n" not in text:
        words = _WORD.findall(text)
        if all(len(w.rstrip()) <= width for w in words):
            lines, line = [], ""
            for word in words:  # rich._wrap.divide_line, for this case
                if line and width - len(line) < len(word.rstrip()):
                    lines.append(line)
                    line = ""
                line += word
            lines.append(line)
            return [ln.rstrip() if len(ln) > width else ln for ln in lines]
    from rich.text import Text

    return [line.plain for line in Text(text).wrap(_real(console), width, justify="left",
                                                   overflow="ellipsis", tab_size=8,
                                                   no_wrap=no_wrap)]


_WORD = re.compile(r"\s*\S+\s*")


def _row(console: Screen, cells: Sequence[Cell], texts: Sequence[str], widths: list[int],
         no_wrap: Sequence[bool], render: _Render | None, header: bool = False
         ) -> Iterator[str]:
    if render is None and all(map(_fits, texts, widths)):
        yield _JOIN.join(t.ljust(w) for t, w in zip(texts, widths, strict=True))
        return  # the common case: one plain line, every cell fits
    columns = [_lines(console, t, w, nw) for t, w, nw in zip(texts, widths, no_wrap, strict=True)]
    height = max(len(c) for c in columns)
    if header:  # rich aligns header cells to the bottom
        columns = [[""] * (height - len(c)) + c for c in columns]
    wrapped = [len(c) > 1 for c in columns]
    for k in range(height):
        line = [c[k] if k < len(c) else "" for c in columns]
        yield _JOIN.join(map(_pad, line, widths)) if render is None else \
            _styled(cells, line, wrapped, widths, render, header)


def _fits(text: str, width: int) -> bool:
    """Whether ``text`` shows as it is in ``width`` cells: one line of ASCII, no tab."""
    return text.isascii() and "\n" not in text and "\t" not in text and len(text) <= width


def _styled(cells: Sequence[Cell], texts: list[str], wrapped: list[bool], widths: list[int],
            render: _Render, header: bool) -> str:
    """One line of a row in its styles: ``texts`` (this line of each cell) padded to
    ``widths``; a cell ``wrapped`` over lines, or cut, loses its styles."""
    last = len(widths) - 1
    line = []
    for i, (cell, text, cut, width) in enumerate(zip(cells, texts, wrapped, widths,
                                                     strict=True)):
        pad = _pad("", width - cell_len(text)) + (_JOIN if i < last else "")
        if header:
            line.append(render(text + pad, "bold"))
        elif isinstance(cell, str) or cut or text != cell_text(cell):
            line.append(text + pad)  # a plain cell, or a styled one that had to be cut
        else:
            line.append("".join(render(t, s) for t, s in cell) + pad)
    return "".join(line)


_JOIN = " " * GAP


def _pad(text: str, width: int) -> str:
    """``text`` padded with spaces to ``width`` cells."""
    return text.ljust(width) if text.isascii() else text + " " * (width - cell_len(text))


class _Render:
    """Wraps text in the escape codes of a rich style, for ``console``'s colour system."""

    def __init__(self, console: Screen) -> None:
        from rich.style import Style

        self._system = (console.color_system if isinstance(console, Terminal) else
                        None if isinstance(console, Piped) else console._color_system)
        self._parse = Style.parse
        self._styles: dict[str, Style] = {}

    def __call__(self, text: str, style: str | None) -> str:
        if not style or not text:
            return text
        parsed = self._styles.get(style)
        if parsed is None:
            parsed = self._styles[style] = self._parse(style)
        return parsed.render(text, color_system=self._system)
