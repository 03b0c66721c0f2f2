"""The typer application and the helpers every command module shares.

Commands live in one module per area (`board.py`, `worktrees.py`, `team.py`,
`agent.py`, …), each a few lines over a library function. They register on
`app` at import; `orchestrator.cli.main` imports them all.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel

from orchestrator.config import Config
from orchestrator.errors import ConfigError
from orchestrator.layout import Layout, find_root

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


def open_repo(repo: Path | None = None, *, ensure: bool = True, lenient: bool = False) -> Repo:
    """Find the repository, load its configuration, and make sure the folders exist.

    ``lenient`` (commands that look or stop: status, down, list, show, add, events, logs):
    a configuration that does not load gives one warning line naming the file and line,
    and the default settings, instead of an error."""
    root = find_root(repo)
    try:
        config = Config.load(root)
    except ConfigError as exc:
        if not lenient:
            raise
        sys.stderr.write(f"warning: {exc}; using the default settings until it is fixed\n")
        config = Config()
    layout = Layout.at(root, _worktree_root(root, config))
    if ensure:
        layout.ensure()
    return Repo(layout=layout, config=config)


def require_commit(root: Path) -> None:
    """Refuse, with the fix, a repository without a commit: every task's worktree is a
    checkout of one."""
    import subprocess

    from orchestrator.errors import UserError

    out = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
                         cwd=root, capture_output=True, check=False)
    if out.returncode != 0:
        raise UserError(f"{root} has no commits yet, and each task works in a checkout of one: "
                        "commit something first (e.g. git commit --allow-empty -m 'start')")


def _worktree_root(root: Path, config: Config) -> Path | None:
    if not config.worktree.root:
        return None
    p = Path(config.worktree.root).expanduser()
    return p if p.is_absolute() else root / p


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


def to_jsonable(obj: Any) -> Any:
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
