"""The PostgreSQL board's events, mailboxes, task logs, teammate status, requests and ids.

Each implements its Protocol of `orchestrator.controlplane` over one table of
``0001_initial.sql``. Timestamps are the database's (``clock_timestamp()``), so rows
written on several machines sort by one clock.
"""

from __future__ import annotations

import builtins
import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.board.mailboxes import check_name
from orchestrator.board.pg.db import NO_WAIT, Database, Listener, jsonb
from orchestrator.board.tasklogs import check_log_name
from orchestrator.controlplane import (
    Answer,
    Event,
    LogRecord,
    Message,
    Request,
    RequestKind,
    TeammateState,
)
from orchestrator.errors import Conflict, InvalidInput, NotFound
from orchestrator.events import AnyEvent, fields_of, redact, secret_values
from orchestrator.fsutil import append_line
from orchestrator.model import format_task_id
from orchestrator.transcript import LogEntry, record

if TYPE_CHECKING:
    from orchestrator.board.pg.db import Cursor

PAGE = 1000


def iso(ts: object) -> str:
    """A database timestamp in the format of `orchestrator.clock.utcnow`."""
    if isinstance(ts, datetime):
        return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return "" if ts is None else str(ts)


def masked(fields: dict[str, Any], secrets: builtins.list[str]) -> dict[str, Any]:
    """``fields`` as JSON-able data with values that look like secrets masked."""
    text = json.dumps(fields, default=str, ensure_ascii=False)
    out: dict[str, Any] = json.loads(redact(text, secrets))
    return out


class PgEvents:
    """`Events` as rows. Appends take an advisory lock until their commit, so commit order
    is seq order: a reader that saw seq N never later finds a smaller one appear (how that
    stays fast: `orchestrator.board.pg.db`)."""

    def __init__(self, db: Database, actor: str, machine: str,
                 local_log: Path | None = None) -> None:
        self.db = db
        self.actor = actor
        self.machine = machine
        self.local_log = local_log
        """This machine's ``events.jsonl``: what happened here is written there too."""
        self.secrets = secret_values()

    def insert(self, cur: Cursor, kind: AnyEvent, task: str | None,
               actor: str | None) -> Event:
        """Append inside the caller's transaction (the change and its event commit together).
        Call it last in a transaction: the lock is held until the commit."""
        event, fields = fields_of(kind)
        data = masked(fields, self.secrets)
        cur.execute("INSERT INTO events (event, task, actor, machine, data) "
                    f"SELECT %s, %s, %s, %s, %s FROM (SELECT {self.db.ordered()}) l "
                    "RETURNING seq, ts",
                    (event, task, actor or self.actor, self.machine, jsonb(data)))
        row = cur.fetchone()
        assert row is not None
        return self.stored(row[0], row[1], event, task, actor, data)

    def stored(self, seq: object, ts: object, event: str, task: str | None,
               actor: str | None, data: dict[str, Any]) -> Event:
        """The `Event` of a row just inserted (also copied to this machine's
        ``events.jsonl`` once its transaction commits)."""
        ev = Event(seq=int(str(seq)), ts=iso(ts), event=event, task=task,
                   actor=actor or self.actor, fields={**data, "machine": self.machine})
        self.db.appended()
        self.db.after_commit(lambda: self._local(ev))
        return ev

    def _local(self, ev: Event) -> None:
        if self.local_log is None:
            return
        line = (json.dumps(ev.to_dict(), default=str, ensure_ascii=False) + "\n").encode()
        try:
            append_line(self.local_log, line)
        except FileNotFoundError:
            try:  # its folder is made on the first write that needs it, not on every one
                self.local_log.parent.mkdir(parents=True, exist_ok=True)
                append_line(self.local_log, line)
            except OSError:
                pass
        except OSError:
            pass  # the row is the record; the local copy is a convenience

    def emit(self, event: AnyEvent, task: str | None = None,
             actor: str | None = None) -> Event:
        return self.db.statement(lambda cur: self.insert(cur, event, task, actor), write=True)

    def read(self, *, since: int = 0, task: str | None = None) -> Iterator[Event]:
        last = since
        while True:
            def page(cur: Cursor, after: int = last) -> builtins.list[Event]:
                return _page(cur, after, task)

            rows = self.db.run(page)
            yield from rows
            if len(rows) < PAGE:
                return
            last = rows[-1].seq

    def follow(self, *, since: int = 0, task: str | None = None,
               stop: threading.Event | None = None, poll: float = 0.2) -> Iterator[Event]:
        listener = Listener(self.db.url, ["orch_events"])
        last = since
        try:
            while stop is None or not stop.is_set():
                for ev in self.read(since=last, task=task):
                    last = ev.seq
                    yield ev
                listener.wait(poll)
        finally:
            listener.close()

    def tail(self, n: int, *, task: str | None = None) -> builtins.list[Event]:
        def newest(cur: Cursor) -> builtins.list[Event]:
            cur.execute(f"SELECT {EVENT_COLS} FROM events WHERE (%(t)s::text IS NULL OR "
                        "task = %(t)s) ORDER BY seq DESC LIMIT %(n)s", {"t": task, "n": n})
            return [_event(r) for r in cur.fetchall()]

        return builtins.list(reversed(self.db.run(newest)))

    def last_seq(self) -> int:
        def last(cur: Cursor) -> int:
            cur.execute("SELECT coalesce(max(seq), 0) FROM events")
            row = cur.fetchone()
            return int(str(row[0])) if row else 0

        return self.db.run(last)


EVENT_COLS = "seq, ts, event, task, actor, machine, data"


def _page(cur: Cursor, since: int, task: str | None) -> builtins.list[Event]:
    cur.execute(f"SELECT {EVENT_COLS} FROM events WHERE seq > %(s)s AND "
                "(%(t)s::text IS NULL OR task = %(t)s) ORDER BY seq LIMIT %(n)s",
                {"s": since, "t": task, "n": PAGE})
    return [_event(r) for r in cur.fetchall()]


def _event(row: tuple[object, ...]) -> Event:
    seq, ts, event, task, actor, machine, data = row
    fields = dict(data) if isinstance(data, dict) else {}
    fields["machine"] = machine
    return Event(seq=int(str(seq)), ts=iso(ts), event=str(event),
                 task=None if task is None else str(task), actor=str(actor or ""),
                 fields=fields)


class PgMailboxes:
    """`Mailboxes` as rows; read positions per (mailbox, reader) in ``read_positions``.

    A mailbox is one machine's: each machine has its ``lead`` and its ``alice``, so the row's
    mailbox is ``<name>@<machine>``. What a lead, a teammate or a command sends reaches
    that name on the same machine; ``machine=`` sends to another one's (`down --all`)."""

    def __init__(self, db: Database, machine: str) -> None:
        self.db = db
        self.machine = machine
        self.secrets = secret_values()

    def _box(self, name: str, machine: str | None = None) -> str:
        return f"{check_name(name)}@{machine or self.machine}"

    def send(self, to: str, sender: str, body: str = "", *, kind: str = "message",
             machine: str | None = None, **fields: Any) -> Message:
        box = self._box(to, machine)
        msg_id = uuid.uuid4().hex[:12]
        data = masked({"from": sender, "kind": kind, "body": body, **fields}, self.secrets)

        def insert(cur: Cursor) -> Message:
            cur.execute("INSERT INTO messages (id, mailbox, data) VALUES (%s, %s, %s) "
                        "RETURNING n, ts", (msg_id, box, jsonb(data)))
            row = cur.fetchone()
            assert row is not None
            return _message(msg_id, to, row[1], data)

        return self.db.run(insert)

    def _select(self, name: str, after: int = 0) -> builtins.list[tuple[int, Message]]:
        box = self._box(name)

        def select(cur: Cursor) -> builtins.list[tuple[int, Message]]:
            cur.execute("SELECT n, id, ts, data FROM messages WHERE mailbox = %s AND n > %s "
                        "ORDER BY n", (box, after))
            return [(int(str(n)), _message(str(i), name, ts, d))
                    for n, i, ts, d in cur.fetchall()]

        return self.db.run(select)

    def read(self, name: str) -> builtins.list[Message]:
        return [m for _, m in self._select(name)]

    def find(self, name: str, **match: Any) -> builtins.list[Message]:
        return [m for m in self.read(name) if all(m.get(k) == v for k, v in match.items())]

    def unread(self, name: str, reader: str | None = None) -> builtins.list[Message]:
        reader = check_name(reader or name)
        box = self._box(name)

        def position(cur: Cursor) -> int:
            cur.execute("SELECT n FROM read_positions WHERE mailbox = %s AND reader = %s",
                        (box, reader))
            row = cur.fetchone()
            return int(str(row[0])) if row else 0

        return [m for _, m in self._select(name, self.db.run(position))]

    def ack(self, name: str, message_id: str, reader: str | None = None) -> None:
        reader = check_name(reader or name)
        box = self._box(name)

        def move(cur: Cursor) -> None:
            cur.execute("SELECT n FROM messages WHERE mailbox = %s AND id = %s",
                        (box, message_id))
            row = cur.fetchone()
            if row is None:
                raise NotFound(f"no message {message_id} in mailbox {name}")
            cur.execute("INSERT INTO read_positions (mailbox, reader, n) VALUES (%s, %s, %s) "
                        "ON CONFLICT (mailbox, reader) DO UPDATE SET "
                        "n = greatest(read_positions.n, excluded.n)", (box, reader, row[0]))

        self.db.run(move)


def _message(msg_id: str, to: str, ts: object, data: object) -> Message:
    d = dict(data) if isinstance(data, dict) else {}
    return Message.from_dict({**d, "id": msg_id, "ts": iso(ts), "to": to})


class PgLogWriter:
    def __init__(self, logs: PgTaskLogs, name: str, actor: str | None) -> None:
        self.logs = logs
        self.name = name
        self.actor = actor

    def write(self, entry: LogEntry) -> None:
        self.logs.insert(self.name, entry, self.actor)


class PgTaskLogs:
    """`TaskLogs` as rows of ``task_logs`` (the log name in column ``task``)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.secrets = secret_values()

    def writer(self, name: str, actor: str | None = None) -> PgLogWriter:
        return PgLogWriter(self, check_log_name(name), actor)

    def append(self, name: str, entry: LogEntry, /, *, actor: str | None = None) -> None:
        self.insert(name, entry, actor)

    def insert(self, name: str, entry: LogEntry, actor: str | None) -> None:
        check_log_name(name)
        data = jsonb(masked(record(entry, actor), self.secrets))
        self.db.hint(lambda cur: cur.execute(
            f"INSERT INTO task_logs (task, data) SELECT %s, %s FROM {NO_WAIT}", (name, data)),
            repeatable=False)

    def _after(self, name: str, after: int) -> builtins.list[tuple[int, LogRecord]]:
        def select(cur: Cursor) -> builtins.list[tuple[int, LogRecord]]:
            cur.execute("SELECT n, ts, data FROM task_logs WHERE task = %s AND n > %s "
                        "ORDER BY n LIMIT %s", (name, after, PAGE))
            return [(int(str(n)), LogRecord.from_dict({**(d if isinstance(d, dict) else {}),
                                                       "ts": iso(ts)}))
                    for n, ts, d in cur.fetchall()]

        return self.db.run(select)

    def read(self, name: str) -> Iterator[LogRecord]:
        last = 0
        while True:
            rows = self._after(name, last)
            for n, rec in rows:
                last = n
                yield rec
            if len(rows) < PAGE:
                return

    def follow(self, name: str, *, stop: threading.Event | None = None,
               poll: float = 0.2) -> Iterator[LogRecord]:
        listener = Listener(self.db.url, ["orch_task_logs"])
        last = 0
        try:
            while stop is None or not stop.is_set():
                rows = self._after(name, last)
                for n, rec in rows:
                    last = n
                    yield rec
                if len(rows) < PAGE:
                    listener.wait(poll)
        finally:
            listener.close()

    def exists(self, name: str) -> bool:
        def found(cur: Cursor) -> bool:
            cur.execute("SELECT 1 FROM task_logs WHERE task = %s LIMIT 1", (name,))
            return cur.fetchone() is not None

        return self.db.run(found)

    def names(self, prefix: str) -> builtins.list[str]:
        like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"

        def select(cur: Cursor) -> builtins.list[str]:
            cur.execute("SELECT DISTINCT task FROM task_logs WHERE task LIKE %s ORDER BY 1",
                        (like,))
            return [str(r[0]) for r in cur.fetchall()]

        return self.db.run(select)


class PgTeamStatus:
    """`TeamStatus` as one row per (machine, teammate); the heartbeat is the database's
    clock. `all` lists every machine's teammates, each with its host."""

    def __init__(self, db: Database, machine: str, host: str) -> None:
        self.db = db
        self.machine = machine
        self.host = host

    def publish(self, name: str, state: str, **fields: Any) -> TeammateState:
        check_name(name)
        data = {k: v for k, v in fields.items() if v is not None}
        data.pop("host", None)
        pid = data.get("pid")
        task = data.get("task")

        def upsert(cur: Cursor) -> TeammateState:
            cur.execute(
                "INSERT INTO teammates (machine, name, host, pid, task, heartbeat, data) "
                "SELECT %(m)s, %(n)s, %(h)s, %(p)s, %(t)s, clock_timestamp(), %(d)s "
                f"FROM {NO_WAIT} "
                "ON CONFLICT (machine, name) DO UPDATE SET host = excluded.host, "
                "pid = excluded.pid, task = excluded.task, heartbeat = excluded.heartbeat, "
                f"data = excluded.data RETURNING {TEAM_COLS}",
                {"m": self.machine, "n": name, "h": self.host, "p": pid, "t": task,
                 "d": jsonb({**data, "state": state})})
            row = cur.fetchone()
            assert row is not None
            return _state(row)

        return self.db.hint(upsert, repeatable=True)  # a hint for `status`, as on files

    def get(self, name: str) -> TeammateState | None:
        def select(cur: Cursor) -> TeammateState | None:
            cur.execute(f"SELECT {TEAM_COLS} FROM teammates WHERE name = %s "
                        "ORDER BY machine = %s DESC, heartbeat DESC LIMIT 1",
                        (name, self.machine))
            row = cur.fetchone()
            return None if row is None else _state(row)

        return self.db.run(select)

    def all(self) -> builtins.list[TeammateState]:
        def select(cur: Cursor) -> builtins.list[TeammateState]:
            cur.execute(f"SELECT {TEAM_COLS} FROM teammates ORDER BY name, machine")
            return [_state(r) for r in cur.fetchall()]

        return self.db.run(select)

    def remove(self, name: str) -> None:
        self.db.run(lambda cur: cur.execute(
            "DELETE FROM teammates WHERE machine = %s AND name = %s", (self.machine, name)))


TEAM_COLS = "name, machine, pid, task, heartbeat, data"
"""``host`` of a `TeammateState` is the machine's name (host name and clone by default), so
two clones on one host stay apart."""


def _state(row: tuple[object, ...]) -> TeammateState:
    name, host, pid, task, beat, data = row
    d = dict(data) if isinstance(data, dict) else {}
    return TeammateState.from_dict({**d, "name": name, "host": host, "pid": pid, "task": task,
                                    "updated_at": iso(beat)})


class PgRequests:
    """`Requests` as rows; an answer is written at most once (``answer IS NULL`` guard)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def ask(self, kind: RequestKind, *, request_id: str, sender: str, task: str | None,
            body: str, **fields: Any) -> Request:
        if kind not in ("permission", "plan"):
            raise InvalidInput(f"not a request kind: {kind!r}")
        data = {"from": sender, "body": body, **fields}

        def insert(cur: Cursor) -> Request:
            cur.execute("INSERT INTO requests (id, kind, task, data) VALUES (%s, %s, %s, %s) "
                        f"ON CONFLICT (id) DO NOTHING RETURNING {REQ_COLS}",
                        (request_id, kind, task, jsonb(data)))
            row = cur.fetchone()
            if row is None:
                raise InvalidInput(f"request {request_id} exists already")
            return _request(row)

        return self.db.run(insert)

    def pending(self) -> builtins.list[Request]:
        def select(cur: Cursor) -> builtins.list[Request]:
            cur.execute(f"SELECT {REQ_COLS} FROM requests WHERE answer IS NULL "
                        "ORDER BY created_at, id")
            return [_request(r) for r in cur.fetchall()]

        return self.db.run(select)

    def answer(self, request_id: str, *, approved: bool, message: str = "",
               actor: str = "cli") -> Request:
        ans = {"approved": approved, "message": message, "by": actor}

        def update(cur: Cursor) -> Request:
            cur.execute("UPDATE requests SET answer = %s, answered_at = now() "
                        f"WHERE id = %s AND answer IS NULL RETURNING {REQ_COLS}",
                        (jsonb(ans), request_id))
            row = cur.fetchone()
            if row is None:
                raise NotFound(f"no pending request {request_id}")
            return _request(row)

        import psycopg

        try:
            return self.db.run(update)
        except psycopg.errors.InsufficientPrivilege:
            raise Conflict("only a person answers a request, and this board's database role "
                           "is the team's: answer with a role that is a member of the "
                           "schema's owner (ORCH_BOARD_URL=postgresql://OWNER@HOST/DB "
                           "orchestrator approve …; docs/postgresql.md)") from None

    def answer_of(self, request_id: str) -> Answer | None:
        def select(cur: Cursor) -> Answer | None:
            cur.execute("SELECT answer FROM requests WHERE id = %s", (request_id,))
            row = cur.fetchone()
            if row is None or not isinstance(row[0], dict):
                return None
            a = row[0]
            return Answer(approved=bool(a.get("approved")), message=str(a.get("message", "")),
                          by=str(a.get("by", "")))

        return self.db.run(select)

    def wait(self, request_id: str, *, stop: threading.Event | None = None,
             timeout: float | None = None, poll: float = 0.25) -> Answer | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        listener = Listener(self.db.url, ["orch_requests"])
        try:
            while True:
                got = self.answer_of(request_id)
                if got is not None:
                    return got
                if stop is not None and stop.is_set():
                    return None
                left = poll if deadline is None else min(poll, deadline - time.monotonic())
                if left <= 0:
                    return None
                listener.wait(left)
        finally:
            listener.close()


REQ_COLS = "id, kind, task, data, created_at"


def _request(row: tuple[object, ...]) -> Request:
    rid, kind, task, data, created = row
    d = dict(data) if isinstance(data, dict) else {}
    sender = str(d.pop("from", ""))
    body = str(d.pop("body", ""))
    k: RequestKind = "plan" if kind == "plan" else "permission"
    return Request(id=str(rid), kind=k, task=None if task is None else str(task),
                   sender=sender, body=body, ts=iso(created), fields=d)


class PgIds:
    """`Ids` from the sequence ``task_ids`` (never hands out a number twice)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def next(self) -> str:
        def take(cur: Cursor) -> int:
            cur.execute("SELECT nextval('task_ids')")
            row = cur.fetchone()
            assert row is not None
            return int(str(row[0]))

        return format_task_id(self.db.run(take))

    def high_water(self) -> int:
        def read(cur: Cursor) -> int:
            cur.execute("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM task_ids")
            row = cur.fetchone()
            return int(str(row[0])) if row else 0

        return self.db.run(read)
