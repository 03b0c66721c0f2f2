"""The file board's permission and plan requests, carried by the mailboxes.

    ask      lead mailbox   <- {"kind": "<kind>_request", "request_id", "task", …}
    answer   asker mailbox  <- {"kind": "<kind>_response", "request_id", "approved", "message"}

Requests and answers are only read with `Mailbox.find`, so nobody's read position
moves. `FileRequests` implements `orchestrator.controlplane.Requests`.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from orchestrator.board.mailboxes import LEAD, FileMailboxes
from orchestrator.controlplane import Answer, Message, Request, RequestKind
from orchestrator.errors import InvalidInput, NotFound

KINDS: dict[str, RequestKind] = {"permission_request": "permission", "plan_request": "plan"}
RESPONSES = {"permission": "permission_response", "plan": "plan_response"}


class FileRequests:
    def __init__(self, mailboxes: FileMailboxes) -> None:
        self.mailboxes = mailboxes

    def ask(self, kind: RequestKind, *, request_id: str, sender: str, task: str | None,
            body: str, **fields: Any) -> Request:
        if kind not in RESPONSES:
            raise InvalidInput(f"not a request kind: {kind!r} (permission or plan)")
        msg = self.mailboxes.send(LEAD, sender, body, kind=f"{kind}_request",
                                  request_id=request_id, task=task, **fields)
        return _request(msg)

    def _asked(self) -> list[Request]:
        return [_request(m) for m in self.mailboxes.read(LEAD)
                if m.kind in KINDS and m.get("request_id") and m.sender]

    def _answered(self, senders: set[str]) -> dict[str, Message]:
        out: dict[str, Message] = {}
        for sender in senders:
            try:
                msgs = self.mailboxes.read(sender)
            except InvalidInput:  # a malformed sender name cannot have a mailbox
                continue
            for m in msgs:
                if m.kind in RESPONSES.values() and m.get("request_id"):
                    out.setdefault(str(m.get("request_id")), m)
        return out

    def pending(self) -> list[Request]:
        asked = self._asked()
        answered = self._answered({r.sender for r in asked})
        return [r for r in asked if r.id not in answered]

    def answer(self, request_id: str, *, approved: bool, message: str = "",
               actor: str = "cli") -> Request:
        match = [r for r in self.pending() if r.id == request_id]
        if not match:
            raise NotFound(f"no pending request {request_id!r}")
        req = match[0]
        self.mailboxes.send(req.sender, actor, message, kind=RESPONSES[req.kind],
                            request_id=req.id, task=req.task, approved=approved,
                            message=message)
        return req

    def answer_of(self, request_id: str) -> Answer | None:
        asked = [r for r in self._asked() if r.id == request_id]
        if not asked:
            return None
        found = self.mailboxes.find(asked[0].sender, kind=RESPONSES[asked[0].kind],
                                    request_id=request_id)
        if not found:
            return None
        m = found[-1]
        return Answer(bool(m.get("approved")), str(m.get("message") or ""), m.sender)

    def wait(self, request_id: str, *, stop: threading.Event | None = None,
             timeout: float | None = None, poll: float = 0.25) -> Answer | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            got = self.answer_of(request_id)
            if got is not None:
                return got
            left = poll if deadline is None else min(poll, deadline - time.monotonic())
            if left <= 0:
                return None
            if stop is not None:
                if stop.wait(left):
                    return None
            else:
                time.sleep(left)


def _request(m: Message) -> Request:
    fields = {k: v for k, v in m.fields.items() if k not in ("request_id", "task")}
    task = m.get("task")
    return Request(id=str(m.get("request_id") or ""), kind=KINDS[m.kind],
                   task=None if task is None else str(task), sender=m.sender, body=m.body,
                   ts=m.ts, fields=fields)
