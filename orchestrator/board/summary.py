"""The file board's totals (`FileBoard.summary`) without reading every task file.

``.tasks/.run/board-summary`` keeps the totals on its first line, with the journal
position (``.tasks/.journal``) they include and the failed tasks that wait for a person;
then, for every task, what it adds to them (its status, cost and tokens) as packed
arrays. A reader with no journal line since reads the first line only; otherwise it
applies the lines written since, re-reading just the files they name, and adds the rows
up again in C loops: the cost of `summary` follows the writes since the last call, not
the size of the board.

The summary is a cache, never the truth. It is rebuilt from the board's full index
(every task file, as `list` reads them) when it is missing or unreadable, when the
journal was rotated, or when ``.tasks/`` changed while the journal did not (a task
file deleted or replaced by hand, a snapshot or id mark saved). A hand change made
while the board was also written, or a file edited in place (which changes neither),
is seen at that task's next board write or the next rebuild.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
from array import array
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.board.index import JOURNAL, read_task_file, task_number
from orchestrator.controlplane import BoardSummary
from orchestrator.fsutil import atomic_write
from orchestrator.model import TASK_ID_RE, Status, Task

FILE = "board-summary"
VERSION = 2
STATUSES = list(Status)
STATUS_NAMES = [s.value for s in STATUSES]
NANO = 1_000_000_000
"""Costs are kept as whole nano-dollars, so adding and taking away stays exact."""
ROW = 3
"""Ints per task in ``rows``: status index, cost in nano-dollars, tokens."""
LEAD = 64
"""How many of the journal's first bytes identify it."""
MAX_HEAD = 8 << 20
"""A longer first line is not read (the file is rebuilt)."""


@dataclass
class _Cache:
    journal: tuple[int, int]
    """(inode, byte position) of the journal that the rows include."""
    lead: bytes
    """The journal's first bytes then: a journal made anew on a reused inode differs."""
    folder: int
    """``.tasks/``'s mtime (ns) when they were last brought up to date."""
    ids: array[int] = field(default_factory=lambda: array("q"))
    """Task numbers, sorted."""
    rows: array[int] = field(default_factory=lambda: array("q"))
    waiting: dict[str, str] = field(default_factory=dict)

    def put(self, task_id: str, task: Task | None) -> None:
        """Make ``task_id``'s row what ``task`` adds (None: it is gone or unreadable)."""
        n = task_number(task_id)
        i = bisect.bisect_left(self.ids, n)
        here = i < len(self.ids) and self.ids[i] == n
        self.waiting.pop(task_id, None)
        if task is None:
            if here:
                del self.ids[i]
                del self.rows[ROW * i:ROW * i + ROW]
            return
        row = array("q", (STATUSES.index(task.status), round(task.usage.cost_usd * NANO),
                          task.usage.tokens))
        if here:
            self.rows[ROW * i:ROW * i + ROW] = row
        else:
            self.ids.insert(i, n)
            self.rows[ROW * i:ROW * i] = row
        if task.wait and task.status is not Status.IN_PROGRESS:
            self.waiting[task_id] = task.wait.text

    def summary(self) -> BoardSummary:
        statuses = self.rows[0::ROW]
        return BoardSummary(
            counts={s.value: statuses.count(i) for i, s in enumerate(STATUSES)},
            cost_usd=round(sum(self.rows[1::ROW]) / NANO, 6),
            tokens=sum(self.rows[2::ROW]),
            waiting=sorted(self.waiting.items(), key=lambda kv: task_number(kv[0])))


def summarize(tasks_dir: Path, run_dir: Path, all_tasks: Callable[[], Iterable[Task]]
              ) -> BoardSummary:
    """The board's totals: from the summary file and the journal lines written since it,
    or (see the module docstring) rebuilt from ``all_tasks()``. The caller holds the
    summary's lock, so two readers never apply the same lines twice."""
    path = run_dir / FILE
    journal, lead = _journal_stat(tasks_dir)
    head = _head(path)
    if head is not None and head.journal[0] == journal[0] and head.journal[1] <= journal[1] \
            and lead.startswith(head.lead):
        lines, end = _read_lines(tasks_dir / JOURNAL, head.journal[1])
        if head.folder == _mtime(tasks_dir) and not lines:
            return head.totals  # nothing changed: the rows are not even read
        cache = _load(path) if lines else None
        if cache is not None:
            for task_id in dict.fromkeys(lines):
                cache.put(task_id, _read(tasks_dir / f"{task_id}.json"))
            cache.journal, cache.lead = (journal[0], end), lead
            cache.folder = _mtime(tasks_dir)
            return _save(path, cache)
    # no cache, a new journal, or a change that no journal line explains: every task
    cache = _Cache(journal=journal, lead=lead, folder=_mtime(tasks_dir))
    _fill(cache, all_tasks())
    return _save(path, cache)


def totals(tasks: Iterable[Task]) -> BoardSummary:
    """The totals of ``tasks``, counted afresh (no summary file)."""
    cache = _Cache(journal=(-1, 0), lead=b"", folder=0)
    _fill(cache, tasks)
    return cache.summary()


def _fill(cache: _Cache, tasks: Iterable[Task]) -> None:
    for task in sorted(tasks, key=lambda t: task_number(t.id)):
        cache.put(task.id, task)


def _journal_stat(tasks_dir: Path) -> tuple[tuple[int, int], bytes]:
    """The journal's (inode, size) and first bytes; it is made first when missing (as the
    index does), so that its first appearance is not taken for a rotation."""
    path = tasks_dir / JOURNAL
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644))
    try:
        with path.open("rb") as fh:
            st = os.fstat(fh.fileno())
            return (st.st_ino, st.st_size), fh.read(LEAD)
    except FileNotFoundError:
        return (-1, 0), b""


def _mtime(folder: Path) -> int:
    return folder.stat().st_mtime_ns


def _read_lines(path: Path, start: int) -> tuple[list[str], int]:
    """The task ids of the whole journal lines from ``start`` on, and where they end."""
    try:
        with path.open("rb") as fh:
            fh.seek(start)
            data = fh.read()
    except FileNotFoundError:
        return [], start
    end = data.rfind(b"\n") + 1  # a torn last line is read next time
    ids = [line.split(maxsplit=1)[0] for line in data[:end].decode(errors="replace").split("\n")
           if line.strip()]
    return [i for i in ids if TASK_ID_RE.match(i)], start + end


def _read(path: Path) -> Task | None:
    try:
        return read_task_file(path)[0]
    except (FileNotFoundError, ValueError):
        return None  # gone, or broken: not a task (as `list` has it)


@dataclass(frozen=True)
class _Head:
    """The summary file's first line: where its rows are up to, and their totals."""

    journal: tuple[int, int]
    lead: bytes
    folder: int
    n: int
    waiting: dict[str, str]
    totals: BoardSummary


def _head(path: Path) -> _Head | None:
    try:
        with path.open("rb") as fh:
            return _parse_head(fh.readline(MAX_HEAD))
    except OSError:
        return None


def _parse_head(line: bytes) -> _Head | None:
    try:
        head = json.loads(line)
        if head.get("version") != VERSION or head.get("statuses") != STATUS_NAMES:
            return None  # rows count statuses by their place in this list
        waiting = {str(k): str(v) for k, v in dict(head["waiting"]).items()}
        counts = {s.value: int(head["counts"][s.value]) for s in STATUSES}
        totals = BoardSummary(counts=counts, cost_usd=float(head["cost_usd"]),
                              tokens=int(head["tokens"]),
                              waiting=sorted(waiting.items(),
                                             key=lambda kv: task_number(kv[0])))
        return _Head((int(head["journal"][0]), int(head["journal"][1])),
                     bytes.fromhex(head["lead"]), int(head["folder"]), int(head["n"]), waiting,
                     totals)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def _load(path: Path) -> _Cache | None:
    try:
        with path.open("rb") as fh:
            head = _parse_head(fh.readline(MAX_HEAD))
            if head is None:
                return None
            ids, rows = array("q"), array("q")
            ids.frombytes(fh.read(head.n * ids.itemsize))
            rows.frombytes(fh.read(ROW * head.n * rows.itemsize))
    except (OSError, ValueError):
        return None
    if len(ids) != head.n or len(rows) != ROW * head.n:
        return None  # torn: rebuilt
    return _Cache(head.journal, head.lead, head.folder, ids, rows, dict(head.waiting))


def _save(path: Path, cache: _Cache) -> BoardSummary:
    """Write the cache (a failure costs speed only) and return its totals."""
    totals = cache.summary()
    head = json.dumps({"version": VERSION, "statuses": STATUS_NAMES, "n": len(cache.ids),
                       "journal": cache.journal, "lead": cache.lead[:cache.journal[1]].hex(),
                       "folder": cache.folder, "waiting": cache.waiting,
                       "counts": totals.counts, "cost_usd": totals.cost_usd,
                       "tokens": totals.tokens})
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, head.encode() + b"\n" + cache.ids.tobytes() + cache.rows.tobytes(),
                     durable=False)
    return totals
