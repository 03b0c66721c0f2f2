"""``orchestrator plan GOAL``: the lead model turns a goal into tasks on the board.

The lead runs the same master loop as a teammate, in the main checkout, in
``plan`` permission mode with read-only tools (read, glob, grep, ls, and the
board's task_list/task_get) plus a planning ``task_create`` that records a
task in memory instead of writing it:

    ref          a local name other planned tasks use in ``blocked_by``
    subject, description, acceptance_criteria, priority, agent (a profile)
    blocked_by   refs of planned tasks, or ids of tasks already on the board

When the model ends its turn the plan is checked as a whole — at least one
task, every blocker known, no cycle — and then written to the board in
dependency order, local refs becoming task ids. A plan that fails the check is
refused with a `InvalidInput` naming the problem and nothing is written;
``dry_run`` stops after the check and writes nothing at all (no board change,
no event, no transcript). The transcript of a real run goes to
``.tasks/logs/plan-<time>.jsonl``.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import msgspec

from orchestrator.adding import add_task
from orchestrator.agent.base import LimitExceeded, ToolContext, ToolResult
from orchestrator.agent.loop import AgentLoop, Limits
from orchestrator.agent.prompt import (
    EPHEMERAL,
    Prompt,
    environment,
    project_memory,
    with_tools_breakpoint,
)
from orchestrator.agent.tools.common import obj, prop
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane as Board
from orchestrator.errors import BackendError, ConfigError, InvalidInput
from orchestrator.events import PlanWritten
from orchestrator.layout import Layout
from orchestrator.model import TASK_ID_RE, Task, Usage
from orchestrator.profiles import Profile, check_task_profile, load_profiles
from orchestrator.record import convert
from orchestrator.transcript import LogEntry

LEAD = "lead"
REF_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
PLAN_INSTRUCTIONS = """\
You are the lead of a team of coding agents. You do not change the repository: \
you turn the user's goal into tasks that teammates will do, each alone in its own \
git worktree.
- First look at the repository with the read-only tools, enough to plan well.
- Then call task_create once per task. Give each task a short `ref`, a one-line \
subject, and a description that says what to change and how a reviewer can tell it \
is done (acceptance criteria). Keep tasks small enough for one agent session and \
independent where you can.
- When a task needs another one's result, put the other task's ref in its \
`blocked_by`: it then starts from that task's branch. Never make a cycle.
- When every task is filed, end your turn with a two-line summary of the plan."""


@dataclass
class PlannedTask:
    ref: str
    subject: str
    description: str = ""
    blocked_by: list[str] = field(default_factory=list)
    priority: int = 0
    agent: str | None = None
    id: str | None = None
    """The board id once written."""

    def to_dict(self) -> dict[str, Any]:
        return {"ref": self.ref, "id": self.id, "subject": self.subject,
                "description": self.description, "blocked_by": self.blocked_by,
                "priority": self.priority, "agent": self.agent}


@dataclass
class Plan:
    goal: str
    tasks: list[PlannedTask] = field(default_factory=list)
    summary: str = ""
    usage: Usage = field(default_factory=Usage)
    written: bool = False

    def ref(self, ref: str) -> PlannedTask | None:
        return next((t for t in self.tasks if t.ref == ref), None)

    def to_dict(self) -> dict[str, Any]:
        return {"goal": self.goal, "written": self.written, "summary": self.summary,
                "tasks": [t.to_dict() for t in self.tasks],
                "usage": msgspec.to_builtins(self.usage)}


class PlanTaskTool:
    """The lead's ``task_create``: records a task of the plan (nothing is written yet)."""

    name = "task_create"
    read_only = True  # it changes nothing until the plan as a whole is accepted
    description = ("Add a task to the plan. Other tasks refer to it by its `ref` in "
                   "`blocked_by`. Nothing reaches the board until the whole plan is checked.")
    input_schema = obj(
        ["subject", "description"],
        ref=prop("string", "A short local name for this task, e.g. `api` (default t1, t2…)."),
        subject=prop("string", "One line saying what is to be done."),
        description=prop("string", "What to change, and the acceptance criteria: how a "
                                   "reviewer can tell that it is done."),
        acceptance_criteria=prop("array", "Checks that must hold when the task is done.",
                                 items=prop("string", "One criterion.")),
        blocked_by=prop("array", "Refs of planned tasks (or ids of tasks already on the "
                                 "board) that must be done first.",
                        items=prop("string", "A ref or a task id.")),
        priority=prop("integer", "Higher runs first (default 0)."),
        agent=prop("string", "An agent profile to run this task with."),
    )

    def __init__(self, plan: Plan, profiles: list[str]) -> None:
        self.plan = plan
        self.profiles = profiles

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        ref = str(args.get("ref") or f"t{len(self.plan.tasks) + 1}")
        problem = self._problem(ref, args)
        if problem:
            return ToolResult(f"task_create: {problem}", is_error=True)
        description = args["description"].strip()
        criteria = [c.strip() for c in args.get("acceptance_criteria", []) if c.strip()]
        if criteria:
            description += "\n\nAcceptance criteria:\n" + "\n".join(f"- {c}" for c in criteria)
        self.plan.tasks.append(PlannedTask(
            ref=ref, subject=args["subject"].strip(), description=description,
            blocked_by=list(dict.fromkeys(args.get("blocked_by", []))),
            priority=args.get("priority", 0), agent=args.get("agent") or None))
        return ToolResult(f"planned {ref}: {args['subject'].strip()}")

    def _problem(self, ref: str, args: dict[str, Any]) -> str | None:
        if not REF_RE.match(ref):
            return f"bad ref {ref!r} (letters, digits, '.', '_', '-')"
        if self.plan.ref(ref) is not None:
            return f"ref {ref!r} is already used; choose another"
        if not args["subject"].strip() or len(args["subject"]) > 500:
            return "the subject must be one line of 1 to 500 characters"
        agent = args.get("agent")
        if agent and agent not in self.profiles:
            known = ", ".join(self.profiles) or "none defined"
            return f"unknown agent profile {agent!r} (profiles: {known})"
        return None


def check_plan(plan: Plan, board_ids: set[str]) -> None:
    """`InvalidInput` unless the plan is a DAG whose blockers all exist."""
    if not plan.tasks:
        raise InvalidInput("the lead planned no tasks" + (f": {plan.summary.strip()[:200]}"
                                                          if plan.summary.strip() else ""))
    refs = {t.ref for t in plan.tasks}
    for t in plan.tasks:
        for b in t.blocked_by:
            if b not in refs and not (TASK_ID_RE.match(b) and b in board_ids):
                raise InvalidInput(f"plan refused: {t.ref} is blocked by {b!r}, which is "
                                   f"neither a planned task ({', '.join(sorted(refs))}) "
                                   "nor a task on the board; nothing was written")
    order = topological(plan)
    if order is None:
        raise InvalidInput(f"plan refused: dependency cycle {' -> '.join(_cycle(plan))}; "
                           "nothing was written")


def topological(plan: Plan) -> list[PlannedTask] | None:
    """Planned tasks, blockers first (plan order among equals); None on a cycle."""
    local = {t.ref: t for t in plan.tasks}
    done: set[str] = set()
    order: list[PlannedTask] = []
    while len(order) < len(plan.tasks):
        ready = [t for t in plan.tasks if t.ref not in done
                 and all(b in done or b not in local for b in t.blocked_by)]
        if not ready:
            return None
        for t in ready:
            done.add(t.ref)
            order.append(t)
    return order


def _cycle(plan: Plan) -> list[str]:
    local = {t.ref: t for t in plan.tasks}
    for start in plan.tasks:
        path, node = [start.ref], start
        seen = {start.ref}
        while True:
            nxt = next((b for b in node.blocked_by if b in local), None)
            if nxt is None:
                break
            path.append(nxt)
            if nxt in seen:
                return path[path.index(nxt):]
            seen.add(nxt)
            node = local[nxt]
    return [t.ref for t in plan.tasks]


def write_plan(plan: Plan, layout: Layout, config: Config, board: Board) -> None:
    """Add the (checked) plan to the board, blockers first; fills in each task's ``id``."""
    order = topological(plan)
    assert order is not None
    for t in order:  # everything is validated before the first task is written
        try:
            convert({"id": "task_000", "subject": t.subject, "description": t.description,
                     "priority": t.priority, "agent": t.agent}, Task)
            if t.agent:
                check_task_profile(layout.root, config, t.agent)
        except (ValueError, ConfigError) as exc:
            raise InvalidInput(f"plan refused: task {t.ref}: {exc}") from None
    ids: dict[str, str] = {}
    plan_id = f"plan-{uuid.uuid4().hex[:8]}"  # what [budget] plan_usd counts together
    for t in order:
        blockers = [ids.get(b, b) for b in t.blocked_by]
        task = add_task(layout, config, board, t.subject, description=t.description,
                        blocked_by=blockers, priority=t.priority, agent=t.agent, actor=LEAD,
                        metadata={"plan": {"id": plan_id, "goal": plan.goal[:500],
                                           "ref": t.ref}})
        ids[t.ref] = t.id = task.id
    for t in plan.tasks:
        t.blocked_by = [ids.get(b, b) for b in t.blocked_by]
    plan.written = True
    board.events.emit(PlanWritten(plan=plan_id, goal=plan.goal[:500],
                                  tasks=[t.id for t in plan.tasks if t.id]), actor=LEAD)


class _Memory:
    """A transcript kept in memory (a dry run writes no file)."""

    def __init__(self) -> None:
        self.records: list[LogEntry] = []

    def write(self, entry: LogEntry) -> None:
        self.records.append(entry)


def plan_prompt(goal: str, layout: Layout, tools: list[dict[str, Any]],
                profile: Profile | None) -> Prompt:
    stable = "\n\n".join(p for p in (
        PLAN_INSTRUCTIONS,
        project_memory(layout.root),
    ) if p)
    goal_text = f"# The goal\n{goal.strip()}"
    system: list[dict[str, Any]] = [
        {"type": "text", "text": stable, "cache_control": EPHEMERAL},
        {"type": "text", "text": f"{goal_text}\n\n{environment(layout.root)}"}]
    prompt = Prompt(system=system, tools=with_tools_breakpoint(tools),
                    first_message=f"Plan this goal as tasks for the team: {goal.strip()}")
    return profile.shape_prompt(prompt) if profile else prompt


def make_plan(goal: str, layout: Layout, config: Config, board: Board, model: Any, *,
              dry_run: bool = False, profile: Profile | None = None) -> Plan:
    """Run the lead on ``goal`` and (unless ``dry_run``) write the checked plan."""
    from orchestrator.agent.base import Tool
    from orchestrator.agent.permissions import PermissionGate
    from orchestrator.agent.tools.board_tools import TaskGetTool, TaskListTool
    from orchestrator.agent.tools.files import ReadTool
    from orchestrator.agent.tools.search import GlobTool, GrepTool, LsTool
    from orchestrator.agent.toolset import Toolset
    from orchestrator.sandbox import safe_env

    if not goal.strip():
        raise InvalidInput("the goal is empty: say what the team should achieve")
    if profile is not None:
        config = profile.config_for(config)
    plan = Plan(goal=goal.strip())
    profiles = load_profiles(layout.root, config).names
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    log = _Memory() if dry_run else board.logs.writer(f"plan-{stamp}-{os.getpid()}", LEAD)
    ctx = ToolContext(cwd=layout.root, env=safe_env(dict(os.environ), config.agent.pass_env),
                      spill_dir=None if dry_run else layout.spill_dir(f"plan-{stamp}"),
                      board=board, teammate=LEAD, events=None if dry_run else board.events)
    gate = PermissionGate.from_sources(config.agent, layout.root)
    gate.mode = "plan"  # read-only whatever the project's mode: planning changes nothing
    tools: list[Tool] = [ReadTool(), GlobTool(), GrepTool(), LsTool(), TaskListTool(),
                         TaskGetTool(), PlanTaskTool(plan, profiles)]
    toolset = Toolset(tools, gate, ctx)
    if profile is not None:
        toolset.keep(lambda n: n == "task_create" or profile.offers(n))
    prompt = plan_prompt(goal, layout, toolset.schemas(), profile)

    def on_usage(total: Usage) -> None:
        plan.usage = total

    loop = AgentLoop(model, toolset, prompt, log, limits=Limits.of(config.agent),
                     max_tokens=config.agent.max_tokens, on_usage=on_usage)
    try:
        plan.summary = loop.run()
    except LimitExceeded as exc:
        raise BackendError(f"planning stopped, nothing was written: {exc}") from exc
    assert_done = getattr(model, "assert_done", None)
    if assert_done is not None:
        assert_done()
    check_plan(plan, {t.id for t in board.list()})
    if not dry_run:
        write_plan(plan, layout, config, board)
    return plan

