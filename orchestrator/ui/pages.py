"""The data behind each page, read through the same library calls as the CLI.

Plain functions (no web types) so they run in a worker thread and tests can call
them: the board's columns, a task with its history and transcript, its review
(row, diff), what needs a person, the team.
"""

from __future__ import annotations

import threading
from bisect import insort
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from orchestrator.adding import labels_of
from orchestrator.agent import permission_flow
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane, Event
from orchestrator.errors import Conflict, GitError, InvalidInput, NotFound
from orchestrator.events import event_status
from orchestrator.layout import Layout
from orchestrator.model import Status, Task, normalize_task_id, task_number
from orchestrator.review import diff_text, review_rows
from orchestrator.review.diff import merged_text
from orchestrator.team.status import board_counts, team_status
from orchestrator.ui import cards, diffview, transcript

TRANSCRIPT_ENTRIES = 500
"""The task page shows the transcript's last this many records (`orchestrator logs` has all)."""
INCREMENTAL_MAX = 200
"""Up to this many changed tasks, a snapshot is updated in place instead of rebuilt."""


@dataclass
class Snapshot:
    """What the board pages derive from the whole board, kept up to date per change."""

    tasks: list[Task]
    by_id: dict[str, Task]
    columns: dict[str, list[Task]]
    owners: set[str]
    labels: set[str]
    waiting: set[str]
    """Tasks that wait for a person (`cards.needs_person`)."""
    problems: dict[str, str] = field(default_factory=dict)
    problems_fresh: bool = False

    @classmethod
    def build(cls, tasks: list[Task]) -> Snapshot:
        return cls(tasks=tasks, by_id={t.id: t for t in tasks},
                   columns=cards.by_column(tasks, cards.Filters()),
                   owners=set(cards.owners(tasks)), labels=set(cards.all_labels(tasks)),
                   waiting={t.id for t in tasks if cards.needs_person(t)})

    def updated(self, tasks: list[Task]) -> Snapshot | None:
        """This snapshot moved to ``tasks`` by its few changed tasks; None when a rebuild
        is cheaper (many changed, some removed)."""
        if len(tasks) < len(self.tasks):
            return None
        changed = [t for t in tasks if self.by_id.get(t.id) is not t]
        if len(changed) > INCREMENTAL_MAX:
            return None
        columns = {name: list(ts) for name, ts in self.columns.items()}
        by_id, waiting = dict(self.by_id), set(self.waiting)
        owners, labels = set(self.owners), set(self.labels)
        for new in changed:
            old = by_id.get(new.id)
            if old is not None:
                col = columns[cards.column(old)]
                at = next((i for i, t in enumerate(col) if t is old), None)
                if at is not None:
                    del col[at]
            insort(columns[cards.column(new)], new, key=lambda t: task_number(t.id))
            by_id[new.id] = new
            waiting.discard(new.id)
            if cards.needs_person(new):
                waiting.add(new.id)
            if new.owner:
                owners.add(new.owner)
            labels.update(labels_of(new))
        return Snapshot(tasks=tasks, by_id=by_id, columns=columns, owners=owners,
                        labels=labels, waiting=waiting, problems=self.problems)

    @property
    def counts(self) -> dict[str, int]:
        return {name: len(ts) for name, ts in self.columns.items()}


@dataclass
class Context:
    """What every page reads from: one board kept open for the life of the server."""

    layout: Layout
    config: Config
    board: ControlPlane
    lock: threading.RLock
    _snapshot: tuple[tuple[int, ...], Snapshot] | None = None

    def task(self, ident: str) -> Task:
        """The task named in a URL; `NotFound` for a malformed or unknown id."""
        try:
            task_id = normalize_task_id(ident)
        except InvalidInput:
            raise NotFound(f"not a task id: {ident[:40]!r} (expected task_NNN)") from None
        with self.lock:
            return self.board.get(task_id)

    def snapshot(self, *, problems: bool = True) -> Snapshot:
        """The board now. `Board.list` hands out the same task objects until a task
        changes, so their identities tell what changed. The live feed asks without
        ``problems`` (a whole-board graph walk), the pages with."""
        with self.lock:
            tasks = self.board.list()
            key = tuple(map(id, tasks))
            if self._snapshot is not None and self._snapshot[0] == key:
                snap = self._snapshot[1]
            else:
                old = self._snapshot[1] if self._snapshot else None
                snap = (old.updated(tasks) if old else None) or Snapshot.build(tasks)
                self._snapshot = (key, snap)
            if problems and not snap.problems_fresh:
                snap.problems, snap.problems_fresh = self.board.problems(), True
            return snap


def board_view(ctx: Context, filters: cards.Filters, page: int = cards.PAGE) -> dict[str, Any]:
    """The columns (first ``page`` cards of each), with counts, owners and labels."""
    snap = ctx.snapshot()
    grouped = snap.columns if filters.unfiltered() else cards.by_column(snap.tasks, filters)
    columns = []
    for name, title in filters.columns():
        items = grouped[name]
        columns.append({"name": name, "title": title, "total": len(items),
                        "cards": [cards.card(t, snap.problems) for t in items[:page]]})
    return {"columns": columns, "owners": sorted(snap.owners), "labels": sorted(snap.labels),
            "filters": filters.as_dict(), "needs": needs_count(ctx, snap),
            "total": len(snap.tasks)}


def column_page(ctx: Context, name: str, filters: cards.Filters, offset: int,
                limit: int) -> list[dict[str, Any]]:
    if name not in cards.COLUMN_NAMES:
        raise NotFound(f"no column {name[:40]!r}")
    snap = ctx.snapshot()
    grouped = snap.columns if filters.unfiltered() else cards.by_column(snap.tasks, filters)
    return [cards.card(t, snap.problems) for t in grouped[name][offset:offset + limit]]


def card_updates(ctx: Context, task_ids: list[str]) -> dict[str, Any]:
    """The cards of ``task_ids`` as they are now, the column counts, the needs-you count."""
    snap = ctx.snapshot(problems=False)
    found = [cards.card(snap.by_id[tid], snap.problems)
             for tid in dict.fromkeys(task_ids) if tid in snap.by_id]
    return {"cards": found, "counts": snap.counts, "needs": needs_count(ctx, snap)}


def needs_count(ctx: Context, snap: Snapshot | None = None) -> int:
    """Pending requests plus tasks that wait for a person (the page title's count)."""
    snap = snap or ctx.snapshot(problems=False)
    pending = permission_flow.pending(ctx.board)
    asked = {str(r["task"]) for r in pending if r.get("task")}
    return len(snap.waiting | asked) + sum(1 for r in pending if not r.get("task"))


def task_view(ctx: Context, ident: str) -> dict[str, Any]:
    task = ctx.task(ident)
    history = []
    for e in ctx.board.events.read(task=task.id):
        history.append({"ts": e.ts[:19].replace("T", " "), "event": e.event, "actor": e.actor,
                        "status": event_status(e) or "", "detail": _detail(e)})
    records: deque[dict[str, Any]] = deque(maxlen=TRANSCRIPT_ENTRIES)
    offset = 0  # records of the transcript shown: the live stream starts after them
    for rec in ctx.board.logs.read(task.id):
        records.append(rec.to_dict())
        offset += 1
    entries = [transcript.entry(r) for r in records]
    requests = [r for r in permission_flow.pending(ctx.board) if r.get("task") == task.id]
    with ctx.lock:
        problems = ctx.board.problems()
    return {"task": task, "card": cards.card(task, problems), "history": history,
            "transcript": entries, "log_offset": offset, "requests": requests,
            "labels": cards.card(task, problems)["labels"]}


def _detail(e: Event) -> str:
    return " ".join(f"{k}={v}" for k, v in e.fields.items() if v not in (None, "", [], {}))[:300]


def review_view(ctx: Context, ident: str) -> dict[str, Any]:
    task = ctx.task(ident)
    with ctx.lock:
        rows = review_rows(ctx.layout, ctx.config, board=ctx.board, only=task.id)
    row = next((r for r in rows if r["id"] == task.id), None)
    error = None
    merged = None
    diff = diffview.Diff(files=[])
    try:
        if task.status is Status.MERGED:  # its branch is gone: what the merge brought
            text, merged = merged_text(ctx.layout, ctx.config, task.id, board=ctx.board,
                                       limit=diffview.MAX_BYTES)
        else:
            text = diff_text(ctx.layout, ctx.config, task.id, board=ctx.board,
                             limit=diffview.MAX_BYTES)
        diff = diffview.parse(text)
    except (Conflict, GitError) as exc:
        error = str(exc)
    return {"task": task, "row": row, "diff": diff, "merged": merged,
            "error": error or (row or {}).get("error")}


def needs_view(ctx: Context) -> dict[str, Any]:
    """Everything across the board that waits for a person."""
    requests = []
    for r in permission_flow.pending(ctx.board):
        plan = r.get("kind") == f"{permission_flow.PLAN_REQUEST}_request"
        requests.append({"id": str(r.get("request_id")), "task": r.get("task"),
                         "from": r.get("from"), "kind": "plan" if plan else "permission",
                         "what": str(r.get("plan") or r.get("body") or "") if plan
                         else f"{r.get('tool')}({r.get('subject') or ''})",
                         "ts": str(r.get("ts", ""))[:19].replace("T", " ")})
    with ctx.lock:
        tasks = ctx.board.list()
        rows = review_rows(ctx.layout, ctx.config, board=ctx.board)
    waiting = [t for t in tasks if t.wait is not None and not t.wait.of_run]
    failed = [t for t in tasks if t.status is Status.FAILED and t.wait is None]
    checks = [t for t in tasks if t.status in (Status.PENDING, Status.REVIEW)
              and t.checks and not t.checks.passed]
    conflicts = [{"id": r["id"], "subject": r["subject"], "into": r["merge"]["into"],
                  "files": r["merge"]["conflicts"]}
                 for r in rows if r.get("merge") and r["merge"].get("conflicts")]
    count = needs_count(ctx)
    return {"requests": requests, "waiting": waiting, "failed": failed, "checks": checks,
            "conflicts": conflicts, "count": count}


def team_view(ctx: Context) -> dict[str, Any]:
    return team_status(ctx.layout, ctx.board, board_counts(ctx.snapshot().tasks))
