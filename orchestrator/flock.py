"""The one file-lock mechanism: an exclusive ``flock`` on a lock file, for the board's
writers (tasks, ids, mailboxes, events), the worktree and merge locks and the daemon's.

Each holder opens its own descriptor, so a lock also excludes the other threads of this
process; the kernel drops it when the holder's process dies (``kill -9`` included). Lock
files are never deleted (deleting races with lockers)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from orchestrator.errors import Conflict

LOCK_TIMEOUT = 10.0


class FileLocked(Exception):
    """A non-blocking lock attempt found the lock held (internal: claimers move on)."""


@contextlib.contextmanager
def flocked(path: os.PathLike[str] | str, timeout: float | None = LOCK_TIMEOUT) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``; ``timeout=0`` raises FileLocked at once,
    ``None`` waits as long as it takes."""
    fd = open_lock_file(path)
    try:
        acquire(fd, path, timeout)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def open_lock_file(path: os.PathLike[str] | str) -> int:
    try:
        return os.open(path, os.O_RDWR)
    except FileNotFoundError:  # O_CREAT only the first time: it takes the folder's lock
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def acquire(fd: int, path: os.PathLike[str] | str, timeout: float | None = LOCK_TIMEOUT
            ) -> None:
    """``flock`` the open lock file ``fd`` (of ``path``), as `flocked` does."""
    deadline = time.monotonic() + (timeout or 0)
    delay = 0.0005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if timeout is not None and time.monotonic() >= deadline:
                if not timeout:
                    raise FileLocked(str(path)) from None
                raise Conflict(f"{os.fspath(path)} stayed locked for {timeout:.0f}s") from None
            time.sleep(delay)
            delay = min(delay * 2, 0.01)
