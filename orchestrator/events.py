"""What every writer of the control plane shares: masking secrets, and what an event
means for its task's status.

The audit log itself is part of the control plane (`orchestrator.controlplane.Events`,
reached through ``board.events``; the file implementation is
`orchestrator.board.eventlog`). Values that look like the secrets in this process's
environment are masked before anything is written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.controlplane import Event, Events

SECRET_NAME_RE = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.I)
MIN_SECRET_LEN = 8
MASK = "***"


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names say they are secrets."""
    env = os.environ if environ is None else environ
    vals = {v for k, v in env.items() if SECRET_NAME_RE.search(k) and len(v) >= MIN_SECRET_LEN}
    return sorted(vals, key=len, reverse=True)


def redact(text: str, secrets: list[str] | None = None) -> str:
    for s in secret_values() if secrets is None else secrets:
        if s in text:
            text = text.replace(s, MASK)
    return text


STATUS_EVENTS = {"task_created": "pending", "task_claimed": "in_progress",
                 "task_completed": "review", "task_released": "pending",
                 "task_cancelled": "cancelled", "task_retried": "pending",
                 "merged": "merged", "discarded": "discarded"}
"""Events that set a task's status to a fixed value; others carry it (see `event_status`)."""


def event_status(e: Mapping[str, Any]) -> str | None:
    """The status an event gave its task, or None for an event that sets none."""
    if e.get("event") in STATUS_EVENTS:
        return STATUS_EVENTS[e["event"]]
    if e.get("event") in ("task_failed", "lease_expired", "task_requeued"):
        return str(e.get("status"))
    if e.get("event") == "task_status":
        return str(e.get("to"))
    return None


def last_status_event(events: Events, task: str) -> Event | None:
    """The newest event that gave ``task`` a status (see `event_status`)."""
    found = None
    for e in events.read(task=task):
        if event_status(e.to_dict()) is not None:
            found = e
    return found


def __getattr__(name: str) -> Any:
    if name == "EventLog":  # where it lived before the control-plane interface
        from orchestrator.board.eventlog import EventLog

        return EventLog
    raise AttributeError(name)
