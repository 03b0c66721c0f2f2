"""The agents' settings tools, over the same registry as ``orchestrator config``.

    config       list the settings, or get one (value in force, what is allowed): read-only,
                 so it never asks
    config_set   change a setting in the project's orchestrator.toml (the main checkout,
                 never the worktree); only keys marked ``agent_writable``. It is not
                 read-only, so the gate asks a person (``default``/``acceptEdits``), denies
                 it in ``plan`` mode, and allows it only where a rule or
                 ``bypassPermissions`` says so. Rules match the key:
                 ``ConfigSet(team.teammates)``.

A running daemon applies a live setting at once (`orchestrator.settings.live`).
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.tools.common import obj, prop
from orchestrator.config import Config
from orchestrator.errors import OrchestratorError
from orchestrator.layout import Layout
from orchestrator.settings.registry import Registry


class _SettingsTool:
    name = ""

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        key = args.get("key")
        return key if isinstance(key, str) else None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        layout = ctx.layout
        if layout is None:
            return ToolResult(f"{self.name}: no project in this run", is_error=True)
        try:
            return ToolResult(self.act(Registry(), layout, args))
        except OrchestratorError as exc:
            return ToolResult(f"{self.name}: {exc}", is_error=True)

    def act(self, reg: Registry, layout: Layout, args: dict[str, Any]) -> str:
        raise NotImplementedError


class ConfigTool(_SettingsTool):
    name = "config"
    read_only = True
    description = ("Read the team's settings: all of them (no key), or one key with its "
                   "description and allowed values. config_set changes the writable ones.")
    input_schema = obj([], key=prop("string", "A setting, e.g. team.teammates."))

    def act(self, reg: Registry, layout: Layout, args: dict[str, Any]) -> str:
        config = Config.load(layout.root)
        if not args.get("key"):
            return "\n".join(
                f"{s.key} = {_show(reg.value(config, s.key))}"
                + (" (writable)" if s.agent_writable else "") for s in reg)
        s = reg.get(args["key"])
        return (f"{s.key} = {_show(reg.value(config, s.key))}\n{s.description}\n"
                f"allowed: {s.allowed}; default: {_show(s.default)}; "
                f"{'applies live' if s.live else 'applies after a restart'}; "
                f"{'agents may set it (with approval)' if s.agent_writable else 'read-only'}")


class ConfigSetTool(_SettingsTool):
    name = "config_set"
    read_only = False
    description = ("Change a team setting in orchestrator.toml (a person approves). Only "
                   "settings marked writable in `config` can be set.")
    input_schema = obj(["key", "value"],
                       key=prop("string", "A writable setting, e.g. team.teammates."),
                       value={"description": "The new value (number, text, boolean, list)."})

    def act(self, reg: Registry, layout: Layout, args: dict[str, Any]) -> str:
        s = reg.writable(args["key"], by_agent=True)
        raw = args["value"]
        value = s.parse(raw) if isinstance(raw, str) else s.validate(raw)
        result = reg.set(layout.root, s.key, value)
        note = " (live)" if s.live else " (applies after a restart)"
        if result.shadowed_by:
            note = f" (but {result.shadowed_by} in the environment wins)"
        return f"set {s.key} = {_show(value)} in {result.path.name}{note}"


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
