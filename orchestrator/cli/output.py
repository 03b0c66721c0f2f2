"""What the commands print: the JSON line, plain lines, the pager (`orchestrator.cli.app`
re-exports them)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from orchestrator.repo import to_jsonable

PIPED_WIDTH = 100_000
"""Piped output is never wrapped (the terminal's width applies on a terminal)."""


_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (9, 10)}
_CONTROLS.update({c: f"\\u{c:04x}" for c in (0x200E, 0x200F, 0x2028, 0x2029,
                                            *range(0x202A, 0x202F), *range(0x2066, 0x206A))})


def plain(text: str) -> str:
    """``text`` with its control characters (all but tab and newline) written out as
    ``\\xNN``, and the marks that reorder or break a line (bidi overrides and isolates, line
    and paragraph separators) as ``\\uNNNN``: a subject, message or event field an agent or a
    dropped file wrote cannot move the cursor, set the title or the clipboard, hide what
    follows, or show a command in an order other than the one it runs in."""
    return text if text.isprintable() else text.translate(_CONTROLS)


def echo(text: str, *, err: bool = False) -> None:
    """One line (``text`` and a newline, its control characters written out: `plain`) on
    stdout, or stderr with ``err``."""
    stream = sys.stderr if err else sys.stdout
    stream.write(plain(text) + "\n")
    stream.flush()


def page(text: str) -> None:
    """Show ``text`` through the pager with its colours, as ``git log`` does: ``$PAGER``,
    else ``less`` (given ``LESS=-R`` unless the user set ``LESS`` or options); printed as it
    is when stdin or stdout is not a terminal, TERM is dumb, the pager is ``cat`` or is not
    found.
    (click's pager does the same, but importing the click package costs every paged list.)"""
    import shlex
    import shutil
    import subprocess

    try:
        argv = shlex.split(os.environ.get("PAGER", ""))
    except ValueError:  # unbalanced quotes: no pager to start, the text is not lost
        argv = ["cat"]
    if not argv and os.environ.get("TERM") not in ("dumb", "emacs"):
        argv = ["less"]
    # PAGER=cat pages nothing: written straight out, as git does, not through a cat
    found = shutil.which(argv[0]) if argv and argv != ["cat"] else None
    if found is None or not (sys.stdin.isatty() and sys.stdout.isatty()):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    env = None
    if Path(found).name == "less" and len(argv) == 1 and not os.environ.get("LESS"):
        env = {**os.environ, "LESS": "-R"}
    sys.stdout.flush()
    pager = subprocess.Popen([found, *argv[1:]], stdin=subprocess.PIPE, env=env)
    assert pager.stdin is not None
    with contextlib.suppress(BrokenPipeError):  # the user quit the pager before the end
        try:
            pager.stdin.write(text.encode(sys.stdout.encoding or "utf-8", errors="replace"))
        finally:
            pager.stdin.close()
    while True:  # less takes Ctrl-C for itself: wait until the user quits it
        try:
            pager.wait()
            return
        except KeyboardInterrupt:
            pass


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(obj), indent=None, default=str) + "\n")
    sys.stdout.flush()


def page_lines(console: Any, lines: list[str]) -> None:
    """Print ``lines``; on a terminal, more than a screenful goes through the pager
    (``$PAGER``, else ``less``), as ``git log`` does."""
    text = "\n".join(lines) + "\n"
    if console.is_terminal and len(lines) >= console.height:
        page(text)
        return
    sys.stdout.write(text)
    sys.stdout.flush()
