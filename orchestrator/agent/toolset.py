"""The tools of one run, all behind the one permission gate.

``Toolset.call`` is the only way the loop runs a tool: it checks the arguments
against the tool's schema, confines paths to the worktree, asks the gate, runs
the tool, masks known secret values in its result (`orchestrator.secrets`),
spills a large result to a file, and records a ``tool_called`` event
(and ``file_modified`` for file writes). A ``deny`` comes back as an error
result naming the rule; an ``ask`` raises `PermissionAsked` unless the call was
already ``approved`` by a person (a deny rule still wins then).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from orchestrator.agent.base import PermissionAsked, Tool, ToolContext, ToolResult
from orchestrator.agent.paths import PathEscape, confine, shown
from orchestrator.agent.permissions import Decision, PermissionGate, edits_files
from orchestrator.agent.spill import RESULT_CAP_CHARS, spill
from orchestrator.errors import ConfigError
from orchestrator.events import UNSET, AnyEvent, FileModified, ToolCalled
from orchestrator.secrets import redact

EVENT_SUBJECT_CHARS = 500
"""A longer subject (a heredoc command) is cut in the event; the transcript has it all."""
_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str, "integer": int, "number": (int, float), "boolean": bool,
    "array": list, "object": dict,
}


class Toolset:
    def __init__(self, tools: Iterable[Tool], gate: PermissionGate, ctx: ToolContext, *,
                 result_cap: int = RESULT_CAP_CHARS) -> None:
        self.gate = gate
        self.ctx = ctx
        self.result_cap = result_cap
        self._builtin: dict[str, Tool] = {}
        self._added: dict[str, Tool] = {}
        for tool in tools:
            self._register(tool, self._builtin)
        if ctx.gate is None:
            ctx.gate = gate

    def add(self, tool: Tool) -> None:
        """Add a tool after construction (MCP tools); listed after the built-ins, by name."""
        self._register(tool, self._added)

    def keep(self, wanted: Callable[[str], bool]) -> list[str]:
        """Drop every tool whose name ``wanted`` rejects (an agent profile's tool list);
        returns the names dropped."""
        dropped = [n for n in self.names() if not wanted(n)]
        for name in dropped:
            self._builtin.pop(name, None)
            self._added.pop(name, None)
        return dropped

    def _register(self, tool: Tool, into: dict[str, Tool]) -> None:
        if tool.name in self._builtin or tool.name in self._added:
            raise ConfigError(f"two tools are named {tool.name!r}")
        into[tool.name] = tool

    def _ordered(self) -> list[Tool]:
        return [*self._builtin.values(), *(self._added[n] for n in sorted(self._added))]

    def names(self) -> list[str]:
        return [t.name for t in self._ordered()]

    def get(self, name: str) -> Tool | None:
        return self._builtin.get(name) or self._added.get(name)

    def schemas(self) -> list[dict[str, Any]]:
        """Tool definitions for the Messages API, in a stable order (the prompt cache
        depends on it)."""
        return [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in self._ordered()]

    def call(self, name: str, args: Any, *, approved: bool = False) -> ToolResult:
        tool = self.get(name)
        if tool is None:
            return ToolResult(f"unknown tool {name!r}; available: {', '.join(self.names())}",
                              is_error=True)
        problem = check_args(tool.input_schema, args)
        if problem is None:
            problem = self._confinement(tool, args)
        if problem is not None:
            self._event(tool, None, "invalid", True)
            return ToolResult(f"{name}: {problem}", is_error=True)
        subject = tool.permission_subject(args)
        decision = self.gate.check(tool, args)
        if decision.behavior == "deny":
            self._event(tool, subject, "deny", True, decision)
            return ToolResult(f"permission denied for {name}: {decision.reason}", is_error=True)
        if decision.behavior == "ask" and not approved:
            self._event(tool, subject, "ask", False, decision)
            raise PermissionAsked(uuid.uuid4().hex[:12], name, subject)
        try:
            result = tool.run(args, self.ctx)
        except Exception as exc:  # a tool bug must not end the run; the model sees it
            result = ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True)
        content = spill(redact(result.content), self.ctx.spill_dir, name, cap=self.result_cap)
        result = ToolResult(content, result.is_error)
        self._event(tool, subject, "approved" if decision.behavior == "ask" else "allow",
                    result.is_error, decision)
        if edits_files(tool) and not result.is_error and subject:
            path = confine(self.ctx.cwd, subject)
            self._emit(FileModified(tool=name, path=shown(path, self.ctx.cwd)))
        return result

    def _confinement(self, tool: Tool, args: dict[str, Any]) -> str | None:
        arg = getattr(tool, "path_arg", None)
        if arg is None or not args.get(arg):
            return None
        extra = [self.ctx.spill_dir] if tool.read_only and self.ctx.spill_dir else []
        try:
            confine(self.ctx.cwd, args[arg], extra_roots=extra)
        except PathEscape as exc:
            return str(exc)
        return None

    def _event(self, tool: Tool, subject: str | None, decision: str, is_error: bool,
               why: Decision | None = None) -> None:
        if subject is not None and len(subject) > EVENT_SUBJECT_CHARS:
            subject = subject[:EVENT_SUBJECT_CHARS] + "…"
        self._emit(ToolCalled(tool=tool.name, subject=subject, decision=decision,
                              is_error=is_error,
                              rule=why.rule if why is not None and why.rule else UNSET))

    def _emit(self, event: AnyEvent) -> None:
        if self.ctx.events is not None:
            self.ctx.events.emit(event, self.ctx.task_id, actor=self.ctx.teammate)


def check_args(schema: dict[str, Any], value: Any, where: str = "arguments") -> str | None:
    """The first way ``value`` breaks the (simple) JSON Schema, or None when it fits."""
    return next((p for check in _CHECKS if (p := check(schema, value, where))), None)


def _value(schema: dict[str, Any], value: Any, where: str) -> str | None:
    kind = schema.get("type")
    py = _JSON_TYPES.get(kind) if isinstance(kind, str) else None
    if py is not None and (not isinstance(value, py)
                           or (kind in ("integer", "number") and isinstance(value, bool))):
        return f"{where} must be of type {kind}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where} must be one of {', '.join(map(str, schema['enum']))}, got {value!r}"
    if "minimum" in schema and isinstance(value, int | float) and value < schema["minimum"]:
        return f"{where} must be at least {schema['minimum']}, got {value}"
    if "maximum" in schema and isinstance(value, int | float) and value > schema["maximum"]:
        return f"{where} must be at most {schema['maximum']}, got {value}"
    return None


def _object(schema: dict[str, Any], value: Any, where: str) -> str | None:
    if not isinstance(value, dict):
        return None
    props = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in value]
    if missing:
        return f"{where}: missing required {', '.join(missing)}"
    extra = sorted(set(value) - set(props))
    if extra and schema.get("additionalProperties") is False:
        return f"{where}: unknown {', '.join(extra)} (allowed: {', '.join(props)})"
    return next((p for key, sub in props.items()
                 if key in value and (p := check_args(sub, value[key], key))), None)


def _array(schema: dict[str, Any], value: Any, where: str) -> str | None:
    if not isinstance(value, list) or "items" not in schema:
        return None
    if len(value) < schema.get("minItems", 0):
        return f"{where} needs at least {schema['minItems']} item(s)"
    return next((p for i, item in enumerate(value)
                 if (p := check_args(schema["items"], item, f"{where}[{i}]"))), None)


_CHECKS: tuple[Callable[[dict[str, Any], Any, str], str | None], ...] = (
    _value, _object, _array)
"""The schema keywords the tools use (type, enum, bounds; properties; items), in order."""
