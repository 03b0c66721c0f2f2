"""Following the board's event log for the web board.

`EventSource` reads the events appended since its last read (by ``seq``, through the
control plane, so any board implementation works). `Hub` follows it in one asyncio
task and hands each new event to every subscriber (one queue per open page), so the
board never re-reads the whole board to learn what moved: each event names its task,
and only that task is re-read. It looks every `EVENT_POLL_SECONDS`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.controlplane import Events

POLL_SECONDS = 0.1
"""How often an open task page looks for new transcript records."""
EVENT_POLL_SECONDS = 0.25
"""How often the hub asks the board for events after the last seq it saw: a card moves
within this (plus rendering) of its event; an idle UI costs a read of the log's index
each time (about 0.2 CPU-s per 30 s on the file board)."""
RECHECK = "_recheck"
RECHECK_SECONDS = 0.6
"""A task named by an event is looked at once more this long after: some writers record
the event before the task file (a permission request marks the task waiting after)."""
QUEUE_SIZE = 1000
"""Events a slow page may fall behind by; past that it is told to reload."""


class EventSource:
    """The events appended to a board's log since the last `read` (by ``seq``), as their
    JSON form; the file board answers from its index, not by re-reading the log."""

    def __init__(self, events: Events) -> None:
        self.events = events
        self.since = events.last_seq()

    def read(self) -> list[dict[str, Any]]:
        out = []
        for e in self.events.read(since=self.since):
            self.since = max(self.since, e.seq)
            out.append(e.to_dict())
        return out


Message = dict[str, Any]


class Hub:
    """One follower of the event log; each event is turned into messages by ``render``
    (called once per event, whatever the number of pages open) and broadcast."""

    def __init__(self, read: Callable[[], list[dict[str, Any]]],
                 render: Callable[[list[dict[str, Any]]], Awaitable[list[Message]]]) -> None:
        self.read = read
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
        again: dict[str, float] = {}
        while True:
            batch = self.read()
            now = loop.time()
            due = [tid for tid, at in again.items() if at <= now]
            for tid in due:
                del again[tid]
            for e in batch:
                if isinstance(e.get("task"), str):
                    again[e["task"]] = now + RECHECK_SECONDS
            if (batch or due) and self.subscribers:
                await self._broadcast(batch + [{"event": RECHECK, "task": t} for t in due])
            await asyncio.sleep(EVENT_POLL_SECONDS)

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
