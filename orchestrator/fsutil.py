"""Atomic file writes: a reader sees the old file or the new one, never half."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_open_file(fd: int, size: int, limit: int) -> bytes:
    """At most ``limit`` bytes of the open file ``fd``, whose fstat gave ``size``: one read
    of ``size`` + 1 bytes, then on to ``limit`` only if the file grew meanwhile (a read
    asked for ``limit`` bytes up front allocates that much for every small file)."""
    first = min(size + 1, limit)
    data = os.read(fd, first)
    if len(data) < first or first >= limit:
        return data
    chunks = [data]
    left = limit - len(data)
    while left > 0 and (chunk := os.read(fd, min(1 << 16, left))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def atomic_write(path: Path, data: bytes | str, *, durable: bool = True,
                 sync_dir: bool = True, tmp_dir: Path | None = None) -> os.stat_result:
    """Write ``data`` to ``path`` via temp file + fsync + rename (+ fsync of the folder);
    returns the new file's stat (taken before the rename, which keeps inode, size and
    mtime), for callers that key a cache on them.

    ``durable=False`` skips both fsyncs; the rename alone still keeps readers from
    ever seeing a torn file, which is enough for caches that can be rebuilt.
    ``sync_dir=False`` fsyncs the data but not the rename: after a power cut the
    old or the new complete file is there (for writes that may be forgotten,
    such as a lease that would have expired anyway).
    ``tmp_dir`` (same file system) holds the temp file, so that a watcher of
    ``path``'s folder sees one arriving file instead of a rename inside it.
    The temp file is made as ``mkstemp`` makes one (``O_EXCL``, mode 0600, a name no
    other writer picks), with plain ``os`` calls: a burst of task writes (intake of
    thousands of drops) pays for no file object around it."""
    if isinstance(data, str):
        data = data.encode()
    fd, tmp = _temp_file(tmp_dir or path.parent, path.name)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            st = os.fstat(fd)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if durable and sync_dir:
        fsync_dir(path.parent)
    return st


def _temp_file(folder: Path, name: str) -> tuple[int, str]:
    """A new file ``.<name>.<random>.tmp`` in ``folder``, open for writing (mode 0600)."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = os.path.join(folder, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


def append_line(path: Path, line: str | bytes) -> None:
    """Append one line with a single ``O_APPEND`` write, so concurrent writers never
    interleave inside a line (creates the file, not its folder)."""
    data = line.encode() if isinstance(line, str) else line
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def sync_filesystem(path: Path) -> None:
    """Make every write so far to ``path``'s file system durable, in one flush: ``syncfs``
    where the C library has it (Linux), else ``sync``. For a batch of writes made with
    ``durable=False``: one flush instead of two fsyncs per file."""
    import ctypes
    import ctypes.util

    fd = os.open(path, os.O_RDONLY)
    try:
        name = ctypes.util.find_library("c")
        syncfs = getattr(ctypes.CDLL(name, use_errno=True), "syncfs", None) if name else None
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def read_regular(path: Path) -> str:
    """A settings file's text: a regular file only, opened without blocking, so a FIFO or a
    device under a settings file's name cannot hang every command (`OSError` instead)."""
    return read_regular_bytes(path).decode("utf-8")


def read_regular_bytes(path: Path, limit: int | None = None) -> bytes:
    """The bytes of ``path`` (at most ``limit``), which must be a regular file: it is opened
    without blocking and checked before a read, so a FIFO or a device someone put under
    its name raises `OSError` instead of hanging the reader."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path} is not a regular file")
        return read_open_file(fd, st.st_size, sys.maxsize if limit is None else limit)
    finally:
        os.close(fd)
