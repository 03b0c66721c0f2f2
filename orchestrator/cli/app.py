"""The typer application and the helpers every command module shares.

Commands live in one module per area (`board.py`, `worktrees.py`, `team.py`,
`agent.py`, …), each a few lines over a library function. They register on
`app` at import; `orchestrator.cli.main` imports only the module of the command
being run (see `orchestrator.cli.COMMANDS`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from orchestrator.repo import Repo, open_repo, require_commit, to_jsonable

__all__ = ["JsonOpt", "Repo", "RepoOpt", "app", "open_repo", "page", "print_json", "print_table",
           "require_commit", "to_jsonable"]

app = typer.Typer(
    name="orchestrator",
    help="Run a team of coding agents on one git repository, one worktree per task.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
RepoOpt = Annotated[
    Path | None,
    typer.Option("--repo", "-C", help="The repository (default: the one containing the cwd)."),
]


PIPED_WIDTH = 100_000
"""Piped output is never wrapped (the terminal's width applies on a terminal)."""


def print_table(table: Any) -> None:
    """A rich table: fitted to a terminal; piped, one line per row, never wrapped, with no
    trailing padding."""
    from rich.console import Console

    if sys.stdout.isatty():
        Console(soft_wrap=False).print(table)
        return
    console = Console(soft_wrap=False, width=PIPED_WIDTH, no_color=True)
    with console.capture() as cap:
        console.print(table)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in cap.get().splitlines()))
    sys.stdout.flush()


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


def _version(value: bool) -> None:
    if value:
        from orchestrator import __version__

        typer.echo(f"orchestrator {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Run a team of coding agents on one git repository, one worktree per task."""
