"""Permission requests in a headless team: the agent asks, a person answers.

Teammate side (`PermissionFlow.ask`): a tool call the gate marks ``ask`` becomes

    lead mailbox  <- {"kind": "permission_request", "request_id", "task", "tool", "subject"}
    events.jsonl  <- permission_requested
    the task      <- waiting_for = request_id   (fenced write; the board shows it)

and the agent blocks until its own mailbox holds a ``permission_response`` with
that ``request_id`` (``approved``, ``message``), then ``waiting_for`` is cleared.
The teammate's heartbeat keeps the lease meanwhile; a warm stop ends the wait.

Person side (`answer`, behind ``orchestrator approve|deny``): finds the pending
request by request id or task id in the lead's mailbox and writes the answer
into the asking teammate's mailbox. Plan approvals of plan-first tasks
(`orchestrator.agent.plan_first`) use the same channel with ``plan_request`` /
``plan_response`` (`PermissionFlow.request`). Messages are only read with
`Mailbox.find`, so nobody else's read position moves.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from orchestrator.agent.base import PermissionAsked, Stopped
from orchestrator.board.model import TASK_ID_RE, normalize_task_id
from orchestrator.errors import NotFound
from orchestrator.events import EventLog
from orchestrator.layout import Layout
from orchestrator.protocols import Board
from orchestrator.team.mailbox import LEAD, Mailbox

REQUEST = "permission_request"
RESPONSE = "permission_response"
PLAN_REQUEST = "plan_request"
PLAN_RESPONSE = "plan_response"
ANSWERS = {REQUEST: (RESPONSE, "permission_answered"), PLAN_REQUEST: (PLAN_RESPONSE,
                                                                       "plan_answered")}
"""Request kind -> (the kind of its answer, the event the answer records)."""
POLL_SECONDS = 0.25


@dataclass
class Answer:
    approved: bool
    message: str = ""


class PermissionFlow:
    """The teammate's side, for one run of one task."""

    def __init__(self, layout: Layout, board: Board, task_id: str, token: int,
                 teammate: str, stop: threading.Event, poll: float = POLL_SECONDS) -> None:
        self.layout, self.board, self.task_id, self.token = layout, board, task_id, token
        self.teammate, self.stop, self.poll = teammate, stop, poll

    def ask(self, request: PermissionAsked, args: dict[str, Any] | None = None) -> Answer:
        return self.request(REQUEST, f"{request.tool}({request.subject or ''})",
                            "permission_requested", request_id=request.request_id,
                            tool=request.tool, subject=request.subject)

    def request(self, kind: str, body: str, event: str, *, request_id: str,
                **fields: Any) -> Answer:
        """Send a ``kind`` request to the lead, record ``event``, mark the task waiting,
        and block until the answer arrives."""
        Mailbox(self.layout, LEAD).send(self.teammate, body, kind=kind, request_id=request_id,
                                        task=self.task_id, **fields)
        self.board.events.emit(event, self.task_id, actor=self.teammate,
                               request_id=request_id, **fields)
        self.board.update(self.task_id, self.token, waiting_for=request_id)
        try:
            return self._wait(request_id, ANSWERS[kind][0])
        finally:
            self.board.update(self.task_id, self.token, waiting_for=None)

    def _wait(self, request_id: str, kind: str = RESPONSE) -> Answer:
        inbox = Mailbox(self.layout, self.teammate)
        while True:
            found = inbox.find(kind=kind, request_id=request_id)
            if found:
                msg = found[-1]
                return Answer(bool(msg.get("approved")), str(msg.get("message") or ""))
            if self.stop.wait(self.poll):
                raise Stopped(f"stopped while waiting for permission {request_id}")


def pending(layout: Layout) -> list[dict[str, Any]]:
    """Permission requests (and plan approvals) in the lead's mailbox that no one has
    answered yet, oldest first."""
    answered: set[str] = set()
    requests = [m for m in Mailbox(layout, LEAD).all() if m.get("kind") in ANSWERS]
    for asker in {str(r.get("from")) for r in requests}:
        answered.update(str(m.get("request_id")) for m in Mailbox(layout, asker).all()
                        if m.get("kind") in (RESPONSE, PLAN_RESPONSE))
    return [r for r in requests if r.get("request_id") not in answered]


def answer(layout: Layout, ident: str, *, approved: bool, message: str = "",
           actor: str = "cli") -> dict[str, Any]:
    """Answer the pending request named by ``ident`` (a request id or a task id).

    Returns the request answered; `NotFound` when nothing matching is pending.
    """
    open_requests = pending(layout)
    by_task = _as_task_id(ident)
    match = [r for r in open_requests
             if r.get("request_id") == ident or (by_task and r.get("task") == by_task)]
    if not match:
        what = f"task {by_task}" if by_task else f"request {ident!r}"
        raise NotFound(f"no pending permission request for {what}"
                       + (f" (pending: {', '.join(_label(r) for r in open_requests)})"
                          if open_requests else ""))
    req = match[0]
    kind, event = ANSWERS[req["kind"]]
    Mailbox(layout, str(req["from"])).send(
        actor, message, kind=kind, request_id=req["request_id"], task=req.get("task"),
        approved=approved, message=message)
    EventLog(layout.events, actor).emit(
        event, req.get("task"), request_id=req["request_id"],
        approved=approved, message=message or None, tool=req.get("tool"))
    return req


def _as_task_id(ident: str) -> str | None:
    if TASK_ID_RE.match(ident.strip()) or ident.strip().isdigit():
        return normalize_task_id(ident)
    return None


def _label(req: dict[str, Any]) -> str:
    return f"{req.get('task')}/{req.get('request_id')}"
