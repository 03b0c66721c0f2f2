"""Messages sent to a teammate (``orchestrator send alice …``) reach its agent.

The teammate appends each message to one file per task run, ``.tasks/.run/messages/
<task>.md``; every backend reads it its own way:

- the built-in loop puts new messages in front of the model at its next step;
- Claude Code gets them when its turn ends: the session is resumed with them;
- a command backend finds the file in ``ORCH_MESSAGES`` and may read it at any time
  (each message is a ``## from SENDER at TIME`` block).

A message that arrives while the teammate is idle waits for its next task.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from orchestrator.controlplane import Message
from orchestrator.fsutil import append_line
from orchestrator.layout import Layout

MESSAGES_ENV = "ORCH_MESSAGES"


def messages_file(layout: Layout, task_id: str) -> Path:
    return layout.run / "messages" / f"{task_id}.md"


def block(msg: Message) -> str:
    """How one message reads in the file and to the agent."""
    return f"## from {msg.get('from') or '?'} at {msg.get('ts', '')}\n{msg.get('body', '')}\n\n"


def start(path: Path, waiting: list[Message]) -> None:
    """A new run's file: empty, then the messages that arrived while nothing ran."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(block(m) for m in waiting))


def deliver(path: Path, msg: Message) -> None:
    append_line(path, block(msg).encode())


class Reader:
    """Reads what was appended to a run's messages file since the last read."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.offset = 0

    def new(self) -> str:
        if self.path is None:
            return ""
        text = b""
        with contextlib.suppress(OSError), self.path.open("rb") as f:
            f.seek(self.offset)
            text = f.read()
        self.offset += len(text)
        return text.decode("utf-8", "replace").strip()


def as_prompt(text: str) -> str:
    return ("Messages for you arrived while you worked (orchestrator send); take them into "
            "account:\n\n" + text)
