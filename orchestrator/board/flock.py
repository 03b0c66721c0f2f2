"""``flock`` on a lock file, shared by the board's writers (tasks, ids, mailboxes)."""

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
    """Hold an exclusive ``flock`` on ``path``; ``timeout=0`` raises FileLocked at once.

    Each call opens its own descriptor, so the lock also excludes other threads
    of this process. The lock file is never deleted (deleting races with lockers).
    """
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:  # O_CREAT only the first time: it takes the folder's lock
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + (timeout or 0)
        delay = 0.0005
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if timeout is not None and time.monotonic() >= deadline:
                    if not timeout:
                        raise FileLocked(str(path)) from None
                    raise Conflict(f"{os.fspath(path)} stayed locked for {timeout:.0f}s") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.01)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the flock
