"""Intake: files people and scripts drop onto the board become tasks.

Dropped into ``.tasks/inbox/`` (or straight into ``.tasks/``), a file may be

- JSON written the way people write it: ``title`` or ``subject``; ``desc``,
  ``body`` or ``description``; ``blockedBy``, ``blocked_by`` or ``blocked-by``;
  Claude Code's task files (``activeForm``, ``blocks``, ``owner``, ``metadata``);
- Markdown (or plain text): the first heading is the subject, the rest the
  description, with optional ``---`` front matter (``key: value``, ``[a, b]``).

Fields we do not know go to ``metadata``; ``blocks: [X]`` adds the new task to
X's ``blocked_by``; an ``id`` is honoured when it is free. A file is claimed by
renaming it into ``inbox/.processing/`` (so several processes can run intake at
once), and removed only after its task file is durably written. A file that
cannot be read goes to ``.tasks/rejected/`` with ``<name>.error.txt`` beside it
and a ``task_rejected`` event: nothing the user wrote is ever deleted.
A task file in ``.tasks/`` that does not validate (written by hand) is
normalised in place the same way, or rejected.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from orchestrator.board.index import (
    DROP_SUFFIXES,
    MAX_TASK_BYTES,
    TASK_FILE_RE,
    describe_error,
    read_task_file,
)
from orchestrator.board.model import Status, Task, normalize_task_id
from orchestrator.errors import Conflict, InvalidInput, NotFound
from orchestrator.fsutil import atomic_write
from orchestrator.procutil import pid_alive

if TYPE_CHECKING:
    from orchestrator.board.store import FileBoard

SETTLE_SECONDS = 2.0
"""A file that does not parse yet and was modified this recently may still be being written."""
PROCESSING = ".processing"

ALIASES = {
    "title": "subject", "subject": "subject",
    "desc": "description", "body": "description", "description": "description",
    "blockedBy": "blocked_by", "blocked_by": "blocked_by", "blocked-by": "blocked_by",
    "priority": "priority", "backend": "backend", "agent": "agent",
    "max_attempts": "max_attempts", "maxAttempts": "max_attempts",
    "max-attempts": "max_attempts",
    "plan_first": "plan_first", "planFirst": "plan_first", "plan-first": "plan_first",
}


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
        if not isinstance(raw, dict):
            raise InvalidInput(f"expected a JSON object, got {type(raw).__name__}")
        return normalize(raw)
    if suffix in (".md", ".markdown", ".txt"):
        return normalize(parse_markdown(text))
    raise InvalidInput(f"unsupported file type {suffix or '(none)'!r}: drop .json or .md files")


def parse_markdown(text: str) -> dict[str, Any]:
    """Front matter fields, ``subject`` from the first heading, ``description`` from the rest."""
    if not text.strip():
        raise InvalidInput("empty Markdown file: write a '# heading' as the task's subject")
    raw: dict[str, Any] = {}
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":
        end = next((i for i, ln in enumerate(lines[1:], 1) if ln.strip() == "---"), None)
        if end is None:
            raise InvalidInput("front matter opened with '---' is never closed")
        for ln in lines[1:end]:
            if not ln.strip() or ln.lstrip().startswith("#"):
                continue
            key, sep, value = ln.partition(":")
            if not sep or not key.strip():
                raise InvalidInput(f"front matter line is not 'key: value': {ln.strip()!r}")
            raw[key.strip()] = _scalar(value.strip())
        lines = lines[end + 1:]
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


def _scalar(value: str) -> Any:
    if value.startswith("[") and value.endswith("]"):
        inner = value[1:-1].strip()
        return [_scalar(v.strip()) for v in inner.split(",")] if inner else []
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


def normalize(raw: dict[str, Any]) -> Draft:
    """Map the shapes people write onto Task fields; the rest goes to ``metadata``."""
    fields: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    draft = Draft(fields)
    for key, value in raw.items():
        canon = ALIASES.get(key)
        if canon is not None:
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
def run_intake(board: FileBoard, actor: str | None = None, *, repair: bool = True
               ) -> list[Task]:
    """Process every dropped file once (and, with ``repair``, every task file that does not
    validate); returns the tasks created."""
    layout = board.layout
    actor = actor or board.actor
    _recover_stale(layout.inbox)
    created: list[Task] = []
    taken: list[Path] = []
    with board.deferred_sync():  # one flush for the whole burst, not 2 fsyncs a file
        for path, rel in _dropped(layout.tasks, layout.inbox):
            task = _take(board, path, rel, actor, taken)
            if task is not None:
                created.append(task)
    for mine in taken:  # only now are their tasks durable
        mine.unlink()
    if not repair:
        return created
    board._index.refresh()
    for task_id in list(board._index.broken):
        task = _repair(board, task_id, actor)
        if task is not None:
            created.append(task)
    return created


def _dropped(tasks: Path, inbox: Path) -> list[tuple[Path, str]]:
    found = []
    for folder, prefix in ((inbox, "inbox/"), (tasks, "")):
        try:
            with os.scandir(folder) as it:
                names = [e.name for e in it if not e.name.startswith(".")
                         and not e.name.endswith(".tmp") and not e.is_dir(follow_symlinks=False)]
        except FileNotFoundError:
            continue
        if folder == tasks:  # task files stay; only files people dropped here are taken
            names = [n for n in names if n.lower().endswith(DROP_SUFFIXES)
                     and not TASK_FILE_RE.match(n)]
        found.extend((folder / n, prefix + n) for n in sorted(names))
    return found


def _take(board: FileBoard, path: Path, rel: str, actor: str, taken: list[Path]
          ) -> Task | None:
    """Make ``path`` a task (or reject it); its claimed copy goes to ``taken``, for the
    caller to delete once the task file is durable."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    problem: str | None = None
    if path.is_symlink():
        target = os.readlink(path)
        outside = not path.resolve().is_relative_to(board.layout.root)
        problem = (f"symlink to {target}{' outside the repository' if outside else ''}: "
                   "drop the file itself, not a link")
    elif st.st_size > MAX_TASK_BYTES:
        problem = f"file is {st.st_size} bytes, over the 1 MiB limit"
    elif time.time() - st.st_mtime < SETTLE_SECONDS:
        try:
            parse_drop(path.name, _read(path))
        except (InvalidInput, OSError):
            return None  # probably still being written: look again on the next event
    mine = _claim(path, board.layout.inbox)
    if mine is None:
        return None  # another process took it
    try:
        if problem is not None:
            raise InvalidInput(problem)
        draft = parse_drop(path.name, _read(mine))
        task = board.create(dict(draft.fields, source=rel), actor=actor,
                            task_id=draft.task_id, source=rel)
    except (InvalidInput, Conflict, OSError) as exc:
        reject(board, mine, path.name, rel, str(exc), actor)
        return None
    taken.append(mine)
    _add_blocks(board, task.id, draft.blocks)
    return task


def _repair(board: FileBoard, task_id: str, actor: str) -> Task | None:
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
            if path.is_symlink():
                raise InvalidInput(f"symlink to {os.readlink(path)}: task files must be files")
            draft = parse_drop(path.name, _read(path))
            if draft.task_id not in (None, task_id):
                raise InvalidInput(f"id {draft.task_id} in the file does not match its name")
            task = Task(id=task_id, **dict(draft.fields, source=path.name))
        except (InvalidInput, ValidationError, OSError) as exc:
            why = describe_error(exc) if isinstance(exc, ValidationError) else str(exc)
            if not path.is_symlink() and time.time() - path.lstat().st_mtime < SETTLE_SECONDS:
                return None
            reject(board, path, path.name, path.name, f"{why} (as a task file: {strict})", actor)
            board._index.load(task_id)
            return None
        board._write(task)
    board.events.emit("task_created", task.id, actor=actor, subject=task.subject,
                      source=path.name)
    _add_blocks(board, task.id, draft.blocks)
    return task


def reject(board: FileBoard, path: Path, name: str, rel: str, reason: str, actor: str) -> Path:
    """Move a dropped file to ``.tasks/rejected/`` with the reason beside it."""
    rejected = board.layout.rejected
    rejected.mkdir(parents=True, exist_ok=True)
    dest = rejected / name
    n = 0
    while dest.exists() or dest.is_symlink() or dest.with_name(dest.name + ".error.txt").exists():
        n += 1
        dest = rejected / f"{name}.{n}"
    os.rename(path, dest)
    atomic_write(dest.with_name(dest.name + ".error.txt"), f"{rel}: {reason}\n")
    board.events.emit("task_rejected", None, actor=actor, file=rel,
                      moved_to=str(dest.relative_to(board.layout.root)), reason=reason)
    return dest


def _add_blocks(board: FileBoard, task_id: str, blocks: list[str]) -> None:
    """``blocks: [X]`` means X is blocked by the new task."""
    for other in blocks:

        def add(t: Task) -> None:
            if task_id not in t.blocked_by:
                t.blocked_by = [*t.blocked_by, task_id]

        with contextlib.suppress(NotFound, InvalidInput):
            board._mutate(other, add)


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return os.read(fd, MAX_TASK_BYTES + 1)
    finally:
        os.close(fd)


def _claim(path: Path, inbox: Path) -> Path | None:
    """Rename the file into a private name; only one process wins the rename."""
    folder = inbox / PROCESSING
    folder.mkdir(parents=True, exist_ok=True)
    mine = folder / f"{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    try:
        os.rename(path, mine)
    except FileNotFoundError:
        return None
    return mine


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
