"""The interfaces every component talks through.

A component depends on these Protocols, never on another component's
implementation, so that the file board can later be swapped for a PostgreSQL
one and git worktrees for a hook-based isolation backend.

- `Board`      the control plane (implemented by `orchestrator.board.store.FileBoard`)
- `Isolation`  one workspace per task (`orchestrator.worktree.manager.WorktreeManager`)
- `Backend`    runs an agent in a workspace (`orchestrator.team.backends`, `orchestrator.agent`)
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from orchestrator.board.model import Status, Task, Usage
from orchestrator.events import EventLog
from orchestrator.layout import Layout


@runtime_checkable
class Board(Protocol):
    """The task board. Every method is safe to call from many processes at once.

    Fenced methods take the lease ``token`` from the claim; a token older than
    the task's current lease raises `LeaseLost` and changes nothing.
    Unknown ids raise `NotFound`; lifecycle violations raise `InvalidTransition`.
    """

    layout: Layout
    events: EventLog

    # --- reading -----------------------------------------------------------
    def get(self, task_id: str) -> Task: ...
    def list(self, status: Status | Collection[Status] | None = None) -> list[Task]: ...
    def ready(self) -> list[Task]:
        """Claimable tasks (pending, blockers in review/merged), in claim order."""
        ...
    def problems(self) -> dict[str, str]:
        """Task id -> why it can never become ready (dependency cycle, unknown blocker)."""
        ...

    # --- writing (people and the lead) --------------------------------------
    def add(self, subject: str, *, description: str = "", blocked_by: Collection[str] = (),
            priority: int = 0, actor: str = "cli", **fields: Any) -> Task: ...
    def edit(self, task_id: str, *, actor: str, **fields: Any) -> Task:
        """Unfenced change of non-status fields (feedback, metadata …)."""
        ...
    def set_status(self, task_id: str, status: Status, *, actor: str, **fields: Any) -> Task:
        """Unfenced status change for the lead and people (merge, discard, retry).
        Leaving ``in_progress`` this way clears the lease."""
        ...
    def cancel(self, task_id: str, *, actor: str = "cli") -> Task: ...
    def intake(self) -> list[Task]:
        """Turn dropped files (inbox/ and stray files in .tasks/) into tasks."""
        ...

    # --- claims and leases (teammates) --------------------------------------
    def claim(self, owner: str, *, lease_seconds: float | None = None,
              task_id: str | None = None) -> Task | None:
        """Claim the next ready task (or ``task_id``); the returned task's ``lease.token``
        is the fencing token. None when nothing is claimable."""
        ...
    def renew(self, task_id: str, token: int, *, lease_seconds: float | None = None) -> Task: ...
    def update(self, task_id: str, token: int, **fields: Any) -> Task:
        """Fenced write of non-status fields (worktree, branch, usage, waiting_for …)."""
        ...
    def complete(self, task_id: str, token: int, **fields: Any) -> Task:
        """in_progress -> review; the lease is cleared."""
        ...
    def fail(self, task_id: str, token: int, error: str, *, retry: bool = True) -> Task:
        """Counts an attempt; back to pending while attempts remain and ``retry``, else failed."""
        ...
    def release(self, task_id: str, token: int, *, reason: str = "") -> Task:
        """Give the task back (warm stop); does not count an attempt."""
        ...
    def requeue_expired(self, *, now: float | None = None, actor: str = "lead") -> list[Task]: ...
    def requeue_owner(self, owner: str, *, reason: str, actor: str = "lead") -> list[Task]:
        """The lead saw ``owner``'s process die: requeue its tasks at once (counts an attempt)."""
        ...

    # --- change feed ----------------------------------------------------------
    def wait_for_change(self, timeout: float) -> bool:
        """Block until something under .tasks/ may have changed (file events, plus a
        periodic rescan) or ``timeout`` passes. True if woken by a change."""
        ...
    def wait_for_ready(self, timeout: float) -> bool:
        """Block until some task is ready or ``timeout`` passes; True if one is."""
        ...
    def close(self) -> None: ...


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
    def remove(self, task: Task, *, force: bool = False) -> str | None:
        """Fail-closed removal; with ``force`` a snapshot ref is saved first and returned."""
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
    board: Board
    layout: Layout
    log: TaskLogger
    stop: threading.Event
    """Set on a warm stop: finish the current step, then return."""
    timeout: float | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)


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


class TaskLogger(Protocol):
    """Appends records to ``.tasks/logs/<task_id>.jsonl`` (the task's transcript)."""

    def write(self, kind: str, **fields: Any) -> None: ...


@runtime_checkable
class Backend(Protocol):
    name: str

    def run(self, ctx: RunContext) -> RunResult: ...
