"""The repository a command works on: its `Layout` and its configuration, found from
a folder (default: the current one). Shared by the CLI and the MCP server."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ConfigError, UserError
from orchestrator.layout import TASKS_DIR, Layout, find_root

if TYPE_CHECKING:  # imported when a repository is opened, not on every command's start
    from orchestrator.board.settings import BoardSettings
    from orchestrator.config import Config


class Repo:
    """A repository's `Layout`, its board settings and (loaded when first asked for) its
    whole configuration."""

    def __init__(self, layout: Layout, config: Config | None = None, *,
                 board: BoardSettings | None = None, lenient: bool = False) -> None:
        self.layout = layout
        self._config = config
        self._board = board
        self._lenient = lenient

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = _load(self.layout.root, self._lenient)[0]
        return self._config

    @property
    def board(self) -> BoardSettings:
        """``[board]``: from the settings cache when the configuration is unchanged since
        it was last checked, so commands that only use the board never load the rest."""
        return self._board if self._board is not None else self.config.board


def open_repo(repo: Path | None = None, *, ensure: bool = True, lenient: bool = False) -> Repo:
    """Find the repository, load its configuration, and make sure the folders exist.

    ``lenient`` (commands that look or stop: status, down, list, show, add, events, logs):
    a configuration that does not load gives one warning line naming the file and line,
    and the default settings, instead of an error.

    The configuration a command checked is remembered in the board's index
    (`orchestrator.board.settings.read_checked`: the one derived store of ``.tasks/``,
    which loses nothing when deleted), keyed by the files' bytes, the ``ORCH_*``
    variables and the code's version; while that key holds,
    the board settings and worktree root come from there and `Repo.config` is loaded only
    when a command uses more."""
    root = find_root(repo)
    key, present = _settings_key(root)
    cached = _cached(root, key)
    if cached is None and not present:
        from orchestrator.board.settings import DEFAULT_BOARD

        cached = DEFAULT_BOARD, None  # nothing to check: a new user's first commands
    if cached is not None:
        board, worktree_root = cached
        layout = Layout.at(root, _worktree_path(root, worktree_root))
        r = Repo(layout, board=board, lenient=lenient)
        if ensure:
            layout.ensure()
        return r
    config, checked = _load(root, lenient)
    layout = Layout.at(root, _worktree_path(root, config.worktree.root))
    if ensure:
        layout.ensure()
    if key is not None and checked:
        _remember(root, key, config)
    return Repo(layout, config, lenient=lenient)


def _load(root: Path, lenient: bool) -> tuple[Config, bool]:
    """The configuration, and whether it is the checked one (False: the defaults a lenient
    command fell back to, after a warning)."""
    from orchestrator.config import Config

    try:
        return Config.load(root), True
    except ConfigError as exc:
        if not lenient:
            raise
        sys.stderr.write(f"warning: {exc}; using the default settings until it is fixed\n")
        return Config(), False


def _settings_key(root: Path) -> tuple[str | None, bool]:
    """What the configuration depends on, hashed: the settings files' bytes, the
    ``ORCH_*`` variables, and this code. None when a file cannot be read or is over
    `CONFIG_MAX_BYTES` (no caching: a key of part of a file would miss a change past it).
    Second: whether there is any setting at all (a file, or an ``ORCH_*`` variable);
    without one the configuration is the defaults."""
    from hashlib import blake2b

    from orchestrator import __version__
    from orchestrator.config_files import config_paths
    from orchestrator.fsutil import read_regular_bytes

    h = blake2b(__version__.encode())
    code = Path(__file__).with_name("config.py")
    with contextlib.suppress(OSError):
        st = code.stat()
        h.update(f"{st.st_mtime_ns}:{st.st_size}".encode())
    present = False
    for path in config_paths(root):
        h.update(b"\0" + str(path).encode() + b"\0")
        try:
            data = read_regular_bytes(path, CONFIG_MAX_BYTES + 1)
            if len(data) > CONFIG_MAX_BYTES:
                return None, True
            h.update(data)
            present = True
        except FileNotFoundError:
            h.update(b"missing")
        except (OSError, ValueError):
            return None, True
    for name in sorted(k for k in os.environ if k.startswith("ORCH_")):
        h.update(f"\0{name}={os.environ[name]}".encode())
        present = True
    return h.hexdigest(), present


CONFIG_MAX_BYTES = 4 << 20


def _cached(root: Path, key: str | None) -> tuple[BoardSettings, str | None] | None:
    """The board settings and worktree root remembered under ``key``, if they are."""
    from orchestrator.board.settings import CheckedBoardSettings, read_checked

    if key is None or not (root / TASKS_DIR).is_dir():
        return None
    try:
        data = json.loads(str(read_checked(root / TASKS_DIR)))
        if data["key"] != key:
            return None
        return CheckedBoardSettings(**data["board"]), data["worktree_root"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _remember(root: Path, key: str, config: Config) -> None:
    from orchestrator.board.settings import keep_checked

    data = {"key": key, "board": config.board.model_dump(mode="json"),
            "worktree_root": config.worktree.root}
    keep_checked(root / TASKS_DIR, json.dumps(data))


def require_commit(root: Path) -> None:
    """Refuse, with the fix, a repository without a commit: every task's worktree is a
    checkout of one."""
    from orchestrator.git import Git  # here: most commands never need to ask

    if not Git(root).ok("rev-parse", "--verify", "--quiet", "HEAD^{commit}"):
        raise UserError(f"{root} has no commits yet, and each task works in a checkout of one: "
                        "commit something first (e.g. git commit --allow-empty -m 'start')")


def _worktree_path(root: Path, setting: str | None) -> Path | None:
    if not setting:
        return None
    p = Path(setting).expanduser()
    return p if p.is_absolute() else root / p


def to_jsonable(obj: Any) -> Any:
    """``obj`` as plain JSON values (models dumped, paths as strings)."""
    if "msgspec" in sys.modules:  # a record can only exist once msgspec is imported
        import msgspec

        from orchestrator.record import Record, to_dict

        if isinstance(obj, Record):
            return to_dict(obj)
        if isinstance(obj, msgspec.Struct):
            return msgspec.to_builtins(obj)
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
