"""What the web board shows of a task: its column and its card, and the board's filters.

Columns follow ``board --watch`` (`orchestrator.model.column_of`): pending,
in progress, waiting for input, review, merged, failed; cancelled and discarded
tasks go to one folded column, ``closed``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from orchestrator.adding import labels_of
from orchestrator.forge import pull_request
from orchestrator.model import Status, Task, column_of

COLUMNS: tuple[tuple[str, str], ...] = (
    ("pending", "Pending"), ("in_progress", "In progress"), ("waiting", "Waiting for you"),
    ("review", "Review"), ("merged", "Merged"), ("failed", "Failed"),
    ("closed", "Cancelled / discarded"),
)
COLUMN_NAMES = tuple(c for c, _ in COLUMNS)
_WATCH_TO_COLUMN = {"pending": "pending", "in progress": "in_progress",
                    "waiting for input": "waiting", "review": "review", "merged": "merged",
                    "failed": "failed"}
PAGE = 30
"""Cards per column in the first page; more are fetched by the column's "more" button."""


def column(task: Task) -> str:
    """The board column of ``task``."""
    name = column_of(task)
    return "closed" if name is None else _WATCH_TO_COLUMN[name]


def card(task: Task, problems: dict[str, str], now: float | None = None) -> dict[str, Any]:
    """The fields a card shows (also what the live feed sends for a moved card)."""
    checks = task.checks
    return {
        "id": task.id, "subject": task.subject, "status": str(task.status),
        "column": column(task), "owner": task.owner or "", "priority": task.priority,
        "blocked_by": task.blocked_by, "attempts": task.attempts,
        "max_attempts": task.max_attempts, "cost": round(task.usage.cost_usd, 4),
        "age": age_text(task.updated_at, time.time() if now is None else now),
        "checks": None if checks is None else ("passed" if checks.passed else "failed"),
        "waiting": task.wait.label if task.wait else None,
        "wait_text": task.wait.text if task.wait else "", "problem": problems.get(task.id),
        "labels": labels_of(task), "error": (task.error or "").splitlines()[0][:200]
        if task.error else "", "pr": pull_request(task.forge),
    }


def needs_person(task: Task) -> bool:
    """A task that waits for a person: a wait (`orchestrator.waits`), failed checks,
    failed for good."""
    return task.wait is not None or task.status is Status.FAILED or (
        task.checks is not None and not task.checks.passed
        and task.status in (Status.REVIEW, Status.PENDING))


@dataclass
class Filters:
    """The board's filters, from the query string; a card is shown when it passes all."""

    statuses: list[str] = field(default_factory=list)
    owner: str = ""
    label: str = ""
    text: str = ""

    @classmethod
    def from_query(cls, query: Any) -> Filters:
        statuses = [s for s in query.getlist("status") if s in COLUMN_NAMES]
        return cls(statuses=statuses, owner=query.get("owner", "").strip()[:100],
                   label=query.get("label", "").strip()[:40],
                   text=query.get("q", "").strip()[:200])

    def unfiltered(self) -> bool:
        """No filter that drops cards (choosing columns only hides whole columns)."""
        return not (self.owner or self.label or self.text)

    def columns(self) -> list[tuple[str, str]]:
        return [c for c in COLUMNS if not self.statuses or c[0] in self.statuses]

    def match(self, task: Task) -> bool:
        if self.owner and (task.owner or "") != self.owner:
            return False
        if self.label and self.label not in labels_of(task):
            return False
        if self.text:
            needle = self.text.lower()
            return needle in task.id or needle in task.subject.lower() or \
                needle in task.description.lower()
        return True

    def as_dict(self) -> dict[str, Any]:
        return {"statuses": self.statuses, "owner": self.owner, "label": self.label,
                "q": self.text}


def by_column(tasks: Iterable[Task], filters: Filters) -> dict[str, list[Task]]:
    """The tasks that pass ``filters``, per column, in board order (lowest id first)."""
    out: dict[str, list[Task]] = {c: [] for c in COLUMN_NAMES}
    for task in tasks:
        if filters.match(task):
            out[column(task)].append(task)
    return out


def counts(tasks: Iterable[Task]) -> dict[str, int]:
    out = dict.fromkeys(COLUMN_NAMES, 0)
    for task in tasks:
        out[column(task)] += 1
    return out


def age_text(iso: str | None, now: float) -> str:
    if not iso:
        return "?"
    try:
        s = int(max(0.0, now - datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()))
    except ValueError:
        return "?"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit}"
    return f"{s}s"


def owners(tasks: Iterable[Task]) -> list[str]:
    return sorted({t.owner for t in tasks if t.owner})


def all_labels(tasks: Iterable[Task]) -> list[str]:
    return sorted({label for t in tasks for label in labels_of(t)})
