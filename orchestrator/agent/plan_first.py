"""Plan-first tasks: read-only until the lead approves the agent's plan.

A task with ``plan_first`` (``orchestrator add --plan-first``, or
``plan_first: true`` in a dropped file) starts its run in ``plan`` mode: the
gate denies every tool that is not read-only, and the agent gets one more
tool, ``submit_plan``. Submitting a plan

    lead mailbox  <- {"kind": "plan_request", "request_id": "plan-…", "task", "plan"}
    events.jsonl  <- plan_submitted
    the task      <- wait = Plan(the request id) (the board shows it waiting)

and the agent waits (its lease kept by the teammate's heartbeat) until a
person answers with ``orchestrator approve ID`` or ``orchestrator deny ID -m WHY``.
Approved: the plan is stored on the task (``plan``), the gate goes back to the
run's normal mode, and the agent carries the plan out. Denied: the agent stays
in plan mode and gets the reason as the tool's result, to revise and submit
again. A run that ends without an approved plan fails (and is retried while
attempts remain). Later runs of a task whose plan was approved (after a crash
or a ``retry``) start with normal permissions and the plan in their first
message.
"""

from __future__ import annotations

import uuid
from typing import Any

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.permission_flow import PermissionFlow
from orchestrator.agent.permissions import PermissionGate
from orchestrator.agent.tools.common import obj, prop
from orchestrator.agent.toolset import Toolset
from orchestrator.errors import OrchestratorError
from orchestrator.events import PlanSubmitted
from orchestrator.model import Task
from orchestrator.protocols import Board

PLAN_MODE_NOTE = """\
This task is plan-first: you are in plan mode. Only read-only tools work until \
the lead approves your plan. Explore what you need, then call submit_plan with \
a concrete plan (the files you will change and how, and how you will check the \
result). Once it is approved you get your normal permissions and carry it out."""
APPROVED_NOTE = "The lead approved this plan for the task; carry it out:\n\n"
NO_PLAN_ERROR = "plan-first: the agent ended its run without an approved plan (submit_plan)"


class Planning:
    """The plan phase of one run: holds the gate in ``plan`` mode until approval."""

    def __init__(self, gate: PermissionGate, flow: PermissionFlow, board: Board,
                 task_id: str, token: int) -> None:
        self.gate, self.flow, self.board = gate, flow, board
        self.task_id, self.token = task_id, token
        self.normal_mode = gate.mode
        self.approved = False
        gate.mode = "plan"

    def submit(self, plan: str) -> ToolResult:
        if self.approved:
            return ToolResult("your plan is already approved: carry it out")
        plan = plan.strip()
        if not plan:
            return ToolResult("submit_plan: the plan is empty", is_error=True)
        answer = self.flow.request(_headline(plan), PlanSubmitted(
            request_id=f"plan-{uuid.uuid4().hex[:12]}", plan=plan))
        note = f"\nNote from the lead: {answer.message}" if answer.message else ""
        if not answer.approved:
            return ToolResult("The lead sent your plan back: "
                              f"{answer.message or 'no reason given'}\nYou are still in plan "
                              "mode: revise the plan and submit it again.")
        try:
            self.board.update(self.task_id, self.token, plan=plan)
        except OrchestratorError as exc:
            return ToolResult(f"submit_plan: approved, but the task could not record it: {exc}",
                              is_error=True)
        self.gate.mode = self.normal_mode
        self.approved = True
        return ToolResult("The lead approved your plan. You now have your normal permissions: "
                          f"carry it out.{note}")


class SubmitPlanTool:
    name = "submit_plan"
    read_only = True
    description = (
        "Submit your plan for this task to the lead and wait for the answer. Approved: you "
        "get your normal permissions. Sent back: you get the reason, revise and submit again."
    )
    input_schema = obj(["plan"], plan=prop(
        "string", "The plan in Markdown: what you will change, where, and how you will check it."))

    def __init__(self, planning: Planning) -> None:
        self.planning = planning

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return self.planning.submit(args["plan"])


def start(task: Task, token: int, toolset: Toolset, flow: PermissionFlow) -> Planning | None:
    """Put the run in plan mode and add ``submit_plan`` when ``task`` is plan-first and has
    no approved plan yet; None otherwise."""
    if not task.plan_first or task.plan:
        return None
    planning = Planning(toolset.gate, flow, flow.board, task.id, token)
    toolset.add(SubmitPlanTool(planning))
    return planning


def first_message(task: Task, default: str) -> str:
    """The run's first user message, with what plan-first adds to it."""
    if not task.plan_first:
        return default
    if task.plan:
        return f"{default}\n\n{APPROVED_NOTE}{task.plan}"
    return f"{default}\n\n{PLAN_MODE_NOTE}"


def _headline(plan: str) -> str:
    first = plan.splitlines()[0].lstrip("# ").strip()
    return first[:120] or "plan"
