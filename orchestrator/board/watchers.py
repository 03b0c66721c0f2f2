"""The threads behind `orchestrator.board.feed.ChangeFeed`: inotify through watchdog's
`InotifyFD` on Linux, a watchdog observer elsewhere. Imported when a feed starts (a
command that only reads the board never imports watchdog)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

try:  # Linux
    from watchdog.observers.inotify_c import InotifyConstants as IN
    from watchdog.observers.inotify_c import InotifyEvent, InotifyFD
except (ImportError, OSError):  # pragma: no cover - other platforms
    InotifyFD = None  # type: ignore[assignment,misc]

if TYPE_CHECKING:
    from orchestrator.board.feed import ChangeFeed, Role

IGNORED = frozenset({"opened", "closed_no_write"})


def make_watcher(feed: ChangeFeed) -> Watcher:
    return _Inotify(feed) if InotifyFD is not None else _Observer(feed)


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
        self._roles: dict[int, Role] = {}

    def watch(self, folder: Path, role: Role) -> None:
        wd = self._fd.add_callback(os.fsencode(folder), MASK, self, id(self))  # type: ignore[arg-type]
        self._roles[wd] = role

    def on_event(self, event: InotifyEvent) -> None:
        if event.is_directory:
            return
        self.feed.changed([os.fsdecode(event.name)], self._roles.get(event.wd, "inbox"))

    def on_watch_deleted(self, wd: int) -> None:
        self.feed.lost()  # the folder went away: let the waiter rescan

    def on_queue_overflow(self) -> None:
        self.feed.lost()  # events were lost: let the waiter rescan

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

    def watch(self, folder: Path, role: Role) -> None:
        self._observer.schedule(_Handler(self.feed, role), str(folder), recursive=False)

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join()


class _Handler(FileSystemEventHandler):
    def __init__(self, feed: ChangeFeed, role: Role) -> None:
        self.feed = feed
        self.role = role

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in IGNORED or event.is_directory:
            return
        raws = (event.src_path, getattr(event, "dest_path", ""))
        self.feed.changed([Path(str(raw)).name for raw in raws if raw], self.role)


Watcher = _Inotify | _Observer
