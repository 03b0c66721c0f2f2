"""Which MCP servers a project uses: `.mcp.json` and plugin manifests.

Sources, in this order (which is also the order names are given out in):

1. ``<project>/.mcp.json`` — Claude Code's format::

       {"mcpServers": {
           "files": {"command": "npx", "args": ["-y", "server"], "env": {"KEY": "${KEY}"}},
           "api":   {"type": "http", "url": "https://…/mcp", "headers": {"Authorization": "…"}}}}

2. the project's plugin, ``<project>/.claude-plugin/plugin.json``;
3. the user's plugins, ``<user_plugin_dir>/<plugin>/.claude-plugin/plugin.json`` (sorted).

A plugin manifest's ``mcpServers`` is an inline mapping, a path (or list of
paths) to such a file relative to the plugin, or absent (then the plugin's own
``.mcp.json`` when there is one). ``${VAR}`` and ``${VAR:-default}`` are expanded
in command, args, env, url and headers; plugins also get ``${CLAUDE_PLUGIN_ROOT}``.

Nothing here raises for a bad file or server: one broken entry must not take the
others down, so problems are collected (`McpSetup.problems`, `ServerSpec.error`)
and shown by ``orchestrator mcp-status``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orchestrator.fsutil import read_regular

MCP_JSON = ".mcp.json"
PLUGIN_MANIFEST = Path(".claude-plugin") / "plugin.json"
NAME_RE = re.compile(r"[^A-Za-z0-9_-]")
VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
MAX_TOOL_NAME = 64
"""The Messages API's limit on a tool name."""

Transport = Literal["stdio", "http", "sse"]
TRANSPORT_ALIASES: dict[str, Transport] = {
    "stdio": "stdio", "http": "http", "streamable-http": "http", "streamable_http": "http",
    "sse": "sse",
}


@dataclass
class ServerSpec:
    """One configured server, after expansion. ``key`` is its unique, name-safe name."""

    name: str
    key: str
    plugin: str | None
    """The plugin that declares it; None for the project's ``.mcp.json``."""
    source: Path
    transport: Transport = "stdio"
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    """Why this entry cannot be used (bad field, unset variable); it is then never started."""
    renamed: str | None = None
    """Why ``key`` differs from the sanitised name (a collision), for the report."""


@dataclass
class McpSetup:
    servers: list[ServerSpec] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Files that could not be read at all (bad JSON, wrong shape)."""


def default_user_plugin_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "orchestrator" / "plugins"


def load_setup(root: Path, user_plugin_dir: Path | None = None,
               environ: Mapping[str, str] | None = None) -> McpSetup:
    """Every server the project and the user's plugins declare, with unique keys."""
    env = dict(os.environ if environ is None else environ)
    setup = McpSetup()
    seen_files: set[Path] = set()
    project_file = root / MCP_JSON
    if project_file.is_file():
        seen_files.add(project_file.resolve())
        _add_file(setup, project_file, None, env)
    plugin_roots = [root] if (root / PLUGIN_MANIFEST).is_file() else []
    udir = user_plugin_dir if user_plugin_dir is not None else default_user_plugin_dir(env)
    if udir.is_dir():
        plugin_roots += sorted(p for p in udir.iterdir() if (p / PLUGIN_MANIFEST).is_file())
    for proot in plugin_roots:
        _add_plugin(setup, proot, env, seen_files)
    assign_keys(setup.servers)
    return setup


def _read_object(path: Path, setup: McpSetup) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None with the reason added to ``setup.problems``."""
    try:
        data = json.loads(read_regular(path))
    except (OSError, UnicodeDecodeError) as exc:
        setup.problems.append(f"{path}: cannot read: {exc}")
        return None
    except json.JSONDecodeError as exc:
        setup.problems.append(f"{path}: invalid JSON: {exc.msg} at line {exc.lineno}")
        return None
    if not isinstance(data, dict):
        setup.problems.append(f"{path}: expected a JSON object")
        return None
    return data


def _add_plugin(setup: McpSetup, proot: Path, env: dict[str, str], seen: set[Path]) -> None:
    manifest_path = proot / PLUGIN_MANIFEST
    manifest = _read_object(manifest_path, setup)
    if manifest is None:
        return
    name = str(manifest.get("name") or proot.name)
    penv = {**env, "CLAUDE_PLUGIN_ROOT": str(proot)}
    decl = manifest.get("mcpServers", MCP_JSON if (proot / MCP_JSON).is_file() else None)
    if decl is None:
        return
    if isinstance(decl, dict):
        _add_servers(setup, decl, name, manifest_path, penv)
        return
    paths = [decl] if isinstance(decl, str) else decl
    if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
        setup.problems.append(f"{manifest_path}: mcpServers must be an object, a path or a list")
        return
    for rel in paths:
        path = (proot / _expand(rel, penv)).resolve()
        if path in seen:
            continue  # the project's own .mcp.json, already loaded
        seen.add(path)
        if not path.is_file():
            setup.problems.append(f"{manifest_path}: mcpServers file not found: {rel}")
            continue
        _add_file(setup, path, name, penv)


def _add_file(setup: McpSetup, path: Path, plugin: str | None, env: dict[str, str]) -> None:
    data = _read_object(path, setup)
    if data is None:
        return
    servers = data.get("mcpServers", data if plugin else None)
    if servers is None:
        setup.problems.append(f"{path}: no \"mcpServers\" object")
        return
    if not isinstance(servers, dict):
        setup.problems.append(f"{path}: \"mcpServers\" must be an object")
        return
    _add_servers(setup, servers, plugin, path, env)


def _add_servers(setup: McpSetup, servers: dict[str, Any], plugin: str | None, source: Path,
                 env: dict[str, str]) -> None:
    for name, entry in servers.items():
        spec = ServerSpec(name=name, key=name, plugin=plugin, source=source)
        try:
            _fill(spec, entry, env)
        except ValueError as exc:
            spec.error = str(exc)
        setup.servers.append(spec)


def _fill(spec: ServerSpec, entry: Any, env: dict[str, str]) -> None:
    if not isinstance(entry, dict):
        raise ValueError("expected an object with \"command\" or \"url\"")
    kind = entry.get("type") or ("stdio" if "command" in entry or "url" not in entry else "http")
    transport = TRANSPORT_ALIASES.get(str(kind))
    if transport is None:
        raise ValueError(f"unknown type {kind!r} (use stdio, http or sse)")
    spec.transport = transport
    if transport == "stdio":
        command = entry.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError("a stdio server needs \"command\" (a string)")
        spec.command = _expand(command, env)
        spec.args = [_expand(a, env) for a in _str_list(entry.get("args", []), "args")]
        spec.env = {k: _expand(v, env) for k, v in _str_map(entry.get("env", {}), "env").items()}
        if entry.get("cwd") is not None:
            spec.cwd = _expand(str(entry["cwd"]), env)
    else:
        url = entry.get("url")
        if not isinstance(url, str) or not url.strip():
            raise ValueError(f"a {transport} server needs \"url\" (a string)")
        spec.url = _expand(url, env)
        spec.headers = {k: _expand(v, env)
                        for k, v in _str_map(entry.get("headers", {}), "headers").items()}


def _str_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
        raise ValueError(f"\"{what}\" must be a list of strings")
    return [str(v) for v in value]


def _str_map(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str | int | float | bool)
                                              for v in value.values()):
        raise ValueError(f"\"{what}\" must be an object of strings")
    return {str(k): str(v) for k, v in value.items()}


def expand(text: str, environ: Mapping[str, str]) -> str:
    """``${VAR}`` and ``${VAR:-default}`` from ``environ``; an unset ``${VAR}`` is a ValueError.

    As in the shell, ``:-`` also applies when the variable is set but empty.
    """
    def sub(m: re.Match[str]) -> str:
        name, default = m.group(1), m.group(2)
        value = environ.get(name)
        if value:
            return value
        if default is not None:
            return default
        if value is not None:
            return value
        raise ValueError(f"environment variable {name} is not set (or write ${{{name}:-default}})")
    return VAR_RE.sub(sub, text)


_expand = expand


def sanitize(name: str) -> str:
    """Characters outside ``[A-Za-z0-9_-]`` become ``_``; never empty."""
    return NAME_RE.sub("_", name) or "_"


def unique(name: str, taken: set[str], limit: int | None = None) -> str:
    """``name``, or ``name_2``, ``name_3`` … : the first one not in ``taken`` (then added).

    With ``limit``, a long name is cut and given a short hash of the whole, so two
    long names that share a prefix stay apart.
    """
    if limit is not None and len(name) > limit:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[:limit - 9]}_{digest}"
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        suffix = f"_{n}"
        base = name if limit is None else name[:limit - len(suffix)]
        candidate = base + suffix
    taken.add(candidate)
    return candidate


def assign_keys(servers: list[ServerSpec]) -> None:
    """Give every server a unique, name-safe key, first come first served (config order)."""
    taken: set[str] = set()
    for spec in servers:
        clean = sanitize(spec.name)
        spec.key = unique(clean, taken)
        if spec.key != clean:
            spec.renamed = f"name {clean!r} already taken: tools are mcp__{spec.key}__*"
