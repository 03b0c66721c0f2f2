"""Claude Code's ``--output-format stream-json``, parsed as it arrives: the session id,
``tool_called`` and ``file_modified`` events, live usage and cost, the final result and
its permission denials, and the no-progress watch at each turn's end."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.agent.paths import shown
from orchestrator.agent.progress import Call, NoProgress, ProgressWatch
from orchestrator.events import AnyEvent, FileModified, ToolCalled
from orchestrator.model import Usage
from orchestrator.protocols import RunContext
from orchestrator.transcript import (
    ClaudeCode,
    Error,
    LogEntry,
    NoProgressWarning,
    Output,
    RunPaused,
)

FILE_TOOLS = {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path",
              "NotebookEdit": "notebook_path"}
LOG_STRING_CHARS = 4000


@dataclass
class Denial:
    tool: str
    input: dict[str, Any]

    @property
    def subject(self) -> str | None:
        for key in ("command", "file_path", "notebook_path", "url", "pattern"):
            if isinstance(self.input.get(key), str):
                return str(self.input[key])
        return json.dumps(self.input)[:200] if self.input else None

    def denied_by(self, rules: list[str]) -> str | None:
        """The deny rule (in Claude Code's terms) that covers this call, if any: those
        are the user's final word, never asked again."""
        from orchestrator.agent.permissions import Rule
        from orchestrator.agent.shell_parse import line_matches

        cmd = self.input.get("command")
        for text in rules:
            rule = Rule.parse(text, "deny", "claude-code")
            if rule.tool != self.tool:
                continue
            spec = rule.specifier
            if spec is None or spec in ("*", self.subject):
                return text
            if self.tool == "Bash" and isinstance(cmd, str) and line_matches(spec, cmd):
                return text
        return None

    @property
    def rule(self) -> str:
        """The narrowest rule that allows this call again."""
        cmd = self.input.get("command")
        if self.tool == "Bash" and isinstance(cmd, str) and "(" not in cmd and ")" not in cmd:
            return f"Bash({cmd})"
        return self.tool


@dataclass
class ClaudeStream:
    """A `TaskLogger` for `run_streamed`: takes Claude Code's output as it comes,
    one JSON message per line, and turns it into state, events and log records."""

    ctx: RunContext
    on_usage: Callable[[Usage], None] = lambda usage: None
    session_id: str | None = None
    result: dict[str, Any] | None = None
    usage: Usage = field(default_factory=Usage)
    auth_error: str | None = None
    other: list[str] = field(default_factory=list)
    """Lines that are not JSON (Claude Code's own errors on stderr)."""
    _pending: str = ""
    _tools: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    _turns: dict[str, Usage] = field(default_factory=dict)
    """Usage per API message (Claude Code repeats a message once per content block)."""
    watch: ProgressWatch = field(default_factory=lambda: ProgressWatch(0, 0, 0))
    halt: threading.Event = field(default_factory=threading.Event)
    """Set to end the run early (a budget spent, no progress); `run_streamed` stops it."""
    paused: str | None = None
    """Why the run was halted for a person (the task waits with it)."""
    note: str | None = None
    """What the agent is to be told (no progress, the first time): the session is resumed
    with it as the prompt."""
    _text: str = ""
    _calls: list[Call] = field(default_factory=list)

    @property
    def started(self) -> bool:
        return self.session_id is not None

    @property
    def denials(self) -> list[Denial]:
        raw = (self.result or {}).get("permission_denials") or []
        return [Denial(str(d.get("tool_name")), d.get("tool_input") or {})
                for d in raw if isinstance(d, dict)]

    def write(self, entry: LogEntry) -> None:
        self._pending += entry.text if isinstance(entry, Output) else ""
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self.feed(line)

    def close(self) -> None:
        if self._pending:
            self.feed(self._pending)
            self._pending = ""

    def feed(self, line: str) -> None:
        line = line.strip()
        if not line:
            return
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            msg = None
        if not isinstance(msg, dict):
            self.other = [*self.other[-19:], line]
            self.ctx.log.write(Output(text=line))
            return
        self.ctx.log.write(ClaudeCode(message=_clip(msg)))
        try:
            self.handle(msg)
        except Exception as exc:  # never stop draining the pipe: Claude Code would block
            self.ctx.log.write(Error(error=f"stream handling: {type(exc).__name__}: {exc}"))

    def handle(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "system" and msg.get("subtype") == "init":
            self.session_id = str(msg.get("session_id"))
            self.ctx.board.update(self.ctx.task.id, self.ctx.token, session_id=self.session_id)
        elif kind == "assistant":
            message = msg.get("message") or {}
            if msg.get("error") in ("authentication_failed", "billing_error"):
                self.auth_error = _text(message) or str(msg["error"])
            for block in message.get("content") or []:
                if block.get("type") == "tool_use":
                    self._tool_use(block)
            self._text = _text(message) or self._text
            self._turns[str(message.get("id") or len(self._turns))] = usage_of(
                message.get("usage") or {})
            self.usage = Usage()
            for turn in self._turns.values():
                self.usage = self.usage.add(turn)
            self.on_usage(self.usage)
        elif kind == "user":
            for block in (msg.get("message") or {}).get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    self._tool_result(block)
            if not self._tools:  # every call of the turn has its result: a step boundary
                self._turn_done()
        elif kind == "result":
            self.result = msg
            self.usage = usage_of(msg.get("usage") or {}, msg.get("total_cost_usd"))
            self.on_usage(self.usage)

    def _turn_done(self) -> None:
        calls, self._calls = self._calls, []
        text, self._text = self._text, ""
        if self.halt.is_set():
            return
        try:
            note = self.watch.turn(text, calls)
        except NoProgress as exc:
            self.stop_for(str(exc))
            return
        if note:
            self.ctx.log.write(NoProgressWarning(note=note))
            self.note = note
            self.halt.set()  # resumed at once with the note as the prompt

    def stop_for(self, reason: str) -> None:
        """End the run now and let the task wait for a person with ``reason``."""
        if self.paused is None:
            self.paused = reason
            self.ctx.log.write(RunPaused(reason=reason))
        self.halt.set()

    def _tool_use(self, block: dict[str, Any]) -> None:
        name, args = str(block.get("name")), block.get("input") or {}
        self._tools[str(block.get("id"))] = (name, args)
        self._emit(ToolCalled(tool=name, subject=Denial(name, args).subject,
                              backend="claude-code"))

    def _tool_result(self, block: dict[str, Any]) -> None:
        name, args = self._tools.pop(str(block.get("tool_use_id")), ("", {}))
        self._calls.append(Call(name, args, block.get("content"), bool(block.get("is_error"))))
        path = args.get(FILE_TOOLS.get(name, ""))
        if path and not block.get("is_error"):
            full = (self.ctx.workspace.path / str(path)).resolve()
            self._emit(FileModified(tool=name, path=shown(full, self.ctx.workspace.path)))

    def _emit(self, event: AnyEvent) -> None:
        self.ctx.board.events.emit(event, self.ctx.task.id, actor=self.ctx.teammate)

    def error(self) -> str:
        """Why the run failed, in one paragraph."""
        r = self.result or {}
        errors = [str(e) for e in r.get("errors") or []]
        text = r.get("result") if isinstance(r.get("result"), str) else ""
        subtype = str(r.get("subtype") or "error")
        return "; ".join([subtype, *errors, *([text] if text else [])])


def usage_of(raw: dict[str, Any], cost: Any = None) -> Usage:
    def n(key: str) -> int:
        v = raw.get(key)
        return v if isinstance(v, int) else 0

    return Usage(input_tokens=n("input_tokens"), output_tokens=n("output_tokens"),
                 cache_read_tokens=n("cache_read_input_tokens"),
                 cache_write_tokens=n("cache_creation_input_tokens"),
                 cost_usd=float(cost) if isinstance(cost, int | float) else 0.0)


def _text(message: dict[str, Any]) -> str:
    return " ".join(b.get("text", "") for b in message.get("content") or []
                    if isinstance(b, dict) and b.get("type") == "text").strip()


def _clip(obj: Any) -> Any:
    """The message for the task log, long strings cut (tool results can be megabytes)."""
    if isinstance(obj, str):
        return obj if len(obj) <= LOG_STRING_CHARS else obj[:LOG_STRING_CHARS] + "…[cut]"
    if isinstance(obj, list):
        return [_clip(x) for x in obj]
    if isinstance(obj, dict):
        return {k: _clip(v) for k, v in obj.items()}
    return obj
