"""The file board's audit log: ``events.jsonl`` in the worktree root, plus its index.

Each event is one JSON line ``{"seq", "ts", "event", "task", "actor", …fields}``.
Appends happen under ``events.jsonl.lock`` (``flock``): the writer reads the newest
seq from the index, writes its line with one ``write`` and then its index record, so
seq is strictly increasing in file order across every process. A writer killed
mid-line leaves a torn fragment; the next writer starts on a fresh line (the
fragment becomes one unreadable line that readers skip).

``events.jsonl.idx`` holds one fixed-width text record per complete line,
``seq start end task`` (``task``: the task's number + 1, 0 for none, `OTHER` for an
id that is not ``task_NNN``), after a header naming the log's inode. Readers find
``since`` by binary search and one task's lines with ``mmap.find`` over the index,
so neither scans the log. The index is a cache: missing, from another log (inode),
or longer than the log, it is rebuilt; behind the log (a writer killed between its
two writes, or lines appended by an older version) it is caught up.

``events.jsonl.keys`` is the index's task column: a header naming the log's inode, then
each record's task key in 4 bytes (little-endian, capped at `KEY_CAP`), so one task's
lines are found by searching 4 bytes a line instead of 61. Writers keep it in step
under the lock (an index rebuild starts it afresh); readers check each hit against its
index record, search the index past the key file's end, and ignore a key file whose
keys disagree with the index (the next writer rebuilds it). It is a cache of a cache:
anything wrong with it costs speed, never an event.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import re
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from orchestrator.board.flock import HeldLockFile
from orchestrator.clock import utcnow
from orchestrator.controlplane import Event
from orchestrator.events import redact

REC = "{:015d} {:015d} {:015d} {:012d}\n"
BREC = b"%015d %015d %015d %012d\n"
W = len(REC.format(0, 0, 0, 0))
"""Bytes per index record (and of the header)."""
MAGIC = "EVIDX1"
OTHER = 999_999_999_999
TASK_RE = re.compile(rb'"task": (?:null|"task_(\d{3,})")')
SEQ_RE = re.compile(rb'^\{"seq": (\d+),')
OURS_RE = re.compile(rb'(?m)^\{"seq": (\d+), "ts": "[^"\\\n]*", "event": "(?:[^"\\\n]|\\.)*", '
                     rb'"task": (null|"task_\d{3,}")[^\n]*\}\n')
"""A whole line as this module writes it (seq, ts, event, then task): indexed without
parsing its JSON. Any other line takes the slow path."""
KEYS_MAGIC = b"EVKEYS1\n"
KW = 4
"""Bytes per record of the key file: the task key, little-endian, capped at `KEY_CAP`."""
KEY_CAP = 0xFFFF_FFFF
"""Keys this large or larger (odd ids, numbers past 4 billion) share one value in the key
file; the index record of each such candidate says which it is."""
KEYS_HEAD = len(KEYS_MAGIC) + 8
KEY_FIELD_RE = re.compile(rb" (\d{12})\n")
"""The task field of an index record (its last: one a record)."""
"""The key file's header: its magic, then the log's inode (little-endian)."""
CHUNK = 8 << 20
LOCK_TIMEOUT = 10.0
Buf = bytes | mmap.mmap


def task_key(task: str | None) -> int:
    if task is None:
        return 0
    if task.startswith("task_") and task[5:].isdigit() and len(task) >= 8:
        n = int(task[5:])
        if f"task_{n:03d}" == task:
            return n + 1
    return OTHER


def parse_line(raw: bytes) -> dict[str, Any] | None:
    raw = raw.strip()
    if not raw:
        return None
    try:
        rec = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


class EventLog:
    """Implements `orchestrator.controlplane.Events` on ``events.jsonl``."""

    def __init__(self, path: Path, actor: str = "cli", secrets: list[str] | None = None) -> None:
        self.path = path
        self.actor = actor
        self.secrets = secrets
        """Values to mask, fixed at start-up (hot writers); None re-reads the environment."""
        self.index_path = path.with_name(path.name + ".idx")
        self.keys_path = path.with_name(path.name + ".keys")
        self.lock_path = path.with_name(path.name + ".lock")
        self._tlock = threading.Lock()
        self._held: tuple[int, HeldLockFile, int, int] | None = None
        """(thread, lock, log fd, index fd) kept open by `hold`."""
        self._held_ino = -1
        """The inode of the log ``_held`` has open."""
        self._held_keys = -1
        """The key file ``_held`` has open (-1: none)."""
        self._tail: tuple[int, int, int, int] | None = None
        """After a held append: (index size, its newest seq, its end in the log, the log's
        size); while both files still have these sizes, nobody wrote since, and the next
        held append need not read the index's last record back."""

    # --- writing -----------------------------------------------------------------
    def emit(self, event: str, task: str | None = None, actor: str | None = None,
             **fields: Any) -> Event:
        [body] = self._emit([(event, task, fields)], actor)
        return Event.from_dict(json.loads(body))

    def emit_many(self, events: Sequence[tuple[str, str | None, dict[str, Any]]],
                  actor: str | None = None) -> None:
        """Append ``events`` (each ``(event, task, fields)``, as `emit` takes them) with
        consecutive seqs, in one write under one lock: a batch of new tasks logs its
        ``task_created`` events at the cost of one."""
        if events:
            self._emit(events, actor)

    def _emit(self, events: Sequence[tuple[str, str | None, dict[str, Any]]],
              actor: str | None) -> list[bytes]:
        ts = utcnow()
        records: list[tuple[dict[str, Any], str | None]] = []
        for event, task, fields in events:
            record: dict[str, Any] = {"seq": 0, "ts": ts, "event": event, "task": task,
                                      "actor": actor or self.actor}
            for k, v in fields.items():
                if k not in record:
                    record[k] = v
            records.append((record, task))
        try:
            return self._append(records)
        except FileNotFoundError:  # the folder is not there (yet)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return self._append(records)

    def _append(self, records: list[tuple[dict[str, Any], str | None]]) -> list[bytes]:
        """Write ``records`` with the next seqs, and their index records (under the lock)."""
        held = self._held
        if held is not None and held[0] == threading.get_ident():
            return self._append_held(records)
        with self._locked():
            log_fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                idx_fd = self._open_index(log_fd)
                try:
                    return self._write_records(log_fd, idx_fd, records)
                finally:
                    os.close(idx_fd)
            finally:
                os.close(log_fd)

    def _write_records(self, log_fd: int, idx_fd: int,
                       records: list[tuple[dict[str, Any], str | None]], *,
                       held: bool = False) -> list[bytes]:
        known = self._tail if held else None
        last, end, size, idx_size = self._catch_up(log_fd, idx_fd, known)
        in_step = known is not None and known[0] == idx_size  # no record since ours
        self._tail = None
        bodies: list[bytes] = []
        index: list[bytes] = []
        keys: list[bytes] = []
        start = size + (size > end)  # after a torn fragment: a newline, then afresh
        for seq, (record, task) in enumerate(records, last + 1):
            record["seq"] = seq
            body = redact(json.dumps(record, default=str, ensure_ascii=False),
                          self.secrets).encode() + b"\n"
            key = task_key(task)
            index.append(REC.format(seq, start, start + len(body), key).encode())
            keys.append(_packed(key))
            bodies.append(body)
            start += len(body)
        os.write(log_fd, (b"\n" if size > end else b"") + b"".join(bodies))
        os.write(idx_fd, b"".join(index))
        with contextlib.suppress(OSError):  # a cache: its readers fall back on the index
            if held and self._held_keys >= 0 and in_step:
                os.write(self._held_keys, b"".join(keys))
            else:
                self._sync_keys(log_fd, idx_fd, self._held_keys if held else -1)
            if held:  # under the lock, nobody else wrote any of the files meanwhile
                self._tail = (idx_size + W * len(records), last + len(records), start, start)
        return bodies

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """This thread's appends inside reuse one set of open files (the lock is still
        taken per append): a burst of events without three ``open`` calls each."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = HeldLockFile(self.lock_path)
        fds: list[int] = []
        try:
            with lock.locked(LOCK_TIMEOUT):
                fds.append(os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644))
                fds.append(self._open_index(fds[0]))
                with contextlib.suppress(OSError):
                    fds.append(self._open_keys())
            self._held_ino = os.fstat(fds[0]).st_ino
            self._held_keys = fds[2] if len(fds) > 2 else -1
            self._tail = None
            self._held = (threading.get_ident(), lock, fds[0], fds[1])
            yield
        finally:
            self._held = None
            self._held_keys = -1
            self._tail = None
            for fd in fds:
                os.close(fd)
            lock.close()

    def _append_held(self, records: list[tuple[dict[str, Any], str | None]]
                     ) -> list[bytes]:
        assert self._held is not None
        _, lock, log_fd, idx_fd = self._held
        with self._tlock, lock.locked(LOCK_TIMEOUT):
            try:
                ino = os.stat(self.path).st_ino
            except FileNotFoundError:
                ino = -1
            if ino != self._held_ino:  # removed or replaced meanwhile
                self._tail = None
                fresh = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
                os.dup2(fresh, log_fd)
                os.close(fresh)
                self._held_ino = os.fstat(log_fd).st_ino
                fresh = self._open_index(log_fd)
                os.dup2(fresh, idx_fd)
                os.close(fresh)
                if self._held_keys >= 0:
                    with contextlib.suppress(OSError):
                        fresh = self._open_keys()
                        os.dup2(fresh, self._held_keys)
                        os.close(fresh)
            return self._write_records(log_fd, idx_fd, records, held=True)

    # --- reading -----------------------------------------------------------------
    def read(self, *, since: int = 0, task: str | None = None) -> Iterator[Event]:
        for _, rec in self._read(since, task):
            yield Event.from_dict(rec)

    def follow(self, *, since: int = 0, task: str | None = None,
               stop: threading.Event | None = None, poll: float = 0.2) -> Iterator[Event]:
        pos = since
        while stop is None or not stop.is_set():
            got = False
            for seq, rec in self._read(pos, task):
                got = True
                pos = max(pos, seq)
                yield Event.from_dict(rec)
            if not got:
                if stop is not None:
                    stop.wait(poll)
                else:
                    time.sleep(poll)

    def tail(self, n: int, *, task: str | None = None) -> list[Event]:
        if n <= 0:
            return []
        with self._index_map(keys=task is not None) as view:
            if view is None:
                return [Event.from_dict(r) for _, r in list(self._scan(0, task))[-n:]]
            log, idx, keys = view
            count = _count(idx)
            records = (range(count - 1, max(count - n, 0) - 1, -1) if task is None
                       else self._task_records(idx, keys, task, reverse=True))
            out = []
            for i in records:  # newest first; an odd id's records include other odd ids
                start, end = _span(idx, i)
                rec = parse_line(log[start:end])
                if rec is not None and (task is None or rec.get("task") == task):
                    out.append(Event.from_dict(rec))
                    if len(out) >= n:
                        break
            out.reverse()
            return out

    def last_seq(self) -> int:
        with self._index_map() as view:
            if view is None:
                return max((s for s, _ in self._scan(0, None)), default=0)
            idx = view[1]
            count = _count(idx)
            return _seq_at(idx, count - 1) if count else 0

    # --- internals ---------------------------------------------------------------
    def _read(self, since: int, task: str | None) -> Iterator[tuple[int, dict[str, Any]]]:
        with self._index_map(keys=task is not None) as view:
            if view is None:
                yield from self._scan(since, task)
                return
            log, idx, keys = view
            count = _count(idx)
            if task is None:
                lo, hi = 0, count if since else 0
                while lo < hi:  # the first record with seq > since
                    mid = (lo + hi) // 2
                    if _seq_at(idx, mid) <= since:
                        lo = mid + 1
                    else:
                        hi = mid
                if lo >= count:
                    return
                start = _span(idx, lo)[0]
                end = _span(idx, count - 1)[1]
                for raw in log[start:end].split(b"\n"):
                    rec = parse_line(raw)
                    if rec is not None:
                        seq = _rec_seq(rec)
                        if seq > since or (since == 0 and seq == 0):
                            yield seq, rec
                return
            for i in self._task_records(idx, keys, task):
                if _seq_at(idx, i) <= since and since:
                    continue
                start, end = _span(idx, i)
                rec = parse_line(log[start:end])
                if rec is not None and rec.get("task") == task:
                    yield _rec_seq(rec), rec

    def _task_records(self, idx: Buf, keys: Buf, task: str, *, reverse: bool = False
                      ) -> Iterator[int]:
        """Record numbers of ``task``'s lines (for an odd id: of every odd-id line):
        found in the key file (4 bytes a record, not the index's 61) as far as it goes,
        each candidate checked against its index record; past it, in the index."""
        key = task_key(task)
        needle = b" %012d\n" % key
        known = min(max(0, (len(keys) - KEYS_HEAD) // KW), _count(idx))
        if known and not all(keys[KEYS_HEAD + i * KW: KEYS_HEAD + (i + 1) * KW]
                             == _packed(int(idx[W + i * W + 48: W + i * W + 60]))
                             for i in {0, known // 2, known - 1}):
            known = 0  # not this index's keys (copied, or left by an older version)
        packed = _packed(key)

        def ours(i: int) -> bool:
            return idx[W + i * W + 47: W + (i + 1) * W] == needle

        if reverse:
            yield from _index_hits(idx, needle, known, reverse=True)
            end = KEYS_HEAD + known * KW
            while True:
                pos = keys.rfind(packed, KEYS_HEAD, end)
                if pos < 0:
                    return
                end = pos + KW - 1
                i, rem = divmod(pos - KEYS_HEAD, KW)
                if not rem and ours(i):
                    yield i
        else:
            pos, end = KEYS_HEAD, KEYS_HEAD + known * KW
            while known:
                pos = keys.find(packed, pos, end)
                if pos < 0:
                    break
                i, rem = divmod(pos - KEYS_HEAD, KW)
                pos += 1
                if not rem and ours(i):
                    yield i
            yield from _index_hits(idx, needle, known)

    def _scan(self, since: int, task: str | None) -> Iterator[tuple[int, dict[str, Any]]]:
        """Every complete line, without the index (it could not be written)."""
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            return
        with fh:
            for raw in fh:
                if not raw.endswith(b"\n"):
                    return
                rec = parse_line(raw)
                if rec is None or (task is not None and rec.get("task") != task):
                    continue
                seq = _rec_seq(rec)
                if seq > since or since == 0:
                    yield seq, rec

    @contextlib.contextmanager
    def _index_map(self, *, keys: bool = False) -> Iterator[tuple[Buf, Buf, Buf] | None]:
        """The log, its (caught up) index and (with ``keys``) the key file when it is this
        log's, mapped (b"" for none); None when the log cannot be indexed (a read-only
        folder) and the caller must scan. Empty logs map to b""."""
        try:
            log_fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            yield _EMPTY
            return
        try:
            try:
                idx_fd = self._fresh_index(log_fd)
            except OSError:
                yield None
                return
            try:
                idx_size = os.fstat(idx_fd).st_size
                end = _span_end(idx_fd, idx_size)
                idx_size -= (idx_size - W) % W if idx_size > W else 0
                if end == 0 or idx_size <= W:
                    yield _EMPTY
                    return
                with mmap.mmap(log_fd, end, access=mmap.ACCESS_READ) as log, \
                        mmap.mmap(idx_fd, idx_size, access=mmap.ACCESS_READ) as idx, \
                        self._keys_map(log_fd) if keys else contextlib.nullcontext(b"") as kv:
                    yield log, idx, kv
            finally:
                os.close(idx_fd)
        finally:
            os.close(log_fd)

    @contextlib.contextmanager
    def _keys_map(self, log_fd: int) -> Iterator[Buf]:
        """The key file mapped, when it is there and this log's (else b"")."""
        try:
            fd = os.open(self.keys_path, os.O_RDONLY)
        except OSError:
            yield b""
            return
        try:
            size = os.fstat(fd).st_size
            size -= (size - KEYS_HEAD) % KW if size > KEYS_HEAD else 0
            if size <= KEYS_HEAD or os.pread(fd, KEYS_HEAD, 0) != _keys_head(
                    os.fstat(log_fd).st_ino):
                yield b""
                return
            with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as view:
                yield view
        finally:
            os.close(fd)

    def _fresh_index(self, log_fd: int) -> int:
        """An fd of the index, caught up with the log (taking the lock only when it lags)."""
        try:
            idx_fd = os.open(self.index_path, os.O_RDONLY)
        except FileNotFoundError:
            idx_fd = -1
        if idx_fd >= 0:
            st = os.fstat(log_fd)
            size = os.fstat(idx_fd).st_size
            if _header_ok(idx_fd, st.st_ino) and size >= W and (size - W) % W == 0 \
                    and _span_end(idx_fd, size) == st.st_size:
                return idx_fd
            os.close(idx_fd)
        with self._locked():
            idx_fd = self._open_index(log_fd)
            try:
                self._catch_up(log_fd, idx_fd)
                with contextlib.suppress(OSError):  # a cache: readers do without it
                    self._sync_keys(log_fd, idx_fd)
            except BaseException:
                os.close(idx_fd)
                raise
            return idx_fd

    def _open_index(self, log_fd: int) -> int:
        """Open the index for appending (under the lock), rebuilding it when it belongs to
        another log or runs past this one's end."""
        st = os.fstat(log_fd)
        fd = os.open(self.index_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        if size >= W and _header_ok(fd, st.st_ino) and _span_end(fd, size) <= st.st_size:
            if (size - W) % W:
                os.ftruncate(fd, size - (size - W) % W)  # a torn record
            return fd
        os.ftruncate(fd, 0)
        os.write(fd, f"{MAGIC:<15} {st.st_ino:015d} {0:015d} {0:012d}\n".encode())
        with contextlib.suppress(OSError):  # its keys were the old index's
            os.truncate(self.keys_path, 0)
        return fd

    def _open_keys(self) -> int:
        return os.open(self.keys_path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)

    def _sync_keys(self, log_fd: int, idx_fd: int, keys_fd: int = -1) -> None:
        """Make the key file hold one key for each index record (under the lock):
        started afresh when it is another log's, cut back when it runs past the index
        (a torn record trimmed), the missing keys read from the index."""
        own = keys_fd < 0
        if own:
            keys_fd = self._open_keys()
        try:
            head = _keys_head(os.fstat(log_fd).st_ino)
            count = max(0, (os.fstat(idx_fd).st_size - W) // W)
            size = os.fstat(keys_fd).st_size
            have = (size - KEYS_HEAD) // KW if size >= KEYS_HEAD \
                and os.pread(keys_fd, KEYS_HEAD, 0) == head else -1
            if have > count or (size - KEYS_HEAD) % KW:
                have = min(have, count)
                os.ftruncate(keys_fd, KEYS_HEAD + have * KW)
            if have > 0 and not all(
                    os.pread(keys_fd, KW, KEYS_HEAD + i * KW)
                    == _packed(int(os.pread(idx_fd, W, W + i * W)[48:60]))
                    for i in {0, have - 1}):
                have = -1  # not this index's keys (copied, or left by an older version)
            if have < 0:
                os.ftruncate(keys_fd, 0)
                os.write(keys_fd, head)
                have = 0
            while have < count:
                data = os.pread(idx_fd, min(count - have, CHUNK // W) * W, W + have * W)
                n = len(data) // W
                if not n:
                    return
                data = data[:n * W]
                found = [min(int(k), KEY_CAP) for k in KEY_FIELD_RE.findall(data)]
                if len(found) != n:  # not our records: readers scan the index instead
                    return
                os.write(keys_fd, struct.pack(f"<{n}I", *found))
                have += n
        finally:
            if own:
                os.close(keys_fd)

    def _catch_up(self, log_fd: int, idx_fd: int, known: tuple[int, int, int, int] | None = None
                  ) -> tuple[int, int, int, int]:
        """Index the log's complete lines past the index's end (under the lock).
        Returns (newest seq, end of the last indexed line, the log's size, the index's
        size). ``known``: `_tail` of this process's last append, used when both sizes
        still match it."""
        size = os.fstat(log_fd).st_size
        idx_size = os.fstat(idx_fd).st_size
        if known is not None and known[0] == idx_size and known[3] == size:
            return known[1], known[2], size, idx_size
        count = (idx_size - W) // W
        last = 0
        end = 0
        if count:
            rec = os.pread(idx_fd, W, W + (count - 1) * W).split()
            last, end = int(rec[0]), int(rec[2])
        if end >= size:
            return last, end, size, idx_size
        out: list[bytes] = []
        keys: dict[bytes, int] = {}

        def slow(lines: bytes, base: int) -> None:
            """Lines not in our own form (older, hand-written, torn): parsed one by one."""
            nonlocal last
            pos = base
            for raw in lines.splitlines(keepends=True):
                start, pos = pos, pos + len(raw)
                parsed = parse_line(raw) if raw.strip() else None
                if parsed is None:  # empty, torn or foreign: readers skip it
                    continue
                last = max(last, _rec_seq(parsed))
                t = TASK_RE.search(raw)
                if t is None:  # an id that is no task_NNN (written by hand), or no task
                    key = task_key(_task_of(raw))
                else:
                    key = task_key("task_" + t.group(1).decode()) if t.group(1) else 0
                out.append(REC.format(last, start, pos, key).encode())

        while end < size:
            want = CHUNK
            while True:  # whole lines only: a line longer than a chunk reads a bigger one
                chunk = os.pread(log_fd, min(want, size - end), end)
                cut = chunk.rfind(b"\n") + 1
                if cut or end + len(chunk) >= size:
                    break
                want *= 2
            if not cut:
                break  # a torn last line: indexed once a writer ends it
            chunk = chunk[:cut]
            cur = 0
            for m in OURS_RE.finditer(chunk):
                start, stop = m.span()
                if start != cur:
                    slow(chunk[cur:start], end + cur)
                seq, task = m.groups()
                seq_n = int(seq)
                if seq_n > last:
                    last = seq_n
                key = keys.get(task)
                if key is None:
                    key = keys[task] = 0 if task == b"null" else task_key(task[1:-1].decode())
                out.append(BREC % (last, end + start, end + stop, key))
                cur = stop
            if cur != len(chunk):
                slow(chunk[cur:], end + cur)
            if out:
                idx_size += os.write(idx_fd, b"".join(out))
                out.clear()
            end += len(chunk)
        return last, end, size, idx_size

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        from orchestrator.board.flock import flocked

        with self._tlock, flocked(self.lock_path, LOCK_TIMEOUT):
            yield


_EMPTY: tuple[bytes, bytes, bytes] = (b"", b"", b"")
"""The view of an empty log: no records."""


def _packed(key: int) -> bytes:
    """A task key as the key file holds it."""
    return min(key, KEY_CAP).to_bytes(KW, "little")


def _keys_head(ino: int) -> bytes:
    return KEYS_MAGIC + ino.to_bytes(8, "little")


def _index_hits(idx: Buf, needle: bytes, first: int, *, reverse: bool = False
                ) -> Iterator[int]:
    """Numbers of the index records from ``first`` on whose task field is ``needle``."""
    low = W + first * W
    if reverse:
        pos = len(idx)
        while True:
            pos = idx.rfind(needle, low, pos)
            if pos < 0:
                return
            i, rem = divmod(pos + len(needle) - W, W)
            if rem == 0:
                yield i - 1
    else:
        pos = low
        while True:
            pos = idx.find(needle, pos)
            if pos < 0:
                return
            pos += len(needle)
            i, rem = divmod(pos - W, W)
            if rem == 0:
                yield i - 1


def _count(idx: Buf) -> int:
    return max(0, (len(idx) - W) // W)


def _task_of(raw: bytes) -> str | None:
    rec = parse_line(raw)
    task = rec.get("task") if rec is not None else None
    return None if task is None else str(task)


def _rec_seq(rec: dict[str, Any]) -> int:
    seq = rec.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else 0


def _header_ok(fd: int, ino: int) -> bool:
    head = os.pread(fd, W, 0).split()
    return len(head) == 4 and head[0] == MAGIC.encode() and head[1] == b"%015d" % ino


def _span_end(fd: int, size: int) -> int:
    """The log offset the index covers (the end of its last record's line)."""
    count = (size - W) // W if size > W else 0
    if not count:
        return 0
    return int(os.pread(fd, W, W + (count - 1) * W).split()[2])


def _seq_at(idx: Buf, i: int) -> int:
    return int(idx[W + i * W: W + i * W + 15])


def _span(idx: Buf, i: int) -> tuple[int, int]:
    base = W + i * W
    return int(idx[base + 16: base + 31]), int(idx[base + 32: base + 47])
