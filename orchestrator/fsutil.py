"""Atomic file writes: a reader sees the old file or the new one, never half."""

from __future__ import annotations

import contextlib
import errno
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
            st = os.fstat(fd)
            if st.st_size > len(data):  # a spare's zeroed blocks past the new text
                os.ftruncate(fd, len(data))
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


SPARE_PREFIX = ".spare."
MAX_SPARES = 4096
"""Spare files a folder keeps at most (a burst of 2,000 drops leaves 2,000)."""
SPARE_BYTES = 4096
"""A file is kept as a spare only up to this size (one block): spares keep their bytes
until they are written over, and 4,096 big drops must not keep gigabytes."""


class Spares:
    """Files no longer needed, kept in a folder to be written over by later atomic writes,
    instead of being deleted now and new files made then.

    Deleting a file and making one both cost on this project's test machines (ext4 without
    a journal, mounted with ``discard``): a delete, or any cut that frees a block, waits
    ~0.3 ms for the disk's trim, and for minutes after a burst of deletes every new file
    nearby costs up to ~1.4 ms more (the allocator passes over each inode freed lately,
    ``recently_deleted``). Intake deleted every drop it took and made a new temp file for
    every task, so each burst paid twice and slowed the next. It now keeps the taken drops
    (up to `SPARE_BYTES` each) here as ``.spare.<random>.tmp``, as they are, and the next
    burst writes its tasks into them: no inode is freed or made, no block freed.

    A spare is claimed by renaming it to a temp name of its own (one process wins). It is
    reused only when it is a regular file of ours with no other link (writing into a file
    linked elsewhere would change that file too) that no other process has open (a writer
    still holding a dropped file must never write into a task file): see `_alone`. Its old
    bytes are then zeroed without freeing its block (`_zero`: on ext4 and XFS the block
    becomes unwritten, read as zeros until the new data is on disk, so after a power cut a
    task file shows the new text or zeros, never a spare's old text), or cut where the file
    system cannot. Its mode becomes 0600.
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
        """A spare claimed as a temp file for ``name``, open for writing at its start, its
        old bytes zeroed (the writer cuts what is left past its own data; `atomic_write`
        does): its descriptor and path; None when there is none left."""
        names = self._spares()
        while names:
            spare = os.path.join(self.folder, names.pop())
            mine = os.path.join(self.folder, f".{name}.{os.urandom(6).hex()}.tmp")
            try:
                os.rename(spare, mine)
            except OSError:
                continue  # another process took it
            try:
                fd = os.open(mine, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:  # a symlink, a FIFO, a folder someone put under a spare's name
                _let_go(mine, spare)
                continue
            try:
                st = os.fstat(fd)
                alone = _alone(fd) if _reusable(st) else False
                if alone is None:  # this file system cannot tell (no leases): none is reused
                    names.clear()
                ok = bool(alone)
                if ok and st.st_size and not _zero(fd, st.st_size, st.st_blksize):
                    os.ftruncate(fd, 0)
                if ok and stat.S_IMODE(st.st_mode) != 0o600:
                    os.fchmod(fd, 0o600)
            except OSError:
                ok = False
            if not ok:
                os.close(fd)
                _let_go(mine, spare)
                continue
            return fd, mine
        return None

    def keep(self, paths: list[Path]) -> list[Path]:
        """Rename each of ``paths`` in as a spare while there is room (a regular file of
        ours, unlinked elsewhere, up to `SPARE_BYTES`); the ones not kept are returned,
        for the caller to delete."""
        names = self._spares()
        rest: list[Path] = []
        for path in paths:
            try:
                st = os.lstat(path)
            except OSError:
                continue  # gone already
            if len(names) >= MAX_SPARES or not _reusable(st):
                rest.append(path)
                continue
            name = f"{SPARE_PREFIX}{os.urandom(6).hex()}.tmp"
            try:
                os.rename(path, os.path.join(self.folder, name))
            except OSError:
                rest.append(path)
                continue
            names.append(name)
        return rest


def _reusable(st: os.stat_result) -> bool:
    """A spare may be kept and written over: a regular file of ours, linked nowhere else,
    of at most `SPARE_BYTES` and holding no more disk than that (a file grown or sparse
    since, or with room allocated past its end, could make a task file hold gigabytes)."""
    return (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()
            and st.st_size <= SPARE_BYTES
            and st.st_blocks * 512 <= max(SPARE_BYTES, st.st_blksize))


def _let_go(mine: str, spare: str) -> None:
    """A spare not to reuse loses the name we gave it (the file lives on where else it is
    linked); a folder goes back under its old name, as it was."""
    try:
        os.unlink(mine)
    except IsADirectoryError:
        with contextlib.suppress(OSError):
            os.rename(mine, spare)
    except OSError:
        pass


def _alone(fd: int) -> bool | None:
    """Whether no other open file has ``fd``'s file open (a process that kept a dropped
    file open, or mapped it, to write on later): Linux grants a write lease (``F_SETLEASE``)
    only then. It is given up at once. While it is held, someone opening the file would
    break it and the kernel would signal us: SIGURG (``F_SETSIG``), which is ignored unless
    handled, not SIGIO, which would end the process. None where leases are not available
    (another system, NFS, some FUSE file systems): no file is reused there."""
    import fcntl
    import signal  # here: every command imports this module, few take a spare

    setlease = getattr(fcntl, "F_SETLEASE", None)
    if setlease is None:
        return None
    try:
        fcntl.fcntl(fd, fcntl.F_SETSIG, signal.SIGURG)
        fcntl.fcntl(fd, setlease, fcntl.F_WRLCK)
    except OSError as exc:
        return False if exc.errno == errno.EAGAIN else None
    fcntl.fcntl(fd, setlease, fcntl.F_UNLCK)
    return True


_ZERO_RANGE = 0x10  # FALLOC_FL_ZERO_RANGE (linux/falloc.h)
_fallocate: Callable[[int, int, int, int], int] | None = None
_no_fallocate = False


def _zero(fd: int, size: int, block: int) -> bool:
    """Zero the first ``size`` bytes of ``fd``, whole blocks, without freeing them
    (``fallocate(FALLOC_FL_ZERO_RANGE)``; the file then spans those blocks, for the writer to
    cut). False where the C library or the file system cannot (tmpfs): cut it then."""
    global _fallocate, _no_fallocate
    if _fallocate is None:
        if _no_fallocate:
            return False
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fn = getattr(libc, "fallocate64", None) or libc.fallocate
        except (OSError, AttributeError):
            _no_fallocate = True
            return False
        fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        fn.restype = ctypes.c_int
        _fallocate = fn
    block = block if block > 0 else 4096
    return _fallocate(fd, _ZERO_RANGE, 0, -(-size // block) * block) == 0


THREADS = 8
"""Threads of `each_in_threads`."""


def each_in_threads(fn: Callable[[T], None], items: Sequence[T]) -> None:
    """``fn(item)`` for each item, from `THREADS` threads once there are enough items.
    For deletes: where the file system trims a file's freed blocks at once (``discard``,
    as on this project's test machines) each waits on the disk, ~0.3 ms, and those waits
    overlap (8 threads: ~0.15 ms a file)."""
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
