"""Following a JSON-lines file (the event log, a task's transcript) for the web board.

`Tail` reads what was appended since its last read, whole lines only (a torn
last line waits for its end). `Hub` follows the event log in one asyncio task
and hands each new event to every subscriber (one queue per open page), so the
board never re-reads the whole board to learn what moved: each event names its
task, and only that task is re-read.

Following is a ``stat`` of the file every `POLL_SECONDS` (a few microseconds;
an idle UI stays far below 1 % of a core) and a read only when it grew.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

POLL_SECONDS = 0.1
RECHECK = "_recheck"
RECHECK_SECONDS = 0.6
"""A task named by an event is looked at once more this long after: some writers record
the event before the task file (a permission request marks the task waiting after)."""
QUEUE_SIZE = 1000
"""Events a slow page may fall behind by; past that it is told to reload."""


class Tail:
    """New complete JSON-object lines of ``path`` since the last `read`."""

    def __init__(self, path: Path, *, from_end: bool = True) -> None:
        self.path = path
        self.pos = 0
        self._buf = b""
        self._inode: int | None = None
        if from_end:
            with contextlib.suppress(FileNotFoundError):
                st = path.stat()
                self.pos, self._inode = st.st_size, st.st_ino

    def read(self) -> list[dict[str, Any]]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return []
        if st.st_ino != self._inode or st.st_size < self.pos:  # replaced or truncated
            self._inode, self.pos, self._buf = st.st_ino, 0, b""
        if st.st_size == self.pos:
            return []
        with self.path.open("rb") as fh:
            fh.seek(self.pos)
            chunk = fh.read(st.st_size - self.pos)
        self.pos += len(chunk)
        *lines, self._buf = (self._buf + chunk).split(b"\n")
        out = []
        for raw in lines:
            try:
                rec = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out


Message = dict[str, Any]


class Hub:
    """One follower of the event log; each event is turned into messages by ``render``
    (called once per event, whatever the number of pages open) and broadcast."""

    def __init__(self, events: Path,
                 render: Callable[[list[dict[str, Any]]], Awaitable[list[Message]]]) -> None:
        self.events = events
        self.render = render
        self.subscribers: set[asyncio.Queue[Message]] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ui-event-hub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def subscribe(self) -> asyncio.Queue[Message]:
        q: asyncio.Queue[Message] = asyncio.Queue(QUEUE_SIZE)
        self.subscribers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[Message]) -> None:
        self.subscribers.discard(q)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        tail = Tail(self.events, from_end=True)
        again: dict[str, float] = {}
        while True:
            batch = tail.read()
            now = loop.time()
            due = [tid for tid, at in again.items() if at <= now]
            for tid in due:
                del again[tid]
            for e in batch:
                if isinstance(e.get("task"), str):
                    again[e["task"]] = now + RECHECK_SECONDS
            if (batch or due) and self.subscribers:
                await self._broadcast(batch + [{"event": RECHECK, "task": t} for t in due])
            await asyncio.sleep(POLL_SECONDS)

    async def _broadcast(self, batch: list[dict[str, Any]]) -> None:
        try:
            messages = await self.render(batch)
        except Exception as exc:  # one bad event never stops the feed
            messages = [{"type": "error", "message": f"{type(exc).__name__}: {exc}"}]
        for q in list(self.subscribers):
            for m in messages:
                try:
                    q.put_nowait(m)
                except asyncio.QueueFull:  # a page that fell behind starts over
                    while not q.empty():
                        q.get_nowait()
                    q.put_nowait({"type": "reload"})
                    break


def sse(message: Message) -> str:
    """One server-sent event."""
    data = json.dumps(message, ensure_ascii=False, default=str)
    return f"event: {message.get('type', 'message')}\ndata: {data}\n\n"
