"""A lock that excludes other processes and other threads of this one.

``FileLock(thread_local=False)`` alone counts re-entries per lock object, so a second
thread holding the same object walks straight in; a per-path ``RLock`` in front of
it restores mutual exclusion between threads and keeps re-entry within a thread.
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType

from filelock import FileLock

POLL_SECONDS = 0.002
"""How often a waiting process retries the file lock. filelock's default (50 ms) made
teammates that finished together queue for worktree creation 50 ms at a time."""

_THREAD_LOCKS: dict[str, threading.RLock] = {}
_GUARD = threading.Lock()


class RepoLock:
    def __init__(self, path: Path) -> None:
        key = str(path.resolve())
        with _GUARD:
            self._thread = _THREAD_LOCKS.setdefault(key, threading.RLock())
        self._file = FileLock(path, thread_local=False)

    def __enter__(self) -> RepoLock:
        self._thread.acquire()
        try:
            self._file.acquire(poll_interval=POLL_SECONDS)
        except BaseException:
            self._thread.release()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._file.release()
        finally:
            self._thread.release()
