"""Intake: files people and scripts drop onto the board become tasks.

Dropped into ``.tasks/inbox/`` (or straight into ``.tasks/``), a file may be

- JSON written the way people write it: ``title`` or ``subject``; ``desc``,
  ``body`` or ``description``; ``blockedBy``, ``blocked_by`` or ``blocked-by``;
  Claude Code's task files (``activeForm``, ``blocks``, ``owner``, ``metadata``);
- Markdown (`.md`, `.markdown`): the first heading is the subject, the rest the
  description, with optional ``---`` front matter (`orchestrator.frontmatter`).

Fields we do not know go to ``metadata``; ``blocks: [X]`` adds the new task to
X's ``blocked_by``; an ``id`` is honoured when it is free. A file is claimed by
renaming it into ``inbox/.processing/`` (so several processes can run intake at
once), and removed only after its task file is durably written. A file that
cannot be read goes to ``.tasks/rejected/`` with ``<name>.error.txt`` beside it
and a ``task_rejected`` event: nothing the user wrote is ever deleted.
A task file in ``.tasks/`` that does not validate (written by hand) is
normalised in place the same way, or rejected.

One bad file never stops intake: each file is handled alone, and whatever goes wrong
with it (an error of ours included) rejects that file with the reason, or, when even
the move fails, leaves it with a one-line warning; then intake goes on. Only regular
files are ever opened, and without blocking (``lstat`` first; a FIFO, socket, device,
folder or symlink is moved to ``rejected/`` unopened); names (`MAX_NAME_BYTES`),
sizes (1 MiB a file, 768 KiB the task file it becomes) and nesting (`MAX_DEPTH`) are
bounded; text must be Unicode (a JSON escape of an unpaired surrogate is refused). A
file that does not parse and was modified less than `SETTLE_SECONDS` ago may still be
being written: it is left for the next pass, and a burst (``up --burst``) is not
finished while one waits.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator import frontmatter
from orchestrator.board.index import (
    DROP_SUFFIXES,
    MAX_TASK_BYTES,
    TASK_FILE_RE,
    read_task_file,
)
from orchestrator.budget import make_budget
from orchestrator.errors import Conflict, InvalidInput, NotFound
from orchestrator.events import TaskCreated, TaskRejected
from orchestrator.fsutil import atomic_write, read_open_file
from orchestrator.model import InvalidRecord, Status, Task, normalize_task_id
from orchestrator.procutil import pid_alive
from orchestrator.record import convert, describe_error

if TYPE_CHECKING:
    from orchestrator.board.store import FileBoard
    from orchestrator.layout import Layout

SETTLE_SECONDS = 2.0
"""A file that does not parse yet and was modified this recently may still be being written."""
PROCESSING = ".processing"
MAX_NAME_BYTES = 150
"""A dropped file's name, in bytes (file systems allow 255; we add suffixes to it)."""
MAX_DEPTH = 32
"""How deeply a dropped JSON document may nest (front matter does not nest at all)."""


def _warn(message: str, *args: object) -> None:
    """A warning in the log (logging is imported only when there is one to write: every
    board command runs intake, and importing logging costs each a few milliseconds)."""
    import logging

    logging.getLogger(__name__).warning(message, *args)


ALIASES = {
    "title": "subject", "subject": "subject",
    "desc": "description", "body": "description", "description": "description",
    "blockedBy": "blocked_by", "blocked_by": "blocked_by", "blocked-by": "blocked_by",
    "priority": "priority", "backend": "backend", "agent": "agent",
    "max_attempts": "max_attempts", "maxAttempts": "max_attempts",
    "max-attempts": "max_attempts",
    "plan_first": "plan_first", "planFirst": "plan_first", "plan-first": "plan_first",
    "expect_changes": "expect_changes", "expectChanges": "expect_changes",
    "expect-changes": "expect_changes",
}
BUDGET_KEYS = {
    "budget_usd": "usd", "budgetUsd": "usd", "budget-usd": "usd",
    "budget_tokens": "tokens", "budgetTokens": "tokens", "budget-tokens": "tokens",
    "timeout": "timeout",
}
"""Budget fields a dropped file may carry at the top level (or inside ``budget: {usd, tokens,
timeout}``)."""


@dataclass
class Draft:
    """A dropped file read leniently: Task fields, plus what intake does with the rest."""

    fields: dict[str, Any]
    task_id: str | None = None
    blocks: list[str] = field(default_factory=list)


# --- parsing ------------------------------------------------------------------------
def parse_drop(name: str, data: bytes) -> Draft:
    """Read a dropped file; raises InvalidInput saying why it is not a task."""
    if len(data) > MAX_TASK_BYTES:
        raise InvalidInput(f"file is {len(data)} bytes, over the 1 MiB limit")
    if b"\0" in data:
        raise InvalidInput("binary file (contains NUL bytes), not a task")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"not UTF-8 text (binary file?): {exc.reason} at byte {exc.start}"
                           ) from None
    suffix = Path(name).suffix.lower()
    if suffix == ".json":
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"malformed JSON: {exc.msg} (line {exc.lineno}, column "
                               f"{exc.colno})") from None
        except RecursionError:
            raise InvalidInput(f"JSON nested more than {MAX_DEPTH} levels deep") from None
        check_depth(raw)
        if not isinstance(raw, dict):
            raise InvalidInput(f"expected a JSON object, got {type(raw).__name__}")
        return normalize(raw)
    if suffix in (".md", ".markdown"):
        return normalize(parse_markdown(text))
    raise InvalidInput(f"unsupported file type {suffix or '(none)'!r}: drop .json or .md files")


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """`InvalidInput` when lists and objects in ``value`` nest deeper than ``limit``, or
    a string in it is not Unicode that UTF-8 can hold (JSON's ``"\\ud800"`` escapes
    decode to an unpaired surrogate, which no event or task file can be written with);
    walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise InvalidInput(f"JSON nested more than {limit} levels deep")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            stack.extend((k, depth + 1) for k in item)
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode()
            except UnicodeEncodeError as exc:
                raise InvalidInput(f"text holds an unpaired surrogate "
                                   f"({item[exc.start]!r}), not Unicode") from None


def parse_markdown(text: str) -> dict[str, Any]:
    """Front matter fields, ``subject`` from the first heading, ``description`` from the rest."""
    if not text.strip():
        raise InvalidInput("empty Markdown file: write a '# heading' as the task's subject")
    head, lines = frontmatter.split(text)
    # an empty value is as if the key were not written
    raw = {k: v for k, v in frontmatter.parse(head).items() if v is not None} if head else {}
    if "subject" not in raw and "title" not in raw:
        i = next((i for i, ln in enumerate(lines) if ln.strip()), None)
        if i is None:
            raise InvalidInput("Markdown file has no heading or text for a subject")
        raw["subject"] = re.sub(r"^#+\s*", "", lines[i].strip()).strip()
        lines = lines[:i] + lines[i + 1:]
    body = "\n".join(lines).strip()
    if body and not any(k in raw for k in ("description", "desc", "body")):
        raw["description"] = body
    return raw


def normalize(raw: dict[str, Any]) -> Draft:
    """Map the shapes people write onto Task fields; the rest goes to ``metadata``."""
    fields: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    budget: dict[str, Any] = {}
    draft = Draft(fields)
    for key, value in raw.items():
        canon = ALIASES.get(key)
        if key in BUDGET_KEYS:
            budget[BUDGET_KEYS[key]] = value
        elif key == "budget":
            if not isinstance(value, dict) or set(value) - {"usd", "tokens", "timeout"}:
                raise InvalidInput("budget must be an object with usd, tokens and/or timeout")
            budget.update(value)
        elif canon is not None:
            if canon in fields and fields[canon] != value:
                raise InvalidInput(f"{key!r} conflicts with another name for {canon!r}")
            fields[canon] = value
        elif key == "id":
            draft.task_id = _task_id(value)
        elif key == "status":
            if value not in set(Status):
                raise InvalidInput(f"unknown status {value!r} (allowed: "
                                   f"{', '.join(s.value for s in Status)})")
            if value != Status.PENDING:
                raise InvalidInput(f"a dropped task starts pending, not {value!r}")
        elif key == "blocks":
            draft.blocks = [_task_id(v) for v in _id_list(value, "blocks")]
            metadata["blocks"] = draft.blocks
        elif key == "metadata":
            if not isinstance(value, dict):
                raise InvalidInput("metadata must be an object")
            metadata.update(value)
        else:
            metadata[key] = value  # activeForm, owner (never a lease), anything else
    if "subject" not in fields:
        raise InvalidInput("no 'title' or 'subject'")
    if "blocked_by" in fields:
        fields["blocked_by"] = [_task_id(v) for v in _id_list(fields["blocked_by"], "blockedBy")]
    if metadata:
        fields["metadata"] = metadata
    if budget:
        fields["budget"] = make_budget(**budget)
    return draft


def _id_list(value: Any, name: str) -> list[Any]:
    if isinstance(value, str):
        return [v for v in re.split(r"[,\s]+", value) if v]
    if isinstance(value, int) and not isinstance(value, bool):
        return [value]
    if isinstance(value, list):
        return value
    raise InvalidInput(f"{name} must be a list of task ids")


def _task_id(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidInput(f"not a task id: {value!r}")
    return normalize_task_id(str(value))


# --- running ----------------------------------------------------------------------
def run_intake(board: FileBoard, actor: str | None = None,
               rejected: list[Path] | None = None, *, repair: bool = True) -> list[Task]:
    """Process every dropped file once (and, with ``repair``, every task file that does not
    validate); returns the tasks created. Where each rejected file went is appended to
    ``rejected``."""
    actor = actor or board.actor
    moved: list[Path] = [] if rejected is None else rejected
    strays = repair
    if repair:  # a full scan reads .tasks/ anyway: it counts the files dropped straight there
        scans = board._index.full_scans
        board._index.refresh()
        strays = board._index.dropped_here > 0 or board._index.full_scans == scans
    created = take_dropped(board, actor, moved, strays=strays)
    if created:
        board._index.settle()
    if not repair:
        return created
    for task_id in list(board._index.broken):
        try:
            task = _repair(board, task_id, actor, moved)
        except Exception as exc:
            if _machine_trouble(exc):
                raise
            _warn("intake: left task file %s in place: %s", task_id, _reason(exc))
            continue
        if task is not None:
            created.append(task)
    return created


def take_dropped(board: Any, actor: str, moved: list[Path], *,
                 strays: bool = True) -> list[Task]:
    """The dropped files of ``board.layout``'s inbox (and, with ``strays``, files dropped
    straight into ``.tasks/``: finding them reads the whole folder, so commands about one
    task leave them to the next list) made tasks with ``board.create_many`` (`BATCH` at a
    time), or ``board.create`` — for any board implementation whose clone has an inbox;
    each rejected file's new place is appended to ``moved``."""
    layout = board.layout
    with contextlib.suppress(OSError):
        _recover_stale(layout.inbox)
    created: list[Task] = []
    taken: list[Path] = []
    found = _dropped(layout.tasks if strays else None, layout.inbox)
    if not found:
        return created
    claims = _Claims(layout.inbox)
    deferred = getattr(board, "deferred_sync", None)  # the file board: one flush, not 2 a file
    failed: BaseException | None = None  # a full disk: the caller backs off
    with deferred() if deferred is not None else contextlib.nullcontext():
        batch: list[_Claimed] = []  # claimed and read, their tasks not yet made
        try:
            for path, rel in found:
                try:
                    got = _claim(board, path, rel, claims)
                except Exception as exc:  # one file never stops the others
                    if _machine_trouble(exc):
                        raise
                    _warn("intake: left %s in place: %s", _printable(rel), _reason(exc))
                    continue
                if got is not None:
                    batch.append(got)
                if len(batch) >= BATCH:
                    created += _make(board, actor, batch, moved, taken)
            created += _make(board, actor, batch, moved, taken)
        except BaseException as exc:
            for item in batch:  # claimed, no task made: back where the user put them
                with contextlib.suppress(OSError):
                    os.rename(item.mine, item.path)
            failed = exc
    # Only now (the flush on the way out did not fail) are the tasks durable, even when a
    # full disk stopped the burst: their drops can go.
    for path in taken:
        with contextlib.suppress(OSError):
            os.unlink(path)
    if failed is not None:
        raise failed
    return created


def settling(layout: Layout) -> float | None:
    """Seconds until the last dropped file that is still settling (modified or moved in
    less than `SETTLE_SECONDS` ago) will be taken in or rejected; None when none is. A
    burst (``up --burst``) is not finished while one is. A file that stays longer (intake
    could not move it, and warned) does not hold a burst up."""
    now = time.time()
    left = []
    for path, _ in _dropped(layout.tasks, layout.inbox):
        try:
            st = path.lstat()
        except OSError:
            continue
        age = now - st.st_ctime  # written, or moved in (mv, cp -p), this long ago
        if age < SETTLE_SECONDS + 1.0:
            left.append(max(SETTLE_SECONDS + 1.0 - max(age, 0.0), 0.05))
    return min(left) if left else None


def _dropped(tasks: Path | None, inbox: Path) -> list[tuple[Path, str]]:
    """Files (and, in the inbox, anything else that is not hidden) to take in; with
    ``tasks``, also the files dropped straight into that folder."""
    found: list[tuple[Path, str]] = []
    for folder, prefix in ((inbox, "inbox/"), (tasks, "")):
        if folder is None:
            continue
        in_inbox = folder is inbox
        try:
            with os.scandir(folder) as it:
                if in_inbox:
                    names = [e.name for e in it if not e.name.startswith(".")
                             and not e.name.endswith(".tmp")]
                else:  # task files stay; only files people dropped here are taken
                    names = [n for e in it if (n := e.name).lower().endswith(DROP_SUFFIXES)
                             and not n.startswith(".") and not n.endswith(".tmp")
                             and not TASK_FILE_RE.match(n)
                             and not e.is_dir(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            continue
        found.extend((folder / n, prefix + n) for n in sorted(names))
    return found


def _problem(path: Path, st: os.stat_result, root: Path) -> str | None:
    """Why a dropped file is refused before it is ever opened (None: it may be read)."""
    name = path.name
    if _printable(name) != name:
        return "the file name is not UTF-8"
    if len(name.encode()) > MAX_NAME_BYTES:
        return f"the file name is {len(name.encode())} bytes long, over the " \
               f"{MAX_NAME_BYTES}-byte limit"
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(path)
        try:
            outside = not path.resolve().is_relative_to(root)
        except (OSError, RuntimeError):
            outside = True
        return (f"symlink to {_printable(target)[:200]}"
                f"{' outside the repository' if outside else ''}: drop the file itself, "
                "not a link")
    if stat.S_ISDIR(st.st_mode):
        return "a folder, not a task file"
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket"
                if stat.S_ISSOCK(st.st_mode) else "a device")
        return f"{kind}, not a regular file (not opened)"
    if st.st_size > MAX_TASK_BYTES:
        return f"file is {st.st_size} bytes, over the 1 MiB limit"
    return None


BATCH = 16
"""Drops whose tasks are made together (`_make`): their events logged in one append, then
their files written. A process killed in between leaves events of tasks never written
(at most this many); their drops are taken in again."""


@dataclass
class _Claimed:
    """A dropped file claimed (renamed to ``mine``) and read, its task not yet made; or
    the error it is rejected for, once its group's tasks are made (`_make`)."""

    path: Path
    rel: str
    mine: Path
    draft: Draft | Exception


def _claim(board: FileBoard, path: Path, rel: str, claims: _Claims) -> _Claimed | None:
    """Claim ``path`` and read it; None when another process took it or when it is still
    being written."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    problem = _problem(path, st, board.layout.root)
    early: tuple[Draft, tuple[int, int, int]] | None = None
    if problem is None and 0 <= time.time() - st.st_mtime < SETTLE_SECONDS:
        try:
            data, seen = _read_stat(path)
            early = parse_drop(path.name, data), _identity(seen)
        except (InvalidInput, OSError):
            return None  # probably still being written: look again on the next event
    mine = claims.claim(path)
    if mine is None:
        return None  # another process took it
    try:
        if problem is not None:
            raise InvalidInput(problem)
        if early is not None and _identity(mine.lstat()) == early[1]:
            draft = early[0]  # the very file read above, unchanged since: not read again
        else:
            draft = parse_drop(path.name, _read(mine))
    except Exception as exc:
        if _machine_trouble(exc):
            os.rename(mine, path)  # not the file's fault: taken in when the fault is gone
            raise
        return _Claimed(path, rel, mine, exc)
    return _Claimed(path, rel, mine, draft)


def _make(board: FileBoard, actor: str, batch: list[_Claimed], moved: list[Path],
          taken: list[Path]) -> list[Task]:
    """The tasks of ``batch`` (emptied), made together where the board can (`create_many`);
    each file whose task could not be made is rejected, and its claimed copy goes to
    ``taken`` otherwise, for the caller to delete once the task files are durable."""
    items = [(dict(d.fields, source=c.rel), d.task_id, c.rel)
             for c in batch if isinstance(d := c.draft, Draft)]
    many = getattr(board, "create_many", None)
    results = iter(many(items, actor=actor) if many is not None else [
        _create_one(board, actor, *item) for item in items])
    done = [(c, next(results) if isinstance(c.draft, Draft) else c.draft) for c in batch]
    batch[:] = []  # answered: from here each file is rejected, kept or put back below
    created: list[Task] = []
    trouble: BaseException | None = None
    for item, made in done:
        if isinstance(made, Exception) and trouble is None and _machine_trouble(made):
            trouble = made
        if isinstance(made, Exception) and trouble is not None:
            with contextlib.suppress(OSError):  # not the file's fault: taken in later
                os.rename(item.mine, item.path)
            continue
        try:  # one file never stops the others
            if isinstance(made, Exception):
                _refuse(board, item.path, item.rel, item.mine, made, actor, moved)
                continue
            taken.append(item.mine)
            created.append(made)
            _add_blocks(board, made.id, item.draft.blocks if isinstance(item.draft, Draft)
                        else [])
        except Exception as exc:
            if _machine_trouble(exc):
                trouble = trouble or exc
                continue
            _warn("intake: left %s in place: %s", _printable(item.rel), _reason(exc))
    if trouble is not None:
        raise trouble
    return created


def _create_one(board: Any, actor: str, fields: dict[str, Any], task_id: str | None,
                source: str) -> Task | Exception:
    try:
        task: Task = board.create(fields, actor=actor, task_id=task_id, source=source)
    except Exception as exc:
        return exc
    return task


def _refuse(board: FileBoard, path: Path, rel: str, mine: Path, exc: Exception, actor: str,
            moved: list[Path]) -> None:
    """Reject the claimed ``mine`` (its new place appended to ``moved``) for ``exc``, the
    file's fault or ours; when even that fails, the file goes back where the user put it."""
    try:
        moved.append(reject(board, mine, path.name, rel, _reason(exc), actor))
    except Exception:
        with contextlib.suppress(OSError):
            os.rename(mine, path)  # back where the user put it
        raise


MACHINE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EMFILE,
                            errno.ENFILE, errno.ENOMEM})


def _machine_trouble(exc: BaseException) -> bool:
    """A full or read-only disk, too few file descriptors: the machine's trouble, not the
    file's."""
    return isinstance(exc, OSError) and exc.errno in MACHINE_ERRNOS


def _reason(exc: BaseException) -> str:
    """One line for why a file was refused: our own errors as they are, others with their
    type."""
    if isinstance(exc, InvalidRecord):
        return describe_error(exc)
    if isinstance(exc, InvalidInput | Conflict):
        text = str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}"
    return _printable(" ".join(text.split()))[:500]


def _printable(name: str) -> str:
    """``name`` with bytes that are not UTF-8 (``surrogateescape``) shown as U+FFFD."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _safe_name(name: str) -> str:
    """A name for ``rejected/`` that any file system takes: UTF-8, bounded in length."""
    clean = _printable(name)
    if len(clean.encode()) <= MAX_NAME_BYTES:
        return clean
    import hashlib

    digest = hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    head = clean.encode()[:MAX_NAME_BYTES - 40].decode("utf-8", "ignore")
    return f"{head}-{digest}{Path(clean).suffix[:20]}"


def _repair(board: FileBoard, task_id: str, actor: str, moved: list[Path]) -> Task | None:
    """A task file that does not validate: normalise it in place, or reject it."""
    path = board.layout.task_file(task_id)
    with board._lock(task_id):
        try:
            read_task_file(path)
            return None  # fixed meanwhile
        except FileNotFoundError:
            return None
        except ValueError as exc:
            strict = str(exc)
        try:
            st = path.lstat()
        except FileNotFoundError:
            return None
        problem = _problem(path, st, board.layout.root)
        try:
            if problem is not None:
                raise InvalidInput(f"{problem}: task files must be regular files")
            draft = parse_drop(path.name, _read(path))
            if draft.task_id not in (None, task_id):
                raise InvalidInput(f"id {draft.task_id} in the file does not match its name")
            task = convert({**draft.fields, "source": path.name, "id": task_id}, Task)
        except Exception as exc:  # the file's or ours: rejected with the reason
            if problem is None and 0 <= time.time() - st.st_mtime < SETTLE_SECONDS:
                return None
            moved.append(reject(board, path, path.name, path.name,
                                f"{_reason(exc)} (as a task file: {strict})", actor))
            board._index.load(task_id)
            return None
        # the event first: once the file is valid the task can be claimed
        board.events.emit(TaskCreated(subject=task.subject, source=path.name), task.id,
                          actor=actor)
        board._write(task)
    _add_blocks(board, task.id, draft.blocks)
    return task


def reject(board: FileBoard, path: Path, name: str, rel: str, reason: str, actor: str) -> Path:
    """Move a dropped file to ``.tasks/rejected/`` with the reason beside it."""
    rejected = board.layout.rejected
    rejected.mkdir(parents=True, exist_ok=True)
    name = _safe_name(name)
    dest = rejected / name
    n = 0
    while dest.exists() or dest.is_symlink() or dest.with_name(dest.name + ".error.txt").exists():
        n += 1
        dest = rejected / f"{name}.{n}"
    os.rename(path, dest)
    atomic_write(dest.with_name(dest.name + ".error.txt"), f"{_printable(rel)}: {reason}\n")
    board.events.emit(TaskRejected(file=_printable(rel), reason=reason,
                                   moved_to=str(dest.relative_to(board.layout.root))),
                      None, actor=actor)
    return dest


def rel_to(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _add_blocks(board: FileBoard, task_id: str, blocks: list[str]) -> None:
    """``blocks: [X]`` means X is blocked by the new task."""
    for other in blocks:

        def add(t: Task) -> None:
            if task_id not in t.blocked_by:
                t.blocked_by = [*t.blocked_by, task_id]

        with contextlib.suppress(NotFound, InvalidInput):
            board._mutate(other, add)


def _read(path: Path) -> bytes:
    """The file's bytes (at most 1 MiB + 1): only a regular file, never blocking on one
    that is not (O_NONBLOCK, then fstat), never following a symlink."""
    return _read_stat(path)[0]


def _read_stat(path: Path) -> tuple[bytes, os.stat_result]:
    """`_read`, with the stat of the file read."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InvalidInput("not a regular file (not read)")
        return read_open_file(fd, st.st_size, MAX_TASK_BYTES + 1), st
    finally:
        os.close(fd)


def _identity(st: os.stat_result) -> tuple[int, int, int]:
    """Which file, and which version of it: a rename keeps all three, a write changes
    the size or the mtime (to the nanosecond the file system keeps)."""
    return st.st_ino, st.st_size, st.st_mtime_ns


class _Claims:
    """Claims of one intake pass: each file is renamed into a private name in
    ``inbox/.processing/`` (``<name>.<pid>.<random>``; only one process wins a rename).
    The folder is made once a pass (again if someone removes it meanwhile), and the
    random part is one per pass plus a counter."""

    def __init__(self, inbox: Path) -> None:
        self.folder = inbox / PROCESSING
        self.tag = f"{os.getpid()}.{uuid.uuid4().hex[:8]}"
        self.n = 0

    def claim(self, path: Path) -> Path | None:
        """Rename ``path`` to a private name; None when another process took it first."""
        if not self.n:
            self.folder.mkdir(parents=True, exist_ok=True)
        self.n += 1
        mine = self.folder / f"{_safe_name(path.name)}.{self.tag}x{self.n}"
        for _ in range(3):  # someone may remove the folder meanwhile: make it again
            try:
                os.rename(path, mine)
                return mine
            except FileNotFoundError:
                if self.folder.is_dir() or not path.parent.is_dir():
                    return None  # the file is gone: another process took it
                self.folder.mkdir(parents=True, exist_ok=True)
        return None  # the folder keeps vanishing: the file stays, for the next pass


def _recover_stale(inbox: Path) -> None:
    """Files a crashed intake had claimed go back to the inbox (at-least-once)."""
    folder = inbox / PROCESSING
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return
    for e in entries:
        name = e.name.rpartition(".")[0]  # strip the random part
        name, _, pid = name.rpartition(".")
        if not pid.isdigit() or pid_alive(int(pid)):
            continue
        dest = inbox / name
        while dest.exists():
            dest = dest.with_name(f"recovered-{dest.name}")
        with contextlib.suppress(FileNotFoundError):
            os.rename(e.path, dest)
