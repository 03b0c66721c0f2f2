"""The error tree of orchestrator.

    Exception
    ├── OrchestratorError            every error we raise on purpose
    │   ├── UserError                bad input or config: one clear line at the CLI, exit 1
    │   │   ├── NotFound             a task, worktree, mailbox … that does not exist
    │   │   ├── InvalidInput         a malformed task file, name, id, value
    │   │   ├── ConfigError          a bad setting
    │   │   └── Conflict             the operation is refused in the current state
    │   │       ├── InvalidTransition    a status change the lifecycle does not allow
    │   │       ├── AlreadyRunning       a second daemon on the same repository
    │   │       └── UnsafeRemoval        removing a worktree would lose work
    │   └── RunError                 something failed while running, with context
    │       ├── LeaseLost            a fenced write with an old token (another owner has it)
    │       ├── GitError             a git command failed (stderr attached)
    │       │   └── SecretLeak       a commit would add a known secret's value
    │       ├── BoardUnavailable     the board's database cannot be used (down, login, schema)
    │       └── BackendError         an agent backend could not run
    └── (loop signals live in orchestrator.agent.base, a teammate's in
         orchestrator.team.teammate: they are control flow, not errors)

Outside errors (OSError, git, pydantic, the SDK) are translated at the boundary
with ``raise … from exc`` so the CLI can print one line and the cause stays in
the log.
"""

from __future__ import annotations


class OrchestratorError(Exception):
    """Base of every error orchestrator raises on purpose."""


class UserError(OrchestratorError):
    """The user's input or configuration is wrong; the message says how."""


class NotFound(UserError):
    pass


class InvalidInput(UserError):
    pass


class ConfigError(UserError):
    pass


class Conflict(UserError):
    pass


class InvalidTransition(Conflict):
    pass


class AlreadyRunning(Conflict):
    pass


class UnsafeRemoval(Conflict):
    pass


class RunError(OrchestratorError):
    """A failure while running; carries the task it happened on when known."""

    def __init__(self, message: str, *, task: str | None = None) -> None:
        super().__init__(message)
        self.task = task


class LeaseLost(RunError):
    """A fenced write carried a token older than the task's current lease."""


class GitError(RunError):
    pass


class SecretLeak(GitError):
    """A commit would add the value of a known secret (`orchestrator.secrets`)."""


class BoardUnavailable(RunError):
    """The board's database is unreachable, refuses the login, or its schema does not fit
    this code. The message says what to do; a daemon retries with back-off."""


class BackendError(RunError):
    """A backend could not run. ``retry`` is False when another attempt cannot help
    (credentials refused, no credentials)."""

    def __init__(self, message: str, *, task: str | None = None, retry: bool = True) -> None:
        super().__init__(message, task=task)
        self.retry = retry


def install_hint(extra: str) -> str:
    """How to install one of orchestrator's extras: from its own checkout, never by the
    bare name from PyPI (``orchestrator`` there is an unrelated project)."""
    from pathlib import Path

    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "scripts" / "install").is_file():
        return (f"{checkout / 'scripts' / 'install'} {extra} (or pip install -e "
                f"'{checkout}[{extra}]')")
    return f"pip install -e '<orchestrator checkout>[{extra}]' (from the checkout, not PyPI)"
