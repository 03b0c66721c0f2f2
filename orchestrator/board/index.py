"""A per-process view of ``.tasks/``, cheap to keep fresh with 10,000 task files.

The index is a hint, never the truth: every write re-reads the task file under
its lock. It is refreshed three ways:

- the **journal** ``.tasks/.journal``: every board write appends a line
  ``<id> <status> <priority>`` (one ``O_APPEND`` write, no fsync: it is a hint),
  so a refresh reads only what was written since the last one instead of
  stat-ing every file. A claimer applies those lines without opening the task
  files (they become *stale*: status and order known, the rest re-read when a
  reader needs it), so N claiming processes do not each re-read every claim;
- **dirty ids** marked by the watchdog handler (hand edits, files dropped
  straight into ``.tasks/``);
- a **full rescan** (``os.scandir`` + stat comparison) every ``rescan_seconds``,
  since file-system events can be lost and people edit files by hand.

A cold start (``orchestrator list`` in a fresh process) begins from
``.tasks/.snapshot.json``, a cache of every task with its file's stat saved by
the last scan that had to read many files, and re-reads only the files whose
stat changed since.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import json
import os
import re
import stat
import threading
import time
from collections.abc import Iterator
from operator import attrgetter
from pathlib import Path

import msgspec

from orchestrator.fsutil import atomic_write, read_open_file
from orchestrator.model import TASK_ID_RE, InvalidRecord, Status, Task
from orchestrator.record import decode_list, encode_list

STATUSES = frozenset(s.value for s in Status)
TASK_FILE_RE = re.compile(r"^(task_\d{3,})\.json$")
JOURNAL = ".journal"
JOURNAL_MAX_BYTES = 4 << 20
"""Past this size a writer starts a new journal; readers notice and rescan once."""
MAX_TASK_BYTES = 1 << 20
"""A task file larger than this is not read (and is never written)."""
MAX_NEW_TASK_BYTES = MAX_TASK_BYTES * 3 // 4
"""A new task's file, at most: the rest is room to grow (feedback, todos, usage), so
a task taken in near the limit never becomes a file the next scan rejects."""
SNAPSHOT = ".snapshot.json"
STAGING = ".tmp"
"""Where atomic writes of the board stage their temp files (see `staged_write`)."""
SNAPSHOT_VERSION = 2
SNAPSHOT_AFTER = 200
"""A full scan that had to read this many files saves a snapshot for the next cold start."""

Key = tuple[int, int, int]
"""(mtime_ns, size, inode): atomic writes rename a new inode in, so any write changes it."""


def task_number(task_id: str) -> int:
    return int(task_id[5:])


def describe_error(exc: Exception) -> str:
    """One line for a decoding error (a record's, or pydantic's for settings and MCP
    arguments), naming the field: ``priority: expected int, got str``."""
    text = str(exc)
    if isinstance(exc, InvalidRecord):
        m = re.match(r"(?s)(.*) - at `\$\.?(.*)`$", text)
        if m:
            where = re.sub(r"\[(\d+)\]", r".\1", m.group(2)) or "file"
            what = m.group(1).replace("`", "")
            return f"{where}: {what[:1].lower()}{what[1:]}"
        return text.replace("`", "")
    errors = getattr(exc, "errors", None)
    if type(exc).__module__.startswith("pydantic") and callable(errors):
        err = errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "file"
        return f"{where}: {err['msg']}"
    return text


RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM})
"""Opening failed for want of file descriptors or memory: the file itself may be fine."""


def read_task_file(path: Path | str, dir_fd: int | None = None) -> tuple[Task, Key]:
    """Read and validate one task file without following symlinks (``path`` relative to
    the folder open as ``dir_fd``, when given: a scan opens each file by its name alone).

    Raises FileNotFoundError, or ValueError with the reason the file is unreadable.
    """
    try:  # O_NONBLOCK: a FIFO named like a task file never blocks the board
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or exc.errno in RESOURCE_ERRNOS:
            raise  # the machine's trouble, not the file's: the caller backs off
        raise ValueError(f"cannot open ({exc.strerror}; a symlink?)") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file (a folder, FIFO, socket or device)")
        if st.st_size > MAX_TASK_BYTES:
            raise ValueError(f"file is {st.st_size} bytes, over the 1 MiB limit")
        data = read_open_file(fd, st.st_size, MAX_TASK_BYTES + 1)
    finally:
        os.close(fd)
    try:
        task = Task.model_validate_json(data)
    except InvalidRecord as exc:
        raise ValueError(describe_error(exc)) from exc
    base = os.path.basename(path)
    name = TASK_FILE_RE.match(base)
    if name and task.id != name.group(1):
        raise ValueError(f"id {task.id!r} in the file does not match its name {base!r}")
    return task, (st.st_mtime_ns, st.st_size, st.st_ino)


class TaskIndex:
    def __init__(self, tasks_dir: Path, rescan_seconds: float) -> None:
        self.dir = tasks_dir
        self.rescan_seconds = rescan_seconds
        self.tasks: dict[str, Task] = {}
        self.broken: dict[str, str] = {}
        """Task files that exist but do not validate: id -> reason (intake repairs or rejects)."""
        self.strays = 0
        """Files waiting for intake (inbox, or dropped straight into .tasks/) at the last scan."""
        self.dropped_here = 0
        """Of those, the files dropped straight into .tasks/."""
        self.full_scans = 0
        """How many full scans this view has made (so a caller knows whether its refresh
        read the whole folder)."""
        self.generation = 0
        """Bumped on every change seen, so derived views (problems) can be cached."""
        self._keys: dict[str, Key] = {}
        self._queue: list[tuple[int, int, str]] | None = []
        """Pending tasks in claim order; None until first asked for after a scan that filled
        an empty view (a command that only lists never sorts them)."""
        self._dirty: set[str] = set()
        self._dirty_lock = threading.Lock()
        self.stale: set[str] = set()
        """Ids whose status and order came from the journal; re-read before full use."""
        self._journal_pos = 0
        self._journal_ino: int | None = None
        self._next_scan = 0.0
        self.lock = threading.RLock()

    # --- refreshing -------------------------------------------------------------
    def refresh(self, *, full: bool = False, light: bool = False) -> bool:
        """Bring the view up to date; True if anything changed.

        ``light`` (the claim path) applies the journal and the watchdog's dirty ids
        only; otherwise stale entries are re-read and the periodic rescan runs when due.
        """
        with self.lock:
            before = self.generation
            due = time.monotonic() >= self._next_scan
            if full or self._journal_ino is None or (due and not light):
                self._full_scan()
            else:
                for task_id, status, priority in self._read_journal():
                    self._apply(task_id, status, priority)
                with self._dirty_lock:
                    dirty, self._dirty = self._dirty, set()
                for task_id in dirty:
                    self.load(task_id)
            if not light:
                for task_id in list(self.stale):
                    self.load(task_id)
            return self.generation != before

    def mark_dirty(self, task_id: str | None) -> None:
        """Called from the watchdog thread: re-read ``task_id`` (None: rescan all) next time."""
        if task_id is None:
            self._next_scan = 0.0
            return
        with self._dirty_lock:
            self._dirty.add(task_id)

    def skip_own(self, ino: int, start: int, end: int) -> None:
        """Our own journal line needs no re-read when nothing came before it unread."""
        with self.lock:
            if self._journal_ino == ino and self._journal_pos == start:
                self._journal_pos = end

    def load(self, task_id: str, dir_fd: int | None = None) -> Task | None:
        """Re-read one task file into the view (``dir_fd``: the task folder, open); the
        task, or None when missing or broken."""
        with self.lock:
            self.stale.discard(task_id)
            name = f"{task_id}.json"
            try:
                task, key = read_task_file(
                    name if dir_fd is not None else os.path.join(self.dir, name), dir_fd)
            except FileNotFoundError:
                self._drop(task_id)
                return None
            except ValueError as exc:
                if self.broken.get(task_id) != str(exc):
                    self._drop(task_id)
                    self.broken[task_id] = str(exc)
                    self.generation += 1
                return None
            self.put(task, key)
            return task

    def put(self, task: Task, key: Key | None = None) -> None:
        with self.lock:
            self.broken.pop(task.id, None)
            self.stale.discard(task.id)
            old = self.tasks.get(task.id)
            if old is not None and old.status is Status.PENDING:
                self._unqueue(old)
            self.tasks[task.id] = task
            if key is not None:
                self._keys[task.id] = key
            if task.status is Status.PENDING and self._queue is not None:
                bisect.insort(self._queue, _order(task))
            self.generation += 1

    def pending_in_order(self) -> Iterator[str]:
        """Pending ids in claim order (a snapshot: the queue may change meanwhile)."""
        with self.lock:
            if self._queue is None:
                self._queue = sorted(_order(t) for t in self.tasks.values()
                                     if t.status is Status.PENDING)
            snapshot = list(self._queue)
        return (tid for _, _, tid in snapshot)

    def in_progress(self) -> Iterator[Task]:
        with self.lock:
            found = [t for t in self.tasks.values() if t.status is Status.IN_PROGRESS]
        yield from found

    # --- internals ----------------------------------------------------------------
    def _apply(self, task_id: str, status: str | None, priority: int | None) -> None:
        """A journal line: update status and order from it; the rest is re-read lazily."""
        old = self.tasks.get(task_id)
        if old is None or status is None or priority is None or status not in STATUSES:
            self.load(task_id)
            return
        if (old.status, old.priority) != (status, priority):
            self.put(old.model_copy(update={"status": Status(status), "priority": priority}))
        self.stale.add(task_id)

    def _drop(self, task_id: str) -> None:
        old = self.tasks.pop(task_id, None)
        self._keys.pop(task_id, None)
        if self.broken.pop(task_id, None) is not None or old is not None:
            self.generation += 1
        if old is not None and old.status is Status.PENDING:
            self._unqueue(old)

    def _unqueue(self, task: Task) -> None:
        queue = self._queue
        if queue is None:
            return
        i = bisect.bisect_left(queue, _order(task))
        if i < len(queue) and queue[i][2] == task.id:
            del queue[i]

    def _read_journal(self) -> list[tuple[str, str | None, int | None]]:
        path = self.dir / JOURNAL
        try:
            with path.open("rb") as fh:
                ino = os.fstat(fh.fileno()).st_ino
                if ino != self._journal_ino:  # a writer started a new journal
                    self._full_scan()
                    return []
                fh.seek(self._journal_pos)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1  # a torn last line is read next time
        self._journal_pos += end
        latest: dict[str, tuple[str, str | None, int | None]] = {}
        for line in data[:end].decode(errors="replace").split("\n"):
            parts = line.split()
            if not parts or not TASK_ID_RE.match(parts[0]):
                continue
            ok = len(parts) == 3 and parts[2].lstrip("-").isdigit()
            latest[parts[0]] = (parts[0], parts[1] if ok else None,
                                int(parts[2]) if ok else None)
        return list(latest.values())

    def _journal_mark(self) -> None:
        # Created up front, so that its first appearance never looks like a rotation
        # (a read-only or full board is still read: the stat below copes without it).
        with contextlib.suppress(OSError):
            os.close(os.open(self.dir / JOURNAL, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
        try:
            st = (self.dir / JOURNAL).stat()
        except FileNotFoundError:
            self._journal_ino, self._journal_pos = -1, 0
            return
        self._journal_ino, self._journal_pos = st.st_ino, st.st_size

    def _full_scan(self) -> None:
        # Mark the journal first: whatever is written during the scan is read again next time.
        self._journal_mark()
        if not self.tasks:
            self._queue = None  # sorted when first asked for: listing never needs it
            self._load_snapshot()
        self._scan_files()

    def _scan_files(self) -> None:
        seen: set[str] = set()
        strays = 0
        todo: list[str] = []
        known, broken, stale = self._keys.get, self.broken, self.stale
        match, remember, want = TASK_FILE_RE.match, seen.add, todo.append
        # By the folder's descriptor: each stat and open then looks up the file's name
        # alone, not every folder of its path (a third off each open).
        folder = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    m = match(entry.name)
                    if m is None:
                        strays += _is_drop(entry.name)
                        continue
                    task_id = m[1]
                    remember(task_id)
                    key = known(task_id)
                    if key is not None and task_id not in broken and task_id not in stale:
                        try:  # a file never read has no key to compare: it is read anyway
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        if (st.st_mtime_ns, st.st_size, st.st_ino) == key:
                            continue
                    want(task_id)
            for task_id in todo:
                self.load(task_id, folder)
        finally:
            os.close(folder)
        loaded = len(todo)
        for task_id in set(self.tasks) - seen | set(self.broken) - seen:
            self._drop(task_id)
        self.dropped_here = strays
        self.full_scans += 1
        try:
            with os.scandir(self.dir / "inbox") as it:
                strays += sum(not e.name.startswith(".") and not e.is_dir(follow_symlinks=False)
                              for e in it)
        except FileNotFoundError:
            pass
        if strays != self.strays:
            self.generation += 1
        self.strays = strays
        if loaded >= SNAPSHOT_AFTER:
            self._save_snapshot()
        self._next_scan = time.monotonic() + self.rescan_seconds

    # --- the snapshot: a cold start without reading every file ----------------------
    def _save_snapshot(self) -> None:
        ids = [tid for tid in self.tasks if tid in self._keys and tid not in self.stale]
        ids.sort(key=task_number)  # loaded in this order, a list's sort by number is linear
        keys = json.dumps({"version": SNAPSHOT_VERSION, "keys": [self._keys[t] for t in ids]})
        tasks = encode_list([self.tasks[t] for t in ids])
        with contextlib.suppress(OSError):  # a cache: failing to write it costs speed only
            staged_write(self.dir / SNAPSHOT, f"{keys}\n{tasks}\n", durable=False)

    def _load_snapshot(self) -> None:
        """Tasks as of the last snapshot, keyed by their file's stat; the scan that follows
        re-reads every file whose stat differs, so the snapshot is never trusted blindly."""
        try:
            raw = (self.dir / SNAPSHOT).read_bytes()
            cut = raw.find(b"\n")
            if cut < 0:
                return
            view = memoryview(raw)  # the two parts decoded where they lie, not copied out
            meta = msgspec.json.decode(view[:cut], type=_SnapshotHead)
            if meta.version != SNAPSHOT_VERSION:
                return
            tasks = decode_list(view[cut + 1:], Task)  # one call: 50,000 tasks in 0.1 s
            keys = meta.keys
            if len(keys) != len(tasks):
                return
        except (OSError, ValueError, KeyError, TypeError):
            return  # missing or unreadable: the scan reads the files instead
        ids = list(map(attrgetter("id"), tasks))
        self.tasks = dict(zip(ids, tasks, strict=True))
        self._keys = dict(zip(ids, keys, strict=True))
        self.generation += 1


class _SnapshotHead(msgspec.Struct):
    version: int
    keys: list[Key]


def _order(task: Task) -> tuple[int, int, str]:
    return (-task.priority, task_number(task.id), task.id)


def _is_drop(name: str) -> bool:
    """A file dropped straight into ``.tasks/`` that intake should pick up."""
    return not name.startswith(".") and name.lower().endswith(DROP_SUFFIXES)


DROP_SUFFIXES = (".json", ".md", ".markdown")


def staged_write(path: Path, data: str, *, durable: bool = True, sync_dir: bool = True
                 ) -> os.stat_result:
    """`atomic_write` of a file in ``.tasks`` with its temp file in ``.tasks/.tmp``.

    Watchers of ``.tasks`` then see one event per write (the file arriving) instead of
    the temp file's create, writes and rename inside the folder; and the portable
    watchdog observer (see `feed`) holds back every event after an in-folder rename
    for 0.5 s. The staging folder is made on first use (and again if someone removed it).
    """
    staging = path.parent / STAGING
    try:
        return atomic_write(path, data, durable=durable, sync_dir=sync_dir, tmp_dir=staging)
    except FileNotFoundError:
        if staging.is_dir() or not path.parent.is_dir():
            raise
        staging.mkdir(exist_ok=True)
        return atomic_write(path, data, durable=durable, sync_dir=sync_dir, tmp_dir=staging)
