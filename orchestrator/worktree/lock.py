"""A lock that excludes other processes and other threads of this one, and that the
thread holding it may take again (a per-path ``RLock`` in front of the file lock, which
is taken once per holding)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

from orchestrator.flock import acquire, open_lock_file

_THREAD_LOCKS: dict[str, threading.RLock] = {}
_GUARD = threading.Lock()


class RepoLock:
    def __init__(self, path: Path) -> None:
        key = str(path.resolve())
        with _GUARD:
            self._thread = _THREAD_LOCKS.setdefault(key, threading.RLock())
        self._path = path
        self._fd = -1
        self._depth = 0

    def __enter__(self) -> RepoLock:
        self._thread.acquire()
        try:
            if not self._depth:
                fd = open_lock_file(self._path)
                try:
                    acquire(fd, self._path, None)
                except BaseException:
                    os.close(fd)
                    raise
                self._fd = fd
            self._depth += 1
        except BaseException:
            self._thread.release()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._depth -= 1
            if not self._depth:
                os.close(self._fd)  # closing the descriptor releases the flock
                self._fd = -1
        finally:
            self._thread.release()
