"""Contracts inside the agent runtime: models, tools, and the loop's signals.

    Model      one call to a language model (`AnthropicModel`, `ScriptedModel`)
    Tool       one tool the model can call (bash, read, edit, board tools, MCP tools …)
    Toolset    the tools of one run, all behind the one permission gate

Loop control uses exceptions that carry their payload (`LoopSignal` and its
subclasses), not flags threaded through calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from orchestrator.model import Usage

if TYPE_CHECKING:
    from orchestrator.agent.permissions import PermissionGate
    from orchestrator.controlplane import ControlPlane, Events
    from orchestrator.layout import Layout
    from orchestrator.sandbox import Sandbox


@dataclass
class ToolContext:
    """What a tool may use while it runs: its worktree and the run's injected
    dependencies (each None when the run has none, e.g. planning has no lease)."""

    cwd: Path
    """The task's worktree; file tools are confined to it (symlinks resolved)."""
    env: Mapping[str, str]
    """The environment for subprocesses (secrets already removed)."""
    task_id: str | None = None
    spill_dir: Path | None = None
    """Where large results are written in full (a preview is returned)."""
    board: ControlPlane | None = None
    token: int | None = None
    """The run's lease token (fenced board writes)."""
    teammate: str | None = None
    """Who the run's events and messages are from."""
    events: Events | None = None
    """Where ``tool_called`` events go (None: not recorded)."""
    sandbox: Sandbox | None = None
    """An enabled sandbox wraps every shell command."""
    layout: Layout | None = None
    """The project, for tools that read or change its settings."""
    gate: PermissionGate | None = None
    """The run's permission gate (set by `Toolset`), for tools that check paths."""


@dataclass
class ToolResult:
    content: str
    is_error: bool = False


@runtime_checkable
class Tool(Protocol):
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool
    """True for tools that change nothing (allowed in ``plan`` mode)."""

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult: ...

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        """What permission rules match against: the command for Bash, the path for
        Read/Edit/Write, None for tools without a specifier (matched by name only)."""
        ...


@dataclass
class ModelResponse:
    """One assistant turn, in Messages API shape (content blocks as dicts)."""

    content: list[dict[str, Any]]
    stop_reason: str
    usage: Usage = field(default_factory=Usage)
    model: str = ""


@runtime_checkable
class Model(Protocol):
    name: str

    def query(self, *, system: list[dict[str, Any]], messages: list[dict[str, Any]],
              tools: list[dict[str, Any]], max_tokens: int) -> ModelResponse: ...


# --- loop signals -------------------------------------------------------------


class LoopSignal(Exception):
    """Ends or redirects the master loop; not an error."""


class Finished(LoopSignal):
    """The model ended its turn; ``summary`` is its last text."""

    def __init__(self, summary: str) -> None:
        super().__init__(summary)
        self.summary = summary


class LimitExceeded(LoopSignal):
    """A budget (turns, tokens, dollars, seconds) ran out; the message names which."""


class BudgetReached(LimitExceeded):
    """The task's budget (`orchestrator.budget`) is spent: the task waits for a person."""


class Stopped(LoopSignal):
    """A warm stop was requested; the loop ended between steps."""


class PermissionAsked(LoopSignal):
    """A tool call needs a person's answer; carries the request to send to the lead."""

    def __init__(self, request_id: str, tool: str, subject: str | None) -> None:
        super().__init__(f"permission requested for {tool}({subject or ''})")
        self.request_id = request_id
        self.tool = tool
        self.subject = subject
