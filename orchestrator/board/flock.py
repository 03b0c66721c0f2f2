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


class HeldLockFile:
    """A lock file kept open for a batch of operations, each of which takes and releases
    the lock on it (`locked`): the same exclusion as `flocked`, without an ``open`` per
    operation. For one thread at a time."""

    def __init__(self, path: os.PathLike[str] | str) -> None:
        self.path = path
        self.fd = open_lock_file(path)

    @contextlib.contextmanager
    def locked(self, timeout: float | None = LOCK_TIMEOUT) -> Iterator[None]:
        acquire(self.fd, self.path, timeout)
        try:
            yield
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.fd)
