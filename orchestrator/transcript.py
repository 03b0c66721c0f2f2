"""Every kind of record in a task's log (``.tasks/logs/<task>.jsonl``), as a typed struct,
and the log as a person reads it: ``orchestrator logs``.

A producer builds the kind and hands it to the task's logger, so mypy checks its fields::

    ctx.log.write(Commit(sha=sha))

On disk a record is one JSON object: ``ts``, ``kind`` (the struct's tag), ``actor`` when
there is one, then the kind's fields; a field marked ``UNSET`` is absent when not given.
`parse` turns a record read back into its kind; a kind this code does not know, or a
record that does not fit its kind (the log is a file anyone can edit), parses to None and
is shown field by field.

A person reads the agent's text; each tool call with its key argument and a short result;
Claude Code's stream the same way; command output as printed; checks, commits, errors and
costs (`render`, each kind's `LogEntry.show`). Model requests, system prompts and raw
stream messages are left out (``logs --raw`` has them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from orchestrator.model import Usage

KEY_ARGS = ("command", "file_path", "path", "pattern", "url", "notebook_path", "query",
            "description", "prompt", "subject", "id")
"""A tool call is shown with the first of these arguments it has."""
WIDTH = 100
MAX_FIELD_CHARS = 64_000
"""A single field longer than this is cut (the full text is in a spill file when it matters)."""


class LogEntry(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind"):
    """What every record kind shares: how ``orchestrator logs`` shows it."""

    def show(self, ts: str) -> str | None:
        """The lines for this record, or None for a record a person does not need; by
        default the kind and its fields after the time."""
        return _stamped(ts, _fields_line(msgspec.to_builtins(self)))


# --- the agent loop ---------------------------------------------------------------------
class AgentStart(LogEntry, frozen=True, tag="agent_start"):
    """The built-in agent began (``resumed``: how many messages a resumed run brought)."""

    model: str
    system: Any
    tools: list[str]
    first_message: Any
    resumed: int | None = None

    def show(self, ts: str) -> str | None:
        return _stamped(ts, f"agent started ({self.model}): {_clip(str(self.first_message))}")


class AgentEnd(LogEntry, frozen=True, tag="agent_end"):
    """The built-in agent stopped: how (``outcome``), after how many turns, what it spent."""

    outcome: str
    turns: int
    compactions: int = 0
    usage: Usage = msgspec.field(default_factory=Usage)

    def show(self, ts: str) -> str | None:
        tokens = self.usage.input_tokens + self.usage.output_tokens
        return _stamped(ts, f"agent ended: {self.outcome} after {self.turns} turn(s), "
                            f"{tokens} tokens, ${self.usage.cost_usd:.4f}")


class TurnRequest(LogEntry, frozen=True, tag="request"):
    """A call to the model (the response shows what it did)."""

    turn: int
    messages: int
    bytes: int

    def show(self, ts: str) -> str | None:
        return None


class TurnResponse(LogEntry, frozen=True, tag="response"):
    """The model's answer: text and tool calls (``content``), why it stopped, its usage."""

    turn: int
    content: list[Any]
    stop_reason: str | None = None
    usage: Usage = msgspec.field(default_factory=Usage)

    def show(self, ts: str) -> str | None:
        return _blocks(self.content)


class Compacted(LogEntry, frozen=True, tag="compacted"):
    """The conversation was summarised to fit the context (``messages``: how many are left)."""

    reason: str
    messages: int


class MessagesDelivered(LogEntry, frozen=True, tag="messages_delivered"):
    """Messages from the lead or a person, handed to the running agent."""

    text: str

    def show(self, ts: str) -> str | None:
        return _stamped(ts, f"messages delivered to the agent:\n{_indent(self.text)}")


class NoProgressWarning(LogEntry, frozen=True, tag="no_progress_warning"):
    """The agent was told it seems to make no progress."""

    note: str


class ToolCall(LogEntry, frozen=True, tag="tool_call"):
    """The agent called a tool with ``input``."""

    id: str
    name: str
    input: Any

    def show(self, ts: str) -> str | None:
        return None  # the response shows the call


class ToolReturned(LogEntry, frozen=True, tag="tool_result"):
    """A tool's result (``is_error``: the tool failed)."""

    id: str
    name: str
    content: Any
    is_error: bool = False

    def show(self, ts: str) -> str | None:
        return _result(self.content, self.is_error)


class PermissionRequested(LogEntry, frozen=True, tag="permission_requested"):
    """A tool call waits for a person (``subject``: what it would do)."""

    request_id: str
    tool: str
    subject: str | None


class PermissionAnswered(LogEntry, frozen=True, tag="permission_answered"):
    """A person's answer to a permission request."""

    request_id: str
    approved: bool
    message: str


class Subagent(LogEntry, frozen=True, tag="subagent"):
    """A subagent started; its own log is ``transcript``."""

    transcript: str
    depth: int
    description: Any
    agent: Any
    tools: list[str]


class SessionSaved(LogEntry, frozen=True, tag="session"):
    """A paused built-in run's messages, for its resumption (``feedback``: how many of
    the task's feedback notes it had seen)."""

    session_id: str
    messages: list[Any]
    feedback: int


# --- backends ---------------------------------------------------------------------------
class ProfileChosen(LogEntry, frozen=True, tag="profile"):
    """The agent profile the run uses, and the tools it takes away."""

    name: str
    model: str
    permission_mode: str
    dropped: list[str]


class BackendStarted(LogEntry, frozen=True, tag="backend_started"):
    """A backend began: its command (``command`` or ``argv``)."""

    backend: str
    command: str | UnsetType = UNSET
    argv: list[str] | UnsetType = UNSET
    prompt_via: str | UnsetType = UNSET
    resume: str | UnsetType | None = UNSET
    config_dir: str | UnsetType = UNSET

    def show(self, ts: str) -> str | None:
        what = self.command or " ".join(self.argv or [])
        return _stamped(ts, f"{self.backend} started: {_clip(what)}")


class BackendFinished(LogEntry, frozen=True, tag="backend_finished"):
    """A backend ended: ``result`` in words, after ``seconds``."""

    backend: str
    result: str
    seconds: float
    exit_code: int | UnsetType | None = UNSET
    output_bytes: int | UnsetType = UNSET
    session_id: str | UnsetType | None = UNSET

    def show(self, ts: str) -> str | None:
        return _stamped(ts, f"{self.backend} finished: {self.result} in {self.seconds}s")


class Output(LogEntry, frozen=True, tag="output"):
    """A command's output as printed (a chunk of whole lines)."""

    text: str

    def show(self, ts: str) -> str | None:
        return self.text.rstrip("\n")


class ClaudeCode(LogEntry, frozen=True, tag="claude_code"):
    """One message of Claude Code's stream (long strings cut)."""

    message: Any

    def show(self, ts: str) -> str | None:
        return _claude(self.message, ts)


class ResumeFailed(LogEntry, frozen=True, tag="resume_failed"):
    """Claude Code could not resume its session; the run starts afresh."""

    session_id: str
    error: str


class Permissions(LogEntry, frozen=True, tag="permissions"):
    """Claude Code's refused calls a person answered: the rules approved and refused."""

    approved: list[str]
    refused: list[str]


class UsageReported(Usage, LogEntry, frozen=True, tag="usage"):  # type: ignore[misc]
    """What a command backend said it spent: a `orchestrator.model.Usage` (mypy takes
    msgspec structs for dataclasses, which may not freeze a mutable base; msgspec may)."""


class UsageRejected(LogEntry, frozen=True, tag="usage_rejected"):
    """A command backend wrote a usage file that could not be read."""

    error: str


class Mcp(LogEntry, frozen=True, tag="mcp"):
    """An MCP server that did not connect, or a note on a tool's name."""

    server: str | UnsetType = UNSET
    state: str | UnsetType = UNSET
    error: str | UnsetType | None = UNSET
    note: str | UnsetType = UNSET


class SandboxNote(LogEntry, frozen=True, tag="sandbox"):
    """How commands are confined (``notice``: the agent's bash; ``note``: a command's)."""

    note: str | UnsetType = UNSET
    notice: str | UnsetType = UNSET


class Setup(LogEntry, frozen=True, tag="setup"):
    """A worktree setup command and its output (``exit`` None: it timed out)."""

    command: str
    exit: int | None
    timed_out: bool
    output: str


class IsolationHook(LogEntry, frozen=True, tag="isolation_hook"):
    """A hook of the isolation backend ran (``exit`` None: it timed out); output tails."""

    command: str
    exit: int | None
    stdout: str
    stderr: str


# --- checks and the teammate ------------------------------------------------------------
class VerifyStarted(LogEntry, frozen=True, tag="verify_started"):
    """The checks (``team.verify``) began."""

    command: str

    def show(self, ts: str) -> str | None:
        return _stamped(ts, f"checks: {self.command}")


class VerifyOutput(Output, frozen=True, tag="verify_output"):
    """The checks' output as printed."""


class VerifyFinished(LogEntry, frozen=True, tag="verify_finished"):
    """The checks ended (``result``: the exit code in words)."""

    passed: bool
    result: str
    seconds: float

    def show(self, ts: str) -> str | None:
        return _stamped(ts, f"checks {'passed' if self.passed else 'failed'}: {self.result}")


class ChecksRetry(LogEntry, frozen=True, tag="checks_retry"):
    """The checks failed: back to the agent with their output, round ``round`` of ``of``."""

    round: int
    of: int

    def show(self, ts: str) -> str | None:
        return _stamped(ts, "checks failed; back to the agent with their output "
                            f"({self.round}/{self.of})")


class Commit(LogEntry, frozen=True, tag="commit"):
    """What the agent left was committed (``sha``)."""

    sha: str

    def show(self, ts: str) -> str | None:
        return _stamped(ts, f"committed {self.sha[:12]}")


class CommitRefused(LogEntry, frozen=True, tag="commit_refused"):
    """What the agent left could not be committed (``reason``)."""

    reason: str


class RunPaused(LogEntry, frozen=True, tag="paused"):
    """The run stopped for a person (``commit``: the work saved so far)."""

    reason: str
    commit: str | UnsetType | None = UNSET


class Abandoned(LogEntry, frozen=True, tag="abandoned"):
    """The teammate stopped working on the task (cancelled, or its lease lost)."""

    reason: str

    def show(self, ts: str) -> str | None:
        return _stamped(ts, f"abandoned: {self.reason}")


class Error(LogEntry, frozen=True, tag="error"):
    """The run failed (``error``)."""

    error: str

    def show(self, ts: str) -> str | None:
        return _stamped(ts, f"error: {self.error}")


Entry = (AgentStart | AgentEnd | TurnRequest | TurnResponse | Compacted | MessagesDelivered
         | NoProgressWarning | ToolCall | ToolReturned | PermissionRequested
         | PermissionAnswered | Subagent | SessionSaved | ProfileChosen | BackendStarted
         | BackendFinished | Output | ClaudeCode | ResumeFailed | Permissions | UsageReported
         | UsageRejected | Mcp | SandboxNote | Setup | IsolationHook | VerifyStarted | VerifyOutput
         | VerifyFinished | ChecksRetry | Commit | CommitRefused | RunPaused | Abandoned | Error)
"""Every kind (a tagged union on ``kind``)."""


def record(entry: LogEntry, actor: str | None = None) -> dict[str, Any]:
    """``entry`` as the fields of its line, without ``ts``: ``kind``, ``actor`` when given,
    then the kind's fields, each string longer than `MAX_FIELD_CHARS` cut."""
    fields: dict[str, Any] = msgspec.to_builtins(entry, enc_hook=str)
    out = {"kind": fields.pop("kind")}
    if actor:
        out["actor"] = actor
    for k, v in fields.items():
        if isinstance(v, str) and len(v) > MAX_FIELD_CHARS:
            v = v[:MAX_FIELD_CHARS] + f"\n… [{len(v) - MAX_FIELD_CHARS} more characters cut]"
        out[k] = v
    return out


def parse(rec: Mapping[str, Any]) -> Entry | None:
    """The kind of a record read back, or None for one this code does not know or that
    does not fit its kind."""
    try:
        entry: Entry = msgspec.convert(
            {k: v for k, v in rec.items() if k not in ("ts", "actor")}, Entry, strict=False)
        return entry
    except (msgspec.ValidationError, RecursionError):
        return None


def render(rec: Mapping[str, Any]) -> str | None:
    """The lines for one record, or None for a record a person does not need."""
    ts = str(rec.get("ts", ""))[11:19]
    entry = parse(rec)
    if entry is None:
        return _stamped(ts, _fields_line(rec))
    return entry.show(ts)


def _stamped(ts: str, line: str) -> str | None:
    return f"[{ts}] {line}" if line else None


def _fields_line(rec: Mapping[str, Any]) -> str:
    rest = " ".join(f"{k}={_short(v)}" for k, v in rec.items()
                    if k not in ("ts", "kind", "actor"))
    return f"{rec.get('kind', '?')} {rest}".rstrip()


def _blocks(content: Any) -> str | None:
    lines = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text" and str(block.get("text", "")).strip():
            lines.append(str(block["text"]).strip())
        elif block.get("type") == "tool_use":
            lines.append(f"→ {block.get('name')}({_key_arg(block.get('input'))})")
    return "\n".join(lines) if lines else None


def _result(content: Any, error: bool) -> str:
    text = content if isinstance(content, str) else _text_of(content)
    lines = text.strip().splitlines() or [""]
    more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
    return f"  {'✗' if error else '←'} {_clip(lines[0], WIDTH - 20)}{more}"


def _claude(msg: Any, ts: str) -> str | None:
    if not isinstance(msg, dict):
        return None
    kind = msg.get("type")
    inner: dict[str, Any] = msg["message"] if isinstance(msg.get("message"), dict) else {}
    if kind == "assistant":
        return _blocks(inner.get("content"))
    if kind == "user":
        content = inner.get("content")
        parts = [_result(b.get("content"), bool(b.get("is_error")))
                 for b in (content if isinstance(content, list) else [])
                 if isinstance(b, dict) and b.get("type") == "tool_result"]
        return "\n".join(parts) or None
    if kind == "system" and msg.get("subtype") == "init":
        return f"[{ts}] Claude Code session {msg.get('session_id')} ({msg.get('model')})"
    if kind == "result":
        cost = msg.get("total_cost_usd")
        return (f"[{ts}] Claude Code {msg.get('subtype')}: {msg.get('num_turns')} turn(s)"
                + (f", ${float(cost):.4f}" if isinstance(cost, int | float) else ""))
    return None


def _key_arg(args: Any) -> str:
    if not isinstance(args, dict):
        return ""
    for key in KEY_ARGS:
        if isinstance(args.get(key), str):
            return _clip(args[key], 80)
    return _clip(", ".join(f"{k}={_short(v)}" for k, v in args.items()), 80)


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    return json.dumps(content, default=str)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return _clip(text, 60)


def _clip(text: str, n: int = WIDTH) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[:n - 1] + "…"


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())
