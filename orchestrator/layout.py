"""Where everything lives in a repository managed by orchestrator.

One `Layout` is built from the repository root and handed to every component,
so no module guesses paths on its own. The worktree root may be configured
outside the repository (``worktree_root``); ``events.jsonl`` lives in it.

The control-plane paths (``tasks``, ``inbox``, ``rejected``, ``mailboxes``, ``logs``,
``seq``, ``events``, ``task_file``) are the file board's business: only
`orchestrator.board` uses them (``tests/test_boundaries.py`` checks). Everyone else
reaches the control plane through `orchestrator.board.open_board`. What stays this
machine's, whatever the board: ``run`` (the lead's pid/log, port blocks), ``locks``
(git and worktree locks), ``snapshots`` and ``spill_dir``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from orchestrator.errors import GitError, UserError

TASKS_DIR = ".tasks"
WORKTREES_DIR = ".worktrees"


@dataclass(frozen=True)
class Layout:
    root: Path
    worktree_root: Path

    @classmethod
    def at(cls, root: Path | str, worktree_root: Path | str | None = None) -> Layout:
        root = Path(root).resolve()
        wt = Path(worktree_root).resolve() if worktree_root else root / WORKTREES_DIR
        return cls(root=root, worktree_root=wt)

    @cached_property
    def tasks(self) -> Path:
        return self.root / TASKS_DIR

    @cached_property
    def inbox(self) -> Path:
        return self.tasks / "inbox"

    @cached_property
    def rejected(self) -> Path:
        return self.tasks / "rejected"

    @cached_property
    def mailboxes(self) -> Path:
        return self.tasks / "mailboxes"

    @cached_property
    def logs(self) -> Path:
        return self.tasks / "logs"

    @cached_property
    def locks(self) -> Path:
        return self.tasks / ".locks"

    @cached_property
    def seq(self) -> Path:
        return self.tasks / ".seq"

    @cached_property
    def run(self) -> Path:
        """Daemon state: pid file, daemon log, teammate status files."""
        return self.tasks / ".run"

    @cached_property
    def events(self) -> Path:
        return self.worktree_root / "events.jsonl"

    @cached_property
    def snapshots(self) -> Path:
        """Hook isolation's workspace snapshots (this machine's)."""
        return self.tasks / "snapshots"

    def spill_dir(self, name: str) -> Path:
        """Where a run (``name``: its task id, or ``plan-<time>``) spills long tool results
        on this machine, for its read-only tools to open."""
        return self.logs / f"{name}.spill"

    def task_file(self, task_id: str) -> Path:
        return self.tasks / f"{task_id}.json"

    def worktree(self, task_id: str) -> Path:
        return self.worktree_root / task_id

    def ensure(self) -> Layout:
        """Create the control-plane and execution-plane folders (idempotent)."""
        for d in (self.tasks, self.inbox, self.rejected, self.mailboxes, self.logs,
                  self.locks, self.run, self.worktree_root):
            d.mkdir(parents=True, exist_ok=True)
        return self


def find_root(start: Path | str | None = None) -> Path:
    """The top of the git repository containing ``start`` (default: cwd), as git finds it
    (``rev-parse --show-toplevel``: linked worktrees, ``GIT_DIR``, ownership checks).

    Raises a UserError with one clear line when not inside a git repository.
    """
    from orchestrator.git import Git

    start = Path(start or os.getcwd()).resolve()
    if not start.is_dir():
        raise UserError(f"no such folder: {start}")
    try:
        out = Git(start).run("rev-parse", "--show-toplevel", check=False)
    except GitError as exc:
        raise UserError(f"not inside a git repository: {start} ({exc})") from None
    if out.returncode != 0 or not out.stdout.strip():
        raise UserError(f"not inside a git repository: {start}")
    return Path(out.stdout.strip()).resolve()
