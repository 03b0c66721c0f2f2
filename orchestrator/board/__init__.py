"""The control plane: tasks in ``.tasks/``, claimed with leases and fencing tokens.

    open_board(layout, config)   the one place a board is opened: a `ControlPlane`
                                 (`orchestrator.controlplane`), the task board plus its
                                 events, mailboxes, task logs, teammate status, requests, ids
    init_repo(root)              create the folders and keep them out of ``git status``

Only modules in this package know how the control plane is stored (paths under
``.tasks/``, ``events.jsonl``); everything else goes through the `ControlPlane`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.board.settings import BoardSettings
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import UserError
from orchestrator.layout import TASKS_DIR, Layout

if TYPE_CHECKING:
    from orchestrator.board.store import FileBoard

__all__ = ["FileBoard", "board_paths", "init_repo", "open_board", "rejected_line"]


def __getattr__(name: str) -> Any:
    """`FileBoard` is imported when first asked for: a module that needs only the task model
    (``orchestrator.model``) or a PostgreSQL board does not load the file board."""
    if name == "FileBoard":
        from orchestrator.board.store import FileBoard

        return FileBoard
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def open_board(layout: Layout, config: BoardSettings | None = None,
               actor: str = "cli", *, create: bool = True) -> ControlPlane:
    """The control plane of ``layout``'s repository, as ``config`` says where it lives:
    the file board (its folders are created when missing unless ``create`` is False), or
    the PostgreSQL board of a team across machines when ``[board] url`` is set. ``actor``
    is who this process writes as."""
    if create:
        layout.ensure()
    if config is not None and config.url:
        from orchestrator.board.pg.store import PgBoard

        return PgBoard(layout, config, actor)
    from orchestrator.board.store import FileBoard

    return FileBoard(layout, config, actor)


def board_modules(config: BoardSettings) -> list[str]:
    """What a process that opens this board imports to use it: the team's spawner loads
    them before it forks, so each teammate shares them (PostgreSQL: psycopg and libpq)."""
    if config.url:
        return ["orchestrator.board.pg.store", "psycopg"]
    return ["orchestrator.board.store"]


def rejected_line(paths: list[str]) -> str | None:
    """What a command says about the files its intake rejected (`ControlPlane.rejected_drops`):
    ``1 file rejected: .tasks/rejected/bad.json — see bad.json.error.txt``."""
    if not paths:
        return None
    shown = "; ".join(f"{p} — see {p.rsplit('/', 1)[-1]}.error.txt" for p in paths[:3])
    more = f" (and {len(paths) - 3} more)" if len(paths) > 3 else ""
    return f"{len(paths)} file{'s' if len(paths) != 1 else ''} rejected: {shown}{more}"


def board_paths(layout: Layout) -> dict[str, Path]:
    """Where the file board keeps things, for ``init`` to tell the user."""
    return {"root": layout.root, "tasks": layout.tasks, "inbox": layout.inbox,
            "worktrees": layout.worktree_root, "events": layout.events}


def init_repo(root: Path, worktree_root: Path | None = None) -> Layout:
    """Create ``.tasks/`` and the worktree root, and list them in ``.git/info/exclude``.

    Idempotent. A worktree root outside the repository needs no exclude line.
    """
    from orchestrator.git import Git  # here: the board's readers never run git

    layout = Layout.at(root, worktree_root).ensure()
    out = Git(layout.root).run("rev-parse", "--git-common-dir", check=False)
    if out.returncode != 0:
        raise UserError(f"not a git repository: {layout.root}")
    exclude = (layout.root / out.stdout.strip()).resolve() / "info" / "exclude"
    wanted = [f"/{TASKS_DIR}/"]
    if layout.worktree_root.is_relative_to(layout.root):
        wanted.append(f"/{layout.worktree_root.relative_to(layout.root).as_posix()}/")
    exclude.parent.mkdir(parents=True, exist_ok=True)
    text = exclude.read_text() if exclude.exists() else ""
    missing = [w for w in wanted if w not in text.splitlines()]
    if missing:
        sep = "" if not text or text.endswith("\n") else "\n"
        exclude.write_text(text + sep + "".join(f"{w}\n" for w in missing))
    return layout
