"""The append-only audit log: ``.worktrees/events.jsonl``.

Each event is one JSON object on one line, written with a single ``O_APPEND``
``write`` so that concurrent writers never interleave inside a line. Readers
skip a torn last line (a writer killed mid-write). Values that look like the
secrets in this process's environment are masked before they are written
(`orchestrator.secrets`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from orchestrator.clock import utcnow
from orchestrator.fsutil import append_line
from orchestrator.secrets import MASK as MASK  # re-exported: callers import them from here
from orchestrator.secrets import SECRET_NAME_RE as SECRET_NAME_RE
from orchestrator.secrets import redact
from orchestrator.secrets import secret_values as secret_values


class EventLog:
    def __init__(self, path: Path, actor: str = "cli", secrets: list[str] | None = None) -> None:
        self.path = path
        self.actor = actor
        self.secrets = secrets
        """Values to mask, fixed at start-up (hot writers); None re-reads the environment."""

    def emit(self, event: str, task: str | None = None, actor: str | None = None,
             **fields: Any) -> dict[str, Any]:
        record: dict[str, Any] = {
            "ts": utcnow(), "event": event, "task": task, "actor": actor or self.actor,
        }
        record.update(fields)
        line = redact(json.dumps(record, default=str, ensure_ascii=False), self.secrets) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_line(self.path, line.encode())
        return record

    def read(self, task: str | None = None) -> Iterator[dict[str, Any]]:
        """Every complete event so far (a torn or corrupt line is skipped)."""
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            return
        with fh:
            for raw in fh:
                rec = _parse(raw)
                if rec is not None and (task is None or rec.get("task") == task):
                    yield rec

    def follow(self, task: str | None = None, poll: float = 0.2,
               stop: Any = None) -> Iterator[dict[str, Any]]:
        """Like ``tail -f``: past events, then new ones as they are appended.

        ``stop`` is an optional ``threading.Event``; following ends when it is set.
        """
        pos = 0
        buf = b""
        while stop is None or not stop.is_set():
            try:
                with self.path.open("rb") as fh:
                    fh.seek(pos)
                    chunk = fh.read()
            except FileNotFoundError:
                chunk = b""
            if chunk:
                pos += len(chunk)
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    rec = _parse(raw)
                    if rec is not None and (task is None or rec.get("task") == task):
                        yield rec
            else:
                time.sleep(poll)


    def backwards(self, block: int = 64 * 1024) -> Iterator[dict[str, Any]]:
        """Every complete event, newest first, reading from the end of the file (so the
        recent history of a big log costs little)."""
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            return
        with fh:
            pos = fh.seek(0, os.SEEK_END)
            head = b""  # the start of a line that began in an earlier block
            while pos > 0:
                step = min(block, pos)
                pos -= step
                fh.seek(pos)
                first, *lines = (fh.read(step) + head).split(b"\n")
                head = first
                for raw in reversed(lines):
                    rec = _parse(raw)
                    if rec is not None:
                        yield rec
            rec = _parse(head)
            if rec is not None:
                yield rec

    def last_status_event(self, task: str) -> dict[str, Any] | None:
        """The newest event that gave ``task`` a status (see `event_status`)."""
        return next((e for e in self.backwards()
                     if e.get("task") == task and event_status(e) is not None), None)


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


def _parse(raw: bytes) -> dict[str, Any] | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        rec = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) else None
