"""Permission requests in a headless team: the agent asks, a person answers.

Teammate side (`PermissionFlow.ask`): a tool call the gate marks ``ask`` becomes

    board.requests  <- a ``permission`` request (request_id, task, tool, subject)
    events          <- permission_requested
    the task        <- wait = Permission(request_id, …)   (fenced write; the board shows it)

and the agent blocks until the request is answered (``approved``, ``message``),
then the wait is cleared. The teammate's heartbeat keeps the lease
meanwhile; a warm stop ends the wait.

Person side (`answer`, behind ``orchestrator approve|deny``): finds the pending
request by request id or task id and answers it (`Requests.answer`).

A request belongs to the run that asked it: it carries the run's lease ``token``, and
it is open only while its task is ``in_progress`` under that lease (`is_open`). When the
run ends — killed, cancelled, its lease lost or expired, its teammate gone — the request
expires: `pending` (``status``, the web board) no longer lists it, and answering it
raises `Conflict` saying so; the next run asks again. Plan
approvals of plan-first tasks (`orchestrator.agent.plan_first`) use the same
channel with ``plan`` requests (`PermissionFlow.request`). On the file board
requests travel through the mailboxes (`orchestrator.board.requests`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from orchestrator.agent.base import PermissionAsked, Stopped
from orchestrator.controlplane import ControlPlane, Request, RequestKind
from orchestrator.errors import Conflict, NotFound, OrchestratorError
from orchestrator.events import (
    PermissionAnswered,
    PermissionRequested,
    PlanAnswered,
    PlanSubmitted,
    fields_of,
)
from orchestrator.model import TASK_ID_RE, Status, normalize_task_id
from orchestrator.waits import Permission, Plan, Wait

REQUEST: RequestKind = "permission"
PLAN_REQUEST: RequestKind = "plan"
ANSWERED: dict[str, type[PermissionAnswered | PlanAnswered]] = {
    REQUEST: PermissionAnswered, PLAN_REQUEST: PlanAnswered}
"""Request kind -> the event its answer records."""
POLL_SECONDS = 0.25


@dataclass
class Answer:
    approved: bool
    message: str = ""


class PermissionFlow:
    """The teammate's side, for one run of one task."""

    def __init__(self, board: ControlPlane, task_id: str, token: int,
                 teammate: str, stop: threading.Event, poll: float = POLL_SECONDS) -> None:
        self.board, self.task_id, self.token = board, task_id, token
        self.teammate, self.stop, self.poll = teammate, stop, poll

    def ask(self, request: PermissionAsked, args: dict[str, Any] | None = None) -> Answer:
        return self.request(f"{request.tool}({request.subject or ''})", PermissionRequested(
            request_id=request.request_id, tool=request.tool, subject=request.subject))

    def request(self, body: str, event: PermissionRequested | PlanSubmitted) -> Answer:
        """Ask the request ``event`` records (a plan or a tool call), record it, mark the
        task waiting, and block until the answer arrives."""
        request_id = event.request_id
        wait: Wait
        if isinstance(event, PlanSubmitted):
            kind, wait = PLAN_REQUEST, Plan(request_id=request_id)
        else:
            kind, wait = REQUEST, Permission(request_id=request_id, tool=event.tool,
                                             subject=(event.subject or "")[:2000])
        self.board.requests.ask(kind, sender=self.teammate, task=self.task_id, body=body,
                                token=self.token, **fields_of(event)[1])
        self.board.events.emit(event, self.task_id, actor=self.teammate)
        self.board.update(self.task_id, self.token, wait=wait)
        try:
            got = self.board.requests.wait(request_id, stop=self.stop, poll=self.poll)
            if got is None:
                raise Stopped(f"stopped while waiting for permission {request_id}")
            return Answer(got.approved, got.message)
        finally:
            self.board.update(self.task_id, self.token, wait=None)


def pending(board: ControlPlane) -> list[dict[str, Any]]:
    """Permission requests (and plan approvals) that no one has answered yet and whose
    run still waits for them, oldest first, as ``status --json`` and the CLI show them."""
    return [_as_dict(r) for r in open_requests(board)]


def open_requests(board: ControlPlane) -> list[Request]:
    """The unanswered requests whose run has not ended (`is_open`)."""
    return [r for r in board.requests.pending() if is_open(board, r)]


def is_open(board: ControlPlane, req: Request) -> bool:
    """The run that asked ``req`` still waits for it: its task is ``in_progress`` under the
    lease the request was asked under (a request of an old version, without a token:
    under any lease)."""
    if req.task is None:
        return True
    try:
        task = board.get(req.task)
    except OrchestratorError:
        return False
    if task.status is not Status.IN_PROGRESS or task.lease is None:
        return False
    token = req.fields.get("token")
    return not isinstance(token, int) or isinstance(token, bool) or token == task.lease.token


def answer(board: ControlPlane, ident: str, *, approved: bool, message: str = "",
           actor: str = "cli") -> dict[str, Any]:
    """Answer the pending request named by ``ident`` (a request id or a task id).

    Returns the request answered; `NotFound` when nothing matching is pending.
    """
    unanswered = board.requests.pending()
    by_task = _as_task_id(ident)
    match = [r for r in unanswered if r.id == ident or (by_task and r.task == by_task)]
    live = [r for r in match if is_open(board, r)]
    if match and not live:
        req = match[-1]
        raise Conflict(f"the {req.kind} request {req.id} of {req.task} has expired: the run "
                       "that asked it has ended (it was stopped, cancelled or lost its lease); "
                       "its next run asks again")
    match = live
    if not match:
        still = [r for r in unanswered if is_open(board, r)]
        what = f"task {by_task}" if by_task else f"request {ident!r}"
        raise NotFound(f"no pending permission request for {what}"
                       + (f" (pending: {', '.join(_label(r) for r in still)})"
                          if still else ""))
    req = match[0]
    board.requests.answer(req.id, approved=approved, message=message, actor=actor)
    tool = req.fields.get("tool")  # a request's file is hostile input: a name or nothing
    board.events.emit(ANSWERED[req.kind](request_id=req.id, approved=approved,
                                         message=message or None,
                                         tool=tool if isinstance(tool, str) else None),
                      req.task, actor=actor)
    return _as_dict(req)


def _as_task_id(ident: str) -> str | None:
    if TASK_ID_RE.match(ident.strip()) or ident.strip().isdigit():
        return normalize_task_id(ident)
    return None


def _label(req: Request) -> str:
    return f"{req.task}/{req.id}"


def _as_dict(req: Request) -> dict[str, Any]:
    """The request as the mailbox carried it (``kind``: ``permission_request`` …)."""
    return {"request_id": req.id, "from": req.sender, "task": req.task, "body": req.body,
            "ts": req.ts, "kind": f"{req.kind}_request", **req.fields}
