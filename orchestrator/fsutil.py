"""Atomic file writes: a reader sees the old file or the new one, never half."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


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
                 sync_dir: bool = True, tmp_dir: Path | None = None,
                 spares: Spares | None = None) -> os.stat_result:
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
    thousands of drops) pays for no file object around it. With ``spares`` (kept in
    ``tmp_dir``) a spare file is written over instead, when there is one.
    """
    if isinstance(data, str):
        data = data.encode()
    taken = spares.take(path.name) if spares is not None else None
    fd, tmp = taken or _temp_file(tmp_dir or path.parent, path.name)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
            st = os.fstat(fd)
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


SPARE_PREFIX = ".spare."
MAX_SPARES = 4096
"""Spare files a folder keeps at most (a burst of 2,000 drops leaves 2,000)."""


class Spares:
    """Files no longer needed, kept empty in a folder to be written over by later atomic
    writes, instead of being deleted now and new files made then.

    On ext4 without a journal (this project's test machines) every new file costs up to
    ~1.4 ms more for minutes after a burst of deletes nearby: the allocator passes over
    each inode freed lately (``recently_deleted``). Intake deleted every drop it took and
    made a new temp file for every task, so each burst slowed the next. It now keeps the
    taken drops here (``.spare.<random>.tmp``), emptied, and the next burst writes its
    tasks into them: no inode is freed or made. Emptied, so that a task written into one
    gets new blocks, whose data a journalling file system writes before the rename that
    shows the file (old bytes never show through after a power cut). Only a regular file
    of ours with no other link is kept or reused: writing into a file linked elsewhere
    would change that file too. A spare is claimed by renaming it to a temp name of its
    own (one process wins), then written as a new temp file is; its mode becomes 0600.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._names: list[str] | None = None

    def _spares(self) -> list[str]:
        if self._names is None:
            try:
                self._names = [n for n in os.listdir(self.folder) if n.startswith(SPARE_PREFIX)]
            except (FileNotFoundError, NotADirectoryError):
                self._names = []
        return self._names

    def take(self, name: str) -> tuple[int, str] | None:
        """A spare claimed as an empty temp file for ``name``, open for writing: its
        descriptor and path; None when there is none left."""
        names = self._spares()
        while names:
            mine = os.path.join(self.folder, f".{name}.{os.urandom(6).hex()}.tmp")
            try:
                os.rename(os.path.join(self.folder, names.pop()), mine)
            except OSError:
                continue  # another process took it
            try:
                fd = os.open(mine, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(mine)
                continue
            st = os.fstat(fd)
            if not _reusable(st):
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(mine)  # our name only: the file lives on where it is linked
                continue
            if st.st_size:
                os.ftruncate(fd, 0)  # kept empty; written to since (see the class)
            if stat.S_IMODE(st.st_mode) != 0o600:
                os.fchmod(fd, 0o600)
            return fd, mine
        return None

    def keep(self, paths: list[Path]) -> list[Path]:
        """Rename each of ``paths`` in as a spare while there is room, and empty them (from
        a few threads: see `each_in_threads`); the ones not kept are returned, for the
        caller to delete."""
        names = self._spares()
        kept: list[str] = []
        rest: list[Path] = []
        for path in paths:
            try:
                ok = len(names) < MAX_SPARES and _reusable(os.lstat(path))
            except OSError:
                continue  # gone already
            name = f"{SPARE_PREFIX}{os.urandom(6).hex()}.tmp"
            if ok:
                try:
                    os.rename(path, os.path.join(self.folder, name))
                except OSError:
                    rest.append(path)
                    continue
                names.append(name)
                kept.append(os.path.join(self.folder, name))
            else:
                rest.append(path)
        each_in_threads(_empty, kept)
        return rest


def _reusable(st: os.stat_result) -> bool:
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()


def _empty(path: str) -> None:
    """Empty a spare just kept, by its descriptor: a name swapped for a symlink, or a file
    linked elsewhere since its check, is dropped from the spares, never cut."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        fd = -1
    try:
        if fd >= 0 and _reusable(os.fstat(fd)):
            os.ftruncate(fd, 0)
            return
    except OSError:
        pass
    finally:
        if fd >= 0:
            os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(path)  # our name only


THREADS = 8
"""Threads of `each_in_threads`."""


def each_in_threads(fn: Callable[[T], None], items: Sequence[T]) -> None:
    """``fn(item)`` for each item, from `THREADS` threads once there are enough items.
    For deletes and truncations: where the file system trims a file's freed blocks at
    once (``discard``, as on this project's test machines) each waits on the disk,
    ~0.3 ms, and those waits overlap (8 threads: ~0.15 ms a file)."""
    def run(some: Sequence[T]) -> None:
        for item in some:
            fn(item)

    if len(items) < 4 * THREADS:
        run(items)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(THREADS, thread_name_prefix="each-in-threads") as pool:
        for _ in pool.map(run, (items[i::THREADS] for i in range(THREADS))):
            pass


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
