"""The typer application and the helpers every command module shares.

Commands live in one module per area (`board.py`, `worktrees.py`, `team.py`,
`agent.py`, …), each a few lines over a library function. They register on
`app` at import; `orchestrator.cli.main` imports only the module of the command
being run (see `orchestrator.cli.COMMANDS`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator.layout import Layout, find_root

if TYPE_CHECKING:
    from orchestrator.config import Config

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


@dataclass
class Repo:
    layout: Layout
    config: Config


def open_repo(repo: Path | None = None, *, ensure: bool = True) -> Repo:
    """Find the repository, load its configuration, and make sure the folders exist."""
    from orchestrator.config import Config

    root = find_root(repo)
    config = Config.load(root)
    layout = Layout.at(root, _worktree_root(root, config))
    if ensure:
        layout.ensure()
    return Repo(layout=layout, config=config)


def _worktree_root(root: Path, config: Config) -> Path | None:
    if not config.worktree.root:
        return None
    p = Path(config.worktree.root).expanduser()
    return p if p.is_absolute() else root / p


def to_jsonable(obj: Any) -> Any:
    if "pydantic" in sys.modules:  # a model can only exist once pydantic is imported
        from pydantic import BaseModel

        if isinstance(obj, BaseModel):
            return obj.model_dump(mode="json")
    if isinstance(obj, list | tuple):
        return [to_jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj


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
