"""The change feed: watchdog events on ``.tasks/`` (and the inbox) wake idle waiters.

Events are hints (they can be lost, and arrive for our own writes too); the
waiter re-reads the journal and rescans periodically whatever happens. One
observer per board, started on the first wait and stopped by ``close()``, so
a board that only reads and writes never starts a thread.

Teammates waiting for a ready task watch ``.tasks/`` alone; the inbox is added
(recursively, with its ``.processing/`` folder) only for ``wait_for_change``.
Why: watchdog holds back every event queued after a rename *out of* a watched
folder for 0.5 s (waiting for the matching half of the move), and intake renames
each dropped file out of the inbox, which would add that delay to every claim.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from orchestrator.board.index import TASK_FILE_RE

IGNORED = frozenset({"opened", "closed_no_write"})


class _Handler(FileSystemEventHandler):
    def __init__(self, feed: ChangeFeed) -> None:
        self.feed = feed

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in IGNORED or event.is_directory:
            return
        relevant = False
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            name = Path(str(raw)).name if raw else ""
            if not name or name.startswith("."):  # temp files, journal, locks
                continue
            relevant = True
            m = TASK_FILE_RE.match(name)
            if m:
                self.feed.on_task(m.group(1))
        if relevant:
            self.feed.wake.set()


class ChangeFeed:
    def __init__(self, tasks: Path, inbox: Path, on_task: Callable[[str], None]) -> None:
        self.tasks = tasks
        self.inbox = inbox
        self.on_task = on_task
        """Called (in the observer thread) with the id of a task file that changed."""
        self.wake = threading.Event()
        self._observer: Observer | None = None  # type: ignore[valid-type]
        self._lock = threading.Lock()
        self._inbox_watched = False
        self.closed = False

    def start(self, *, inbox: bool = False) -> None:
        """Start watching ``.tasks/`` (and the inbox too when ``inbox``); idempotent."""
        with self._lock:
            if self.closed:
                return
            if self._observer is None:
                observer = Observer()
                observer.name = "orchestrator-board-feed"
                observer.daemon = True
                observer.schedule(_Handler(self), str(self.tasks), recursive=False)
                observer.start()
                self._observer = observer
            if inbox and not self._inbox_watched:
                self.inbox.mkdir(parents=True, exist_ok=True)
                self._observer.schedule(_Handler(self), str(self.inbox), recursive=True)
                self._inbox_watched = True

    def close(self) -> None:
        """Stop for good: a later `start` does nothing (a waiter racing with close)."""
        with self._lock:
            self.closed = True
        self.wake.set()
        self.stop()

    def stop(self) -> None:
        with self._lock:
            observer, self._observer = self._observer, None
            self._inbox_watched = False
        if observer is not None:
            observer.stop()
            observer.join()
