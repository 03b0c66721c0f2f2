"""The interfaces every component talks through.

A component depends on these Protocols, never on another component's
implementation, so that the file board can later be swapped for a PostgreSQL
one and git worktrees for a hook-based isolation backend.

- `Board`, `ControlPlane` and the rest of the control plane (events, mailboxes, task
  logs, teammate status, requests, ids): `orchestrator.controlplane`, opened by
  `orchestrator.board.open_board` (the file implementation: `orchestrator.board.files`)
- `Isolation`  one workspace per task (`orchestrator.worktree.manager.WorktreeManager`)
- `Backend`    runs an agent in a workspace (`orchestrator.backends`)
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from orchestrator.controlplane import Board, ControlPlane, TaskLogger
from orchestrator.layout import Layout
from orchestrator.model import Task, Usage

if TYPE_CHECKING:
    from orchestrator.budget import Limit

__all__ = ["Backend", "Board", "ControlPlane", "Isolation", "RunContext", "RunResult",
           "TaskLogger", "Workspace"]


@dataclass
class Workspace:
    """Where a task's agent works, and what it needs to know about it."""

    task_id: str
    path: Path
    branch: str | None
    base: str | None
    base_commit: str | None
    env: dict[str, str] = field(default_factory=dict)
    """ORCH_TASK_ID, ORCH_WORKTREE, ORCH_PORT_BASE … for every process run there."""


@runtime_checkable
class Isolation(Protocol):
    """One isolated workspace per task (git worktrees by default)."""

    def create(self, task: Task) -> Workspace:
        """Create (or reuse, when it exists) the task's workspace and run its setup."""
        ...
    def keep(self, task: Task) -> None: ...
    def remove(self, task: Task, *, force: bool = False,
               keep_commits: bool = False) -> str | None:
        """Fail-closed removal; with ``force`` a snapshot ref is saved first and returned.
        ``keep_commits``: committed work not in the base is no reason to refuse: it is kept
        under the snapshot ref (a discard of reviewed work); uncommitted work still is."""
        ...
    def prepare(self) -> None:
        """One-time look-ups a long-lived user (a teammate) does at start-up, so that they
        are not on its first task's path."""
        ...


@dataclass
class RunContext:
    """Everything a backend gets for one run of one task. Injected, not serialised."""

    task: Task
    token: int
    teammate: str
    workspace: Workspace
    board: ControlPlane
    layout: Layout
    log: TaskLogger
    stop: threading.Event
    """Set on a warm stop: finish the current step, then return."""
    timeout: float | None = None
    command: str | None = None
    """The shell command of the ``command`` backend (``team.command`` when None)."""
    on_process_start: Callable[[int], None] | None = None
    """Called with the process group id of the backend's process once it runs (the
    teammate records it, so that a restarted lead can kill an orphaned backend)."""
    on_files_changed: Callable[[], None] | None = None
    """Called after an agent step whose tool calls may have changed files (a backend with
    steps calls it; across machines the teammate pushes its work-in-progress snapshot)."""
    messages: Path | None = None
    """The run's messages file: what `orchestrator send` sent its agent
    (`orchestrator.delivery`)."""
    limits: list[Limit] | None = None
    """Every budget the run counts against (`orchestrator.budget.limits_for`); None: the
    task's own."""


@dataclass
class RunResult:
    ok: bool
    summary: str = ""
    error: str | None = None
    usage: Usage = field(default_factory=Usage)
    session_id: str | None = None
    stopped: bool = False
    """True when the run ended because of a warm stop (the task is released, not failed)."""
    retry: bool = True
    """False when retrying cannot help (backend not installed, not logged in)."""
    paused: str | None = None
    """The run stopped for a reason a person must look at ("budget: $2.00 of $2.00 spent",
    going round in circles): its work is committed and the task waits with this reason."""


@runtime_checkable
class Backend(Protocol):
    name: str

    def run(self, ctx: RunContext) -> RunResult: ...
