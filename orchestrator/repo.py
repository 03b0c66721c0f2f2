"""The repository a command works on: its `Layout` and its configuration, found from
a folder (default: the current one). Shared by the CLI and the MCP server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from orchestrator.config import Config
from orchestrator.layout import Layout, find_root


@dataclass
class Repo:
    layout: Layout
    config: Config


def open_repo(repo: Path | None = None, *, ensure: bool = True) -> Repo:
    """Find the repository, load its configuration, and make sure the folders exist."""
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
    """``obj`` as plain JSON values (models dumped, paths as strings)."""
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, list | tuple):
        return [to_jsonable(o) for o in obj]
    if isinstance(obj, dict):
        return {k: to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, Path):
        return str(obj)
    return obj
