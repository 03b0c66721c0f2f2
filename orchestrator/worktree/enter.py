"""``orchestrator enter ID``: a person steps into a task's workspace.

The shell (``$SHELL``, else ``/bin/sh``) or the given command runs in the workspace with
the task's environment (``ORCH_TASK_ID``, ``ORCH_WORKTREE``, the port block, the
subject); when it exits, the person is back where they were. Nothing about the task
changes: no claim, no lease, no status; an event records the visit.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.controlplane import ControlPlane
from orchestrator.errors import NotFound
from orchestrator.worktree import Workspaces


def workspace_of(isolation: Workspaces, board: ControlPlane,
                 task_id: str) -> tuple[Path, dict[str, str]]:
    """The task's workspace folder and the environment to run in it (`NotFound` when it
    has none on disk)."""
    task = board.get(task_id)
    row = isolation.status(task)
    if not row.exists:
        when = ("it is made when a teammate claims the task" if str(task.status) == "pending"
                else "it was removed or never made")
        raise NotFound(f"{task.id} ({task.status}) has no workspace at {row.path}: {when}")
    env = {**os.environ, **isolation.environment(task), "ORCH_TASK_SUBJECT": task.subject}
    return Path(row.path), env


def user_shell() -> str:
    shell = os.environ.get("SHELL", "")
    return shell if shell and shutil.which(shell) else "/bin/sh"


def run_in(path: Path, env: dict[str, str], argv: Sequence[str],
           relay: Callable[[bytes], None] | None = None) -> int:
    """Run ``argv`` in ``path`` in the foreground; its exit status (128 + N for a signal).
    Ctrl-C and Ctrl-\\ reach the child only: the caller waits for it to end. ``relay``:
    the child's standard output goes through a pipe to it, chunk by chunk, instead of
    straight to ours (so the caller knows how it ended)."""
    handlers = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT,
                                                                     signal.SIGQUIT)}
    try:
        proc = subprocess.Popen(list(argv), cwd=path, env=env,
                                stdout=subprocess.PIPE if relay else None)
        if relay is not None and proc.stdout is not None:
            with proc.stdout:
                while chunk := os.read(proc.stdout.fileno(), 65536):
                    relay(chunk)
        code = proc.wait()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    return 128 - code if code < 0 else code
