"""Running the Claude Code CLI: finding it, its command line and environment, one
process per turn of the conversation (`Session.once`: the argv, the prompt on stdin, the
stream into `ClaudeStream`), resumes with messages, no-progress notes and approved
permissions, and what a failed run means."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator import budget as budgets
from orchestrator import delivery
from orchestrator.agent.base import PermissionAsked, Stopped
from orchestrator.agent.progress import ProgressWatch
from orchestrator.agent.prompt import project_memory
from orchestrator.backends.claude_code.config import agents_arg, mcp_args, permission_args
from orchestrator.backends.claude_code.stream import ClaudeStream, Denial
from orchestrator.config import Config
from orchestrator.errors import OrchestratorError
from orchestrator.events import PermissionDenied
from orchestrator.fsutil import atomic_write
from orchestrator.model import Task, Usage
from orchestrator.process import ProcResult, run_streamed
from orchestrator.prompting import build_prompt, last_failure
from orchestrator.protocols import RunContext, RunResult
from orchestrator.sandbox import Sandbox
from orchestrator.transcript import (
    BackendFinished,
    BackendStarted,
    Error,
    MessagesDelivered,
    Permissions,
    ResumeFailed,
)

INSTALL_HINT = "npm install -g @anthropic-ai/claude-code, or set claude_code.binary"


def command_line(config: Config, binary: str, project: Path, cdir: Path, turns: int,
                 dollars: float | None, worktree: Path | None = None
                 ) -> tuple[list[str], dict[str, list[str]]]:
    """(the argv every run of a session starts with, the permission rules by behaviour);
    each run adds ``--resume`` and the allowed tools (`Session.once`). Settings, rules,
    MCP servers and agents come from ``project``, the main checkout (never the worktree
    Claude Code runs in: `orchestrator.backends.claude_code.config`). Since that keeps it
    from reading the project's memory too, the worktree's ``CLAUDE.md`` (and
    ``AGENTS.md``), read as the built-in loop reads them, are appended to its system
    prompt."""
    perm, rules = permission_args(config, project, into=cdir)
    base = [binary, "-p", "--output-format", "stream-json", "--verbose", *perm,
            *mcp_args(config, project, cdir), *agents_arg(config, project),
            "--max-turns", str(turns)]
    memory = project_memory(worktree) if worktree is not None else ""
    if memory:
        base += ["--append-system-prompt", memory]
    if dollars is not None:
        base += ["--max-budget-usd", f"{dollars:.4f}"]
    model = config.claude_code.model or (
        config.agent.model if "model" in config.agent.model_fields_set else None)
    if model:
        base += ["--model", model]
    return base, rules


def session_env(cdir: Path) -> dict[str, str]:
    """What the CLI's environment adds to the task's: the teammate's config dir, no
    self-updates, and MCP servers connected before the first turn."""
    # MCP_CONNECTION_NONBLOCKING=0: headless Claude Code otherwise starts the first turn
    # while the MCP servers are still connecting, and a slow one's tools are missing
    return {"CLAUDE_CONFIG_DIR": str(cdir), "DISABLE_AUTOUPDATER": "1",
            "MCP_CONNECTION_NONBLOCKING": "0"}


def find_binary(name: str, env: dict[str, str]) -> str | None:
    """The Claude Code CLI: a path as given, else ``name`` on ``PATH``, else the one
    orchestrator's own set-up installed (``scripts/test-deps``: ``.venv/npm``)."""
    if os.sep in name:
        path = Path(name).expanduser()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(name, path=env.get("PATH")) or shutil.which(
        name, path=str(PROJECT_NPM_BIN))


PROJECT_NPM_BIN = Path(sys.prefix) / "npm" / "node_modules" / ".bin"
"""Where orchestrator's set-up installs npm tools (Claude Code among them)."""


def resume_prompt(task: Task) -> str:
    failure = last_failure(task)
    parts = ["Continue the task in this worktree; the previous attempt did not finish."]
    if failure:
        parts.append(failure)
    if task.feedback:
        parts.append("Feedback from review:\n" + "\n".join(f"- {f}" for f in task.feedback))
    return "\n\n".join(parts)


@dataclass
class Session:
    """One task's conversation: a first run (or a resume), then rounds of approved
    permissions, each a ``--resume`` of the same session."""

    config: Config
    ctx: RunContext
    base: list[str]
    allowed: list[str]
    denied: list[str]
    env: dict[str, str]
    cdir: Path
    sandbox: Sandbox | None = None
    """Where each turn of the CLI runs (None: on the host, `sandbox.backends` off)."""
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
        rounds = self.config.claude_code.permission_rounds
        agent = self.config.agent
        self.watch = ProgressWatch(agent.no_progress_repeats, agent.no_progress_failures,
                                   agent.no_progress_turns)
        for round_no in range(rounds + 1):
            stream, proc = self.once(prompt, session)
            if session and not stream.started and _lost_session(stream):
                ctx.log.write(ResumeFailed(session_id=session, error=stream.error()))
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
                    ctx.log.write(MessagesDelivered(text=news))
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
        argv += self.config.claude_code.args
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
        ctx.log.write(BackendStarted(backend="claude-code", argv=argv[1:],
                                     resume=session, config_dir=str(self.cdir)))
        res = run_streamed(
            f"{shlex.join(argv)} < {shlex.quote(str(prompt_file))}", cwd=ctx.workspace.path,
            env=self.env, log=stream, timeout=ctx.timeout or self.config.team.task_timeout,
            stop=stream.halt, on_start=ctx.on_process_start, log_limit=None,
            sandbox=self.sandbox)
        stream.close()
        prompt_file.unlink(missing_ok=True)
        ctx.log.write(BackendFinished(backend="claude-code", result=res.describe(),
                                      seconds=round(res.seconds, 3), session_id=stream.session_id))
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
        self.ctx.log.write(Error(error=error))
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
                ctx.board.events.emit(PermissionDenied(tool=d.tool, subject=d.subject, rule=rule,
                                                       backend="claude-code"),
                                      ctx.task.id, actor=ctx.teammate)
                continue
            request = PermissionAsked(f"perm_{uuid.uuid4().hex[:12]}", d.tool, d.subject)
            answer = flow.ask(request)
            if answer.approved:
                self.allowed.append(d.rule)
                approved.append(d.rule)
            else:
                refused.append(f"{d.rule}" + (f": {answer.message}" if answer.message else ""))
        ctx.log.write(Permissions(approved=approved, refused=refused))
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
