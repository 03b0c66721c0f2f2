"""A task's diff as the review page shows it: files, hunks, lines, highlighted.

The text comes from `orchestrator.review.diff_text` (what ``orchestrator diff``
prints); this module only cuts it into files and lines, pairs removed and added
lines for the side-by-side view, and highlights each line with Pygments (the
lexer chosen from the file name). The page is bounded: git's output is read up to
`MAX_BYTES` (then git is stopped), at most `MAX_LINES` lines are shown, and a line
longer than `MAX_LINE_CHARS` is shown cut, saying how much is left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from markupsafe import Markup, escape
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexer import Lexer
from pygments.lexers import TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

from orchestrator.events import redact

MAX_LINES = 5000
MAX_BYTES = 1 << 20
MAX_LINE_CHARS = 2000
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")


@dataclass
class Line:
    kind: str
    """``add``, ``del`` or ``ctx``."""
    old: int | None
    new: int | None
    html: Markup


@dataclass
class Hunk:
    header: str
    lines: list[Line] = field(default_factory=list)

    def pairs(self) -> list[tuple[Line | None, Line | None]]:
        """Side by side: context on both sides, each run of removals beside the additions
        that follow it."""
        out: list[tuple[Line | None, Line | None]] = []
        dels: list[Line] = []
        adds: list[Line] = []

        def flush() -> None:
            for i in range(max(len(dels), len(adds))):
                out.append((dels[i] if i < len(dels) else None,
                            adds[i] if i < len(adds) else None))
            dels.clear()
            adds.clear()

        for line in self.lines:
            if line.kind == "del":
                if adds:
                    flush()
                dels.append(line)
            elif line.kind == "add":
                adds.append(line)
            else:
                flush()
                out.append((line, line))
        flush()
        return out


@dataclass
class FileDiff:
    path: str
    added: int = 0
    removed: int = 0
    binary: bool = False
    hunks: list[Hunk] = field(default_factory=list)


@dataclass
class Diff:
    files: list[FileDiff]
    truncated: bool = False


@lru_cache(maxsize=256)
def _lexer(path: str) -> Lexer:
    try:
        return get_lexer_for_filename(path, stripnl=False, ensurenl=False)
    except ClassNotFound:
        return TextLexer(stripnl=False, ensurenl=False)


_FORMATTER = HtmlFormatter(nowrap=True)


def _highlight(path: str, text: str) -> Markup:
    text = redact(text)
    if not text.strip():
        return escape(text)
    return Markup(highlight(text, _lexer(path), _FORMATTER).rstrip("\n"))


def parse(text: str, max_lines: int = MAX_LINES) -> Diff:
    """Cut ``git diff`` output into files, hunks and numbered lines."""
    files: list[FileDiff] = []
    current: FileDiff | None = None
    hunk: Hunk | None = None
    old = new = 0
    shown = 0
    cut = False
    for raw in text.splitlines():
        if raw.startswith("diff --git "):
            m = re.match(r"diff --git a/(.*) b/(.*)$", raw)
            current = FileDiff(path=m.group(2) if m else raw[11:])
            files.append(current)
            hunk = None
            continue
        if current is None:
            continue
        if raw.startswith("Binary files "):
            current.binary = True
            continue
        m = HUNK_RE.match(raw)
        if m:
            old, new = int(m.group(1)), int(m.group(2))
            hunk = Hunk(header=raw)
            current.hunks.append(hunk)
            continue
        if hunk is None:
            continue  # the file's header lines (index, ---, +++, mode)
        if raw.startswith("\\"):
            cut = cut or raw.startswith("\\ [cut here")
            continue  # "\ No newline at end of file"
        kind = {"+": "add", "-": "del"}.get(raw[:1], "ctx")
        if kind == "add":
            current.added += 1
        elif kind == "del":
            current.removed += 1
        if shown >= max_lines:
            continue
        shown += 1
        body = raw[1:]
        if len(body) > MAX_LINE_CHARS:
            body = f"{body[:MAX_LINE_CHARS]} … [{len(body) - MAX_LINE_CHARS} more characters]"
        html = _highlight(current.path, body)
        if kind == "add":
            hunk.lines.append(Line(kind, None, new, html))
            new += 1
        elif kind == "del":
            hunk.lines.append(Line(kind, old, None, html))
            old += 1
        else:
            hunk.lines.append(Line(kind, old, new, html))
            old += 1
            new += 1
    total = sum(f.added + f.removed for f in files)
    return Diff(files=files, truncated=cut or total > max_lines)


def css() -> str:
    """The highlighting colours (Pygments' default style), for the page's style sheet."""
    return str(_FORMATTER.get_style_defs(".code"))
