"""Host reads and writes inside a folder an agent can write: never through its links.

A task's worktree (``.task_ref``, the ``.git`` file), a sandbox's scratch folder (the
private ref of its branch), a backend's report files (``$ORCH_USAGE_FILE``): the agent
may have put a symlink, a FIFO, a device or a gigabyte under the name the host is about
to open. Every such open goes through this module:

- the path is walked beneath a folder the host trusts, one component at a time, each
  opened with ``O_NOFOLLOW`` from the folder before it, so a link anywhere on the way
  (the file itself or a folder above it) is refused (``ELOOP``/``ENOTDIR``), never
  followed; ``..`` and absolute paths are refused before anything is opened;
- the file is opened with ``O_NONBLOCK`` and checked with ``fstat``: only a regular
  file is read or written (a FIFO cannot hang the host, a device is never read);
- reads are bounded: a file over the limit raises instead of being read whole;
- writes go to a new file in the same folder, renamed over the name: a link under
  that name is replaced, not followed, and a reader sees the old or the new text.

Errors are `OSError` (`NotRegular` for a FIFO, device, socket or folder).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from orchestrator.fsutil import read_open_file

DEFAULT_LIMIT = 1 << 20
_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


class NotRegular(OSError):
    """The name holds something other than a regular file."""


def _parts(rel: str | PurePosixPath) -> list[str]:
    parts = PurePosixPath(rel).parts
    if not parts or PurePosixPath(rel).is_absolute() or any(p in ("..", ".") for p in parts):
        raise OSError(errno.EINVAL, f"not a path beneath the folder: {rel}")
    return list(parts)


@contextmanager
def _folder(root: Path, parts: list[str], *, make: bool = False) -> Iterator[int]:
    """An fd of ``root/parts…``, every component opened without following a link
    (``make``: missing folders are made)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts:
            if make:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nxt
        yield fd
    finally:
        os.close(fd)


def open_beneath(root: Path, rel: str | PurePosixPath, flags: int = os.O_RDONLY,
                 mode: int = 0o644) -> int:
    """An fd of the regular file ``root/rel``, opened without following a link on the
    way and without blocking; `NotRegular` for anything else under that name."""
    *folders, name = _parts(rel)
    with _folder(root, folders) as dir_fd:
        try:
            fd = os.open(name, flags | _NOFOLLOW | os.O_NONBLOCK, mode, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise NotRegular(errno.ELOOP, f"{root / rel} is a symbolic link (not "
                                 "followed), not a regular file") from None
            raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(errno.EINVAL, f"{root / rel} is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_beneath(root: Path, rel: str | PurePosixPath, limit: int = DEFAULT_LIMIT, *,
                 cut: bool = False) -> bytes:
    """The bytes of the regular file ``root/rel``; `OSError` (``EFBIG``) when it holds
    more than ``limit`` (``cut``: its first ``limit`` bytes instead)."""
    fd = open_beneath(root, rel)
    try:
        data = read_open_file(fd, os.fstat(fd).st_size, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        if cut:
            return data[:limit]
        raise OSError(errno.EFBIG, f"{root / rel} is over {limit} bytes")
    return data


def read_text_beneath(root: Path, rel: str | PurePosixPath,
                      limit: int = DEFAULT_LIMIT) -> str:
    """`read_beneath` as UTF-8 text (`UnicodeDecodeError` when it is not)."""
    return read_beneath(root, rel, limit).decode()


def write_beneath(root: Path, rel: str | PurePosixPath, data: bytes | str,
                  mode: int = 0o644, *, make: bool = False) -> None:
    """Replace ``root/rel`` with a regular file holding ``data``: written under a new
    name in the same folder and renamed over it, so whatever was there (a link, a FIFO)
    is replaced, never written through. A folder under that name is refused. ``make``:
    missing folders on the way are made (none is followed if it is a link)."""
    raw = data.encode() if isinstance(data, str) else data
    *folders, name = _parts(rel)
    with _folder(root, folders, make=make) as dir_fd:
        tmp = f".{name}.{uuid.uuid4().hex[:12]}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, mode,
                     dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb", closefd=True) as fh:
                fh.write(raw)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise


def copy_beneath(src: Path, root: Path, rel: str | PurePosixPath) -> bool:
    """Copy the host's file ``src`` (a link as a link) to ``root/rel`` unless something is
    there already (False); folders on the way are made, none is followed if it is a link
    (`OSError`), so the copy lands beneath ``root`` or nowhere."""
    *folders, name = _parts(rel)
    with _folder(root, folders, make=True) as dir_fd:
        if src.is_symlink():
            try:
                os.symlink(os.readlink(src), name, dir_fd=dir_fd)
            except FileExistsError:
                return False
            return True
        st = os.stat(src)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW,
                         st.st_mode & 0o7777, dir_fd=dir_fd)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as out, open(src, "rb") as inp:
            shutil.copyfileobj(inp, out)
        os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dir_fd)
        return True
