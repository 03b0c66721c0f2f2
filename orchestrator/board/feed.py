"""The change feed: watchdog events on ``.tasks/`` and its inbox wake idle waiters.

Events are hints (they can be lost, and arrive for our own writes too); the
waiter re-reads the journal and rescans periodically whatever happens. One
observer per board, started on the first wait and stopped by ``close()``, so
a board that only reads and writes never starts a thread.
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
    def __init__(self, folders: list[Path], on_task: Callable[[str], None]) -> None:
        self.folders = folders
        self.on_task = on_task
        """Called (in the observer thread) with the id of a task file that changed."""
        self.wake = threading.Event()
        self._observer: Observer | None = None  # type: ignore[valid-type]
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._observer is not None:
                return
            observer = Observer()
            observer.name = "orchestrator-board-feed"
            observer.daemon = True
            handler = _Handler(self)
            for folder in self.folders:
                folder.mkdir(parents=True, exist_ok=True)
                observer.schedule(handler, str(folder), recursive=False)
            observer.start()
            self._observer = observer

    def stop(self) -> None:
        with self._lock:
            observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join()
