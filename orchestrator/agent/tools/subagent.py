"""The ``agent`` tool: hand a job to a sub-agent with a fresh context.

A sub-agent is a new `AgentLoop` in the same worktree, with the same model:

- **Fresh context.** Its conversation starts with the prompt it was given; it
  sees neither the parent's messages nor their tool results. Its system prompt
  is the parent's stable block (base instructions and memory, read from the
  prompt cache) plus a sub-agent role and the environment; not the task.
- **Granted tools, one gate.** It gets the tools named in ``tools`` (default:
  all of the parent's), each through the parent's permission gate, so plan
  mode, deny rules and permission requests apply to it as to the parent.
  ``todo_write`` and ``submit_plan`` belong to the task's own agent and are
  never granted.
- **One budget.** Its turns and tokens count toward the task's: while it runs
  the limits are checked against the parent's spending plus its own, the live
  usage on the task includes it, and when it ends its spending is added to
  the parent's. A budget that runs out inside it ends it; the parent's next
  turn then ends the task.
- **Transcript beside the task's:** ``.tasks/logs/<task>.sub-<n>.jsonl``, with a
  ``subagent`` record in the parent's transcript naming it.
- **Bounded nesting:** sub-agents may spawn sub-agents down to `MAX_DEPTH`;
  below that the tool is not offered.
- Only the sub-agent's final text comes back, as the one tool result.

Named sub-agents (``agent``: a profile from ``.claude/agents/<name>.md`` or
``[agents.<name>]``) come from `orchestrator.profiles` (``load_profiles(root,
config).get(name)``): the profile's prompt is added to the sub-agent's role and
only the tools it ``offers`` are granted. The sub-agent keeps the run's model
and permission gate (a profile's ``model`` and ``permissionMode`` apply to
tasks, not to sub-agents).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.agent.base import LimitExceeded, Stopped, ToolContext, ToolResult
from orchestrator.agent.loop import AgentLoop, Limits, LoopState
from orchestrator.agent.prompt import Prompt, environment, with_tools_breakpoint
from orchestrator.agent.tools.common import obj, prop
from orchestrator.agent.toolset import Toolset
from orchestrator.config import Config
from orchestrator.controlplane import TaskLogger, TaskLogs
from orchestrator.errors import BackendError, ConfigError, OrchestratorError
from orchestrator.profiles import load_profiles
from orchestrator.transcript import Subagent

MAX_DEPTH = 2
"""The task's agent is depth 0; its sub-agents 1, theirs 2, and no deeper."""
NOT_GRANTED = frozenset({"todo_write", "submit_plan"})

SUBAGENT_ROLE = """\
# Your role: sub-agent
You are now a sub-agent: a teammate handed you one self-contained job (the \
first message). You cannot see the teammate's conversation, so everything you \
know about the job is in that message. Do it with the tools you have, then end \
your turn with a complete, concise answer: your final message is all the \
teammate receives (not your tool calls or their output)."""


class SubagentError(OrchestratorError):
    """The sub-agent cannot start (unknown tool grant, unknown profile …)."""


@dataclass
class _Node:
    """One agent in the tree: its loop, transcript, and the agent that spawned it."""

    log: TaskLogger
    loop: AgentLoop | None = None
    above: _Node | None = None

    def spent(self) -> LoopState:
        """This agent's spending plus that of every agent above it (for the limits)."""
        assert self.loop is not None, "the agent loop is not bound yet"
        own = self.loop.state
        if self.above is None:
            return own
        up = self.above.spent()
        return LoopState(usage=up.usage.add(own.usage), turns=up.turns + own.turns,
                         started=up.started)


@dataclass
class SharedLimits(Limits):
    """The task's limits, checked against everything spent from the top agent down."""

    node: _Node | None = None

    def check(self, state: LoopState) -> None:
        super().check(self.node.spent() if self.node is not None else state)


class Subagents:
    """Spawns the sub-agents of one run. `bind` it to the task's loop before the loop runs."""

    def __init__(self, toolset: Toolset, logs: TaskLogs, task_id: str, project: Path, *,
                 config: Config | None = None, max_depth: int = MAX_DEPTH) -> None:
        self.toolset, self.logs, self.task_id = toolset, logs, task_id
        self.project = project
        """The main checkout: profiles come from there, never from the agent's worktree."""
        self.config = config or Config()
        self.max_depth = max_depth
        self.top: _Node | None = None

    def bind(self, loop: AgentLoop) -> None:
        self.top = _Node(loop.log, loop)

    @property
    def root(self) -> AgentLoop:
        if self.top is None or self.top.loop is None:
            raise SubagentError("sub-agents are not bound to a running agent")
        return self.top.loop

    def tool(self) -> AgentTool:
        """The ``agent`` tool of the task's own agent (depth 0)."""
        return AgentTool(self, None, depth=0)

    def grants(self, wanted: list[str] | None, profile: Any = None) -> list[Any]:
        grantable = [n for n in self.toolset.names() if n not in NOT_GRANTED and n != "agent"
                     and (profile is None or profile.offers(n))]
        if wanted is not None:
            unknown = [n for n in wanted if n not in grantable and n != "agent"]
            if unknown:
                raise SubagentError(f"cannot grant {', '.join(unknown)} "
                                    f"(grantable: {', '.join(grantable)})")
            grantable = [n for n in grantable if n in wanted]
        return [self.toolset.get(n) for n in grantable]

    def profile(self, name: str) -> Any:
        try:
            return load_profiles(self.project, self.config).get(name)
        except ConfigError as exc:
            raise SubagentError(str(exc)) from None

    def transcript(self) -> tuple[str, TaskLogger]:
        """A new transcript ``<task>.sub-<n>`` (its name and writer), numbered after the
        existing ones."""
        pattern = re.compile(re.escape(self.task_id) + r"\.sub-(\d+)$")
        taken = [int(m.group(1)) for name in self.logs.names(f"{self.task_id}.sub-")
                 if (m := pattern.match(name))]
        name = f"{self.task_id}.sub-{max(taken, default=0) + 1}"
        return name, self.logs.writer(name)


class AgentTool:
    name = "agent"
    read_only = True
    """It changes nothing itself; every tool the sub-agent calls goes through the gate."""
    description = (
        "Hand a self-contained job to a sub-agent that works in the same worktree with a "
        "fresh context: it sees none of this conversation, only your prompt, so say "
        "everything it needs. Only its final answer comes back to you. Use it for searches "
        "and investigations whose details you do not need to keep in your own context."
    )
    input_schema = obj(
        ["prompt"],
        description=prop("string", "A few words saying what the sub-agent is for."),
        prompt=prop("string", "The job, complete: what to do and what to answer with."),
        tools=prop("array", "Tool names to grant (default: all of yours).",
                   items=prop("string", "A tool name.")),
        agent=prop("string", "A named sub-agent profile (.claude/agents/<name>.md)."),
    )

    def __init__(self, host: Subagents, node: _Node | None, depth: int) -> None:
        self.host, self.node, self.depth = host, node, depth

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        host = self.host
        try:
            root = host.root
            above = self.node or host.top
            assert above is not None
            profile = host.profile(args["agent"]) if args.get("agent") else None
            tools = host.grants(args.get("tools"), profile)
        except SubagentError as exc:
            return ToolResult(f"agent: {exc}", is_error=True)
        log_name, log = host.transcript()
        node = _Node(log, above=above)
        if self.depth + 1 < host.max_depth and "agent" in (args.get("tools") or ["agent"]) \
                and (profile is None or profile.offers("agent")):
            tools.append(AgentTool(host, node, self.depth + 1))
        toolset = Toolset(tools, host.toolset.gate, host.toolset.ctx)
        role = SUBAGENT_ROLE
        if profile is not None and profile.settings.prompt.strip():
            role += f"\n\n# The {profile.name} agent\n{profile.settings.prompt.strip()}"
        prompt = Prompt(system=[*root.prompt.system[:1],
                                {"type": "text", "text": f"{role}\n\n{environment(ctx.cwd)}"}],
                        tools=with_tools_breakpoint(toolset.schemas()),
                        first_message=args["prompt"])
        on_usage = root.on_usage

        def live(_total: Any) -> None:
            if on_usage is not None:
                on_usage(node.spent().usage)

        limits = SharedLimits(**{f.name: getattr(root.limits, f.name)  # shallow: Limit kept
                                 for f in dataclasses.fields(Limits)}, node=node)
        node.loop = AgentLoop(root.model, toolset, prompt, log, limits=limits,
                              max_tokens=root.max_tokens, stop=root.stop, ask=root.ask,
                              on_usage=live)
        above.log.write(Subagent(transcript=f"{log_name}.jsonl", depth=self.depth + 1,
                                 description=args.get("description", ""), agent=args.get("agent"),
                                 tools=toolset.names()))
        try:
            answer = node.loop.run()
        except (LimitExceeded, Stopped) as exc:
            return ToolResult(f"agent: the sub-agent was stopped: {exc}", is_error=True)
        except BackendError as exc:
            return ToolResult(f"agent: the sub-agent failed: {exc}", is_error=True)
        finally:
            assert above.loop is not None
            mine = above.loop.state
            mine.usage = mine.usage.add(node.loop.state.usage)
            mine.turns += node.loop.state.turns
        return ToolResult(answer or "(the sub-agent ended without an answer)")
