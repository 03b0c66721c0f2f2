"""Project configuration: one pydantic model per component.

Read from ``orchestrator.toml`` (or ``[tool.orchestrator]`` in ``pyproject.toml``),
then environment variables ``ORCH_<SECTION>_<KEY>`` (e.g. ``ORCH_BOARD_LEASE_SECONDS=10``),
then whatever the CLI passes as overrides. Unknown keys and bad values are a
`ConfigError` naming the key and what is allowed.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.config_files import user_config_file as user_config_file
from orchestrator.errors import ConfigError
from orchestrator.events import EVENT_TYPES, HOOK_EVENTS

DEFAULT_LEASE_SECONDS = 30.0
DEFAULT_TEAMMATE_NAMES = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
    "ivan", "judy", "mallory", "niaj", "olivia", "peggy", "rupert", "sybil",
)


PermissionMode = Literal["default", "acceptEdits", "plan", "bypassPermissions"]
SandboxMode = Literal["auto", "on", "off"]


class _Section(BaseModel):
    """A config section. Field docstrings are the settings' descriptions
    (`orchestrator config list`); ``json_schema_extra`` on a field may override the
    section's `LIVE` / `SCOPE` and mark it ``agent_writable`` (see orchestrator.settings)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True,
                              use_attribute_docstrings=True)
    LIVE: ClassVar[bool] = False
    """Whether a running daemon applies a change of this section's settings."""
    SCOPE: ClassVar[str] = "project"
    """``project`` (orchestrator.toml) or ``user`` (~/.config/orchestrator/config.toml)."""


class BoardConfig(_Section):
    lease_seconds: float = Field(default=DEFAULT_LEASE_SECONDS, gt=0,
                                 json_schema_extra={"live": True})
    """How long a claim lives without a heartbeat before the lead requeues it."""
    max_attempts: int = Field(default=3, ge=1, json_schema_extra={"agent_writable": True})
    """Default for new tasks: failed or expired runs before a task is `failed`."""
    rescan_seconds: float = Field(default=10.0, gt=0)
    """Periodic rescan of `.tasks/` (and mailbox check of idle teammates), since
    file-system events can be lost; events wake waiters at once in between."""
    fsync: bool = True
    """Durable task writes (fsync of file and folder). Off only for throwaway boards
    (tests, benchmarks on tmpfs): a power cut may then lose the last writes."""
    url: str | None = None
    """The shared board of a team across machines: a PostgreSQL database
    (`postgresql://USER@HOST[:PORT]/DB`, set by `orchestrator init --board URL`). None: the
    file board in `.tasks/`. Never holds a password (PGPASSWORD or ~/.pgpass do)."""
    remote: str = "origin"
    """With a PostgreSQL board: the git remote task branches are based on and pushed to."""
    machine: str | None = None
    """With a PostgreSQL board: this clone's name on the shared board (leases, `status`);
    default: the host name and the clone's folder."""
    lock_wait_seconds: float = Field(default=2.0, gt=0)
    """With a PostgreSQL board: how long a write waits for a lock another participant
    holds before it gives up and tries again (PostgreSQL's `lock_timeout`)."""
    statement_seconds: float = Field(default=30.0, gt=0)
    """With a PostgreSQL board: the longest one statement may run (`statement_timeout`);
    a slower one is cancelled and tried again."""
    idle_in_transaction_seconds: float = Field(default=5.0, gt=0)
    """With a PostgreSQL board: a participant that stops inside a transaction (frozen,
    partitioned) is disconnected by the server after this long, so the locks it held
    are let go (`idle_in_transaction_session_timeout`)."""

    @field_validator("url")
    @classmethod
    def _no_password(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.startswith(("postgresql://", "postgres://")):
            raise ValueError("expected a PostgreSQL URL: postgresql://USER@HOST[:PORT]/DB")
        netloc = v.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
        if (":" in netloc.rsplit("@", 1)[0] and "@" in netloc) or "password=" in v.lower():
            raise ValueError("the URL holds a password: put it in PGPASSWORD or ~/.pgpass")
        return v


class SharedFolder(_Section):
    """One shared heavy folder (see `orchestrator.worktree.shared`)."""

    enabled: bool = True
    """`false` opts the folder out: each worktree then installs its own."""
    key_files: list[str] = Field(default_factory=list)
    """Files (globs, relative to the worktree) whose content keys the cache; default: the
    usual lockfiles of the folder's name (`package-lock.json` for `node_modules` …)."""
    link: Literal["hardlink", "symlink"] = "hardlink"
    """`hardlink`: a tree of hard links, private to each worktree; `symlink`: one link to
    the cache (instant, but every worktree then writes into the same folder)."""
    command: str | None = None
    """Builds the folder once, in the first worktree that needs a new cache entry
    (e.g. `npm ci`), when the main checkout has none with the same key files."""


def _check_relative(name: str, what: str) -> None:
    parts = name.split("/")
    if not name or name.startswith(("/", "~")) or any(p in ("", ".", "..", ".git")
                                                     for p in parts):
        raise ValueError(f"{what}: {name!r} must be a folder path inside the worktree")


class WorktreeConfig(_Section):
    root: str | None = None
    """Where worktrees live; default `.worktrees` in the repository."""
    branch_prefix: str = "task/"
    """Prefix of task branches (`task/task_001-<slug>`)."""
    base: str = "HEAD"
    """The ref new task branches start from (blocked tasks start from their blockers)."""
    setup: list[str] = Field(default_factory=list)
    """Shell commands run in each new worktree (e.g. `npm ci`)."""
    setup_timeout: float = Field(default=600.0, gt=0)
    """Seconds the setup commands of one worktree may take."""
    port_base: int = Field(default=20000, ge=1024, le=65000)
    """The first port handed out to worktrees (`ORCH_PORT_BASE`)."""
    port_block: int = Field(default=10, ge=1, le=1000)
    """Each live worktree gets `port_block` ports from `ORCH_PORT_BASE`."""
    shared_folders: list[str] = Field(default_factory=list)
    """Gitignored heavy folders (e.g. `node_modules`, `.venv`) linked into each worktree from
    a cache keyed by their lockfiles instead of being installed again."""
    shared: dict[str, SharedFolder] = Field(default_factory=dict)
    """Per shared folder: `[worktree.shared.node_modules]` with `key_files`, `link`,
    `command`, or `enabled = false` to opt that folder out."""
    sparse_paths: list[str] = Field(default_factory=list)
    """Sparse checkout of new worktrees: folders (cone mode) or, when any entry has a
    glob or `!`, gitignore-style patterns (non-cone). Empty: the full tree."""
    create_command: str | None = None
    """Hook isolation: a shell command that makes a task's workspace instead of
    `git worktree add`; gets the task as JSON on stdin, prints the path as its last line."""
    remove_command: str | None = None
    """Hook isolation: a shell command that removes a workspace, its path as the last
    argument (and JSON on stdin); default: delete the folder when it is in the worktree root."""
    hook_timeout: float = Field(default=300.0, gt=0)
    """Seconds the create or remove command may take."""

    @field_validator("shared_folders")
    @classmethod
    def _folder_names(cls, v: list[str]) -> list[str]:
        for name in v:
            _check_relative(name, "worktree.shared_folders")
        return v

    @field_validator("shared")
    @classmethod
    def _shared_names(cls, v: dict[str, SharedFolder]) -> dict[str, SharedFolder]:
        for name in v:
            _check_relative(name, "worktree.shared")
        return v


class TeamConfig(_Section):
    LIVE = True  # the lead resizes the team; teammates reload the rest before each task

    teammates: int = Field(default=2, ge=1, le=64, json_schema_extra={"agent_writable": True})
    """How many teammate processes the lead runs."""
    backend: str = "command"
    """The agent backend of tasks that do not name one (`command`, `anthropic`, …)."""
    command: str | None = None
    """The shell command the `command` backend runs in the worktree."""
    verify: str | None = None
    """The verification command (e.g. `pytest -q`); a non-zero exit sends the task to retry."""
    verify_timeout: float = Field(default=900.0, gt=0)
    """Seconds the verification command may take."""
    task_timeout: float = Field(default=3600.0, gt=0)
    """Wall-clock budget of one run of the backend; past it the process group is killed."""
    land: bool = False
    """Land each task once it reaches review (`orchestrator land`: merged one by one, each
    merge result verified with `verify` before the branch moves); `up --land` sets it."""
    names: list[str] = Field(default_factory=lambda: list(DEFAULT_TEAMMATE_NAMES),
                             json_schema_extra={"live": False})
    """Teammate names, in the order they are started."""
    log_format: Literal["text", "json"] = Field(default="text",
                                                json_schema_extra={"live": False})
    """How `.tasks/.run/daemon.log` is written: `text`, the console's readable lines, or
    `json`, one JSON object per line (for log tools)."""
    retry_backoff: float = Field(default=1.0, ge=0, le=3600)
    """Seconds before a failed task's next attempt starts, doubled for each attempt after
    that (at most 60 s). Errors that cannot change on a retry (a program not found, exit
    126/127, a backend not installed, credentials refused) fail the task at once instead."""


class ChecksConfig(_Section):
    LIVE = True

    retries: int = Field(default=2, ge=0, le=20)
    """How many times a task whose checks (`team.verify`) fail goes straight back to the
    same agent, with the check's output as feedback, before it waits for a person (status
    `failed` with the last output; `orchestrator retry ID -m …` runs it again)."""


class AgentConfig(_Section):
    LIVE = True  # teammates build each run from the settings of the moment

    model: str = Field(default="claude-sonnet-4-6", json_schema_extra={"agent_writable": True})
    """The model of the `anthropic` backend (a profile's `model` wins for its tasks)."""
    max_turns: int = Field(default=50, ge=1, json_schema_extra={"agent_writable": True})
    """Model calls per run before the run stops (budget)."""
    max_tokens: int = Field(default=8192, ge=1, json_schema_extra={"agent_writable": True})
    """Output tokens per model call."""
    max_total_tokens: int | None = Field(default=None, ge=1)
    """Token budget of one run (input, output and cache), none by default."""
    max_cost_usd: float | None = Field(default=None, gt=0)
    """Dollar budget of one run, none by default."""
    max_seconds: float | None = Field(default=None, gt=0)
    """Wall-clock budget of one run of the agent loop, none by default."""
    no_progress_repeats: int = Field(default=3, ge=0, le=100)
    """The same tool call with the same arguments and result this many times is no progress:
    the agent is told once, then stopped to wait for a person (0: off)."""
    no_progress_failures: int = Field(default=3, ge=0, le=100)
    """The same failing tool output this many times in a row (told once, then stopped; 0: off)."""
    no_progress_turns: int = Field(default=3, ge=0, le=100)
    """This many turns in a row without a new tool call or new text (told once, then
    stopped; 0: off)."""
    permission_mode: PermissionMode = "acceptEdits"
    """What tools may do when no rule decides (see `orchestrator.agent.permissions`)."""
    allow: list[str] = Field(default_factory=list)
    """Permission rules that allow, e.g. `Bash(npm test:*)`."""
    ask: list[str] = Field(default_factory=list)
    """Permission rules that ask a person (`orchestrator approve|deny`)."""
    deny: list[str] = Field(default_factory=list)
    """Permission rules that deny, whatever else allows (e.g. `Read(./.env)`)."""
    sandbox: SandboxMode = "auto"
    """`auto` (bubblewrap where it works), `on` (required) or `off`."""
    network: bool = False
    """Network access for bash inside the sandbox."""
    auto_allow_sandboxed_bash: bool = True
    """Let bash run without asking while the sandbox confines it (`default` and
    `acceptEdits` modes; deny and ask rules still apply), like Claude Code's
    `autoAllowBashIfSandboxed`. Off: every unmatched command is a permission request."""
    allow_unsandboxed_bash: bool = False
    """Let the permission mode (`bypassPermissions`) and a bare `Bash` allow rule run bash
    without asking while no sandbox confines it (`sandbox = "off"`, or `auto` without a
    working bubblewrap). Off: such commands ask a person, since unconfined they can read
    every file and process of this user; `Bash(...)` rules with a specifier still allow."""
    pass_env: list[str] = Field(default_factory=list)
    """Secret-looking environment variables that tools may still see."""


class SandboxConfig(_Section):
    LIVE = True  # each run builds its sandbox from the settings of the moment

    backends: bool = True
    """Run the `command` and `claude-code` backends (and the CLI presets) inside the task's
    sandbox, like the agent's bash (`agent.sandbox` says whether there is one). Off: they
    run on the host with the person's rights, as before issue 29."""
    network: bool = True
    """Network access for the backends and the setup commands inside the sandbox (the
    agent's own bash and the checks follow `agent.network`)."""
    read_only: list[str] = Field(default_factory=list)
    """More folders bound read-only into the sandbox, for toolchains not found from `PATH`
    (e.g. `~/.nvm`). A folder that holds a Unix socket is refused."""
    own_network: bool = False
    """With the network allowed, give the sandbox a network namespace of its own
    (slirp4netns, a NAT to the outside) instead of the host's: the host's loopback
    services and abstract Unix sockets are then out of reach (bubblewrap runner)."""
    runner: Literal["bwrap", "podman", "docker"] = "bwrap"
    """What the sandbox is made with: `bwrap` (bubblewrap, light, the default), or a full
    container per command with `podman` (or `docker`, not as root), with the same binds."""
    image: str | None = None
    """The container runners' image; default: the `image` of the main checkout's
    `.devcontainer/devcontainer.json` (with its `containerEnv`), else the host's system
    folders on an empty root."""


class McpConfig(_Section):
    LIVE = True  # servers start per run

    start_timeout: float = Field(default=30.0, gt=0)
    """Seconds a server may take to start and answer `initialize` before it is marked failed."""
    call_timeout: float = Field(default=300.0, gt=0)
    """Seconds one MCP tool call or resource read may take; past it the server is restarted."""
    user_plugin_dir: str | None = Field(default=None, json_schema_extra={"scope": "user"})
    """The user's plugin folder (`<dir>/<plugin>/.claude-plugin/plugin.json`);
    default `$XDG_CONFIG_HOME/orchestrator/plugins` (`~/.config/orchestrator/plugins`)."""


class HooksConfig(_Section):
    """Notification hooks: shell commands the lead runs on task events, the event as JSON
    on stdin. A hook that fails or runs past `timeout` is logged; it never blocks the team."""

    LIVE = True  # the lead runs them

    review: list[str] = Field(default_factory=list)
    """Run when a task is ready for review (event `task_completed`)."""
    failed: list[str] = Field(default_factory=list)
    """Run when a task has failed for good, no attempts left (`task_failed`, `lease_expired`
    or `task_requeued` with status `failed`)."""
    waiting: list[str] = Field(default_factory=list)
    """Run when a task waits for input (events `permission_requested`, `plan_submitted`,
    `no_progress`)."""
    budget: list[str] = Field(default_factory=list)
    """Run when a task has spent 80 % of a budget (`budget_warning`) and when it has spent
    it all and waits for `orchestrator resume` (`budget_reached`)."""
    events: dict[str, list[str]] = Field(default_factory=dict)
    """Any other event type (e.g. `merged`; docs/events.md lists them) -> commands. A name
    that is not an event type is refused, with the closest ones."""
    timeout: float = Field(default=30.0, gt=0)
    """Seconds one hook may run before its process group is killed."""

    @field_validator("events")
    @classmethod
    def _event_types(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for name in v:
            if name not in HOOK_EVENTS:
                raise ValueError(_not_a_hook_event(name))
        return v


HOOK_GROUPS = ("review", "failed", "waiting", "budget")
"""The hooks of `HooksConfig` named for what happened rather than for an event type."""


def _not_a_hook_event(name: str) -> str:
    """Why ``name`` cannot be a key of ``[hooks] events``, with the closest event types
    (the key shown escaped, and cut: the message is one line)."""
    if name in EVENT_TYPES:
        return f"{name!r} runs no hooks: a failing hook would run itself again"
    if name in HOOK_GROUPS:
        return f"{name!r} is not an event type: its commands go in [hooks] {name} = [...]"
    shown = repr(name if len(name) <= 60 else name[:60] + "…")
    close = difflib.get_close_matches(name[:60].lower(), sorted(HOOK_EVENTS), n=2)
    hint = f"; did you mean {' or '.join(close)}?" if close else " (docs/events.md lists them)"
    return f"{shown} is not an event type{hint}"


class BudgetConfig(_Section):
    """Spending limits beyond each task's own (`orchestrator.budget`): a run that reaches
    one stops like a task whose budget is spent, and waits for a person. Each run is capped
    by what was left when it started; runs going on at once may together pass a shared
    limit by up to one run's worth each."""

    LIVE = True  # teammates read them before each run

    plan_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Dollars all the tasks of one `orchestrator plan` may spend together."""
    plan_tokens: int | None = Field(default=None, gt=0)
    """Tokens all the tasks of one plan may spend together."""
    teammate_daily_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Dollars each teammate may spend per UTC day."""
    teammate_daily_tokens: int | None = Field(default=None, gt=0)
    """Tokens each teammate may spend per UTC day."""
    daily_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Dollars the whole board may spend per UTC day."""
    daily_tokens: int | None = Field(default=None, gt=0)
    """Tokens the whole board may spend per UTC day."""


class ClaudeCodeConfig(_Section):
    """The ``claude-code`` backend: the Claude Code CLI run headless in each worktree."""

    LIVE = True

    binary: str = Field(default="claude", json_schema_extra={"scope": "user"})
    """The CLI: a name looked up on PATH, or a path."""
    args: list[str] = Field(default_factory=list)
    """Extra arguments added to every run (e.g. `["--effort", "high"]`)."""
    model: str | None = None
    """`--model`; default: `agent.model` when set in the config, else Claude Code's own choice."""
    config_root: str | None = None
    """Where each teammate's `CLAUDE_CONFIG_DIR` lives (`<root>/<teammate>`);
    default `.tasks/.run/claude`."""
    user_config_dir: str | None = Field(default=None, json_schema_extra={"scope": "user"})
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

    LIVE = True

    cli: CommandPreset | None = None
    """The generic template the `cli` backend runs."""
    aider: CommandPreset | None = None
    """Replaces the built-in aider preset."""
    codex: CommandPreset | None = None
    """Replaces the built-in codex preset."""
    gemini: CommandPreset | None = None
    """Replaces the built-in gemini preset."""
    startup_seconds: float = Field(default=5.0, ge=0)
    """A command that fails within this many seconds without changing the worktree is
    taken as not installed or not logged in: the task fails without retries. 0 turns it off."""


class ProfileConfig(_Section):
    """An agent profile: ``[agents.<name>]`` in orchestrator.toml, or Claude Code's
    ``.claude/agents/<name>.md`` (see `orchestrator.profiles`)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True,
                              use_attribute_docstrings=True, populate_by_name=True)

    description: str = ""
    """When to use this agent."""
    tools: list[str] | None = None
    """The tools it may use (`Read, Grep, Bash`, `mcp__github__*`); default: all."""
    model: str | None = None
    """Its model; default `agent.model`."""
    permission_mode: PermissionMode | None = Field(
        default=None, validation_alias=AliasChoices("permission_mode", "permissionMode"))
    """Its permission mode; default `agent.permission_mode`."""
    max_turns: int | None = Field(default=None, ge=1,
                                  validation_alias=AliasChoices("max_turns", "maxTurns"))
    """Its turn budget; default `agent.max_turns`."""
    prompt: str = ""
    """Its system prompt (the body of the Markdown file)."""

    @field_validator("tools", mode="before")
    @classmethod
    def _tool_list(cls, v: Any) -> Any:
        return [t.strip() for t in v.split(",") if t.strip()] if isinstance(v, str) else v


class ForgeConfig(_Section):
    """The forge where the team reviews in pull requests (docs/forge.md)."""

    kind: Literal["none", "github"] = "none"
    """`github`: each kept task becomes a pull request on `repo`; CI results and review
    comments go back to its agent; a merge there is a merge on the board."""
    repo: str | None = None
    """The repository on the forge, `owner/name`."""
    api_url: str = "https://api.github.com"
    """The forge's API (GitHub Enterprise: `https://HOST/api/v3`)."""
    token_file: str | None = None
    """A file holding the token (else `GITHUB_TOKEN`, `GH_TOKEN`, or `gh auth token`)."""
    remote: str = "origin"
    """The git remote that is the forge's repository: task branches are pushed there."""
    draft: bool = False
    """Open pull requests as drafts, marked ready when their checks pass."""
    mention: str | None = None
    """A name that, in a comment by someone with write access, sends the task back to its
    agent (besides `/orchestrator`), e.g. `@our-bot`."""
    issue_label: str | None = "orchestrator"
    """Open issues with this label become tasks (none: issues are not read)."""
    merge_method: Literal["merge", "squash", "rebase"] = "merge"
    """How `orchestrator merge`/`land` merge a pull request through the forge's API."""
    poll_seconds: float = Field(default=4.0, ge=1, le=3600)
    """How often the lead asks the forge what changed (conditional requests: an unchanged
    answer does not count against the rate limit); doubled while nothing changes, up to
    `poll_max_seconds`."""
    poll_max_seconds: float = Field(default=120.0, ge=1, le=86400)
    """The longest wait between polls while nothing changes."""
    webhook_secret_file: str | None = None
    """A file holding the webhook's secret: `orchestrator ui` then takes the forge's
    webhooks at `/forge/webhook` (HMAC-SHA256 checked) and the lead acts on them at once."""
    board_url: str | None = None
    """The web board's address people reach (`https://host:8321`), linked from each pull
    request's body."""


class Config(_Section):
    board: BoardConfig = Field(default_factory=BoardConfig)
    worktree: WorktreeConfig = Field(default_factory=WorktreeConfig)
    team: TeamConfig = Field(default_factory=TeamConfig)
    checks: ChecksConfig = Field(default_factory=ChecksConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    claude_code: ClaudeCodeConfig = Field(default_factory=ClaudeCodeConfig)
    commands: CommandsConfig = Field(default_factory=CommandsConfig)
    hooks: HooksConfig = Field(default_factory=HooksConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    forge: ForgeConfig = Field(default_factory=ForgeConfig)
    agents: dict[str, ProfileConfig] = Field(default_factory=dict)
    """Agent profiles by name (not a settings section: see `orchestrator.profiles`)."""

    @classmethod
    def load(cls, root: Path, environ: dict[str, str] | None = None,
             overrides: dict[str, dict[str, Any]] | None = None) -> Config:
        env = os.environ if environ is None else environ
        data = _merge(_read_toml(user_config_file(env)), _read_files(root))
        for section, model in cls.model_fields.items():
            sub = model.annotation
            if not (isinstance(sub, type) and issubclass(sub, BaseModel)):
                continue  # `agents`: tables by name, no environment variables
            for key in sub.model_fields:
                var = f"ORCH_{section}_{key}".upper()
                if var in env:
                    data.setdefault(section, {})[key] = _env_value(env[var])
        for section, values in (overrides or {}).items():
            data.setdefault(section, {}).update({k: v for k, v in values.items() if v is not None})
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            loc, msg = first_problem(exc)
            where = ".".join(str(p) for p in loc)
            raise ConfigError(f"config {where}{_where(root, loc)}: {msg}") from exc


def first_problem(exc: ValidationError) -> tuple[tuple[int | str, ...], str]:
    """Where the first error of ``exc`` is and what it says: our validators' messages as
    they wrote them, without pydantic's "Value error, " before them."""
    err = exc.errors()[0]
    cause = err.get("ctx", {}).get("error")
    return err["loc"], str(cause) if err["type"] == "value_error" and cause else err["msg"]


def _env_value(raw: str) -> Any:
    """Environment values are TOML scalars or arrays when they parse as such, else strings."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(_config_text(path)) if path.is_file() else {}
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read configuration {path}: {exc}") from exc


def _config_text(path: Path) -> str:
    """A config file's text (a regular file only: a FIFO named orchestrator.toml must not
    hang every command)."""
    from orchestrator.fsutil import read_regular

    return read_regular(path)


def _merge(low: dict[str, Any], high: dict[str, Any]) -> dict[str, Any]:
    """``high`` over ``low``, section by section."""
    out = dict(low)
    for key, value in high.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def _read_files(root: Path) -> dict[str, Any]:
    own = root / "orchestrator.toml"
    py = root / "pyproject.toml"
    path = own if own.exists() else py
    try:
        if own.exists():
            return tomllib.loads(_config_text(own))
        if py.exists():
            return dict(tomllib.loads(_config_text(py)).get("tool", {}).get("orchestrator", {}))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read configuration {path}: {exc}") from exc
    return {}


def _where(root: Path, loc: tuple[Any, ...]) -> str:
    """`` in FILE, line N`` for the project file line that sets ``section.key`` (``key =``,
    or the header of its table: ``[hooks.events]``), if any."""
    if len(loc) < 2:
        return ""
    key, table = re.escape(str(loc[1])), re.escape(f"{loc[0]}.{loc[1]}")
    sets = re.compile(rf"\s*({key}\s*=|\[\s*(tool\.orchestrator\.)?{table}\s*[\].])")
    for path in (root / "orchestrator.toml", root / "pyproject.toml"):
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        for n, line in enumerate(lines, 1):
            if sets.match(line):
                return f" in {path}, line {n}"
    return ""
