"""Project configuration: one pydantic model per component.

Read from ``orchestrator.toml`` (or ``[tool.orchestrator]`` in ``pyproject.toml``),
then environment variables ``ORCH_<SECTION>_<KEY>`` (e.g. ``ORCH_BOARD_LEASE_SECONDS=10``),
then whatever the CLI passes as overrides. Unknown keys and bad values are a
`ConfigError` naming the key and what is allowed.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.errors import ConfigError

DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_TEAMMATE_NAMES = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
    "ivan", "judy", "mallory", "niaj", "olivia", "peggy", "rupert", "sybil",
)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class BoardConfig(_Section):
    lease_seconds: float = Field(default=DEFAULT_LEASE_SECONDS, gt=0)
    """How long a claim lives without a heartbeat before the lead requeues it."""
    max_attempts: int = Field(default=3, ge=1)
    """Default for new tasks: failed or expired runs before a task is `failed`."""
    rescan_seconds: float = Field(default=5.0, gt=0)
    """Periodic rescan of `.tasks/`, since file-system events can be lost."""
    fsync: bool = True
    """Durable task writes (fsync of file and folder). Off only for throwaway boards
    (tests, benchmarks on tmpfs): a power cut may then lose the last writes."""


class WorktreeConfig(_Section):
    root: str | None = None
    """Where worktrees live; default `.worktrees` in the repository."""
    branch_prefix: str = "task/"
    base: str = "HEAD"
    """The ref new task branches start from (blocked tasks start from their blockers)."""
    setup: list[str] = Field(default_factory=list)
    """Shell commands run in each new worktree (e.g. `npm ci`)."""
    setup_timeout: float = Field(default=600.0, gt=0)
    port_base: int = Field(default=20000, ge=1024, le=65000)
    port_block: int = Field(default=10, ge=1, le=1000)
    """Each live worktree gets `port_block` ports from `ORCH_PORT_BASE`."""


class TeamConfig(_Section):
    teammates: int = Field(default=2, ge=1, le=64)
    backend: str = "command"
    command: str | None = None
    """The shell command the `command` backend runs in the worktree."""
    verify: str | None = None
    """The verification command (e.g. `pytest -q`); a non-zero exit sends the task to retry."""
    verify_timeout: float = Field(default=900.0, gt=0)
    task_timeout: float = Field(default=3600.0, gt=0)
    """Wall-clock budget of one run of the backend; past it the process group is killed."""
    names: list[str] = Field(default_factory=lambda: list(DEFAULT_TEAMMATE_NAMES))


class AgentConfig(_Section):
    model: str = "claude-sonnet-4-5"
    max_turns: int = Field(default=50, ge=1)
    max_tokens: int = Field(default=8192, ge=1)
    """Output tokens per model call."""
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    max_seconds: float | None = None
    permission_mode: str = "acceptEdits"
    allow: list[str] = Field(default_factory=list)
    ask: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    sandbox: str = "auto"
    """`auto` (bubblewrap where it works), `on` (required) or `off`."""
    network: bool = False
    pass_env: list[str] = Field(default_factory=list)
    """Secret-looking environment variables that tools may still see."""


class McpConfig(_Section):
    start_timeout: float = Field(default=30.0, gt=0)
    """Seconds a server may take to start and answer `initialize` before it is marked failed."""
    call_timeout: float = Field(default=300.0, gt=0)
    """Seconds one MCP tool call or resource read may take; past it the server is restarted."""
    user_plugin_dir: str | None = None
    """The user's plugin folder (`<dir>/<plugin>/.claude-plugin/plugin.json`);
    default `$XDG_CONFIG_HOME/orchestrator/plugins` (`~/.config/orchestrator/plugins`)."""


class HooksConfig(_Section):
    """Notification hooks: shell commands the lead runs on task events, the event as JSON
    on stdin. A hook that fails or runs past `timeout` is logged; it never blocks the team."""

    review: list[str] = Field(default_factory=list)
    """Run when a task is ready for review (event `task_completed`)."""
    failed: list[str] = Field(default_factory=list)
    """Run when a task has failed for good (no attempts left)."""
    waiting: list[str] = Field(default_factory=list)
    """Run when a task waits for input (event `permission_requested`)."""
    events: dict[str, list[str]] = Field(default_factory=dict)
    """Any other event type (e.g. `merged`) -> commands."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds one hook may run before its process group is killed."""


class ClaudeCodeConfig(_Section):
    """The ``claude-code`` backend: the Claude Code CLI run headless in each worktree."""

    binary: str = "claude"
    """The CLI: a name looked up on PATH, or a path."""
    args: list[str] = Field(default_factory=list)
    """Extra arguments added to every run (e.g. `["--effort", "high"]`)."""
    model: str | None = None
    """`--model`; default: `agent.model` when set in the config, else Claude Code's own choice."""
    config_root: str | None = None
    """Where each teammate's `CLAUDE_CONFIG_DIR` lives (`<root>/<teammate>`);
    default `.tasks/.run/claude`."""
    user_config_dir: str | None = None
    """The user's Claude Code folder whose login and settings teammates use;
    default `$CLAUDE_CONFIG_DIR`, else `~/.claude`."""
    permission_rounds: int = Field(default=3, ge=0)
    """How many times a run that ended with denied tools asks the lead and resumes
    with the approved ones; 0 reports denials without waiting."""


PromptVia = Literal["arg", "stdin", "env"]


class CommandPreset(_Section):
    """A command-line agent: its words, and how it gets the task's prompt."""

    argv: list[str] = Field(min_length=1)
    """The command, one word per item; `{prompt}` in a word is replaced by the prompt
    when `prompt = "arg"`."""
    prompt: PromptVia = "arg"
    """`arg` (in `argv`), `stdin`, or `env` (in `prompt_env`)."""
    prompt_env: str = "ORCH_PROMPT"
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for the command."""


class CommandsConfig(_Section):
    """Presets for command-line agents: `--backend aider|codex|gemini`, or `cli` for your own."""

    cli: CommandPreset | None = None
    """The generic template the `cli` backend runs."""
    aider: CommandPreset | None = None
    """Replaces the built-in aider preset."""
    codex: CommandPreset | None = None
    gemini: CommandPreset | None = None
    startup_seconds: float = Field(default=5.0, ge=0)
    """A command that fails within this many seconds without changing the worktree is
    taken as not installed or not logged in: the task fails without retries. 0 turns it off."""


class Config(_Section):
    board: BoardConfig = Field(default_factory=BoardConfig)
    worktree: WorktreeConfig = Field(default_factory=WorktreeConfig)
    team: TeamConfig = Field(default_factory=TeamConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    claude_code: ClaudeCodeConfig = Field(default_factory=ClaudeCodeConfig)
    commands: CommandsConfig = Field(default_factory=CommandsConfig)
    hooks: HooksConfig = Field(default_factory=HooksConfig)

    @classmethod
    def load(cls, root: Path, environ: dict[str, str] | None = None,
             overrides: dict[str, dict[str, Any]] | None = None) -> Config:
        data = _read_files(root)
        env = os.environ if environ is None else environ
        for section, model in cls.model_fields.items():
            sub = model.annotation
            assert sub is not None
            for key in sub.model_fields:  # type: ignore[union-attr]
                var = f"ORCH_{section}_{key}".upper()
                if var in env:
                    data.setdefault(section, {})[key] = _env_value(env[var])
        for section, values in (overrides or {}).items():
            data.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ConfigError(f"config {where}: {err['msg']}") from exc


def _env_value(raw: str) -> Any:
    """Environment values are TOML scalars or arrays when they parse as such, else strings."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _read_files(root: Path) -> dict[str, Any]:
    own = root / "orchestrator.toml"
    try:
        if own.exists():
            return tomllib.loads(own.read_text())
        py = root / "pyproject.toml"
        if py.exists():
            return dict(tomllib.loads(py.read_text()).get("tool", {}).get("orchestrator", {}))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read configuration: {exc}") from exc
    return {}
