"""What every writer of the control plane shares: masking secrets, and what an event
means for its task's status.

The audit log itself is part of the control plane (`orchestrator.controlplane.Events`,
reached through ``board.events``; the file implementation is
`orchestrator.board.eventlog`). Values that look like the secrets in this process's
environment are masked before anything is written (`orchestrator.secrets`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from orchestrator.secrets import MASK as MASK  # re-exported: callers import them from here
from orchestrator.secrets import SECRET_NAME_RE as SECRET_NAME_RE
from orchestrator.secrets import redact as redact
from orchestrator.secrets import secret_values as secret_values

if TYPE_CHECKING:
    from orchestrator.controlplane import Event, Events


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
