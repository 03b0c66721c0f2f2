"""Each task's transcript: ``.tasks/logs/<task_id>.jsonl``.

Backend output, agent turns, tool calls and results, setup and verification
output all land here as JSON lines (``ts``, ``kind``, fields), secrets masked.
`orchestrator logs ID [-f]` reads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.clock import utcnow
from orchestrator.events import redact, secret_values
from orchestrator.fsutil import append_line
from orchestrator.layout import Layout

MAX_FIELD_CHARS = 64_000
"""A single field longer than this is cut (the full text is in a spill file when it matters)."""


class TaskLog:
    """Implements `orchestrator.protocols.TaskLogger` for one task."""

    def __init__(self, layout: Layout, task_id: str, actor: str | None = None) -> None:
        self.path = layout.logs / f"{task_id}.jsonl"
        self.actor = actor
        self._secrets = secret_values()

    def write(self, kind: str, **fields: Any) -> None:
        rec: dict[str, Any] = {"ts": utcnow(), "kind": kind}
        if self.actor:
            rec["actor"] = self.actor
        for k, v in fields.items():
            if isinstance(v, str) and len(v) > MAX_FIELD_CHARS:
                v = v[:MAX_FIELD_CHARS] + f"\n… [{len(v) - MAX_FIELD_CHARS} more characters cut]"
            rec[k] = v
        line = redact(json.dumps(rec, default=str, ensure_ascii=False), self._secrets) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_line(self.path, line.encode())

    def read(self) -> Iterator[dict[str, Any]]:
        return read_jsonl(self.path)


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        for raw in fh:
            try:
                rec = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(rec, dict):
                yield rec
