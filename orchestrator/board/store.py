"""FileBoard: the task board as one JSON file per task under ``.tasks/``, and the
file implementation of the whole `orchestrator.controlplane.ControlPlane`.

Every write happens under the task's lock file (``.tasks/.locks/<id>.lock``,
``flock``), re-reads the task file, checks the transition and the fencing
token, and replaces the file atomically (temp + fsync + rename + fsync of the
folder). The `TaskIndex` (the tasks as a stat-keyed scan last saw them, kept in
``.tasks/.index/board.sqlite``) only chooses candidates; the file decides.

The rest of the control plane hangs off the board: ``events`` (`EventLog`,
``events.jsonl`` with its seq and index), ``mailboxes``, ``logs``, ``team``,
``requests`` and ``ids``, each in its own module of this package.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from functools import cached_property
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from orchestrator.board import graph
from orchestrator.board.eventlog import EventLog
from orchestrator.board.feed import ChangeFeed
from orchestrator.board.index import (
    MAX_NEW_TASK_BYTES,
    MAX_TASK_BYTES,
    TASK_FILE_RE,
    TaskIndex,
    read_task_file,
    staged_write,
)
from orchestrator.board.settings import BoardSettings, default_settings
from orchestrator.controlplane import BoardSummary
from orchestrator.errors import Conflict, InvalidInput, LeaseLost, NotFound
from orchestrator.events import (
    UNSET,
    LeaseExpired,
    TaskCancelled,
    TaskClaimed,
    TaskCompleted,
    TaskCreated,
    TaskCreateFailed,
    TaskEdited,
    TaskFailed,
    TaskReleased,
    TaskRequeued,
    TaskStatusSet,
    secret_values,
)
from orchestrator.flock import LOCK_TIMEOUT, FileLocked, flocked
from orchestrator.fsutil import fsync_dir, read_regular_bytes, sync_filesystem
from orchestrator.layout import Layout
from orchestrator.model import (
    InvalidRecord,
    Lease,
    Status,
    Task,
    check_transition,
    format_task_id,
    normalize_task_id,
    parse_task_id,
    task_number,
    utcnow,
)
from orchestrator.record import convert, describe_error, to_dict, to_json
from orchestrator.waits import from_text

if TYPE_CHECKING:
    from orchestrator.board.mailboxes import FileMailboxes
    from orchestrator.board.requests import FileRequests
    from orchestrator.board.tasklogs import FileTaskLogs
    from orchestrator.board.teamstatus import FileTeamStatus

REAP_LOCK_TIMEOUT = 1.0
"""How long the lead's reaping waits for one task's lock before moving on to the next."""
SPREAD = 8
"""After losing a race for a candidate, a claimer skips up to this many (tried later)."""
PROTECTED = frozenset({"id", "status", "owner", "lease", "fence", "created_at", "updated_at"})
"""Fields only the board itself changes (through claims and status changes)."""


_ID, _DIGITS, _THIRD = attrgetter("id"), itemgetter(slice(5, None)), itemgetter(2)


class BoardClosed(RuntimeError):
    """``wait_for_*`` on a board that was closed (by another thread, at shutdown)."""


class FileBoard:
    """Implements `orchestrator.protocols.Board` on the file system."""

    # The parts a command may not use are made (and their modules imported) on first use.
    @cached_property
    def mailboxes(self) -> FileMailboxes:
        from orchestrator.board.mailboxes import FileMailboxes

        return FileMailboxes(self.layout)

    @cached_property
    def logs(self) -> FileTaskLogs:
        from orchestrator.board.tasklogs import FileTaskLogs

        return FileTaskLogs(self.layout)

    @cached_property
    def team(self) -> FileTeamStatus:
        from orchestrator.board.teamstatus import FileTeamStatus

        return FileTeamStatus(self.layout)

    @cached_property
    def requests(self) -> FileRequests:
        from orchestrator.board.requests import FileRequests

        return FileRequests(self.mailboxes)

    def __init__(self, layout: Layout, config: BoardSettings | None = None,
                 actor: str = "cli") -> None:
        self.layout = layout
        self.config = config or default_settings()
        self.actor = actor
        self.events = EventLog(layout.events, actor, secret_values())
        self.ids = FileIds(self)
        self._index = TaskIndex(layout.tasks, self.config.rescan_seconds)
        self._feed = ChangeFeed(layout.tasks, layout.inbox, self._index.mark_dirty,
                                layout.events)
        self._problems: tuple[int, dict[str, str]] = (-1, {})
        self._holder: str | None = None  # the lease owner of the last fenced write, for events
        self._deferred: int | None = None  # the thread inside `deferred_sync`
        self._deferred_seq = 0  # the id mark it has yet to write
        self._deferred_dirty = False  # it wrote something that skipped its fsync
        self._closed = False
        self.rejected_files: list[Path] = []
        """Where the last `intake` moved the files it rejected (for the command to say)."""

    def __enter__(self) -> FileBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now(self) -> float:
        """This machine's clock: the one the file board's leases expire by."""
        return time.time()

    def close(self) -> None:
        """Stop the watchdog thread (a thread blocked in ``wait_for_*`` raises BoardClosed)
        and save what this process read or wrote into the index."""
        self._closed = True
        self._feed.close()
        self._index.save()

    # --- reading -----------------------------------------------------------------
    def get(self, task_id: str) -> Task:
        task_id = self._check_id(task_id)
        try:
            task, key = read_task_file(self.layout.task_file(task_id))
        except FileNotFoundError:
            raise NotFound(f"no task {task_id}") from None
        except ValueError as exc:
            raise InvalidInput(f"{task_id}: unreadable task file: {exc}") from None
        self._index.put(task, key)
        return task

    def list(self, status: Status | Collection[Status] | None = None, *,
             after: str | None = None, limit: int | None = None) -> builtins.list[Task]:
        check_limit(limit)
        self._index.refresh()
        wanted = {Status(status)} if isinstance(status, str) else (
            {Status(s) for s in status} if status is not None else None)
        above = -1 if after is None else parse_task_id(str(after))
        with self._index.lock:
            tasks = list(self._index.tasks.values())
        if wanted is not None or above >= 0:
            tasks = [t for t in tasks if (wanted is None or t.status in wanted)
                     and (above < 0 or task_number(t.id) > above)]
        # By number, then id, all by built-ins (ids are unique: tasks are never compared).
        ids = list(map(_ID, tasks))
        numbers = map(int, map(_DIGITS, ids))
        tasks = list(map(_THIRD, sorted(zip(numbers, ids, tasks, strict=True))))
        return tasks if limit is None else tasks[:limit]

    def ready(self) -> builtins.list[Task]:
        self._index.refresh()
        return list(self._ready())

    def problem(self, task_id: str) -> str | None:
        """What keeps one task from ever starting (see `problems`), from reading only the
        task and its blockers, transitively: no scan of the board."""
        task_id = self._check_id(task_id)
        seen: dict[str, Task] = {task_id: self.get(task_id)}
        todo = list(seen[task_id].blocked_by)
        while todo:
            tid = todo.pop()
            if tid in seen:
                continue
            try:
                seen[tid] = self.get(tid)
            except (NotFound, InvalidInput):
                continue  # missing or unreadable: absent, as in `problems`
            todo.extend(seen[tid].blocked_by)
        return graph.find_problems(seen).get(task_id)

    def problems(self) -> dict[str, str]:
        self._index.refresh()
        with self._index.lock:
            if self._problems[0] != self._index.generation:
                found = graph.find_problems(self._index.tasks)
                found.update({tid: f"unreadable task file: {why}"
                              for tid, why in self._index.broken.items()})
                self._problems = (self._index.generation, found)
            return dict(self._problems[1])

    def summary(self) -> BoardSummary:
        """Counted by the index (`TaskIndex.summary`) after one stat per task file."""
        return self._index.summary()

    # --- writing (people and the lead) -----------------------------------------
    def add(self, subject: str, *, description: str = "", blocked_by: Collection[str] = (),
            priority: int = 0, actor: str = "cli", **fields: Any) -> Task:
        blockers = [self._check_id(b) for b in blocked_by]
        for b in blockers:
            if not self.layout.task_file(b).exists():
                raise NotFound(f"unknown blocker {b}: no such task")
        return self.create(dict(fields, subject=subject, description=description,
                                blocked_by=blockers, priority=priority), actor=actor)

    def create(self, fields: dict[str, Any], *, actor: str, task_id: str | None = None,
               source: str | None = None) -> Task:
        """Allocate an id (or take ``task_id`` when free) and write a new pending task
        (``source``: the dropped file it came from, for its ``task_created``)."""
        [made] = self.create_many([(fields, task_id, source)], actor=actor)
        if isinstance(made, Exception):
            raise made
        return made

    def create_many(self, items: Sequence[tuple[dict[str, Any], str | None, str | None]],
                    *, actor: str) -> builtins.list[Task | Exception]:
        """`create` for each ``(fields, task_id, source)``, in order: each item's new
        task, or the error that kept it from being made (one item never stops the others;
        only an interrupt does). Their events are logged in one append, then their files
        written (a burst of drops: one event write, not one per task)."""
        out: builtins.list[Task | Exception] = [RuntimeError("not made")] * len(items)
        drafts: builtins.list[tuple[int, Task, str | None]] = []
        for i, (fields, wanted, _) in enumerate(items):
            fields.setdefault("max_attempts", self.config.max_attempts)
            bad = PROTECTED & fields.keys()
            if bad:
                out[i] = InvalidInput(f"cannot set {', '.join(sorted(bad))} on a new task")
                continue
            try:
                draft = convert({**fields, "id": "task_000"}, Task)  # before an id is spent
                size = len(to_json(draft, indent=2).encode())
            except InvalidRecord as exc:
                out[i] = InvalidInput(f"invalid task: {describe_error(exc)}")
                continue
            except UnicodeEncodeError as exc:
                out[i] = InvalidInput(f"text holds {exc.object[exc.start]!r}, not Unicode")
                continue
            except Exception as exc:  # a bug of ours, for this item only
                out[i] = exc
                continue
            if size > MAX_NEW_TASK_BYTES:
                out[i] = InvalidInput(f"the task would be {size} bytes, over the "
                                      f"{MAX_NEW_TASK_BYTES // 1024} KiB limit of a new task")
                continue
            drafts.append((i, draft, wanted))
        with flocked(self.layout.locks / "seq.lock"):
            # The mark's rename is made durable by the task file's fsync of .tasks (one
            # fsync of the folder, not two); on a failure, by its own.
            made: builtins.list[tuple[int, Task]] = []
            ids: set[str] = set()
            for i, draft, wanted in drafts:
                try:
                    if wanted is not None and wanted in ids:  # allocated above, not yet written
                        raise Conflict(f"duplicate id {wanted}: that task already exists")
                    new_id = self._allocate(wanted, sync_dir=False)
                except Exception as exc:
                    out[i] = exc
                    continue
                ids.add(new_id)
                made.append((i, msgspec.structs.replace(draft, id=new_id)))
            # The events first: once a file is written a teammate may claim the task,
            # and its task_claimed must come after this in the log.
            self.events.emit_many([(TaskCreated(subject=t.subject, source=items[i][2] or UNSET),
                                    t.id) for i, t in made], actor=actor)
            written: builtins.list[Task] = []
            for i, task in made:
                try:
                    self._write(task)
                except BaseException as exc:
                    with contextlib.suppress(Exception):
                        self.events.emit(TaskCreateFailed(error=f"{type(exc).__name__}: {exc}"),
                                         task.id, actor=actor)
                    if self._durable:
                        with contextlib.suppress(OSError):
                            fsync_dir(self.layout.tasks)
                    if not isinstance(exc, Exception):
                        raise
                    out[i] = exc
                    continue
                out[i] = task
                written.append(task)
        return out

    def edit(self, task_id: str, *, actor: str, **fields: Any) -> Task:
        bad = PROTECTED & fields.keys()
        if bad:
            raise InvalidInput(f"edit cannot change {', '.join(sorted(bad))} "
                               "(use claim/complete/set_status)")
        task = self._mutate(task_id, lambda t: _assign(t, fields))
        self.events.emit(TaskEdited(fields=sorted(fields)), task.id, actor=actor)
        return task

    def set_status(self, task_id: str, status: Status, *, actor: str, **fields: Any) -> Task:
        status = Status(status)
        if status is Status.IN_PROGRESS:
            raise InvalidInput(f"{task_id}: only a claim starts a task (it issues the lease)")
        bad = PROTECTED & fields.keys()
        if bad:
            raise InvalidInput(f"set_status cannot change {', '.join(sorted(bad))}")
        old: builtins.list[Status] = []

        def change(t: Task) -> None:
            old.append(t.status)
            _move(t, status)
            _assign(t, fields)

        task = self._mutate(task_id, change)
        self.events.emit(TaskStatusSet(from_=old[0], to=status), task.id, actor=actor)
        return task

    def cancel(self, task_id: str, *, actor: str = "cli") -> Task:
        old: builtins.list[Status] = []

        def change(t: Task) -> None:
            old.append(t.status)
            _move(t, Status.CANCELLED)

        task = self._mutate(task_id, change)
        self.events.emit(TaskCancelled(previous=old[0]), task.id, actor=actor)
        return task

    @contextlib.contextmanager
    def deferred_sync(self) -> Iterator[None]:
        """Writes inside skip their own fsyncs; one flush of the file system on the way out
        makes them durable together (intake of a burst of drops: 2 fsyncs a file cost more
        than everything else), and the id mark is written once. Whatever must follow
        durability waits until after it."""
        self._deferred, self._deferred_seq = threading.get_ident(), 0
        self._deferred_dirty = False
        try:
            yield
        finally:
            self._deferred = None
            if self._deferred_seq:
                with flocked(self.layout.locks / "seq.lock"):
                    try:
                        high = int(self.layout.seq.read_text().strip() or 0)
                    except (FileNotFoundError, ValueError):
                        high = 0
                    if self._deferred_seq > high:  # the flush below makes it durable
                        staged_write(self.layout.seq, f"{self._deferred_seq}\n", durable=False)
                self._deferred_seq = 0
            if self.config.fsync and self._deferred_dirty:  # nothing written: nothing to flush
                sync_filesystem(self.layout.tasks)
            self._deferred_dirty = False
            self._index.save()  # the next command starts from the burst's tasks

    def rejected_drops(self) -> builtins.list[str]:
        from orchestrator.board.intake import rel_to

        return [rel_to(p, self.layout.root) for p in self.rejected_files]

    def settling(self) -> float | None:
        from orchestrator.board.intake import settling

        return settling(self.layout)

    def intake(self, *, repair: bool = True) -> builtins.list[Task]:
        """Turn dropped files into tasks; ``repair`` also normalises or rejects task files
        that do not validate (which needs a scan of every task file)."""
        from orchestrator.board.intake import run_intake

        self.rejected_files = []
        return run_intake(self, rejected=self.rejected_files, repair=repair)

    # --- claims and leases ---------------------------------------------------------
    def claim(self, owner: str, *, lease_seconds: float | None = None,
              task_id: str | None = None) -> Task | None:
        seconds = lease_seconds or self.config.lease_seconds
        if task_id is not None:
            task_id = self._check_id(task_id)
            if not self.layout.task_file(task_id).exists():
                raise NotFound(f"no task {task_id}")
            candidates: Iterator[str] = iter([task_id])
        else:
            self._index.refresh(light=True)
            candidates = (t.id for t in self._ready())
        busy: builtins.list[str] = []
        skip = 0
        for timeout in (0.0, LOCK_TIMEOUT):
            for tid in candidates:
                if skip:
                    skip -= 1
                    busy.append(tid)
                    continue
                try:
                    task = self._try_claim(tid, owner, seconds, timeout)
                except FileLocked:
                    # Another claimer is on it; the others are likely right behind us, so
                    # jump a few candidates ahead instead of queueing up on the next one.
                    busy.append(tid)
                    if timeout == 0:
                        import random  # only claims that collide need it

                        skip = random.randrange(SPREAD)
                    else:
                        skip = 0
                    continue
                if task is not None:
                    self.events.emit(TaskClaimed(owner=owner, token=task.fence,
                                                 attempt=task.attempts + 1), task.id, actor=owner)
                    return task
            candidates, busy = iter(busy), []
            skip = 0  # the second round waits on each busy task: none is skipped again
        return None

    def renew(self, task_id: str, token: int, *, lease_seconds: float | None = None) -> Task:
        seconds = lease_seconds or self.config.lease_seconds

        def extend(t: Task) -> None:
            assert t.lease is not None
            t.lease = msgspec.structs.replace(t.lease, expires_at=time.time() + seconds,
                                           renewed_at=utcnow())

        return self._fenced(task_id, token, extend, forgettable=True)

    def update(self, task_id: str, token: int, **fields: Any) -> Task:
        bad = PROTECTED & fields.keys()
        if bad:
            raise InvalidInput(f"update cannot change {', '.join(sorted(bad))}")
        return self._fenced(task_id, token, lambda t: _assign(t, fields), forgettable=True)

    def complete(self, task_id: str, token: int, **fields: Any) -> Task:
        def done(t: Task) -> None:
            _move(t, Status.REVIEW)
            _assign(t, fields)

        task = self._fenced(task_id, token, done)
        self.events.emit(TaskCompleted(token=token), task.id, actor=self._holder)
        return task

    def fail(self, task_id: str, token: int, error: str, *, retry: bool = True) -> Task:
        task = self._fenced(task_id, token, lambda t: _count_attempt(t, error, retry))
        self.events.emit(TaskFailed(token=token, error=error, attempts=task.attempts,
                                    status=task.status), task.id, actor=self._holder)
        return task

    def release(self, task_id: str, token: int, *, reason: str = "") -> Task:
        task = self._fenced(task_id, token, lambda t: _move(t, Status.PENDING))
        self.events.emit(TaskReleased(token=token, reason=reason), task.id, actor=self._holder)
        return task

    def requeue_expired(self, *, now: float | None = None,
                        actor: str = "lead") -> builtins.list[Task]:
        """Requeue tasks whose lease ran out. A task whose lock stays held (its owner is
        frozen in the middle of a write) is skipped for this pass, not waited for."""
        def expired(t: Task) -> bool:
            return not t.lease_live(time.time() if now is None else now)

        return self._requeue(expired, "lease expired", LeaseExpired, actor,
                             lock_timeout=REAP_LOCK_TIMEOUT)

    def requeue_owner(self, owner: str, *, reason: str, actor: str = "lead") -> builtins.list[Task]:
        return self._requeue(lambda t: t.owner == owner, reason, TaskRequeued, actor)

    def _requeue(self, match: Callable[[Task], bool], reason: str,
                 kind: type[LeaseExpired | TaskRequeued], actor: str,
                 lock_timeout: float = LOCK_TIMEOUT) -> builtins.list[Task]:
        """Send matching in-progress tasks back (an attempt counts); checked again under lock."""
        self._index.refresh()
        out: builtins.list[Task] = []
        for seen in list(self._index.in_progress()):
            if not match(seen):
                continue
            leases: builtins.list[Lease] = []

            def requeue(t: Task, leases: list[Lease] = leases) -> None:
                if t.status is not Status.IN_PROGRESS or t.lease is None or not match(t):
                    raise _Skip
                leases.append(t.lease)
                _count_attempt(t, reason, True)

            with contextlib.suppress(_Skip, NotFound, Conflict):
                task = self._mutate(seen.id, requeue, lock_timeout=lock_timeout)
                self.events.emit(kind(owner=leases[0].owner, token=leases[0].token,
                                      reason=reason, attempts=task.attempts,
                                      status=task.status), task.id, actor=actor)
                out.append(task)
        return out

    # --- change feed -------------------------------------------------------------
    def wait_for_change(self, timeout: float, *, events: bool = True,
                        running: bool = True) -> bool:
        # ``running`` is not told apart here: the feed names the task file, not its status
        self._start_feed(inbox=True, events=events)
        deadline = time.monotonic() + timeout
        while True:
            if self._closed:
                raise BoardClosed("the board was closed while waiting")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._feed.wake.wait(min(remaining, self.config.rescan_seconds)):
                self._feed.wake.clear()
                return True
            if self._index.refresh(full=True) or self._index.strays:
                return True

    def wait_for_ready(self, timeout: float) -> bool:
        self._start_feed(inbox=False)
        deadline = time.monotonic() + timeout
        while True:
            if self._closed:
                raise BoardClosed("the board was closed while waiting")
            self._feed.wake.clear()
            self._index.refresh()
            if next(self._ready(), None) is not None:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._feed.wake.wait(min(remaining, self.config.rescan_seconds))

    # --- internals ---------------------------------------------------------------------
    def _start_feed(self, *, inbox: bool, events: bool = False) -> None:
        if self._closed:
            raise BoardClosed("the board is closed")
        self._feed.start(inbox=inbox, events=events)
        self._index.watched = True

    def _check_id(self, task_id: str) -> str:
        return normalize_task_id(str(task_id))

    def _ready(self) -> Iterator[Task]:
        tasks = self._index.tasks
        for tid in self._index.pending_in_order():
            task = tasks.get(tid)
            if task is not None and graph.is_ready(task, tasks):
                yield task

    def _allocate(self, wanted: str | None, *, sync_dir: bool = True) -> str:
        """Next id under the seq lock: past the high-water mark (``.seq``), stepping over
        any task file already there; without a mark, past every id on disk.
        ``sync_dir=False``: the caller fsyncs ``.tasks`` itself before it lets go of the id
        (a new task's own durable write does, and so makes the mark's rename durable too)."""
        high, seen = self._read_mark()
        if wanted is not None:
            if self.layout.task_file(wanted).exists():
                raise Conflict(f"duplicate id {wanted}: that task already exists")
            n = task_number(wanted)
        else:
            # The mark is past every id this board gave out or honoured; files written by
            # hand past it are stepped over. Only a board without a mark lists the files.
            # (Within one deferred batch the mark is kept in memory: the first id of the
            # batch lists the files, the others start from it.)
            on_disk = high if seen or self._deferred_seq else self._highest_on_disk()
            n = max(on_disk, self._deferred_seq) + 1
            while self.layout.task_file(format_task_id(n)).exists():
                n += 1
        if n > high and self._deferred == threading.get_ident():
            # The new task file is written before the seq lock is released, so another
            # allocator steps over it meanwhile; the mark is written once, at the end.
            self._deferred_seq = max(self._deferred_seq, n)
        elif n > high:
            staged_write(self.layout.seq, f"{n}\n", durable=self._durable, sync_dir=sync_dir)
        return format_task_id(n)

    def _read_mark(self) -> tuple[int, bool]:
        """The high-water mark in ``.seq``, and whether there is one (under the seq lock)."""
        path = self.layout.seq
        try:
            return int(read_regular_bytes(path, 1 << 16).decode().strip() or 0), True
        except FileNotFoundError:
            return 0, False
        except (ValueError, OSError) as exc:  # not digits, not UTF-8, not a file
            raise InvalidInput(f"{path} is corrupt: {exc}") from None

    def _highest_on_disk(self) -> int:
        """The highest task number among the files (names only: no stat, no read)."""
        with os.scandir(self.layout.tasks) as it:
            found = [m.group(1) for e in it if (m := TASK_FILE_RE.match(e.name))]
        return max((task_number(t) for t in found), default=0)

    @property
    def _durable(self) -> bool:
        if self._deferred == threading.get_ident():
            self._deferred_dirty = True
            return False
        return self.config.fsync

    def _lock(self, task_id: str, timeout: float | None = LOCK_TIMEOUT
              ) -> contextlib.AbstractContextManager[None]:
        return flocked(self.layout.locks / f"{task_id}.lock", timeout)

    def _read_locked(self, task_id: str) -> Task:
        try:
            task, _ = read_task_file(self.layout.task_file(task_id))
        except FileNotFoundError:
            self._index.load(task_id)
            raise NotFound(f"no task {task_id}") from None
        except ValueError as exc:
            raise InvalidInput(f"{task_id}: unreadable task file: {exc}") from None
        return task

    def _write(self, task: Task, *, forgettable: bool = False) -> None:
        """Replace the task file atomically and durably.

        ``forgettable`` (a claim, and every write of its run before the final one:
        renewals, updates) skips the folder fsync: after a power cut the file is the old
        or the new one, whole; losing a claim or a step of its run then is the same as
        its lease expiring, since every worker on this machine died too. The run's final
        write fsyncs the folder, and so everything renamed in it before.
        """
        task.updated_at = utcnow()
        path = self.layout.task_file(task.id)
        text = to_json(task, indent=2) + "\n"
        if len(text.encode()) > MAX_TASK_BYTES:
            # Written, it would be a file every reader refuses: the task would vanish.
            raise InvalidInput(f"{task.id}: the task would be over the "
                               f"{MAX_TASK_BYTES >> 20} MiB limit of a task file")
        st = staged_write(path, text, durable=self._durable, sync_dir=not forgettable)
        self._index.put(task, (st.st_mtime_ns, st.st_size, st.st_ino))

    def _mutate(self, task_id: str, change: Callable[[Task], None], *,
                forgettable: bool = False, lock_timeout: float = LOCK_TIMEOUT) -> Task:
        """Read the task under its lock, apply ``change`` (which may raise), write it back."""
        task_id = self._check_id(task_id)
        with self._lock(task_id, lock_timeout):
            task = self._read_locked(task_id)
            try:
                change(task)
            except InvalidRecord as exc:
                raise InvalidInput(f"{task_id}: {describe_error(exc)}") from None
            self._write(task, forgettable=forgettable)
        return task

    def _fenced(self, task_id: str, token: int, change: Callable[[Task], None], *,
                forgettable: bool = False) -> Task:
        def check(t: Task) -> None:
            lease = t.lease
            if t.status is not Status.IN_PROGRESS or lease is None or lease.token != token:
                now = (f"held by {lease.owner} with token {lease.token}" if lease
                       else f"{t.status}, no lease")
                raise LeaseLost(f"{t.id}: lease token {token} is no longer valid ({now})",
                                task=t.id)
            self._holder = lease.owner
            change(t)

        return self._mutate(task_id, check, forgettable=forgettable)

    def _try_claim(self, task_id: str, owner: str, seconds: float,
                   timeout: float) -> Task | None:
        with self._lock(task_id, timeout):
            try:
                task = self._read_locked(task_id)
            except (NotFound, InvalidInput):
                return None
            if task.status is not Status.PENDING:
                self._index.put(task)
                return None
            for b in task.blocked_by:  # blockers fresh from disk: the index may lag
                self._index.load(b)
            if not graph.is_ready(task, self._index.tasks):
                self._index.put(task)
                return None
            check_transition(task.id, task.status, Status.IN_PROGRESS)
            task.fence += 1
            task.status = Status.IN_PROGRESS
            task.owner = owner
            task.lease = Lease(owner=owner, token=task.fence, expires_at=time.time() + seconds)
            # task.error stays: the run's prompt says what went wrong last time; a
            # completed run clears it
            self._write(task, forgettable=True)
            return task


class FileIds:
    """Implements `orchestrator.controlplane.Ids`: ``.tasks/.seq`` under ``seq.lock``."""

    def __init__(self, board: FileBoard) -> None:
        self.board = board

    def next(self) -> str:
        with flocked(self.board.layout.locks / "seq.lock"):
            return self.board._allocate(None)

    def high_water(self) -> int:
        try:
            return int(self.board.layout.seq.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            return 0


class _Skip(Exception):
    """Inside a requeue: the task changed since the index saw it; leave it alone."""


def _move(task: Task, new: Status) -> None:
    check_transition(task.id, task.status, new)
    if task.status is Status.IN_PROGRESS:
        task.owner = None
        task.lease = None
    task.wait = None  # a wait ends with the state it was for (the caller may set a new one)
    task.status = new


def _count_attempt(task: Task, error: str, retry: bool) -> None:
    task.attempts += 1
    task.error = error
    _move(task, Status.PENDING if retry and task.attempts < task.max_attempts else Status.FAILED)


def _assign(task: Task, fields: dict[str, Any]) -> None:
    """Set ``fields`` on ``task``, each checked (and converted: a dict becomes its record)
    as decoding checks it. ``waiting_for`` (the old string) is set as the `Wait` it names,
    and None clears the wait."""
    if "waiting_for" in fields:
        fields = dict(fields)
        legacy = fields.pop("waiting_for")
        fields["wait"] = from_text(str(legacy)) if legacy else None
    for name in fields:
        if name not in Task.__struct_fields__:
            raise InvalidInput(f"{task.id}: unknown field {name!r}")
    try:
        checked = convert(to_dict(task) | msgspec.to_builtins(fields), Task)
    except InvalidRecord as exc:
        raise InvalidInput(f"{task.id}: {describe_error(exc)}") from None
    for name in fields:
        setattr(task, name, getattr(checked, name))


def check_limit(limit: int | None) -> None:
    """A page size given to `list` is a whole number ≥ 0."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 0):
        raise InvalidInput(f"a page holds 0 or more tasks, not {limit!r}")
