"""The typer application and the helpers every command module shares.

Commands live in one module per area (`board.py`, `worktrees.py`, `team.py`,
`agent.py`, …), each a few lines over a library function. They register on
`app` at import; `orchestrator.cli.load_app` imports them all (`orchestrator.cli.MODULES`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestrator.cli.output import PIPED_WIDTH, echo, page, print_json
from orchestrator.repo import Repo, open_repo, require_commit, to_jsonable

__all__ = ["PIPED_WIDTH", "JsonOpt", "Repo", "RepoOpt", "app", "open_repo", "page", "print_json",
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


def _version(value: bool) -> None:
    if value:
        from orchestrator import __version__

        echo(f"orchestrator {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """Run a team of coding agents on one git repository, one worktree per task."""
