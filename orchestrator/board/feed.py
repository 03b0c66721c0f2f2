"""The change feed: file events on ``.tasks/`` (and the inbox) wake idle waiters.

Events are hints (they can be lost, and arrive for our own writes too); the
waiter re-reads the journal and rescans periodically whatever happens. One
watcher per board, started on the first wait and stopped by ``close()``, so a
board that only reads and writes never starts a thread.

Teammates waiting for a ready task watch ``.tasks/`` alone; the lead's
``wait_for_change`` adds the inbox.

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

import os
import threading
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from orchestrator.board.index import TASK_FILE_RE

try:  # Linux
    from watchdog.observers.inotify_c import InotifyConstants as IN
    from watchdog.observers.inotify_c import InotifyEvent, InotifyFD
except (ImportError, OSError):  # pragma: no cover - other platforms
    InotifyFD = None  # type: ignore[assignment,misc]

IGNORED = frozenset({"opened", "closed_no_write"})


class ChangeFeed:
    def __init__(self, tasks: Path, inbox: Path, on_task: Callable[[str], None]) -> None:
        self.tasks = tasks
        self.inbox = inbox
        self.on_task = on_task
        """Called (in the watcher thread) with the id of a task file that changed."""
        self.wake = threading.Event()
        self._watcher: _Inotify | _Observer | None = None
        self._lock = threading.Lock()
        self._inbox_watched = False
        self.closed = False

    def start(self, *, inbox: bool = False) -> None:
        """Start watching ``.tasks/`` (and the inbox too when ``inbox``); idempotent."""
        with self._lock:
            if self.closed:
                return
            if self._watcher is None:
                watcher = _Inotify(self) if InotifyFD is not None else _Observer(self)
                try:
                    watcher.watch(self.tasks, tasks=True)
                except BaseException:
                    watcher.stop()
                    raise
                self._watcher = watcher
            if inbox and not self._inbox_watched:
                self.inbox.mkdir(parents=True, exist_ok=True)
                self._watcher.watch(self.inbox, tasks=False)
                self._inbox_watched = True

    def close(self) -> None:
        """Stop for good: a later `start` does nothing (a waiter racing with close)."""
        with self._lock:
            self.closed = True
        self.wake.set()
        self.stop()

    def stop(self) -> None:
        with self._lock:
            watcher, self._watcher = self._watcher, None
            self._inbox_watched = False
        if watcher is not None:
            watcher.stop()

    def changed(self, names: list[str], *, tasks: bool) -> None:
        """File ``names`` changed in ``.tasks/`` (``tasks``) or the inbox: wake the waiters."""
        relevant = False
        for name in names:
            if not name or name.startswith("."):  # temp files, journal, locks, staging
                continue
            relevant = True
            m = TASK_FILE_RE.match(name) if tasks else None
            if m:
                self.on_task(m.group(1))
        if relevant:
            self.wake.set()


if InotifyFD is not None:
    MASK = (IN.IN_CREATE | IN.IN_MODIFY | IN.IN_ATTRIB | IN.IN_CLOSE_WRITE | IN.IN_MOVED_FROM
            | IN.IN_MOVED_TO | IN.IN_DELETE | IN.IN_DELETE_SELF | IN.IN_MOVE_SELF
            | IN.IN_DONT_FOLLOW | IN.IN_ONLYDIR)


class _Inotify:
    """A private inotify instance whose thread calls back at once, one event at a time."""

    def __init__(self, feed: ChangeFeed) -> None:
        self.feed = feed
        self._fd = InotifyFD()
        self._fd.name = "orchestrator-board-feed"
        self._fd.start()
        self._tasks_wds: set[int] = set()

    def watch(self, folder: Path, *, tasks: bool) -> None:
        wd = self._fd.add_callback(os.fsencode(folder), MASK, self, id(self))  # type: ignore[arg-type]
        if tasks:
            self._tasks_wds.add(wd)

    def on_event(self, event: InotifyEvent) -> None:
        if event.is_directory:
            return
        self.feed.changed([os.fsdecode(event.name)], tasks=event.wd in self._tasks_wds)

    def on_watch_deleted(self, wd: int) -> None:
        self.feed.wake.set()  # the folder went away: let the waiter rescan

    def on_queue_overflow(self) -> None:
        self.feed.wake.set()  # events were lost: let the waiter rescan

    def stop(self) -> None:
        self._fd.stop()
        self._fd.join()


class _Observer:
    """The portable fallback: a watchdog observer (with its 0.5 s move pairing)."""

    def __init__(self, feed: ChangeFeed) -> None:
        self.feed = feed
        self._observer = Observer()
        self._observer.name = "orchestrator-board-feed"
        self._observer.daemon = True
        self._observer.start()

    def watch(self, folder: Path, *, tasks: bool) -> None:
        self._observer.schedule(_Handler(self.feed, tasks=tasks), str(folder), recursive=False)

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join()


class _Handler(FileSystemEventHandler):
    def __init__(self, feed: ChangeFeed, *, tasks: bool) -> None:
        self.feed = feed
        self.tasks = tasks

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in IGNORED or event.is_directory:
            return
        raws = (event.src_path, getattr(event, "dest_path", ""))
        self.feed.changed([Path(str(raw)).name for raw in raws if raw], tasks=self.tasks)
