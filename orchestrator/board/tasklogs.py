"""The file board's task transcripts: ``.tasks/logs/<name>.jsonl``.

Backend output, agent turns, tool calls and results, setup and verification
output all land here as JSON lines (``ts``, ``kind``, fields), secrets masked.
`orchestrator logs ID [-f]` reads it. `FileTaskLogs` implements
`orchestrator.controlplane.TaskLogs`; a log's name is a task id, ``<task>.sub-<n>``
(a subagent's transcript) or ``plan-<time>`` (a planning run).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from orchestrator.clock import utcnow
from orchestrator.controlplane import LogRecord
from orchestrator.errors import InvalidInput
from orchestrator.events import redact, secret_values
from orchestrator.fsutil import append_line
from orchestrator.layout import Layout
from orchestrator.transcript import LogEntry, record


class TaskLog:
    """Implements `orchestrator.protocols.TaskLogger` for one task."""

    def __init__(self, layout: Layout, task_id: str, actor: str | None = None) -> None:
        self.path = layout.logs / f"{check_log_name(task_id)}.jsonl"
        self.actor = actor
        self._secrets = secret_values()

    def write(self, entry: LogEntry) -> None:
        rec = {"ts": utcnow(), **record(entry, self.actor)}
        line = redact(json.dumps(rec, default=str, ensure_ascii=False), self._secrets) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_line(self.path, line.encode())

    def read(self) -> Iterator[dict[str, Any]]:
        return read_jsonl(self.path)


LOG_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def check_log_name(name: str) -> str:
    if not LOG_NAME_RE.match(name) or ".." in name:
        raise InvalidInput(f"not a log name: {name!r}")
    return name


class FileTaskLogs:
    """Implements `orchestrator.controlplane.TaskLogs` on ``.tasks/logs/``."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def _path(self, name: str) -> Path:
        return self.layout.logs / f"{check_log_name(name)}.jsonl"

    def writer(self, name: str, actor: str | None = None) -> TaskLog:
        return TaskLog(self.layout, name, actor=actor)

    def append(self, name: str, entry: LogEntry, /, *, actor: str | None = None) -> None:
        self.writer(name, actor).write(entry)

    def read(self, name: str) -> Iterator[LogRecord]:
        for rec in read_jsonl(self._path(name)):
            yield LogRecord.from_dict(rec)

    def follow(self, name: str, *, stop: threading.Event | None = None,
               poll: float = 0.2) -> Iterator[LogRecord]:
        path = self._path(name)
        pos = 0
        buf = b""
        while stop is None or not stop.is_set():
            try:
                with path.open("rb") as fh:
                    fh.seek(pos)
                    chunk = fh.read()
            except FileNotFoundError:
                chunk = b""
            if chunk:
                pos += len(chunk)
                *lines, buf = (buf + chunk).split(b"\n")
                for raw in lines:
                    rec = _parse(raw)
                    if rec is not None:
                        yield LogRecord.from_dict(rec)
            elif stop is not None:
                stop.wait(poll)
            else:
                time.sleep(poll)

    def exists(self, name: str) -> bool:
        return self._path(name).exists()

    def names(self, prefix: str) -> list[str]:
        if not self.layout.logs.is_dir():
            return []
        return sorted(p.name[:-len(".jsonl")] for p in self.layout.logs.glob("*.jsonl")
                      if p.name.startswith(prefix))


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return None
    return rec if isinstance(rec, dict) else None


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return
    with fh:
        for raw in fh:
            rec = _parse(raw)
            if rec is not None:
                yield rec
