"""What a Claude Code run is configured with: orchestrator's permission rules and mode as
Claude Code's arguments, the project's MCP servers as an ``--mcp-config`` file, the
teammate's own ``CLAUDE_CONFIG_DIR`` seeded from the user's, and the task's turn and
dollar budget.

Control files are the person's: settings, permission rules, MCP servers and agent
profiles are read from the main checkout (``project``), never from the task's worktree,
which is Claude Code's working directory and the agent's to write. So Claude Code runs
with ``--setting-sources user`` (it reads no ``.claude/settings*.json`` of its working
directory), ``--settings FILE`` holding the main checkout's project settings,
``--mcp-config FILE --strict-mcp-config`` always (its working directory's ``.mcp.json``
is ignored even when the project has no server) and ``--agents`` with the main
checkout's profiles."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from orchestrator.config import Config
from orchestrator.fsutil import atomic_write, read_regular
from orchestrator.layout import Layout
from orchestrator.model import Task

ALL_TOOLS = ["Bash", "Edit", "Write", "MultiEdit", "NotebookEdit", "Read", "Glob", "Grep",
             "LS", "WebFetch", "WebSearch", "Task", "TodoWrite"]
"""What ``bypassPermissions`` allows when Claude Code refuses that mode (as root)."""
TOOL_NAMES = {t.lower(): t for t in ALL_TOOLS} | {"multi_edit": "MultiEdit",
                                                   "notebook_edit": "NotebookEdit"}
USER_FILES = (".credentials.json", "settings.json", "CLAUDE.md", "agents", "commands",
              "skills", "plugins", "hooks", "output-styles")
"""Linked from the user's folder: login, settings, memory, extensions (never copied)."""

PROJECT_SETTINGS = (".claude/settings.json", ".claude/settings.local.json")


def permission_args(config: Config, project: Path, *, root: bool | None = None,
                    into: Path | None = None) -> tuple[list[str], dict[str, list[str]]]:
    """(arguments, rules by behaviour) for orchestrator's rules and mode, in Claude Code's
    terms; the allow rules are left to the caller (approvals add to them). ``project`` is
    the main checkout, whose project settings go to ``into/project-settings.json``
    (passed with ``--settings``; ``into=None``: the ask rules as inline JSON only)."""
    from orchestrator.agent.permissions import PermissionGate

    gate = PermissionGate.from_sources(config.agent, project)
    rules: dict[str, list[str]] = {"allow": [], "ask": [], "deny": []}
    for rule in gate.rules:
        name = rule.tool if rule.tool.startswith("mcp__") else TOOL_NAMES.get(
            rule.tool.lower(), rule.tool)
        text = f"{name}({rule.specifier})" if rule.specifier is not None else name
        if text not in rules[rule.behavior]:
            rules[rule.behavior].append(text)
    mode = gate.mode
    unconfined = not config.agent.allow_unsandboxed_bash  # orchestrator never sandboxes it
    if mode == "bypassPermissions" and (unconfined or (
            os.geteuid() == 0 if root is None else root)):
        # Claude Code refuses to bypass as root; and its Bash runs unconfined, so unless
        # the user opted in (agent.allow_unsandboxed_bash) it must ask: allow every other
        # tool instead
        mode = "acceptEdits"
        rules["allow"] += [t for t in ALL_TOOLS if t not in rules["allow"]
                           and not (unconfined and t == "Bash")]
    if unconfined:
        rules["allow"] = [r for r in rules["allow"] if r != "Bash"]  # bare: asks instead
    args = ["--permission-mode", mode, "--setting-sources", "user"]
    settings = project_settings(project)
    if rules["ask"]:
        settings["permissions"] = {"ask": rules["ask"]}
    if into is not None:
        path = into / "project-settings.json"
        atomic_write(path, json.dumps(settings, indent=2).encode())
        path.chmod(0o600)
        args += ["--settings", str(path)]
    elif settings:
        args += ["--settings", json.dumps(settings)]
    if rules["deny"]:
        args += ["--disallowedTools", *rules["deny"]]
    return args, rules


def project_settings(project: Path) -> dict[str, Any]:
    """The main checkout's Claude Code project settings (``settings.local.json`` over
    ``settings.json``, key by key) without their permission rules, which reach Claude
    Code as orchestrator's (`permission_args`). An unreadable file counts as empty."""
    merged: dict[str, Any] = {}
    for name in PROJECT_SETTINGS:
        try:
            data = json.loads(read_regular(project / name))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            merged.update(data)
    merged.pop("permissions", None)
    return merged


def agents_arg(config: Config, project: Path) -> list[str]:
    """``--agents JSON`` with the main checkout's agent profiles (none: no args)."""
    from orchestrator.profiles import load_profiles

    agents: dict[str, Any] = {}
    for name, profile in load_profiles(project, config).found.items():
        s = profile.settings
        entry: dict[str, Any] = {"description": s.description or name, "prompt": s.prompt}
        if s.tools is not None:
            entry["tools"] = s.tools
        if s.model:
            entry["model"] = s.model
        agents[name] = entry
    return ["--agents", json.dumps(agents)] if agents else []


def config_dir(layout: Layout, config: Config, teammate: str,
               environ: dict[str, str] | None = None) -> Path:
    """The teammate's ``CLAUDE_CONFIG_DIR``, seeded from the user's Claude Code folder.

    The user's credentials, settings, memory and extensions are symlinked (their
    login and later changes apply; a refreshed token is seen by all); Claude
    Code's mutable state file ``.claude.json`` is copied once, so instances never
    share it. ``projects/`` (where sessions live) is shared by the teammates, so
    a task retried by another teammate still resumes its conversation.
    """
    env = os.environ if environ is None else environ
    cc = config.claude_code
    root = Path(cc.config_root).expanduser() if cc.config_root else layout.run / "claude"
    home = Path(env.get("HOME") or Path.home())
    user = Path(cc.user_config_dir or env.get("CLAUDE_CONFIG_DIR") or home / ".claude")
    user = user.expanduser()
    mine = root / teammate
    (root / "projects").mkdir(parents=True, exist_ok=True)
    mine.mkdir(parents=True, exist_ok=True)
    _link(mine / "projects", Path("..") / "projects")
    for name in USER_FILES:
        if (user / name).exists() and user.resolve() != mine.resolve():
            _link(mine / name, (user / name).resolve())
    state = mine / ".claude.json"
    if not state.exists():
        for seed in (user / ".claude.json", home / ".claude.json"):
            if seed.is_file():
                with contextlib.suppress(OSError):
                    atomic_write(state, seed.read_bytes())
                    state.chmod(0o600)
                break
    return mine


def linked_files(cdir: Path, *, login: bool) -> list[str]:
    """What the person's files linked into ``cdir`` point at (for the sandbox to bind
    read-only); their login (``.credentials.json``) only with ``login`` — when the run
    has a proxy's token it needs none."""
    found = []
    for name in USER_FILES:
        link = cdir / name
        if link.is_symlink() and (login or name != ".credentials.json"):
            target = link.resolve()
            if target.exists():
                found.append(str(target))
    return found


def _link(path: Path, target: Path) -> None:
    """Point ``path`` at ``target``; an existing regular file (Claude Code's own) is kept."""
    if path.is_symlink():
        if Path(os.readlink(path)) == target:
            return
        path.unlink()
    elif path.exists():
        return
    with contextlib.suppress(FileExistsError):
        path.symlink_to(target)


def mcp_args(config: Config, project: Path, into: Path) -> list[str]:
    """``--mcp-config FILE --strict-mcp-config`` for the main checkout's servers (an empty
    list when it has none: the worktree's ``.mcp.json`` is never read)."""
    from orchestrator.mcp.config import load_setup

    udir = Path(config.mcp.user_plugin_dir).expanduser() if config.mcp.user_plugin_dir else None
    servers: dict[str, Any] = {}
    for s in load_setup(project, udir).servers:
        if s.error:
            continue
        if s.transport == "stdio":
            entry: dict[str, Any] = {"command": s.command, "args": s.args, "env": s.env}
            if s.cwd:
                entry["cwd"] = s.cwd
        else:
            entry = {"type": s.transport, "url": s.url, "headers": s.headers}
        servers[s.key] = entry
    path = into / "mcp.json"
    atomic_write(path, json.dumps({"mcpServers": servers}, indent=2).encode())
    path.chmod(0o600)  # expanded ${VAR}s may be secrets
    return ["--mcp-config", str(path), "--strict-mcp-config"]


def mcp_paths(cdir: Path) -> list[str]:
    """The existing absolute paths the MCP config written in ``cdir`` names (servers'
    programs, arguments, folders): bound read-only into the sandbox, where the CLI
    starts them. The person's configuration (not the agent's) names them."""
    try:
        servers = json.loads((cdir / "mcp.json").read_text())["mcpServers"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    found = []
    for entry in servers.values() if isinstance(servers, dict) else []:
        words = [entry.get("command"), entry.get("cwd"), *(entry.get("args") or [])] \
            if isinstance(entry, dict) else []
        for w in words:
            if isinstance(w, str) and os.path.isabs(w) and os.path.exists(w):
                found.append(w)
    return found


def budget(task: Task, config: Config) -> tuple[int, float | None]:
    """(max turns, dollars left) from the task's metadata, else ``[agent]``."""
    meta = task.metadata
    turns = meta.get("max_turns") if isinstance(meta.get("max_turns"), int) else None
    cost = meta.get("max_cost_usd")
    cost = cost if isinstance(cost, int | float) else config.agent.max_cost_usd
    if task.budget.usd is not None:  # the task's own budget over all its runs
        cost = task.budget.usd if cost is None else min(float(cost), task.budget.usd)
    left = None if cost is None else max(0.0, float(cost) - task.usage.cost_usd)
    return turns or config.agent.max_turns, left
