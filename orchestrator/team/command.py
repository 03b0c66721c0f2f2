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
import tempfile
from pathlib import Path

from orchestrator.board.model import Task, Usage
from orchestrator.budget import USAGE_FILE_ENV, read_usage_file
from orchestrator.config import Config
from orchestrator.errors import InvalidInput
from orchestrator.layout import Layout
from orchestrator.protocols import RunContext, RunResult
from orchestrator.team.proc import run_streamed


def build_prompt(task: Task) -> str:
    parts = [task.subject]
    if task.description:
        parts.append(task.description)
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
    return env


class CommandBackend:
    name = "command"

    def __init__(self, config: Config, layout: Layout) -> None:
        self.config = config
        self.layout = layout

    def run(self, ctx: RunContext) -> RunResult:
        cmd = ctx.settings.get("command") or self.config.team.command
        if not cmd:
            return RunResult(ok=False, retry=False, error="the command backend needs a command "
                             "(--command 'CMD' or team.command in orchestrator.toml)")
        ctx.log.write("backend_started", backend=self.name, command=cmd)
        with tempfile.TemporaryDirectory(prefix="orch-usage-") as tmp:
            usage_file = Path(tmp) / "usage.json"
            res = run_streamed(
                cmd, cwd=ctx.workspace.path, env={**task_env(ctx), USAGE_FILE_ENV: str(usage_file)},
                log=ctx.log, kind="output", timeout=ctx.timeout or self.config.team.task_timeout,
                stop=ctx.stop, on_start=ctx.settings.get("on_process_start"),
            )
            usage = self.reported_usage(ctx, usage_file)
        ctx.log.write("backend_finished", backend=self.name, exit_code=res.returncode,
                      seconds=round(res.seconds, 3), output_bytes=res.output_bytes,
                      result=res.describe())
        if res.stopped:
            return RunResult(ok=False, stopped=True, error="stopped", usage=usage)
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
