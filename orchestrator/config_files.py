"""Where the settings live: the user's file and the project's (read by
`orchestrator.config.Config.load`; hashed by the settings cache in `orchestrator.repo`).
Kept apart from `orchestrator.config` so finding them imports nothing heavy."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def user_config_file(environ: Mapping[str, str] | None = None) -> Path:
    """The user's settings (scope ``user``), read before the project's:
    ``$XDG_CONFIG_HOME/orchestrator/config.toml``, default ``~/.config/...``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "orchestrator" / "config.toml"


def config_paths(root: Path) -> list[Path]:
    """Every file the configuration of the repository at ``root`` is read from."""
    return [user_config_file(), root / "orchestrator.toml", root / "pyproject.toml"]
