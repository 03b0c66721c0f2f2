"""The file board's view of ``.tasks/``: every task as a stat-keyed scan last saw it.

The task files are the truth; this is a view of them, never trusted over them: every
write re-reads the task file under its lock. A scan lists the folder and ``stat``s each
task file; a file whose (mtime, size, inode) differs from what the view holds is read
again (an atomic write renames a new inode in, so any write changes the key; a hand edit
in place changes mtime or size).

**One derived index**, ``.tasks/.index/board.sqlite`` (`sqlite3`, WAL), keeps what the last
scan of any process saw: each task's key and the task itself, with its status, priority,
cost, tokens and what it waits for as columns (and, in ``meta``, the settings as a
command last checked them: `orchestrator.repo`). A process starting cold begins from it
and reads only the files changed since; whatever it read (and whatever it wrote) is
written back at its next scan and when the board closes, and intake writes a burst's
new tasks in one transaction, so the first command after a burst reads no file. `status`
counts from its columns (`summary`) without decoding a task, and without a scan when
``.tasks/`` has not changed since the last full scan of any process (the index keeps the
folder's mtime then: a file edited in place is counted at its next write or scan).
Deleting it, or a copy it cannot read, loses nothing: the next scan reads every file again.

Within a long-lived process the view is kept fresh by the change feed (the ids of the
task files inotify saw change) and a full scan every ``rescan_seconds``. A process
without a feed (a command, the MCP server) scans again on a read when ``.tasks/`` has
changed since its last scan (every board write renames a file in: the folder's mtime
moves) and every ``rescan_seconds`` (a file edited in place changes no folder).
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import os
import re
import stat
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from orchestrator.controlplane import BoardSummary
from orchestrator.fsutil import atomic_write, read_open_file
from orchestrator.model import InvalidRecord, Status, Task, task_number
from orchestrator.record import decode, decode_list, describe_error

if TYPE_CHECKING:
    import sqlite3

TASK_FILE_RE = re.compile(r"^(task_\d{3,})\.json$")
MAX_TASK_BYTES = 1 << 20
"""A task file larger than this is not read (and is never written)."""
MAX_NEW_TASK_BYTES = MAX_TASK_BYTES * 3 // 4
"""A new task's file, at most: the rest is room to grow (feedback, todos, usage), so
a task taken in near the limit never becomes a file the next scan rejects."""
STAGING = ".tmp"
"""Where atomic writes of the board stage their temp files (see `staged_write`)."""
INDEX = ".index/board.sqlite"
"""In a folder of its own: sqlite makes and deletes its ``-wal`` and ``-shm`` files beside
it, which must not move ``.tasks/``'s mtime (a reader's sign that a task file changed)."""
SCHEMA = 4
"""The index's ``user_version``: an index of another version is made afresh (2: the
``waiting`` column holds every non-running task's `orchestrator.waits` text; 3: the
``folder`` the last full scan saw; 4: ``meta`` values of any type, such as the checked
settings `orchestrator.repo` keeps there)."""
NANO = 1_000_000_000
"""Costs are summed as whole nano-dollars, so the total is exact."""
RACY_NS = 50_000_000
"""A folder mtime this close to the scan that saw it is not trusted to show a later change
(file times move in clock ticks): the next read scans again."""

Key = tuple[int, int, int]
"""(mtime_ns, size, inode): atomic writes rename a new inode in, so any write changes it."""


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
        task = decode(data, Task)
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
        self.watched = False
        """The change feed runs: between full scans, the ids it names are enough."""
        self._keys: dict[str, Key] = {}
        self._queue: list[tuple[int, int, str]] | None = []
        """Pending tasks in claim order; None until first asked for after a scan that filled
        an empty view (a command that only lists never sorts them)."""
        self._dirty: set[str] = set()
        self._dirty_lock = threading.Lock()
        self._unsaved: set[str] = set()
        """Ids whose row in the index differs from this view (read, written or gone)."""
        self._view = "none"
        """What the view was started from: "none" yet, the index's "keys" only (`summary`),
        or "all" of it."""
        self._next_scan = 0.0
        self._folder_seen: int | None = None
        """``.tasks/``'s mtime when the last full scan began, if no change can hide behind it."""
        self._folder_saved: int | None = None
        self.lock = threading.RLock()

    # --- refreshing -------------------------------------------------------------
    def refresh(self, *, full: bool = False, light: bool = False) -> bool:
        """Bring the view up to date; True if anything changed.

        A full scan when asked, on the first refresh, every ``rescan_seconds``, and when no
        feed runs and ``.tasks/`` changed since the last one (unless ``light``: the claim
        path, which re-reads what it tries anyway); otherwise the files the feed named are
        re-read.
        """
        with self.lock:
            before = self.generation
            due = time.monotonic() >= self._next_scan
            moved = not (self.watched or light) and self._folder_mtime() != self._folder_seen
            if full or due or moved or self._view != "all":
                self._full_scan()
            else:
                with self._dirty_lock:
                    dirty, self._dirty = self._dirty, set()
                for task_id in dirty:
                    self.load(task_id)
            return self.generation != before

    def settle(self) -> None:
        """After a burst of this process's own writes (intake of drops), scan once the
        folder's mtime has left the racy window, so the index records the folder as it is
        and the next command reads no file and stats none (issue 34 item 5). A process with
        a change feed (the lead) skips it: its saves follow its scans."""
        if self.watched:
            return
        mtime = self._folder_mtime()
        if mtime is not None:
            time.sleep(max(0.0, (mtime + RACY_NS - time.time_ns()) / 1e9))
        with self.lock:
            self._full_scan()

    def mark_dirty(self, task_id: str | None) -> None:
        """Called from the watchdog thread: re-read ``task_id`` (None: rescan all) next time."""
        if task_id is None:
            self._next_scan = 0.0
            return
        with self._dirty_lock:
            self._dirty.add(task_id)

    def load(self, task_id: str, dir_fd: int | None = None) -> Task | None:
        """Re-read one task file into the view (``dir_fd``: the task folder, open); the
        task, or None when missing or broken."""
        with self.lock:
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
        """``task`` as this process just read or wrote it (``key``: its file's, when known;
        a task put without one is read again by the next scan)."""
        with self.lock:
            self.broken.pop(task.id, None)
            old = self.tasks.get(task.id)
            if old is not None and old.status is Status.PENDING:
                self._unqueue(old)
            self.tasks[task.id] = task
            if key is not None:
                self._keys[task.id] = key
                self._unsaved.add(task.id)
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

    # --- the derived index ---------------------------------------------------------
    def save(self) -> bool:
        """Write what this view read or wrote since into the index, in one transaction,
        with the folder's mtime its last full scan saw; False when it could not (a
        read-only board, a locked index: it costs speed only, and is tried again with the
        next save)."""
        with self.lock:
            if not self._unsaved and self._folder_seen == self._folder_saved:
                return True
            ids, self._unsaved = self._unsaved, set()
            rows = [_row(self.tasks[t], self._keys[t]) for t in ids
                    if t in self.tasks and t in self._keys]
            gone = [(t,) for t in ids if t not in self.tasks]
            saved = False
            with index_db(self.dir) as db:
                if db is not None:
                    with db:
                        db.executemany("INSERT OR REPLACE INTO tasks VALUES "
                                       "(?,?,?,?,?,?,?,?,?,?,?)", rows)
                        db.executemany("DELETE FROM tasks WHERE id = ?", gone)
                        db.execute("INSERT OR REPLACE INTO meta VALUES ('folder', ?)",
                                   (self._folder_seen,))
                    saved = True
                    self._folder_saved = self._folder_seen
            if not saved:
                self._unsaved |= ids
            return saved

    def summary(self) -> BoardSummary:
        """The totals of every task, counted by the index once a scan has brought it up
        to date (key by key: no task is decoded but those whose files changed); from the
        view itself when the index cannot be used."""
        with self.lock:
            if not self._unchanged_since_saved():
                self._full_scan(keys_only=True)
            with index_db(self.dir) as db:
                if db is not None and not self._unsaved:
                    counts = dict.fromkeys((s.value for s in Status), 0)
                    cost = tokens = 0
                    for status, n, c, t in db.execute(
                            "SELECT status, count(*), sum(cost), sum(tokens) FROM tasks "
                            "GROUP BY status"):
                        counts[status] = n
                        cost, tokens = cost + c, tokens + t
                    waiting = db.execute("SELECT id, waiting FROM tasks WHERE waiting IS NOT "
                                         "NULL ORDER BY num").fetchall()
                    return BoardSummary(counts=counts, cost_usd=round(cost / NANO, 6),
                                        tokens=tokens, waiting=[(i, w) for i, w in waiting])
            self._full_scan()
            return totals(self.tasks.values())

    def _unchanged_since_saved(self) -> bool:
        """A fresh view whose index was saved by a full scan of ``.tasks/`` as it is now."""
        if self._view != "none":
            return False
        now = self._folder_mtime()
        with index_db(self.dir) as db:
            if db is not None and now is not None:
                saved = db.execute("SELECT value FROM meta WHERE key = 'folder'").fetchone()
                return saved is not None and saved[0] == now
        return False

    def _load_saved(self, *, keys_only: bool = False) -> None:
        """Start the view from the index: every task (or, ``keys_only``, only the keys: a
        scan then reads the changed files, and `summary` counts the rest in the index)."""
        self._view = "keys" if keys_only else "all"
        rows: list[tuple[str, int, int, int, bytes]] = []
        with index_db(self.dir) as db:
            if db is not None:
                rows = db.execute(f"SELECT id, mtime, size, ino{'' if keys_only else ', data'} "
                                  "FROM tasks ORDER BY num").fetchall()
        if keys_only:
            self._keys = {r[0]: (r[1], r[2], r[3]) for r in rows}
            return
        try:
            tasks = decode_list(b"[" + b",".join(r[4] for r in rows) + b"]", Task)
        except (InvalidRecord, ValueError):
            rows, tasks = [], []  # an index of another model: the scan reads every file
        have = self.tasks  # read already (by a `summary`): newer than the index
        self._keys = {r[0]: (r[1], r[2], r[3]) for r in rows} | {
            t: self._keys[t] for t in have if t in self._keys}
        self.tasks = {t.id: t for t in tasks} | have
        self._queue = None
        self.generation += 1

    # --- internals ----------------------------------------------------------------
    def _drop(self, task_id: str) -> None:
        old = self.tasks.pop(task_id, None)
        if self._keys.pop(task_id, None) is not None:
            self._unsaved.add(task_id)
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

    def _folder_mtime(self) -> int | None:
        try:
            return os.stat(self.dir).st_mtime_ns
        except OSError:
            return None

    def _full_scan(self, *, keys_only: bool = False) -> None:
        if self._view == "none" or (self._view == "keys" and not keys_only):
            self._load_saved(keys_only=keys_only)
        mtime = self._folder_mtime()
        racy = mtime is None or time.time_ns() - mtime < RACY_NS
        self._folder_seen = None if racy else mtime
        with self._dirty_lock:
            self._dirty.clear()
        seen, strays = self._scan_folder()
        for task_id in (set(self._keys) | set(self.tasks) | set(self.broken)) - seen:
            self._drop(task_id)
        self.dropped_here = strays
        self.full_scans += 1
        strays += _inbox_files(self.dir / "inbox")
        if strays != self.strays:
            self.generation += 1
        self.strays = strays
        self.save()
        self._next_scan = time.monotonic() + self.rescan_seconds

    def _scan_folder(self) -> tuple[set[str], int]:
        """Stat every task file, read those whose key differs; the ids seen, and how many
        files were dropped straight into the folder."""
        seen: set[str] = set()
        strays = 0
        todo: list[str] = []
        known, broken = self._keys.get, self.broken
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
                    if key is not None and task_id not in broken:
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
        return seen, strays


def _inbox_files(inbox: Path) -> int:
    """The files waiting in the inbox (not hidden, not folders)."""
    try:
        with os.scandir(inbox) as it:
            return sum(not e.name.startswith(".") and not e.is_dir(follow_symlinks=False)
                       for e in it)
    except FileNotFoundError:
        return 0


@contextlib.contextmanager
def index_db(tasks_dir: Path) -> Iterator[sqlite3.Connection | None]:
    """The index, open (None when it cannot be). An error while it is used is not
    raised: the caller goes without it."""
    import sqlite3

    db = _open(tasks_dir)
    if db is None:
        yield None
        return
    try:
        yield db
    except sqlite3.OperationalError:
        pass  # locked, busy, read-only: another time
    except sqlite3.DatabaseError:
        discard(tasks_dir)  # damaged: made afresh by the next process
    finally:
        db.close()


def _open(tasks_dir: Path) -> sqlite3.Connection | None:
    """Connect to the index, making it when missing, damaged (not a database) or of
    another `SCHEMA`; None when that cannot be done now."""
    import sqlite3

    for _ in range(2):
        try:
            (tasks_dir / INDEX).parent.mkdir(exist_ok=True)
            db = sqlite3.connect(tasks_dir / INDEX, timeout=5.0)
        except (sqlite3.Error, OSError):
            return None
        try:
            if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA:
                _create(db)
            db.execute("PRAGMA synchronous = OFF")
            return db
        except sqlite3.OperationalError:
            db.close()
            return None
        except sqlite3.DatabaseError:
            db.close()
            discard(tasks_dir)
    return None


def discard(tasks_dir: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            os.unlink(tasks_dir / f"{INDEX}{suffix}")


def read_meta(tasks_dir: Path, key: str) -> object:
    """What the index keeps under ``key`` beside the tasks (None: nothing, or no index)."""
    with index_db(tasks_dir) as db:
        if db is not None:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return None if row is None else row[0]
    return None


def write_meta(tasks_dir: Path, key: str, value: object) -> None:
    """Keep ``value`` under ``key`` in the index (not at all when it cannot be used)."""
    with index_db(tasks_dir) as db:
        if db is not None:
            with db:  # one transaction
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))


def _create(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA journal_mode = WAL")
    db.executescript(f"""
        BEGIN IMMEDIATE;
        DROP TABLE IF EXISTS tasks;
        CREATE TABLE tasks (id TEXT PRIMARY KEY, num INTEGER, mtime INTEGER, size INTEGER,
                            ino INTEGER, status TEXT, priority INTEGER, cost INTEGER,
                            tokens INTEGER, waiting TEXT, data BLOB);
        DROP TABLE IF EXISTS meta;
        CREATE TABLE meta (key TEXT PRIMARY KEY, value);
        PRAGMA user_version = {SCHEMA};
        COMMIT;
    """)


def _row(task: Task, key: Key) -> tuple[object, ...]:
    waiting = task.wait.text if task.wait and task.status is not Status.IN_PROGRESS else None
    return (task.id, task_number(task.id), *key, task.status.value, task.priority,
            round(task.usage.cost_usd * NANO), task.usage.tokens, waiting or None,
            msgspec.json.encode(task))


def totals(tasks: Iterable[Task]) -> BoardSummary:
    """The totals of ``tasks``, counted afresh."""
    counts = dict.fromkeys((s.value for s in Status), 0)
    cost = tokens = 0
    waiting: list[tuple[str, str]] = []
    for t in sorted(tasks, key=lambda t: task_number(t.id)):
        counts[t.status.value] += 1
        cost += round(t.usage.cost_usd * NANO)
        tokens += t.usage.tokens
        if t.wait and t.status is not Status.IN_PROGRESS:
            waiting.append((t.id, t.wait.text))
    return BoardSummary(counts=counts, cost_usd=round(cost / NANO, 6), tokens=tokens,
                        waiting=waiting)


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
        if not path.parent.is_dir():
            raise
        staging.mkdir(exist_ok=True)  # (or another process made it since: write again)
        return atomic_write(path, data, durable=durable, sync_dir=sync_dir, tmp_dir=staging)
