"""The ``command`` backend: any CLI agent (aider, codex, gemini …) from a command template.

The command runs through the shell in the task's worktree, in its own process
group, with the task in its environment:

    ORCH_TASK_ID, ORCH_TASK_SUBJECT, ORCH_TASK_DESCRIPTION
    ORCH_PROMPT          subject, description and any review feedback, as one prompt
    ORCH_TEAMMATE        the teammate running it
    ORCH_USAGE_FILE      where the command may report what it spent: one JSON object
                         {"input_tokens", "output_tokens", "cache_read_tokens",
                         "cache_write_tokens", "cost_usd"} with the run's totals, or JSON
                         lines of such objects (added up); read as it grows (twice a
                         second), counted on the task and against its budgets: the run
                         is stopped (the task paused) once a budget is reached
                         (`orchestrator.budget.read_usage_file`)
    + the workspace's own variables (ORCH_WORKTREE, ORCH_PORT_BASE …)

Exit code 0 means done. Output goes to the task log as it comes. Past
``team.task_timeout`` (or the run's own timeout) the whole group is killed; a
warm stop terminates it and the task is released, not failed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import tempfile
import threading
from pathlib import Path

import msgspec

from orchestrator import budget as budgets
from orchestrator.budget import USAGE_FILE_ENV, read_usage_file
from orchestrator.config import Config
from orchestrator.errors import ConfigError, InvalidInput, OrchestratorError
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.model import Usage
from orchestrator.process import CANNOT_RUN, run_streamed
from orchestrator.prompting import last_lines, task_env
from orchestrator.protocols import RunContext, RunResult
from orchestrator.sandbox import backend_sandbox
from orchestrator.sandbox.credproxy import run_env
from orchestrator.transcript import (
    BackendFinished,
    BackendStarted,
    RunPaused,
    UsageRejected,
    UsageReported,
)


def locate_command(command: str, start: Path, root: Path) -> tuple[str, str | None]:
    """Make a command whose program is a relative path (``./my-agent.sh``) run in every
    task's worktree, which is a checkout of HEAD: a program committed there is left as it
    is; one that is not committed but exists relative to ``start`` (where ``up`` was run)
    is run by its absolute path. Returns the command and a note saying what changed.
    Raises `ConfigError` for a program found in neither place."""
    m = re.match(r"\s*(\S+)", command)
    try:
        words = shlex.split(command)
    except ValueError:
        return command, None
    if m is None or not words or m.group(1) != words[0]:
        return command, None  # a quoted or unusual program: leave it to the shell
    prog = words[0]
    if "/" not in prog or os.path.isabs(prog):
        return command, None
    rel = os.path.normpath(os.path.relpath(start / prog, root))
    if not rel.startswith("..") and _committed(root, rel):
        return command, None
    here = (start / prog).resolve()
    if here.is_file():
        note = (f"{prog} is not committed, so it is not in the tasks' worktrees "
                f"(checkouts of HEAD); running {here} in each worktree instead")
        return shlex.quote(str(here)) + command[m.end():], note
    raise ConfigError(
        f"command {prog!r} not found: commands run in each task's worktree (a checkout of "
        f"HEAD) and {prog} is neither committed nor in {start}; commit it or give its path")


def _committed(root: Path, rel: str) -> bool:
    return Git(root).ok("cat-file", "-e", f"HEAD:{rel}")


class CommandBackend:
    name = "command"

    def __init__(self, config: Config, layout: Layout) -> None:
        self.config = config
        self.layout = layout

    def run(self, ctx: RunContext) -> RunResult:
        cmd = ctx.command or self.config.team.command
        if not cmd:
            return RunResult(ok=False, retry=False, error="the command backend needs a command "
                             "(--command 'CMD' or team.command in orchestrator.toml)")
        ctx.log.write(BackendStarted(backend=self.name, command=cmd))
        with tempfile.TemporaryDirectory(prefix="orch-usage-") as tmp:
            usage_file = Path(tmp) / "usage.json"
            watch = _UsageWatch(ctx, usage_file)
            box = backend_sandbox(self.config, cmd, [Path(tmp)], self.layout.root)
            if box is not None and ctx.messages is not None and ctx.messages.is_file():
                box = box.with_(files=[str(ctx.messages)])  # ORCH_MESSAGES, read-only
            env = {**task_env(ctx), USAGE_FILE_ENV: str(usage_file)}
            with run_env(env, self.config.agent.pass_env, sandbox=box) as (env, box):
                res = run_streamed(
                    cmd, cwd=ctx.workspace.path, env=env, log=ctx.log,
                    timeout=ctx.timeout or self.config.team.task_timeout, stop=watch,
                    on_start=ctx.on_process_start, sandbox=box)
            usage = self.reported_usage(ctx, usage_file)
        ctx.log.write(BackendFinished(backend=self.name, exit_code=res.returncode,
                                      seconds=round(res.seconds, 3), output_bytes=res.output_bytes,
                                      result=res.describe()))
        if watch.reached:  # stopped at its budget while it ran
            return RunResult(ok=False, error=watch.reached, paused=watch.reached, usage=usage)
        if res.stopped:
            return RunResult(ok=False, stopped=True, error="stopped", usage=usage)
        if not res.ok and res.returncode in CANNOT_RUN:
            # the shell could not find or execute the program: the same on every attempt
            error = f"command cannot run ({res.describe()}): {cmd}\n{last_lines(res.tail)}"
            return RunResult(ok=False, error=error, retry=False, usage=usage)
        if not res.ok:
            error = f"command failed: {res.describe()}\n{last_lines(res.tail)}"
            return RunResult(ok=False, error=error, usage=usage)
        return RunResult(ok=True, summary=last_lines(res.tail, 5), usage=usage)

    @staticmethod
    def reported_usage(ctx: RunContext, path: Path, *, quiet: bool = False) -> Usage:
        """What the command wrote to ``$ORCH_USAGE_FILE`` (`orchestrator.budget`); a
        malformed file counts nothing and says why in the task log."""
        try:
            usage = read_usage_file(path)
        except InvalidInput as exc:
            if not quiet:
                ctx.log.write(UsageRejected(error=str(exc)))
            return Usage()
        if usage != Usage() and not quiet:
            ctx.log.write(UsageReported(**msgspec.to_builtins(usage)))
        return usage


class _UsageWatch(threading.Event):
    """The run's stop event (`run_streamed` asks it twice a second): set by the teammate's
    stop, or once the usage file, read each time it changed, reaches one of the run's
    budgets (``reached`` then says which). What it reports is counted on the task as it
    grows, so the board shows the spending of a run still going."""

    def __init__(self, ctx: RunContext, path: Path) -> None:
        super().__init__()
        self.ctx, self.path = ctx, path
        self.limits = budgets.run_limits(ctx)
        self.seen: tuple[int, int] | None = None
        self.reached: str | None = None

    def is_set(self) -> bool:
        if self.ctx.stop.is_set() or self.reached:
            return True
        try:
            st = self.path.stat()
        except OSError:
            return False
        if (st.st_mtime_ns, st.st_size) == self.seen:
            return False
        self.seen = (st.st_mtime_ns, st.st_size)
        usage = CommandBackend.reported_usage(self.ctx, self.path, quiet=True)
        with contextlib.suppress(OrchestratorError):
            self.ctx.board.update(self.ctx.task.id, self.ctx.token,
                                  usage=self.ctx.task.usage.add(usage))
        self.reached = budgets.first_reached(self.limits, usage)
        if self.reached:
            self.ctx.log.write(RunPaused(reason=self.reached))
        return self.reached is not None

