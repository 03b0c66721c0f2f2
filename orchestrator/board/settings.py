"""What a board reads of its settings (``[board]`` in orchestrator.toml).

`BoardSettings` is the shape both boards take: `orchestrator.config.BoardConfig` (the
pydantic model that checks and documents the settings) has it, and so has
`CheckedBoardSettings`, the same values as a plain record that a command reads from the
settings cache (`orchestrator.repo`) without importing pydantic.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import msgspec


class BoardSettings(Protocol):
    @property
    def lease_seconds(self) -> float: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def rescan_seconds(self) -> float: ...
    @property
    def fsync(self) -> bool: ...
    @property
    def url(self) -> str | None: ...
    @property
    def remote(self) -> str: ...
    @property
    def machine(self) -> str | None: ...
    @property
    def lock_wait_seconds(self) -> float: ...
    @property
    def statement_seconds(self) -> float: ...
    @property
    def idle_in_transaction_seconds(self) -> float: ...


class CheckedBoardSettings(msgspec.Struct, frozen=True):
    """`BoardSettings` that `BoardConfig` has already checked (see the module's text)."""

    lease_seconds: float
    max_attempts: int
    rescan_seconds: float
    fsync: bool
    url: str | None
    remote: str
    machine: str | None
    lock_wait_seconds: float = 2.0
    statement_seconds: float = 30.0
    idle_in_transaction_seconds: float = 5.0


CHECKED = "settings"
"""The entry of the board's index (``meta``) that holds the settings as a command last
checked them (`orchestrator.repo`: their key, board settings and worktree root, as JSON).
Only orchestrator processes write ``.tasks/`` (agents cannot); a stale or unreadable
entry is ignored, so it costs speed only."""


def read_checked(tasks_dir: Path) -> object:
    """What `keep_checked` last kept (None: nothing, or no index)."""
    from orchestrator.board.index import read_meta

    return read_meta(tasks_dir, CHECKED)


def keep_checked(tasks_dir: Path, value: str) -> None:
    from orchestrator.board.index import write_meta

    write_meta(tasks_dir, CHECKED, value)


def default_settings() -> BoardSettings:
    from orchestrator.config import BoardConfig

    return BoardConfig()


DEFAULT_BOARD = CheckedBoardSettings(lease_seconds=30.0, max_attempts=3, rescan_seconds=10.0,
                                     fsync=True, url=None, remote="origin", machine=None)
"""`BoardConfig`'s defaults (a test holds them equal): a repository with no settings file
at all runs its board commands on these without loading the settings models."""
