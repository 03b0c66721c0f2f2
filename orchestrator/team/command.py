"""The ``command`` backend: any CLI agent (aider, codex, gemini …) from a command template.

The command runs through the shell in the task's worktree, in its own process
group, with the task in its environment:

    ORCH_TASK_ID, ORCH_TASK_SUBJECT, ORCH_TASK_DESCRIPTION
    ORCH_PROMPT          subject, description and any review feedback, as one prompt
    ORCH_TEAMMATE        the teammate running it
    ORCH_USAGE_FILE      where the command may report what it spent: one JSON object
                         {"input_tokens", "output_tokens", "cache_read_tokens",
                         "cache_write_tokens", "cost_usd"} with the run's totals, or JSON
                         lines of such objects (added up); counted against the task's
                         budget after the run (`orchestrator.budget.read_usage_file`)
    + the workspace's own variables (ORCH_WORKTREE, ORCH_PORT_BASE …)

Exit code 0 means done. Output goes to the task log as it comes. Past
``team.task_timeout`` (or the run's own timeout) the whole group is killed; a
warm stop terminates it and the task is released, not failed.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

from orchestrator.board.model import Task, Usage
from orchestrator.budget import USAGE_FILE_ENV, read_usage_file
from orchestrator.config import Config
from orchestrator.errors import ConfigError, InvalidInput
from orchestrator.layout import Layout
from orchestrator.process import CANNOT_RUN, run_streamed
from orchestrator.protocols import RunContext, RunResult
from orchestrator.team.delivery import MESSAGES_ENV


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
    out = subprocess.run(["git", "cat-file", "-e", f"HEAD:{rel}"], cwd=root,
                         capture_output=True, check=False)
    return out.returncode == 0


LAST_ERROR_LINES = 30
"""How much of the last attempt's error (a failing check's output tail) a retry is shown."""


def last_failure(task: Task) -> str | None:
    """What went wrong on the task's last attempt, for the prompt of the next one (every
    backend puts it there), or None on a first attempt."""
    if not task.error or not task.error.strip():
        return None
    lines = task.error.strip().splitlines()
    if len(lines) > LAST_ERROR_LINES:
        lines = [lines[0], "…", *lines[-LAST_ERROR_LINES + 2:]]
    which = f" (attempt {task.attempts} of {task.max_attempts})" if task.attempts else ""
    return (f"The previous attempt{which} failed; its work is still in this worktree. "
            "What went wrong:\n" + "\n".join(lines))


def reason_line(error: str) -> str:
    """One line for the console: the error's first line, and its last when that differs
    (the last line of a command's output usually says what went wrong)."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    if not lines:
        return "failed"
    first, last = lines[0][:200], lines[-1][:200]
    return first if len(lines) == 1 or first == last else f"{first} — {last}"


def build_prompt(task: Task) -> str:
    parts = [task.subject]
    if task.description:
        parts.append(task.description)
    failure = last_failure(task)
    if failure:
        parts.append(failure)
    if task.feedback:
        parts.append("Feedback from review:\n" + "\n".join(f"- {f}" for f in task.feedback))
    return "\n\n".join(parts)


def task_env(ctx: RunContext) -> dict[str, str]:
    """The environment of every process run for a task (backend and checks)."""
    env = dict(os.environ)
    env.update(ctx.workspace.env)
    env.update(
        ORCH_TASK_ID=ctx.task.id,
        ORCH_TASK_SUBJECT=ctx.task.subject,
        ORCH_TASK_DESCRIPTION=ctx.task.description,
        ORCH_PROMPT=build_prompt(ctx.task),
        ORCH_TEAMMATE=ctx.teammate,
    )
    if ctx.messages is not None:
        env[MESSAGES_ENV] = str(ctx.messages)
    return env


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
        ctx.log.write("backend_started", backend=self.name, command=cmd)
        with tempfile.TemporaryDirectory(prefix="orch-usage-") as tmp:
            usage_file = Path(tmp) / "usage.json"
            res = run_streamed(
                cmd, cwd=ctx.workspace.path, env={**task_env(ctx), USAGE_FILE_ENV: str(usage_file)},
                log=ctx.log, kind="output", timeout=ctx.timeout or self.config.team.task_timeout,
                stop=ctx.stop, on_start=ctx.on_process_start,
            )
            usage = self.reported_usage(ctx, usage_file)
        ctx.log.write("backend_finished", backend=self.name, exit_code=res.returncode,
                      seconds=round(res.seconds, 3), output_bytes=res.output_bytes,
                      result=res.describe())
        if res.stopped:
            return RunResult(ok=False, stopped=True, error="stopped", usage=usage)
        if not res.ok and res.returncode in CANNOT_RUN:
            # the shell could not find or execute the program: the same on every attempt
            error = f"command cannot run ({res.describe()}): {cmd}\n{_last_lines(res.tail)}"
            return RunResult(ok=False, error=error, retry=False, usage=usage)
        if not res.ok:
            error = f"command failed: {res.describe()}\n{_last_lines(res.tail)}"
            return RunResult(ok=False, error=error, usage=usage)
        return RunResult(ok=True, summary=_last_lines(res.tail, 5), usage=usage)

    @staticmethod
    def reported_usage(ctx: RunContext, path: Path) -> Usage:
        """What the command wrote to ``$ORCH_USAGE_FILE`` (`orchestrator.budget`); a
        malformed file counts nothing and says why in the task log."""
        try:
            usage = read_usage_file(path)
        except InvalidInput as exc:
            ctx.log.write("usage_rejected", error=str(exc))
            return Usage()
        if usage != Usage():
            ctx.log.write("usage", **usage.model_dump())
        return usage


def _last_lines(text: str, n: int = 20) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])
