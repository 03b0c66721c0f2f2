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
Code refuses, becomes ``acceptEdits`` with every built-in tool allowed. The CLI
runs in the task's sandbox (`orchestrator.sandbox.backend_sandbox`, unless
``sandbox.backends`` is off) with a credential proxy's token in place of the key
(`orchestrator.sandbox.credproxy`). Its Bash is still treated as unconfined
(the rule predates the sandbox and asks more, never less): unless
``agent.allow_unsandboxed_bash`` is set
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

The parts: `stream` (the output parsed), `process` (running the CLI, a session's
turns), `config` (permission arguments, MCP config, config dir, budget); this module
puts them together as the backend.
"""

from __future__ import annotations

from orchestrator.backends.claude_code.config import (
    budget,
    config_dir,
    linked_files,
    mcp_args,
    mcp_paths,
    permission_args,
)
from orchestrator.backends.claude_code.process import (
    INSTALL_HINT,
    Session,
    command_line,
    find_binary,
    resume_prompt,
    session_env,
)
from orchestrator.backends.claude_code.stream import ClaudeStream, Denial, usage_of
from orchestrator.config import Config
from orchestrator.errors import OrchestratorError
from orchestrator.layout import Layout
from orchestrator.model import Usage
from orchestrator.prompting import task_env
from orchestrator.protocols import RunContext, RunResult
from orchestrator.sandbox import backend_sandbox
from orchestrator.sandbox.credproxy import is_proxied, run_env
from orchestrator.transcript import Error

__all__ = [
    "ClaudeCodeBackend",
    "ClaudeStream",
    "Denial",
    "Session",
    "budget",
    "command_line",
    "config_dir",
    "mcp_args",
    "permission_args",
    "resume_prompt",
    "session_env",
    "usage_of",
]


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
            base, rules = command_line(self.config, binary, self.layout.root, cdir,
                                       turns, dollars, ctx.workspace.path)
        except (OrchestratorError, OSError) as exc:
            return self._fail(ctx, f"claude-code: {exc}", retry=False)
        env.update(session_env(cdir))
        box = backend_sandbox(self.config, binary, [cdir.parent], self.layout.root)
        with run_env(env, self.config.agent.pass_env, sandbox=box) as (env, box):
            if box is not None:  # the person's settings linked in; their login only unproxied
                box = box.with_(files=[*linked_files(cdir, login=not is_proxied(env)),
                                       *mcp_paths(cdir)])
            return Session(self.config, ctx, base, rules["allow"], rules["deny"], env, cdir,
                           sandbox=box).run()

    def _fail(self, ctx: RunContext, error: str, *, retry: bool,
              usage: Usage | None = None) -> RunResult:
        ctx.log.write(Error(error=error))
        return RunResult(ok=False, error=error, retry=retry, usage=usage or Usage())
