"""The ``claude-code`` backend: the Claude Code CLI, headless, in the task's worktree.

    claude -p --output-format stream-json --verbose  < prompt
           --permission-mode MODE --allowedTools … --disallowedTools … --settings {ask rules}
           --mcp-config FILE --strict-mcp-config --max-turns N --max-budget-usd X
           [--model M] [--resume SESSION] [claude_code.args …]

The prompt goes on stdin (no length limit, no confusion with options). The
stream (`ClaudeStream`) is parsed as it arrives: ``system/init`` gives the
session id, stored on the task at once so a retried task resumes the same
conversation (``--resume``) in the same worktree; each ``tool_use`` is a
``tool_called`` event and each successful Write/Edit/MultiEdit/NotebookEdit a
``file_modified`` event; assistant usage is live on the task; the final
``result`` gives usage, ``total_cost_usd`` and ``permission_denials``.

Permissions come from orchestrator's own rules (`PermissionGate.from_sources`):
allow → ``--allowedTools``, deny → ``--disallowedTools``, ask → ``--settings``
(in ``-p`` mode an ask is a denial). ``bypassPermissions`` as root, which Claude
Code refuses, becomes ``acceptEdits`` with every built-in tool allowed. Claude
Code's Bash runs unsandboxed, so unless ``agent.allow_unsandboxed_bash`` is set
neither ``bypassPermissions`` nor a bare ``Bash`` rule allows it (a ``Bash(...)``
rule with a specifier does): it asks, like the built-in bash without a sandbox. A run
that ends with denied tools sends each one to the lead as a permission request
(`PermissionFlow`), waits for the answers, and resumes the session with the
approved calls allowed, up to ``claude_code.permission_rounds`` times.

Each teammate has its own ``CLAUDE_CONFIG_DIR`` (`config_dir`): concurrent
instances never write one shared state file, while the user's login and
settings are linked in from their own folder and never written by us.

A missing CLI, a failed login, or a CLI that exits before starting its session
fails the task without retries (``RunResult.retry=False``) and with a clear error.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import budget as budgets
from orchestrator.agent.base import PermissionAsked, Stopped
from orchestrator.agent.paths import shown
from orchestrator.agent.progress import Call, NoProgress, ProgressWatch
from orchestrator.board.model import Task, Usage
from orchestrator.config import Config
from orchestrator.errors import OrchestratorError
from orchestrator.fsutil import atomic_write
from orchestrator.layout import Layout
from orchestrator.process import ProcResult, run_streamed
from orchestrator.protocols import RunContext, RunResult
from orchestrator.team import delivery
from orchestrator.team.command import build_prompt, last_failure, task_env

FILE_TOOLS = {"Write": "file_path", "Edit": "file_path", "MultiEdit": "file_path",
              "NotebookEdit": "notebook_path"}
ALL_TOOLS = ["Bash", "Edit", "Write", "MultiEdit", "NotebookEdit", "Read", "Glob", "Grep",
             "LS", "WebFetch", "WebSearch", "Task", "TodoWrite"]
"""What ``bypassPermissions`` allows when Claude Code refuses that mode (as root)."""
TOOL_NAMES = {t.lower(): t for t in ALL_TOOLS} | {"multi_edit": "MultiEdit",
                                                   "notebook_edit": "NotebookEdit"}
USER_FILES = (".credentials.json", "settings.json", "CLAUDE.md", "agents", "commands",
              "skills", "plugins", "hooks", "output-styles")
"""Linked from the user's folder: login, settings, memory, extensions (never copied)."""
LOG_STRING_CHARS = 4000
INSTALL_HINT = "npm install -g @anthropic-ai/claude-code, or set claude_code.binary"


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

    def write(self, kind: str, **fields: Any) -> None:
        self._pending += str(fields.get("text", ""))
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
            self.ctx.log.write("output", text=line)
            return
        self.ctx.log.write("claude_code", message=_clip(msg))
        try:
            self.handle(msg)
        except Exception as exc:  # never stop draining the pipe: Claude Code would block
            self.ctx.log.write("error", error=f"stream handling: {type(exc).__name__}: {exc}")

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
            self.ctx.log.write("no_progress_warning", note=note)
            self.note = note
            self.halt.set()  # resumed at once with the note as the prompt

    def stop_for(self, reason: str) -> None:
        """End the run now and let the task wait for a person with ``reason``."""
        if self.paused is None:
            self.paused = reason
            self.ctx.log.write("paused", reason=reason)
        self.halt.set()

    def _tool_use(self, block: dict[str, Any]) -> None:
        name, args = str(block.get("name")), block.get("input") or {}
        self._tools[str(block.get("id"))] = (name, args)
        self._emit("tool_called", tool=name, subject=Denial(name, args).subject,
                   backend="claude-code")

    def _tool_result(self, block: dict[str, Any]) -> None:
        name, args = self._tools.pop(str(block.get("tool_use_id")), ("", {}))
        self._calls.append(Call(name, args, block.get("content"), bool(block.get("is_error"))))
        path = args.get(FILE_TOOLS.get(name, ""))
        if path and not block.get("is_error"):
            full = (self.ctx.workspace.path / str(path)).resolve()
            self._emit("file_modified", tool=name, path=shown(full, self.ctx.workspace.path))

    def _emit(self, event: str, **fields: Any) -> None:
        self.ctx.board.events.emit(event, self.ctx.task.id, actor=self.ctx.teammate, **fields)

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


# --- the command line ----------------------------------------------------------

def permission_args(config: Config, worktree: Path, *, root: bool | None = None
                    ) -> tuple[list[str], dict[str, list[str]]]:
    """(arguments, rules by behaviour) for orchestrator's rules and mode, in Claude Code's
    terms; the allow rules are left to the caller (approvals add to them)."""
    from orchestrator.agent.permissions import PermissionGate

    gate = PermissionGate.from_sources(config.agent, worktree)
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
    args = ["--permission-mode", mode]
    if rules["ask"]:
        args += ["--settings", json.dumps({"permissions": {"ask": rules["ask"]}})]
    if rules["deny"]:
        args += ["--disallowedTools", *rules["deny"]]
    return args, rules


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


def mcp_args(config: Config, worktree: Path, into: Path) -> list[str]:
    """``--mcp-config FILE --strict-mcp-config`` for the project's servers (none: no args)."""
    from orchestrator.mcp.config import load_setup

    udir = Path(config.mcp.user_plugin_dir).expanduser() if config.mcp.user_plugin_dir else None
    servers: dict[str, Any] = {}
    for s in load_setup(worktree, udir).servers:
        if s.error:
            continue
        if s.transport == "stdio":
            entry: dict[str, Any] = {"command": s.command, "args": s.args, "env": s.env}
            if s.cwd:
                entry["cwd"] = s.cwd
        else:
            entry = {"type": s.transport, "url": s.url, "headers": s.headers}
        servers[s.key] = entry
    if not servers:
        return []
    path = into / "mcp.json"
    atomic_write(path, json.dumps({"mcpServers": servers}, indent=2).encode())
    path.chmod(0o600)  # expanded ${VAR}s may be secrets
    return ["--mcp-config", str(path), "--strict-mcp-config"]


def find_binary(name: str, env: dict[str, str]) -> str | None:
    if os.sep in name:
        path = Path(name).expanduser()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(name, path=env.get("PATH"))


def resume_prompt(task: Task) -> str:
    failure = last_failure(task)
    parts = ["Continue the task in this worktree; the previous attempt did not finish."]
    if failure:
        parts.append(failure)
    if task.feedback:
        parts.append("Feedback from review:\n" + "\n".join(f"- {f}" for f in task.feedback))
    return "\n\n".join(parts)


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


# --- the backend ---------------------------------------------------------------

class ClaudeCodeBackend:
    name = "claude-code"

    def __init__(self, config: Config, layout: Layout) -> None:
        self.config = config
        self.layout = layout

    def run(self, ctx: RunContext) -> RunResult:
        cc = self.config.claude_code
        env = task_env(ctx)
        binary = find_binary(cc.binary, env)
        if binary is None:
            return self._fail(ctx, f"Claude Code CLI not found: {cc.binary!r} is not "
                              f"installed or not on PATH ({INSTALL_HINT})", retry=False)
        turns, dollars = budget(ctx.task, self.config)
        if dollars is not None and dollars <= 0:
            return self._fail(ctx, f"budget: ${ctx.task.usage.cost_usd:.2f} spent of "
                              "max_cost_usd", retry=False)
        try:
            cdir = config_dir(self.layout, self.config, ctx.teammate, env)
            perm, rules = permission_args(self.config, ctx.workspace.path)
            base = [binary, "-p", "--output-format", "stream-json", "--verbose", *perm,
                    *mcp_args(self.config, ctx.workspace.path, cdir),
                    "--max-turns", str(turns)]
        except (OrchestratorError, OSError) as exc:
            return self._fail(ctx, f"claude-code: {exc}", retry=False)
        if dollars is not None:
            base += ["--max-budget-usd", f"{dollars:.4f}"]
        model = cc.model or (self.config.agent.model
                             if "model" in self.config.agent.model_fields_set else None)
        if model:
            base += ["--model", model]
        # MCP_CONNECTION_NONBLOCKING=0: headless Claude Code otherwise starts the first turn
        # while the MCP servers are still connecting, and a slow one's tools are missing
        env.update(CLAUDE_CONFIG_DIR=str(cdir), DISABLE_AUTOUPDATER="1",
                   MCP_CONNECTION_NONBLOCKING="0")
        return Session(self, ctx, base, rules["allow"], rules["deny"], env, cdir).run()

    def _fail(self, ctx: RunContext, error: str, *, retry: bool,
              usage: Usage | None = None) -> RunResult:
        ctx.log.write("error", error=error)
        return RunResult(ok=False, error=error, retry=retry, usage=usage or Usage())


@dataclass
class Session:
    """One task's conversation: a first run (or a resume), then rounds of approved
    permissions, each a ``--resume`` of the same session."""

    backend: ClaudeCodeBackend
    ctx: RunContext
    base: list[str]
    allowed: list[str]
    denied: list[str]
    env: dict[str, str]
    cdir: Path
    spent: Usage = field(default_factory=Usage)
    watch: ProgressWatch = field(default_factory=lambda: ProgressWatch(0, 0, 0))
    """Shared by every run of the session: told once, stopped the next time."""

    def run(self) -> RunResult:
        ctx = self.ctx
        session = ctx.task.session_id
        prompt = resume_prompt(ctx.task) if session else build_prompt(ctx.task)
        inbox = delivery.Reader(ctx.messages)
        waiting = inbox.new()
        if waiting:
            prompt = f"{prompt}\n\n{delivery.as_prompt(waiting)}"
        rounds = self.backend.config.claude_code.permission_rounds
        agent = self.backend.config.agent
        self.watch = ProgressWatch(agent.no_progress_repeats, agent.no_progress_failures,
                                   agent.no_progress_turns)
        for round_no in range(rounds + 1):
            stream, proc = self.once(prompt, session)
            if session and not stream.started and _lost_session(stream):
                ctx.log.write("resume_failed", session_id=session, error=stream.error())
                session, prompt = None, build_prompt(ctx.task)
                stream, proc = self.once(prompt, None)
            while stream.note and stream.session_id and not ctx.stop.is_set():
                self.spent = self.spent.add(stream.usage)  # told once: the same session
                stream, proc = self.once(stream.note, stream.session_id)
            self.spent = self.spent.add(stream.usage)
            if stream.paused is None and _hit_budget(stream):  # its own --max-budget-usd
                stream.paused = budgets.first_reached(budgets.run_limits(ctx), self.spent)
            if stream.paused:
                return RunResult(ok=False, error=stream.paused, paused=stream.paused,
                                 usage=self.spent, session_id=stream.session_id)
            failed = self.failure(stream, proc)
            if failed is not None:
                return failed
            denials = stream.denials
            if not denials:
                news = inbox.new()  # messages sent during the turn: resume with them
                if news and stream.session_id and not ctx.stop.is_set():
                    ctx.log.write("messages_delivered", text=news)
                    session, prompt = stream.session_id, delivery.as_prompt(news)
                    continue
                break
            try:
                answer = self.ask(denials, wait=round_no < rounds)
            except Stopped:
                return RunResult(ok=False, stopped=True, error="stopped", usage=self.spent,
                                 session_id=stream.session_id)
            if answer is None:
                break
            prompt = answer
            session = stream.session_id
        summary = (stream.result or {}).get("result")
        return RunResult(ok=True, summary=summary if isinstance(summary, str) else "",
                         usage=self.spent, session_id=stream.session_id)

    def once(self, prompt: str, session: str | None) -> tuple[ClaudeStream, ProcResult]:
        ctx = self.ctx
        argv = [*self.base, *(["--resume", session] if session else [])]
        if self.allowed:
            argv += ["--allowedTools", *self.allowed]
        argv += self.backend.config.claude_code.args
        prompt_file = self.cdir / f"prompt-{ctx.task.id}.txt"
        atomic_write(prompt_file, prompt.encode())
        before = self.spent

        limits = budgets.run_limits(ctx)

        def live(usage: Usage) -> None:
            with contextlib.suppress(OrchestratorError):
                ctx.board.update(ctx.task.id, ctx.token,
                                 usage=ctx.task.usage.add(before.add(usage)))
            reason = budgets.first_reached(limits, before.add(usage))
            if reason:  # right after the request that crossed it
                stream.stop_for(reason)

        stream = ClaudeStream(ctx, on_usage=live, watch=self.watch, halt=_Halt(ctx.stop))
        ctx.log.write("backend_started", backend="claude-code", argv=argv[1:],
                      resume=session, config_dir=str(self.cdir))
        res = run_streamed(
            f"{shlex.join(argv)} < {shlex.quote(str(prompt_file))}", cwd=ctx.workspace.path,
            env=self.env, log=stream, timeout=ctx.timeout or self.backend.config.team.task_timeout,
            stop=stream.halt, on_start=ctx.on_process_start, log_limit=None)
        stream.close()
        prompt_file.unlink(missing_ok=True)
        ctx.log.write("backend_finished", backend="claude-code", result=res.describe(),
                      seconds=round(res.seconds, 3), session_id=stream.session_id)
        return stream, res

    def failure(self, stream: ClaudeStream, res: ProcResult) -> RunResult | None:
        """The result for a run that did not succeed; None when it did."""
        if res.stopped:
            return RunResult(ok=False, stopped=True, error="stopped", usage=self.spent,
                             session_id=stream.session_id)
        said = "\n".join(stream.other[-5:])
        result = stream.result or {}
        if stream.auth_error:
            error, retry = (f"Claude Code is not logged in: {stream.auth_error} (run `claude` "
                            "and /login, or set ANTHROPIC_API_KEY)"), False
        elif res.timed_out:
            error, retry = f"claude-code {res.describe()}", True
        elif not stream.started and not result:
            said = said or "no output"
            error, retry = f"Claude Code exited at once ({res.describe()}): {said}", False
        elif not result:
            error, retry = f"Claude Code ended without a result ({res.describe()}) {said}", True
        elif str(result.get("subtype", "")).startswith("error_max"):
            # max turns or budget: the same limits would run out again
            error, retry = f"budget: Claude Code stopped: {stream.error()}", False
        elif result.get("is_error") or not res.ok:
            error, retry = f"Claude Code failed: {stream.error()}", True
        else:
            return None
        self.ctx.log.write("error", error=error)
        return RunResult(ok=False, error=error.strip(), retry=retry, usage=self.spent,
                         session_id=stream.session_id)

    def ask(self, denials: list[Denial], *, wait: bool) -> str | None:
        """Send each denied call to the lead; with ``wait``, collect the answers and
        return the prompt that resumes the session (None when nothing was approved)."""
        from orchestrator.agent.permission_flow import PermissionFlow

        ctx = self.ctx
        flow = PermissionFlow(ctx.board, ctx.task.id, ctx.token, ctx.teammate, ctx.stop)
        approved, refused = [], []
        for d in denials:
            if d.rule in self.allowed:
                continue
            rule = d.denied_by(self.denied)
            if rule or not wait:
                ctx.board.events.emit("permission_denied", ctx.task.id, actor=ctx.teammate,
                                      tool=d.tool, subject=d.subject, rule=rule,
                                      backend="claude-code")
                continue
            request = PermissionAsked(f"perm_{uuid.uuid4().hex[:12]}", d.tool, d.subject)
            answer = flow.ask(request)
            if answer.approved:
                self.allowed.append(d.rule)
                approved.append(d.rule)
            else:
                refused.append(f"{d.rule}" + (f": {answer.message}" if answer.message else ""))
        ctx.log.write("permissions", approved=approved, refused=refused)
        if not approved:
            return None
        lines = ["The lead approved what was denied before; do it now and continue the task.",
                 "Approved: " + ", ".join(approved)]
        if refused:
            lines.append("Refused (do not try again): " + "; ".join(refused))
        return "\n".join(lines)


class _Halt(threading.Event):
    """Set by the stream (a budget spent, no progress), or the teammate's stop is."""

    def __init__(self, outer: threading.Event) -> None:
        super().__init__()
        self.outer = outer

    def is_set(self) -> bool:
        return super().is_set() or self.outer.is_set()


def _hit_budget(stream: ClaudeStream) -> bool:
    return str((stream.result or {}).get("subtype", "")).startswith("error_max_budget")


def _lost_session(stream: ClaudeStream) -> bool:
    return any("No conversation found" in str(e) for e in (stream.result or {}).get("errors")
               or [])
