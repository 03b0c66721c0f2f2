"""The repository a command works on: its `Layout` and its configuration, found from
a folder (default: the current one). Shared by the CLI and the MCP server."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ConfigError, UserError
from orchestrator.layout import Layout, find_root

if TYPE_CHECKING:  # imported when a repository is opened, not on every command's start
    from orchestrator.config import Config


@dataclass
class Repo:
    layout: Layout
    config: Config


def open_repo(repo: Path | None = None, *, ensure: bool = True, lenient: bool = False) -> Repo:
    """Find the repository, load its configuration, and make sure the folders exist.

    ``lenient`` (commands that look or stop: status, down, list, show, add, events, logs):
    a configuration that does not load gives one warning line naming the file and line,
    and the default settings, instead of an error."""
    from orchestrator.config import Config

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


def to_jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values (models dumped, paths as strings)."""
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
