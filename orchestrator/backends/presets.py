"""Command-line agents as teammates: presets for aider, codex and gemini, and ``cli``
for any command.

    orchestrator up --backend aider          # or codex, gemini
    orchestrator up --backend cli            # your own, from [commands.cli]

    [commands.cli]
    argv = ["my-agent", "--task", "{prompt}"]
    prompt = "arg"          # or "stdin", or "env" (then prompt_env names the variable)

A preset is the agent's words and how it takes the task's prompt: ``arg``
replaces ``{prompt}`` in the words, ``stdin`` feeds it on standard input, ``env``
puts it in ``prompt_env`` (default ``ORCH_PROMPT``). The built-ins below can be
replaced with ``[commands.aider]`` and so on.

The command runs as the ``command`` backend's does (`orchestrator.process`): in
the worktree, in its own process group, with the task's ``ORCH_*`` variables,
its output streamed to the task log, killed past the task timeout, released on
a warm stop; exit 0 is done. A command that is not installed, cannot run (exit
126/127), or fails within ``commands.startup_seconds`` without touching the
worktree (not logged in, a bad flag) fails the task once, without retries, with
its last output in the error.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

from orchestrator.config import CommandPreset, Config
from orchestrator.fsutil import atomic_write
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.process import CANNOT_RUN, run_streamed
from orchestrator.prompting import build_prompt, last_lines, task_env
from orchestrator.protocols import RunContext, RunResult
from orchestrator.sandbox import backend_sandbox
from orchestrator.sandbox.credproxy import run_env
from orchestrator.transcript import BackendFinished, BackendStarted, Error

PRESETS: dict[str, CommandPreset] = {
    "aider": CommandPreset(argv=["aider", "--yes-always", "--no-auto-commits",
                                 "--no-check-update", "--message", "{prompt}"]),
    "codex": CommandPreset(argv=["codex", "exec", "--full-auto", "{prompt}"]),
    "gemini": CommandPreset(argv=["gemini", "--yolo", "--prompt", "{prompt}"]),
}
INSTALL = {"aider": "pip install aider-chat", "codex": "npm install -g @openai/codex",
           "gemini": "npm install -g @google/gemini-cli"}


def command_line(preset: CommandPreset, prompt: str, stdin: Path | None) -> str:
    """The shell line for ``preset`` (every word quoted; the prompt never meets the shell)."""
    words = [w.replace("{prompt}", prompt) for w in preset.argv] if preset.prompt == "arg" \
        else list(preset.argv)
    line = shlex.join(words)
    return f"{line} < {shlex.quote(str(stdin))}" if stdin is not None else line


def find_program(word: str, cwd: Path, path: str | None) -> str | None:
    if "/" in word:
        found = cwd / Path(word).expanduser()
        return str(found) if found.is_file() else None
    return shutil.which(word, path=path)


def worktree_state(path: Path) -> str:
    """HEAD and the dirty files: what tells whether an agent did anything."""
    git = Git(path)
    return (git.run("rev-parse", "HEAD", check=False).stdout
            + git.run("status", "--porcelain", "--untracked-files=all", check=False).stdout)


class PresetBackend:
    """Runs one preset; ``name`` is the backend's and the preset's name."""

    name = "cli"

    def __init__(self, config: Config, layout: Layout) -> None:
        self.config = config
        self.layout = layout

    def preset(self) -> CommandPreset | None:
        own: CommandPreset | None = getattr(self.config.commands, self.name, None)
        return own or PRESETS.get(self.name)

    def run(self, ctx: RunContext) -> RunResult:
        preset = self.preset()
        if preset is None:
            return self._fail(ctx, f"the {self.name} backend needs a command: "
                              f'[commands.{self.name}] argv = ["agent", "{{prompt}}"] in '
                              "orchestrator.toml", retry=False)
        env = task_env(ctx) | preset.env
        prompt = build_prompt(ctx.task)
        if preset.prompt == "env":
            env[preset.prompt_env] = prompt
        program = preset.argv[0]
        if find_program(program, ctx.workspace.path, env.get("PATH")) is None:
            hint = f" (install: {INSTALL[self.name]})" if self.name in INSTALL else ""
            return self._fail(ctx, f"{self.name}: {program!r} is not installed or not on "
                              f"PATH{hint}", retry=False)
        stdin = None
        if preset.prompt == "stdin":
            stdin = self.layout.run / "prompts" / f"{ctx.task.id}-{ctx.teammate}.txt"
            stdin.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(stdin, prompt.encode())
        line = command_line(preset, prompt, stdin)
        before = worktree_state(ctx.workspace.path)
        ctx.log.write(BackendStarted(backend=self.name, argv=preset.argv,
                                     prompt_via=preset.prompt))
        box = backend_sandbox(self.config, line, [] if stdin is None else [stdin.parent],
                              self.layout.root)
        try:
            with run_env(env, self.config.agent.pass_env, sandbox=box) as (env, box):
                res = run_streamed(line, cwd=ctx.workspace.path, env=env, log=ctx.log,
                                   timeout=ctx.timeout or self.config.team.task_timeout,
                                   stop=ctx.stop, on_start=ctx.on_process_start, sandbox=box)
        finally:
            if stdin is not None:
                stdin.unlink(missing_ok=True)
        ctx.log.write(BackendFinished(backend=self.name, exit_code=res.returncode,
                                      seconds=round(res.seconds, 3), output_bytes=res.output_bytes,
                                      result=res.describe()))
        if res.stopped:
            return RunResult(ok=False, stopped=True, error="stopped")
        tail = last_lines(res.tail)
        if res.ok:
            return RunResult(ok=True, summary=last_lines(res.tail, 5))
        if res.returncode in CANNOT_RUN:
            return self._fail(ctx, f"{self.name} cannot run ({res.describe()}):\n{tail}",
                              retry=False)
        quick = self.config.commands.startup_seconds
        if not res.timed_out and res.seconds < quick \
                and worktree_state(ctx.workspace.path) == before:
            return self._fail(ctx, f"{self.name} exited at once ({res.describe()}, nothing "
                              f"changed; not logged in or misconfigured?):\n{tail}", retry=False)
        return self._fail(ctx, f"{self.name} failed: {res.describe()}\n{tail}", retry=True)

    def _fail(self, ctx: RunContext, error: str, *, retry: bool) -> RunResult:
        ctx.log.write(Error(error=error))
        return RunResult(ok=False, error=error, retry=retry)


class AiderBackend(PresetBackend):
    name = "aider"


class CodexBackend(PresetBackend):
    name = "codex"


class GeminiBackend(PresetBackend):
    name = "gemini"

