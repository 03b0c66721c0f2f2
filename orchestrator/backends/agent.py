"""The ``anthropic`` and ``scripted`` backends: the master loop in a task's worktree.

Both build the same run: the tools behind the one permission gate, confined to
the worktree (bash in the sandbox, secrets stripped from its environment), the
``agent`` tool for sub-agents sharing the task's budget, plan mode and
``submit_plan`` for plan-first tasks, the prompt for this task, the permission
flow to the lead, live usage on the task, and the task's agent profile (model,
permission mode, turns, tools, prompt: `orchestrator.profiles`); only the
model differs. Signals map
to the `RunResult` the teammate acts on:

    Finished        ok, the model's summary
    BudgetReached   paused: the task waits for a person (`orchestrator.budget`); the
                    transcript is kept, so ``resume`` continues the same conversation
                    (``anthropic``; a scripted run starts its script again)
    NoProgress      paused the same way (`orchestrator.agent.progress`)
    LimitExceeded   failed, not retried (the same budget would run out again)
    Stopped         stopped (the teammate releases the task)
    BackendError    failed, retried (a script that does not match: not retried)

Extensions (MCP servers) plug in through `EXTENSIONS`: ``module:function``
names, each ``function(config, ctx, toolset)`` returning a context manager that
adds its tools to the toolset and yields the text for the prompt's "MCP
capabilities" section; a module that is not installed is skipped.
"""

from __future__ import annotations

import contextlib
import importlib
import uuid
from collections.abc import Callable
from typing import Any

from orchestrator import budget, delivery, profiles
from orchestrator.agent import plan_first
from orchestrator.agent.base import BudgetReached, LimitExceeded, Model, Stopped, ToolContext
from orchestrator.agent.loop import AgentLoop, Limits
from orchestrator.agent.permission_flow import PermissionFlow
from orchestrator.agent.progress import NoProgress, ProgressWatch
from orchestrator.agent.prompt import PromptSources, build_prompt
from orchestrator.agent.scripted import ScriptedModel, ScriptError, load_script
from orchestrator.agent.tools.subagent import Subagents
from orchestrator.agent.toolset import Toolset
from orchestrator.config import Config
from orchestrator.errors import BackendError, ConfigError, InvalidInput
from orchestrator.layout import Layout
from orchestrator.model import Usage
from orchestrator.procutil import user_environ
from orchestrator.protocols import RunContext, RunResult
from orchestrator.transcript import (
    Error,
    ProfileChosen,
    RunPaused,
    SandboxNote,
    SessionSaved,
    parse,
)

EXTENSIONS: list[str] = ["orchestrator.mcp.attach:attach"]


class AgentBackend:
    """The shared run; subclasses say which model to use."""

    name = "agent"

    def __init__(self, config: Config, layout: Layout) -> None:
        self.config = config
        self.layout = layout

    def model_for(self, ctx: RunContext, config: Config | None = None) -> Model:
        """The run's model; ``config`` is the run's (a task's agent profile applied)."""
        raise NotImplementedError

    def run(self, ctx: RunContext) -> RunResult:
        try:
            # the profile comes from the main checkout: an agent cannot edit its own
            config, profile = profiles.resolve(self.layout.root, self.config, ctx.task.agent)
            model = self.model_for(ctx, config)
        except (BackendError, InvalidInput, ConfigError) as exc:
            ctx.log.write(Error(error=str(exc)))
            return RunResult(ok=False, error=str(exc), retry=False)
        usage = Usage()
        loop: AgentLoop | None = None

        limits = budget.run_limits(ctx)

        def live(total: Usage) -> None:
            nonlocal usage
            before, usage = usage, total
            ctx.board.update(ctx.task.id, ctx.token, usage=ctx.task.usage.add(total))
            budget.warn(limits, before, total, ctx.board.events, ctx.task.id, ctx.teammate)

        try:
            with contextlib.ExitStack() as stack:
                toolset = build_toolset(config, ctx)
                subagents = Subagents(toolset, ctx.board.logs, ctx.task.id, ctx.layout.root,
                                      config=config)
                toolset.add(subagents.tool())
                capabilities = [stack.enter_context(ext(config, ctx, toolset))
                                for ext in extensions()]
                if profile is not None:
                    ctx.log.write(ProfileChosen(name=profile.name, model=config.agent.model,
                                                permission_mode=config.agent.permission_mode,
                                                dropped=profiles.restrict(toolset, profile)))
                sources = PromptSources(ctx.workspace.path,
                                        mcp_capabilities="\n\n".join(c for c in capabilities if c))
                flow = PermissionFlow(ctx.board, ctx.task.id, ctx.token, ctx.teammate,
                                      ctx.stop)
                planning = plan_first.start(ctx.task, ctx.token, toolset, flow)
                prompt = build_prompt(ctx.task, toolset.schemas(), sources)
                if profile is not None:
                    prompt = profile.shape_prompt(prompt)
                loop = AgentLoop(model, toolset, prompt, ctx.log,
                                 limits=Limits.of(config.agent, ctx.timeout, limits),
                                 max_tokens=config.agent.max_tokens, stop=ctx.stop,
                                 ask=flow.ask, on_usage=live,
                                 inbox=delivery.Reader(ctx.messages).new,
                                 watch=ProgressWatch(
                                     config.agent.no_progress_repeats,
                                     config.agent.no_progress_failures,
                                     config.agent.no_progress_turns),
                                 after_change=ctx.on_files_changed)
                subagents.bind(loop)
                summary = loop.run(plan_first.first_message(ctx.task, prompt.first_message),
                                   resume=self.transcript(ctx))
                if isinstance(model, ScriptedModel):
                    model.assert_done()
                if planning is not None and not planning.approved:
                    return self._failed(ctx, plan_first.NO_PLAN_ERROR, usage, retry=True)
                return RunResult(ok=True, summary=summary, usage=usage)
        except (BudgetReached, NoProgress) as exc:
            ctx.log.write(RunPaused(reason=str(exc)))
            session = self.keep_transcript(ctx, loop)
            return RunResult(ok=False, error=str(exc), usage=usage, paused=str(exc),
                             session_id=session)
        except LimitExceeded as exc:
            return self._failed(ctx, f"budget: {exc}", usage, retry=False)
        except Stopped:
            return RunResult(ok=False, stopped=True, error="stopped", usage=usage)
        except ScriptError as exc:
            return self._failed(ctx, f"script: {exc}", usage, retry=False)
        except BackendError as exc:
            return self._failed(ctx, str(exc), usage, retry=exc.retry)
        finally:
            close = getattr(model, "close", None)
            if close is not None:
                close()

    resumable = False
    """Whether a paused run's transcript is continued by the next run of the task."""

    def keep_transcript(self, ctx: RunContext, loop: AgentLoop | None) -> str | None:
        """Save a paused run's messages for `transcript`; the session id naming them."""
        if not self.resumable or loop is None:
            return None
        session = f"loop-{uuid.uuid4().hex[:12]}"
        ctx.board.logs.append(_session_log(ctx), SessionSaved(
            session_id=session, messages=loop.state.messages, feedback=len(ctx.task.feedback)))
        return session

    def transcript(self, ctx: RunContext) -> list[dict[str, Any]] | None:
        """The messages of the task's paused run, when this run continues it."""
        session = ctx.task.session_id
        if not self.resumable or not session or not session.startswith("loop-"):
            return None
        saved: SessionSaved | None = None
        for rec in ctx.board.logs.read(_session_log(ctx)):
            entry = parse(rec.to_dict())
            if isinstance(entry, SessionSaved) and entry.session_id == session:
                saved = entry
        if saved is None or not saved.messages:
            return None
        messages = list(saved.messages)
        new = ctx.task.feedback[saved.feedback:] if saved.feedback >= 0 else []
        if new:  # what the person said when resuming (resume -m)
            note = {"type": "text", "text": "Feedback from a person:\n" + "\n".join(
                f"- {f}" for f in new)}
            last = messages[-1]
            if isinstance(last, dict) and last.get("role") == "user":
                content = last.get("content")
                blocks = content if isinstance(content, list) else [
                    {"type": "text", "text": str(content)}]
                messages[-1] = {**last, "content": [*blocks, note]}
            else:
                messages.append({"role": "user", "content": [note]})
        return messages

    def _failed(self, ctx: RunContext, error: str, usage: Usage, *, retry: bool) -> RunResult:
        ctx.log.write(Error(error=error))
        return RunResult(ok=False, error=error, usage=usage, retry=retry)


class AnthropicBackend(AgentBackend):
    """The built-in master loop on the Messages API (``ANTHROPIC_API_KEY``,
    ``ANTHROPIC_BASE_URL`` for proxies and gateways)."""

    name = "anthropic"
    resumable = True

    def model_for(self, ctx: RunContext, config: Config | None = None) -> Model:
        from orchestrator.agent.anthropic_model import AnthropicModel

        return AnthropicModel((config or self.config).agent.model)


class ScriptedBackend(AgentBackend):
    """Replays the task's script (``metadata.script`` or ``ORCH_SCRIPT``) as the model."""

    name = "scripted"

    def model_for(self, ctx: RunContext, config: Config | None = None) -> Model:
        return ScriptedModel(load_script(ctx.task, self.layout.root))


def _session_log(ctx: RunContext) -> str:
    """The log that keeps the messages of the task's paused runs (one record each)."""
    return f"{ctx.task.id}.session"


def build_toolset(config: Config, ctx: RunContext) -> Toolset:
    from orchestrator.agent.permissions import PermissionGate
    from orchestrator.agent.tools import default_tools
    from orchestrator.sandbox import safe_env, task_sandbox
    from orchestrator.secrets import protect_process

    protect_process()  # this process is the parent of every tool process it runs
    root = ctx.workspace.path
    sandbox = task_sandbox(config, root=ctx.layout.root)
    notice = sandbox.notice or (None if sandbox.enabled else "sandbox off (agent.sandbox = off)")
    if notice and not config.agent.allow_unsandboxed_bash:
        notice += ("; bash commands ask a person first, because unconfined they can read "
                   "every file and process of this user (set agent.allow_unsandboxed_bash = "
                   "true to let the permission mode and rules allow them)")
    elif notice:
        notice += "; bash runs unconfined (agent.allow_unsandboxed_bash = true)"
    if notice:
        ctx.log.write(SandboxNote(notice=notice))
    env = safe_env({**user_environ(ctx.layout.root), **ctx.workspace.env},
                   config.agent.pass_env)
    tctx = ToolContext(
        cwd=root, env=env, task_id=ctx.task.id,
        spill_dir=ctx.layout.spill_dir(ctx.task.id),
        board=ctx.board, token=ctx.token, teammate=ctx.teammate, sandbox=sandbox,
        events=ctx.board.events, layout=ctx.layout,
    )
    # Project rules come from the main checkout, not the worktree: an agent must not be
    # able to grant itself permissions by editing its own copy of .claude/settings.json.
    gate = PermissionGate.from_sources(config.agent, ctx.layout.root, root,
                                       sandboxed=sandbox.enabled)
    return Toolset(default_tools(config.agent), gate, tctx)


def extensions() -> list[Callable[..., Any]]:
    found = []
    for target in EXTENSIONS:
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or not module_name.startswith(exc.name):
                raise
            continue
        found.append(getattr(module, attr))
    return found
