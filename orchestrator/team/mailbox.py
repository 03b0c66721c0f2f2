"""Mailboxes: ``.tasks/mailboxes/<name>.jsonl``, one message per line.

Appends happen under a lock file beside the mailbox (never the data file) so
that message ids stay in order. Reading never deletes: each reader keeps its
own read position in ``<name>.<reader>.pos``, so a crashed reader sees again
what it had not acknowledged, and `orchestrator` can always show the history.

A message is ``{"id", "ts", "from", "to", "kind", "body", ...fields}``. Kinds
in use: ``message`` (free text), ``shutdown_request`` / ``shutdown_response``
(the handshake, matched by ``request_id``), ``permission_request`` /
``permission_response`` (the permission gate's channel).
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

from filelock import FileLock

from orchestrator.clock import utcnow
from orchestrator.errors import InvalidInput
from orchestrator.events import redact
from orchestrator.fsutil import append_line, atomic_write
from orchestrator.layout import Layout

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
LEAD = "lead"


def check_name(name: str) -> str:
    if not NAME_RE.match(name) or ".." in name:
        raise InvalidInput(f"not a mailbox name: {name!r} (letters, digits, . _ -; at most 64)")
    return name


class Mailbox:
    def __init__(self, layout: Layout, name: str) -> None:
        self.name = check_name(name)
        self.dir = layout.mailboxes
        self.path = self.dir / f"{name}.jsonl"
        self._lock = FileLock(str(self.dir / f".{name}.lock"), thread_local=False)

    def send(self, sender: str, body: str = "", *, kind: str = "message",
             **fields: Any) -> dict[str, Any]:
        """Append a message; returns it with its new ``id``."""
        msg: dict[str, Any] = {
            "id": uuid.uuid4().hex[:12], "ts": utcnow(), "from": sender, "to": self.name,
            "kind": kind, "body": body, **fields,
        }
        line = (redact(json.dumps(msg, default=str, ensure_ascii=False)) + "\n").encode()
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            append_line(self.path, line)
        return msg

    def all(self) -> list[dict[str, Any]]:
        return [m for _, m in self._scan(0)]

    def read_new(self, reader: str | None = None) -> list[dict[str, Any]]:
        """Messages after ``reader``'s position (default: the mailbox owner), then advance it."""
        pos_file = self._pos_file(reader or self.name)
        try:
            start = int(pos_file.read_text() or 0)
        except (FileNotFoundError, ValueError):
            start = 0
        scanned = self._scan(start)
        if scanned:
            atomic_write(pos_file, str(scanned[-1][0]), durable=False)
        return [msg for _, msg in scanned]

    def find(self, **match: Any) -> list[dict[str, Any]]:
        """Every message whose fields equal ``match`` (e.g. ``request_id=…``)."""
        return [m for m in self.all() if all(m.get(k) == v for k, v in match.items())]

    def _pos_file(self, reader: str) -> Path:
        return self.dir / f"{self.name}.{check_name(reader)}.pos"

    def _scan(self, start: int) -> list[tuple[int, dict[str, Any]]]:
        """(offset after the line, message) for each complete line from ``start``."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(start)
                data = fh.read()
        except FileNotFoundError:
            return []
        out: list[tuple[int, dict[str, Any]]] = []
        offset = start
        for raw in data.split(b"\n")[:-1]:  # the part after the last newline is torn or empty
            offset += len(raw) + 1
            try:
                msg = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(msg, dict):
                out.append((offset, msg))
        return out
