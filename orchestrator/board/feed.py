"""The change feed: file events on ``.tasks/`` (and the inbox) wake idle waiters.

Events are hints (they can be lost, and arrive for our own writes too); the
waiter re-reads the files they name and rescans periodically whatever happens. One
watcher per board, started on the first wait and stopped by ``close()``, so a
board that only reads and writes never starts a thread.

Teammates waiting for a ready task watch ``.tasks/`` alone; the lead's
``wait_for_change`` adds the inbox, and the audit log (``events.jsonl``) when it follows
events: a lead with a forge thread, which it pokes on a webhook's event.

On Linux the feed reads inotify directly through watchdog's `InotifyFD` (its own
instance, its own thread) instead of a watchdog ``Observer``. Why: the observer
pairs the two halves of a rename and holds back *every* event queued behind an
``IN_MOVED_FROM`` for 0.5 s while it waits for the other half — even when that
half has already arrived. Dropping a file into the inbox and intake's move of it
into ``inbox/.processing/`` are both renames, so that delay landed on about one
drop in thirty. Since events are only hints, the feed needs no pairing at all.
Elsewhere the portable ``Observer`` is used.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from orchestrator.board.index import TASK_FILE_RE

if TYPE_CHECKING:
    from orchestrator.board.watchers import Watcher


Role = Literal["tasks", "inbox", "events"]
"""What a watched folder is: ``.tasks/``, the inbox, or the folder of ``events.jsonl``
(whose other entries, the task worktrees, do not count)."""


class ChangeFeed:
    def __init__(self, tasks: Path, inbox: Path, on_task: Callable[[str | None], None],
                 events: Path | None = None) -> None:
        self.tasks = tasks
        self.inbox = inbox
        self.events = events
        self.on_task = on_task
        """Called (in the watcher thread) with the id of a task file that changed (None:
        events were lost, rescan every file)."""
        self.wake = threading.Event()
        self._watcher: Watcher | None = None
        self._lock = threading.Lock()
        self._inbox_watched = False
        self._events_watched = False
        self.closed = False

    def start(self, *, inbox: bool = False, events: bool = False) -> None:
        """Start watching ``.tasks/`` (and the inbox too when ``inbox``, the audit log when
        ``events``); idempotent."""
        with self._lock:
            if self.closed:
                return
            if self._watcher is None:
                from orchestrator.board.watchers import make_watcher  # watchdog: when used

                watcher = make_watcher(self)
                try:
                    watcher.watch(self.tasks, "tasks")
                except BaseException:
                    watcher.stop()
                    raise
                self._watcher = watcher
            if inbox and not self._inbox_watched:
                self.inbox.mkdir(parents=True, exist_ok=True)
                self._watcher.watch(self.inbox, "inbox")
                self._inbox_watched = True
            if events and self.events is not None and not self._events_watched:
                self.events.parent.mkdir(parents=True, exist_ok=True)
                self._watcher.watch(self.events.parent, "events")
                self._events_watched = True

    def close(self) -> None:
        """Stop for good: a later `start` does nothing (a waiter racing with close)."""
        with self._lock:
            self.closed = True
        self.wake.set()
        self.stop()

    def stop(self) -> None:
        with self._lock:
            watcher, self._watcher = self._watcher, None
            self._inbox_watched = self._events_watched = False
        if watcher is not None:
            watcher.stop()

    def lost(self) -> None:
        """Events were lost (the kernel's queue overflowed, a folder went away)."""
        self.on_task(None)
        self.wake.set()

    def changed(self, names: list[str], role: Role) -> None:
        """File ``names`` changed in the folder of ``role``: wake the waiters."""
        relevant = False
        for name in names:
            if not name or name.startswith("."):  # temp files, the index, locks, staging
                continue
            if role == "events" and (self.events is None or name != self.events.name):
                continue  # a task's worktree, not the log
            relevant = True
            m = TASK_FILE_RE.match(name) if role == "tasks" else None
            if m:
                self.on_task(m.group(1))
        if relevant:
            self.wake.set()
