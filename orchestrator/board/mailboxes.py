"""The file board's mailboxes: ``.tasks/mailboxes/<name>.jsonl``, one message per line.

Appends happen under a lock file beside the mailbox (never the data file) so
that message ids stay in order. Reading never deletes: each reader keeps its
own read position in ``<name>.<reader>.pos``, so a crashed reader sees again
what it had not acknowledged, and `orchestrator` can always show the history.

A message is ``{"id", "ts", "from", "to", "kind", "body", ...fields}``. Kinds
in use: ``message`` (free text), ``shutdown_request`` / ``shutdown_response``
(the handshake, matched by ``request_id``), ``permission_request`` /
``permission_response`` (the permission gate's channel).

`FileMailboxes` implements `orchestrator.controlplane.Mailboxes` over `Mailbox`.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

from orchestrator.clock import utcnow
from orchestrator.controlplane import Message
from orchestrator.errors import InvalidInput
from orchestrator.events import redact
from orchestrator.flock import flocked
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
        self._lock_file = self.dir / f".{name}.lock"

    def send(self, sender: str, body: str = "", *, kind: str = "message",
             **fields: Any) -> dict[str, Any]:
        """Append a message; returns it with its new ``id``."""
        msg: dict[str, Any] = {
            "id": uuid.uuid4().hex[:12], "ts": utcnow(), "from": sender, "to": self.name,
            "kind": kind, "body": body, **fields,
        }
        line = (redact(json.dumps(msg, default=str, ensure_ascii=False)) + "\n").encode()
        self.dir.mkdir(parents=True, exist_ok=True)
        with flocked(self._lock_file, timeout=None):
            append_line(self.path, _after_torn(self.path) + line)
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

    def unread(self, reader: str | None = None) -> list[tuple[int, dict[str, Any]]]:
        """(offset after it, message) for each message past ``reader``'s position."""
        pos_file = self._pos_file(reader or self.name)
        try:
            start = int(pos_file.read_text() or 0)
        except (FileNotFoundError, ValueError):
            start = 0
        try:
            if self.path.stat().st_size <= start:
                return []
        except FileNotFoundError:
            return []
        return self._scan(start)

    def ack(self, message_id: str, reader: str | None = None) -> None:
        """Move ``reader``'s position past ``message_id``."""
        for offset, msg in self.unread(reader):
            if msg.get("id") == message_id:
                atomic_write(self._pos_file(reader or self.name), str(offset), durable=False)
                return

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


def _after_torn(path: Path) -> bytes:
    """A newline when the file ends inside a line (a writer killed mid-write), so that
    the next message starts a line of its own instead of joining the fragment."""
    try:
        with path.open("rb") as fh:
            if fh.seek(0, os.SEEK_END) == 0:
                return b""
            fh.seek(-1, os.SEEK_END)
            return b"" if fh.read(1) == b"\n" else b"\n"
    except FileNotFoundError:
        return b""


class FileMailboxes:
    """Implements `orchestrator.controlplane.Mailboxes` (one `Mailbox` file per name)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def box(self, name: str) -> Mailbox:
        return Mailbox(self.layout, name)

    def send(self, to: str, sender: str, body: str = "", *, kind: str = "message",
             **fields: Any) -> Message:
        return Message.from_dict(self.box(to).send(sender, body, kind=kind, **fields))

    def read(self, name: str) -> list[Message]:
        return [Message.from_dict(m) for m in self.box(name).all()]

    def find(self, name: str, **match: Any) -> list[Message]:
        return [Message.from_dict(m) for m in self.box(name).find(**match)]

    def unread(self, name: str, reader: str | None = None) -> list[Message]:
        return [Message.from_dict(m) for _, m in self.box(name).unread(reader)]

    def ack(self, name: str, message_id: str, reader: str | None = None) -> None:
        self.box(name).ack(message_id, reader)
