"""PgBoard: the control plane of a team across machines, in PostgreSQL.

A task is a row of ``tasks``: the columns the board decides on (status, priority,
blockers, owner, lease, fence, attempts) plus ``data`` (the rest of the `Task`). Every
change is one transaction that locks the row (``FOR UPDATE``), checks the transition and
the fencing token in Python with the same rules as the file board, writes the row back
and appends its event, so a change and its audit record commit together.

- **Claims** pick the first ready row in claim order with ``FOR UPDATE SKIP LOCKED``:
  concurrent claimers never wait on each other and never get the same task.
- **Leases** expire on the database's clock (``now()``), never a machine's.
- **Owners** are teammate names, which repeat across machines (each machine has its
  ``alice``), so a task also records the ``machine`` holding it and `requeue_owner`
  touches only this machine's.
- **Wake-ups**: `wait_for_ready` / `wait_for_change` sleep on ``LISTEN`` (see
  `orchestrator.board.pg.db.Listener`) and re-check the table after each hint.
"""

from __future__ import annotations

import builtins
import copy
import json
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from orchestrator.board import graph
from orchestrator.board.pg import schema
from orchestrator.board.pg.db import ANSWER, Database, Listener, jsonb
from orchestrator.board.pg.parts import (
    PgEvents,
    PgIds,
    PgMailboxes,
    PgRequests,
    PgTaskLogs,
    PgTeamStatus,
    iso,
    masked,
)
from orchestrator.board.settings import BoardSettings
from orchestrator.board.store import (
    PROTECTED,
    BoardClosed,
    _assign,
    _count_attempt,
    _move,
    check_limit,
)
from orchestrator.controlplane import BoardSummary
from orchestrator.errors import InvalidInput, LeaseLost, NotFound
from orchestrator.events import (
    UNSET,
    AnyEvent,
    LeaseExpired,
    TaskCancelled,
    TaskCompleted,
    TaskCreated,
    TaskEdited,
    TaskFailed,
    TaskReleased,
    TaskRequeued,
    TaskStatusSet,
    fields_of,
)
from orchestrator.layout import Layout
from orchestrator.model import (
    InvalidRecord,
    Lease,
    Status,
    Task,
    format_task_id,
    normalize_task_id,
    parse_task_id,
    task_number,
)
from orchestrator.record import convert, describe_error, to_dict
from orchestrator.waits import text_of

if TYPE_CHECKING:
    from orchestrator.board.pg.db import Cursor

COLUMNS = frozenset({"id", "status", "priority", "blocked_by", "owner", "fence", "lease",
                     "attempts", "created_at", "updated_at"})
"""Task fields kept in columns; the others live in ``data``."""
COLS = ("id, status, priority, blocked_by, owner, fence, lease_token, "
        "extract(epoch FROM lease_expires), lease_acquired, lease_renewed, attempts, data, "
        "created_at, updated_at")
SELECT = f"SELECT {COLS} FROM tasks"
_TS = "to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"
ROW_JSON = (
    "json_build_array(id, status, priority, blocked_by, owner, fence, lease_token, "
    f"extract(epoch FROM lease_expires), {_TS.format('lease_acquired')}, "
    f"{_TS.format('lease_renewed')}, attempts, data, {_TS.format('created_at')}, "
    f"{_TS.format('updated_at')})")
"""A row of ``tasks`` as a JSON array in the order of `COLS` (timestamps already in `iso`'s
form), for `_task`."""
_USAGE = "coalesce((data->'usage'->>'{}')::{}, 0)"
_WAIT = "coalesce(nullif(data->'wait', 'null'), to_jsonb(nullif(data->>'waiting_for', '')))"
"""A task's `orchestrator.waits` wait, or the string an old row held instead."""
SUMMARY = (
    "SELECT status, count(*), sum(" + _USAGE.format("cost_usd", "float8") + "), sum("
    + " + ".join(_USAGE.format(k, "bigint") for k in (
        "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"))
    + "), jsonb_object_agg(id, " + _WAIT + ") FILTER (WHERE status <> 'in_progress' "
    "AND " + _WAIT + " IS NOT NULL) FROM tasks GROUP BY status")
"""`Board.summary` in one statement: per status, its tasks, their spending, and (failed
ones) what each waits for."""

TASK_ID_SQL = "'task_' || CASE WHEN c.id < 100 THEN lpad(c.id::text, 3, '0') ELSE c.id::text END"
"""`format_task_id` in SQL, of the claimed row ``c``."""
READY = ("status = 'pending' AND (cardinality(t.blocked_by) = 0 OR NOT EXISTS (SELECT 1 FROM "
         "unnest(t.blocked_by) b LEFT JOIN tasks bt ON bt.id = b WHERE bt.status IS NULL "
         "OR bt.status NOT IN ('review', 'merged')))")
"""A pending task whose every blocker exists and is in review or merged (graph.is_ready);
one without blockers is that at once (no subquery to start for it: most are that)."""
CLOCK_CHECK_SECONDS = 60.0
"""How long `PgBoard.now` trusts the difference between the database's clock and ours."""
CHANGE_CHANNELS = ["orch_tasks", "orch_messages", "orch_requests"]
"""What `wait_for_change` wakes on: tasks, mail, permission/plan requests, and with
``events`` events too (a ``forge_webhook`` event alone wakes a lead with a forge thread,
which it pokes; a task appends ~6, so nobody else follows them). A teammate
(``running=False``) does not follow the claims and writes of running tasks either
(`_no_run_step`): each woke every teammate of the team, and a running one's heartbeat
read its task again."""


def machine_name(layout: Layout, config: BoardSettings) -> str:
    """This clone's name on the shared board: ``[board] machine``, else host:folder."""
    return config.machine or f"{os.uname().nodename}:{layout.root}"


class PgBoard:
    """Implements `orchestrator.controlplane.ControlPlane` on PostgreSQL."""

    def __init__(self, layout: Layout, config: BoardSettings, actor: str = "cli") -> None:
        if not config.url:
            raise InvalidInput("PgBoard needs [board] url")
        self.layout = layout
        self.config = config
        self.actor = actor
        self._rejected: builtins.list[Path] = []
        self.url = config.url
        self.machine = machine_name(layout, config)
        self.db = Database(config.url, schema.bounds(
            lock_wait=config.lock_wait_seconds, statement=config.statement_seconds,
            idle_in_transaction=config.idle_in_transaction_seconds))
        self.db.connection()  # fail here, with one line, when the database cannot be used
        self.events = PgEvents(self.db, actor, self.machine, layout.events)
        self.mailboxes = PgMailboxes(self.db, self.machine)
        self.logs = PgTaskLogs(self.db)
        self.team = PgTeamStatus(self.db, self.machine, os.uname().nodename)
        self.requests = PgRequests(self.db)
        self.ids = PgIds(self.db)
        self._listeners: dict[str, Listener] = {}
        """One per kind of wait: a teammate waits for changes in one thread (its waker's
        feed) and for ready tasks in another, and a connection serves one thread."""
        self._closed = False
        self._offset: tuple[float, float] | None = None
        """The database's clock minus this machine's, and when to read it again (`now`)."""
        self._claim_data: dict[str, tuple[dict[str, Any], str]] = {}
        """Each claimer's part of its ``task_claimed`` event, masked once, and as JSON."""

    def __enter__(self) -> PgBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed = True
        for listener in self._listeners.values():
            listener.close()
        self.db.close()

    def now(self) -> float:
        """The database's clock: this machine's plus their difference, read at most once a
        `CLOCK_CHECK_SECONDS` (one round trip), so a machine whose clock is off by minutes
        times its lease expiries and the ages it shows by the database's."""
        local = time.time()
        if self._offset is None or time.monotonic() >= self._offset[1]:
            def read(cur: Cursor) -> float:
                cur.execute("SELECT extract(epoch FROM clock_timestamp())")
                row = cur.fetchone()
                assert row is not None
                return float(str(row[0]))

            self._offset = (self.db.statement(read, write=False) - local,
                            time.monotonic() + CLOCK_CHECK_SECONDS)
        return local + self._offset[0]

    # --- reading -----------------------------------------------------------------
    def get(self, task_id: str) -> Task:
        n = parse_task_id(str(task_id))

        def select(cur: Cursor) -> Task:
            return _fetch(cur, n)

        return self.db.statement(select, write=False)

    def list(self, status: Status | Collection[Status] | None = None, *,
             after: str | None = None, limit: int | None = None) -> builtins.list[Task]:
        check_limit(limit)
        wanted = None if status is None else (
            [str(Status(status))] if isinstance(status, str) else [str(Status(s))
                                                                   for s in status])
        # only the conditions asked for, so each shape has its own plan (index on
        # (status, id) for a status, the primary key otherwise) and a page reads a page
        where = " AND ".join(w for w, on in (("status = ANY(%(w)s)", wanted is not None),
                                             ("id > %(a)s", after is not None)) if on)
        sql = (f"{SELECT}{' WHERE ' + where if where else ''} ORDER BY id"
               f"{' LIMIT %(n)s' if limit is not None else ''}")
        params = {"w": wanted, "a": None if after is None else parse_task_id(str(after)),
                  "n": limit}

        def select(cur: Cursor) -> builtins.list[Task]:
            cur.execute(sql, {k: v for k, v in params.items() if f"%({k})s" in sql})
            return [_task(r) for r in cur.fetchall()]

        return self.db.statement(select, write=False)

    def ready(self) -> builtins.list[Task]:
        def select(cur: Cursor) -> builtins.list[Task]:
            cur.execute(f"{SELECT} t WHERE {READY} ORDER BY priority DESC, id")
            return [_task(r) for r in cur.fetchall()]

        return self.db.run(select)

    def problem(self, task_id: str) -> str | None:
        return self.problems().get(task_id)

    def problems(self) -> dict[str, str]:
        """Only unfinished tasks that wait for others, and what they wait for, are read:
        the rest can have no problem (see `graph.find_problems`), and a board of a million
        tasks is mostly finished ones."""
        waiting = ("WITH w AS (SELECT id, blocked_by FROM tasks WHERE cardinality(blocked_by) > 0 "
                   "AND status NOT IN ('merged', 'discarded', 'cancelled')) ")
        among = " WHERE id IN (SELECT id FROM w UNION SELECT unnest(blocked_by) FROM w)"

        def select(cur: Cursor) -> dict[str, Task]:
            cur.execute(f"{waiting}{SELECT}{among}")
            return {t.id: t for t in map(_task, cur.fetchall())}

        return graph.find_problems(self.db.run(select))

    def summary(self) -> BoardSummary:
        """One aggregate over the rows, grouped by status."""
        def select(cur: Cursor) -> BoardSummary:
            cur.execute(SUMMARY)
            counts = dict.fromkeys((s.value for s in Status), 0)
            cost, tokens, waiting = 0.0, 0, []
            for status, n, spent, used, asks in cur.fetchall():
                counts[str(status)] = int(str(n))
                cost += float(str(spent))
                tokens += int(str(used))
                waiting += [(format_task_id(int(k)), text_of(v))
                            for k, v in (asks if isinstance(asks, dict) else {}).items()]
            return BoardSummary(counts=counts, cost_usd=round(cost, 6), tokens=tokens,
                                waiting=sorted(waiting, key=lambda w: task_number(w[0])))

        return self.db.run(select)

    # --- writing (people and the lead) ---------------------------------------------
    def add(self, subject: str, *, description: str = "", blocked_by: Collection[str] = (),
            priority: int = 0, actor: str = "cli", **fields: Any) -> Task:
        blockers = [normalize_task_id(str(b)) for b in blocked_by]
        return self.create(dict(fields, subject=subject, description=description,
                                blocked_by=blockers, priority=priority), actor=actor,
                           check_blockers=True)

    def create(self, fields: dict[str, Any], *, actor: str, task_id: str | None = None,
               source: str | None = None, check_blockers: bool = False) -> Task:
        """A new pending task with the next id (or ``task_id`` when free); the row and its
        ``task_created`` event commit together, so no claimer sees the task first."""
        fields.setdefault("max_attempts", self.config.max_attempts)
        bad = PROTECTED & fields.keys()
        if bad:
            raise InvalidInput(f"cannot set {', '.join(sorted(bad))} on a new task")
        try:
            draft = convert({**fields, "id": "task_000"}, Task)
        except InvalidRecord as exc:
            raise InvalidInput(f"invalid task: {describe_error(exc)}") from None

        blockers = [parse_task_id(b) for b in draft.blocked_by]
        if check_blockers and blockers:
            self._check_blockers(blockers)  # tasks are never deleted: it stays true
        created = TaskCreated(subject=draft.subject, source=source or UNSET)
        event, data = fields_of(created)
        data = masked(data, self.events.secrets)
        if task_id is None:
            return self._insert_new(draft, blockers, event, actor, data)
        n = parse_task_id(task_id)

        def insert(cur: Cursor) -> Task:
            cur.execute("SELECT setval('task_ids', greatest(%s, (SELECT CASE WHEN "
                        "is_called THEN last_value ELSE 0 END FROM task_ids)))", (n,))
            task = msgspec.structs.replace(draft, id=format_task_id(n))
            cur.execute("INSERT INTO tasks (id, status, priority, blocked_by, attempts, data) "
                        "VALUES (%s, 'pending', %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING "
                        "RETURNING created_at", (n, task.priority, blockers, task.attempts,
                                                 jsonb(_data(task))))
            row = cur.fetchone()
            if row is None:
                from orchestrator.errors import Conflict

                raise Conflict(f"duplicate id {task.id}: that task already exists")
            task = msgspec.structs.replace(task, created_at=iso(row[0]), updated_at=iso(row[0]))
            self.events.insert(cur, created, task.id, actor)
            return task

        return self.db.run(insert)

    def _insert_new(self, draft: Task, blockers: builtins.list[int], event: str, actor: str,
                    data: dict[str, Any]) -> Task:
        """The row with the next id and its event in one statement (one round trip)."""
        def insert(cur: Cursor) -> tuple[object, ...]:
            cur.execute(
                "WITH c AS (INSERT INTO tasks (id, status, priority, blocked_by, attempts, "
                "data) VALUES (nextval('task_ids'), 'pending', %(p)s, %(b)s, %(a)s, %(t)s) "
                "RETURNING id, created_at), "
                "e AS (INSERT INTO events (event, task, actor, machine, data) "
                f"SELECT %(e)s, {TASK_ID_SQL}, %(o)s, %(m)s, %(d)s FROM c "
                f"CROSS JOIN LATERAL (SELECT {self.db.ordered()}) l RETURNING seq, ts) "
                "SELECT c.id, c.created_at, e.seq, e.ts FROM c, e",
                {"p": draft.priority, "b": blockers, "a": draft.attempts,
                 "t": jsonb(_data(draft)), "e": event, "o": actor, "m": self.machine,
                 "d": jsonb(data)})
            row = cur.fetchone()
            assert row is not None
            self.events.stored(row[2], row[3], event, format_task_id(int(str(row[0]))), actor,
                               data)
            return row

        row = self.db.statement(insert, write=True)
        return msgspec.structs.replace(draft, id=format_task_id(int(str(row[0]))),
                                      created_at=iso(row[1]), updated_at=iso(row[1]))

    def _check_blockers(self, blockers: builtins.list[int]) -> None:
        def select(cur: Cursor) -> set[int]:
            cur.execute("SELECT id FROM tasks WHERE id = ANY(%s)", (blockers,))
            return {int(str(r[0])) for r in cur.fetchall()}

        have = self.db.statement(select, write=False)
        for b in blockers:
            if b not in have:
                raise NotFound(f"unknown blocker {format_task_id(b)}: no such task")

    def edit(self, task_id: str, *, actor: str, **fields: Any) -> Task:
        bad = PROTECTED & fields.keys()
        if bad:
            raise InvalidInput(f"edit cannot change {', '.join(sorted(bad))} "
                               "(use claim/complete/set_status)")
        return self._mutate(task_id, lambda t: _assign(t, fields),
                            lambda t, old: (TaskEdited(fields=sorted(fields)), actor))

    def set_status(self, task_id: str, status: Status, *, actor: str, **fields: Any) -> Task:
        status = Status(status)
        if status is Status.IN_PROGRESS:
            raise InvalidInput(f"{task_id}: only a claim starts a task (it issues the lease)")
        bad = PROTECTED & fields.keys()
        if bad:
            raise InvalidInput(f"set_status cannot change {', '.join(sorted(bad))}")

        def change(t: Task) -> None:
            _move(t, status)
            _assign(t, fields)

        return self._mutate(task_id, change, lambda t, old: (
            TaskStatusSet(from_=old.status, to=status), actor))

    def cancel(self, task_id: str, *, actor: str = "cli") -> Task:
        return self._mutate(task_id, lambda t: _move(t, Status.CANCELLED), lambda t, old: (
            TaskCancelled(previous=old.status), actor))

    def intake(self, *, repair: bool = True) -> builtins.list[Task]:
        """Files dropped into this clone's ``.tasks/inbox/`` become tasks on the shared board
        (a bad file goes to ``.tasks/rejected/`` with the reason, as on the file board)."""
        from orchestrator.board.intake import take_dropped

        self._rejected = []
        return take_dropped(self, self.actor, self._rejected)

    def rejected_drops(self) -> builtins.list[str]:
        from orchestrator.board.intake import rel_to

        return [rel_to(p, self.layout.root) for p in self._rejected]

    def settling(self) -> float | None:
        from orchestrator.board.intake import settling

        return settling(self.layout)

    # --- claims and leases -------------------------------------------------------------
    def claim(self, owner: str, *, lease_seconds: float | None = None,
              task_id: str | None = None) -> Task | None:
        seconds = lease_seconds or self.config.lease_seconds
        n = None if task_id is None else parse_task_id(str(task_id))

        known = self._claim_data.get(owner)
        if known is None:
            extra = masked({"owner": owner}, self.events.secrets)
            known = self._claim_data[owner] = (extra, json.dumps(extra))
        extra, data = known
        # one statement, one round trip (see `Database.trip`): the row is taken (SKIP
        # LOCKED: claimers never wait on each other), then the events lock, and the event
        # appended; the answer comes once the claim is on disk
        def took(answer: str) -> Task | None:
            if not answer:
                return None
            row, seq, ts = json.loads(answer)
            task = _task(tuple(row))
            lease = task.lease
            assert lease is not None
            self.events.stored(seq, ts, "task_claimed", task.id, owner, {
                **extra, "token": lease.token, "attempt": task.attempts + 1})
            return task

        args = (owner, self.machine, seconds, data) + (() if n is None else (n,))
        by_id = n is not None
        task = self.db.trip(f"orch_claim{'_id' if by_id else ''}",
                            f"text, text, float8, jsonb{', bigint' if by_id else ''}",
                            lambda: self._claim_sql(by_id), args, took)
        if task is None and n is not None and not self._exists(n):
            raise NotFound(f"no task {format_task_id(n)}")
        return task

    def _claim_sql(self, by_id: bool) -> str:
        """The claim's statement (``$5``: the task asked for, ``by_id``)."""
        return ("WITH c AS (UPDATE tasks SET status = 'in_progress', owner = $1, machine = $2, "
                "fence = fence + 1, lease_token = fence + 1, "
                "lease_expires = now() + make_interval(secs => $3), lease_acquired = now(), "
                "lease_renewed = now(), data = data - 'error', updated_at = now() "
                f"WHERE id = (SELECT id FROM tasks t WHERE {READY} "
                f"{'AND id = $5 ' if by_id else ''}"
                "ORDER BY priority DESC, id LIMIT 1 FOR UPDATE SKIP LOCKED) "
                f"RETURNING id, fence, attempts, {ROW_JSON} AS j), "
                "e AS (INSERT INTO events (event, task, actor, machine, data) "
                f"SELECT 'task_claimed', {TASK_ID_SQL}, $1, $2, $4 || "
                "jsonb_build_object('token', c.fence, 'attempt', c.attempts + 1) FROM c "
                f"CROSS JOIN LATERAL (SELECT {self.db.ordered()} WHERE c.id IS NOT NULL) l "
                "RETURNING seq, ts) "
                f"SELECT set_config('{ANSWER}', coalesce((SELECT json_build_array(c.j, e.seq, "
                f"{_TS.format('e.ts')})::text FROM c, e), ''), false)")

    def renew(self, task_id: str, token: int, *, lease_seconds: float | None = None) -> Task:
        seconds = lease_seconds or self.config.lease_seconds
        n = parse_task_id(str(task_id))

        def extend(cur: Cursor) -> Task:
            cur.execute("SET LOCAL synchronous_commit = off")  # as a claim: see `claim`
            cur.execute("UPDATE tasks SET lease_expires = now() + make_interval(secs => %s), "
                        "lease_renewed = now() WHERE id = %s AND status = 'in_progress' "
                        f"AND lease_token = %s RETURNING {COLS}",
                        (seconds, n, token))
            row = cur.fetchone()
            if row is None:
                raise self._lost(cur, n, token)
            return _task(row)

        return self.db.run(extend)

    def update(self, task_id: str, token: int, **fields: Any) -> Task:
        bad = PROTECTED & fields.keys()
        if bad:
            raise InvalidInput(f"update cannot change {', '.join(sorted(bad))}")
        return self._mutate(task_id, lambda t: _assign(t, fields), None, token=token)

    def complete(self, task_id: str, token: int, **fields: Any) -> Task:
        def done(t: Task) -> None:
            _move(t, Status.REVIEW)
            _assign(t, fields)

        return self._mutate(task_id, done, lambda t, old: (
            TaskCompleted(token=token), _holder(old)), token=token)

    def fail(self, task_id: str, token: int, error: str, *, retry: bool = True) -> Task:
        return self._mutate(task_id, lambda t: _count_attempt(t, error, retry), lambda t, old: (
            TaskFailed(token=token, error=error, attempts=t.attempts, status=t.status),
            _holder(old)), token=token)

    def release(self, task_id: str, token: int, *, reason: str = "") -> Task:
        return self._mutate(task_id, lambda t: _move(t, Status.PENDING), lambda t, old: (
            TaskReleased(token=token, reason=reason), _holder(old)), token=token)

    def requeue_expired(self, *, now: float | None = None,
                        actor: str = "lead") -> builtins.list[Task]:
        """Requeue every task whose lease ran out on the database's clock (``now``, a
        machine's epoch seconds, only for tests that move time forward). A lease not renewed
        since the server last started runs a full term from that start: its teammate could
        not renew while the database was down, and a restart must not cost a running task
        an attempt."""
        return self._requeue("greatest(lease_expires, pg_postmaster_start_time() + "
                             "(lease_expires - lease_renewed)) < "
                             "coalesce(to_timestamp(%(now)s), now())",
                             {"now": now}, "lease expired", LeaseExpired, actor)

    def requeue_owner(self, owner: str, *, reason: str,
                      actor: str = "lead") -> builtins.list[Task]:
        return self._requeue("owner = %(owner)s AND machine = %(machine)s",
                             {"owner": owner, "machine": self.machine}, reason,
                             TaskRequeued, actor)

    def _requeue(self, where: str, params: dict[str, Any], reason: str,
                 kind: type[LeaseExpired | TaskRequeued], actor: str) -> builtins.list[Task]:
        def requeue(cur: Cursor) -> builtins.list[Task]:
            cur.execute(f"{SELECT} WHERE status = 'in_progress' AND {where} "
                        "ORDER BY id FOR UPDATE SKIP LOCKED", params)
            out = []
            for row in cur.fetchall():
                old = _task(row)
                task = copy.deepcopy(old)
                _count_attempt(task, reason, True)
                self._write(cur, task)
                lease = old.lease
                out.append((task, lease))
            for task, lease in out:
                self.events.insert(cur, kind(
                    owner=lease.owner if lease else None, token=lease.token if lease else None,
                    reason=reason, attempts=task.attempts, status=task.status), task.id, actor)
            return [t for t, _ in out]

        return self.db.run(requeue)

    # --- change feed -------------------------------------------------------------
    def wait_for_change(self, timeout: float, *, events: bool = True,
                        running: bool = True) -> bool:
        listener = self._listen(f"change events={events} running={running}",
                                [*CHANGE_CHANNELS, *(["orch_events"] if events else [])],
                                None if running else _no_run_step)
        deadline = time.monotonic() + timeout
        while True:
            if self._closed:
                raise BoardClosed("the board was closed while waiting")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if listener.wait(min(remaining, self.config.rescan_seconds)):
                return True
            if self._has_drops():
                return True

    def wait_for_ready(self, timeout: float) -> bool:
        listener = self._listen("ready", ["orch_tasks"], _may_make_ready)
        deadline = time.monotonic() + timeout
        while True:
            if self._closed:
                raise BoardClosed("the board was closed while waiting")
            if self._any_ready():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            listener.wait(min(remaining, self.config.rescan_seconds))

    # --- internals -----------------------------------------------------------------
    def _listen(self, kind: str, channels: builtins.list[str],
                wanted: Callable[[str], bool] | None = None) -> Listener:
        if self._closed:
            raise BoardClosed("the board is closed")
        if kind not in self._listeners:
            self._listeners[kind] = Listener(self.url, channels, wanted)
        return self._listeners[kind]

    def _any_ready(self) -> bool:
        def exists(cur: Cursor) -> bool:
            cur.execute(f"SELECT 1 FROM tasks t WHERE {READY} LIMIT 1")
            return cur.fetchone() is not None

        return self.db.statement(exists, write=False)

    def _exists(self, n: int) -> bool:
        def select(cur: Cursor) -> bool:
            cur.execute("SELECT 1 FROM tasks WHERE id = %s", (n,))
            return cur.fetchone() is not None

        return self.db.statement(select, write=False)

    def _has_drops(self) -> bool:
        try:
            return any(not n.startswith(".") for n in os.listdir(self.layout.inbox))
        except OSError:
            return False

    def _lost(self, cur: Cursor, n: int, token: int) -> LeaseLost | NotFound:
        cur.execute(f"{SELECT} WHERE id = %s", (n,))
        row = cur.fetchone()
        if row is None:
            return NotFound(f"no task {format_task_id(n)}")
        t = _task(row)
        now = (f"held by {t.lease.owner} with token {t.lease.token}" if t.lease
               else f"{t.status}, no lease")
        return LeaseLost(f"{t.id}: lease token {token} is no longer valid ({now})", task=t.id)

    def _mutate(self, task_id: str, change: Callable[[Task], None],
                event: Callable[[Task, Task], tuple[AnyEvent, str | None]] | None
                = None, *, token: int | None = None,
                lock_timeout: float | None = None) -> Task:
        """Lock the row, apply ``change`` (which may raise), write it back and append
        ``event(new, old)`` in the same transaction. With ``token``: fenced."""
        n = parse_task_id(str(task_id))

        def mutate(cur: Cursor) -> Task:
            old = _fetch(cur, n, lock=True)
            if token is not None and (old.status is not Status.IN_PROGRESS or old.lease is None
                                      or old.lease.token != token):
                raise self._lost(cur, n, token)
            task = copy.deepcopy(old)
            try:
                change(task)
            except InvalidRecord as exc:
                raise InvalidInput(f"{task.id}: {describe_error(exc)}") from None
            task = self._write(cur, task)
            if event is not None:
                kind, actor = event(task, old)
                self.events.insert(cur, kind, task.id, actor)
            return task

        return self.db.run(mutate)

    def _write(self, cur: Cursor, task: Task) -> Task:
        """Write a locked row back from ``task``; a cleared lease clears its columns."""
        n = parse_task_id(task.id)
        live = task.lease is not None
        cur.execute(
            "UPDATE tasks SET status = %(st)s, priority = %(p)s, blocked_by = %(b)s, "
            "owner = %(o)s, machine = CASE WHEN %(live)s THEN machine END, fence = %(f)s, "
            "lease_token = CASE WHEN %(live)s THEN lease_token END, "
            "lease_expires = CASE WHEN %(live)s THEN lease_expires END, "
            "lease_acquired = CASE WHEN %(live)s THEN lease_acquired END, "
            "lease_renewed = CASE WHEN %(live)s THEN lease_renewed END, "
            "attempts = %(a)s, data = %(d)s, updated_at = now() WHERE id = %(id)s "
            f"RETURNING {COLS}",
            {"st": str(task.status), "p": task.priority,
             "b": [parse_task_id(b) for b in task.blocked_by], "o": task.owner,
             "live": live, "f": task.fence, "a": task.attempts, "d": jsonb(_data(task)),
             "id": n})
        row = cur.fetchone()
        assert row is not None
        return _task(row)


def _may_make_ready(payload: str) -> bool:
    """Whether a ``orch_tasks`` notification (``"<id> <status>"``) can make a task ready:
    a task became pending, or a blocker reached review or merged. A claim (in_progress)
    or a cancel cannot, so an idle teammate does not rescan for every other's claim."""
    return payload.rsplit(" ", 1)[-1] in ("pending", "review", "merged")


def _no_run_step(payload: str) -> bool:
    """Whether a notification of `wait_for_change` with ``running=False`` can concern a
    teammate:
    any but a task's ``in_progress`` (a claim, or a write of a running task: each of those
    woke every teammate, and a running one's heartbeat read its task again). What takes a
    task away from its teammate says so: its requeue says ``pending``, a cancel
    ``cancelled``. (A mailbox name or a request id never ends in a status.)"""
    return not payload.endswith(" in_progress")


def _holder(old: Task) -> str | None:
    return old.lease.owner if old.lease else None


def _data(task: Task) -> dict[str, Any]:
    return {k: v for k, v in to_dict(task).items() if k not in COLUMNS}


def _task(row: tuple[object, ...]) -> Task:
    (n, status, priority, blocked, owner, fence, token, expires, acquired, renewed,
     attempts, data, created, updated) = row
    lease = None
    if token is not None:
        lease = Lease(owner=str(owner), token=int(str(token)), expires_at=float(str(expires)),
                      acquired_at=iso(acquired), renewed_at=iso(renewed))
    fields = dict(data) if isinstance(data, dict) else {}
    blockers = blocked if isinstance(blocked, list) else []
    return convert({
        **fields, "id": format_task_id(int(str(n))), "status": status, "priority": priority,
        "blocked_by": [format_task_id(int(b)) for b in blockers], "owner": owner,
        "lease": lease, "fence": fence, "attempts": attempts, "created_at": iso(created),
        "updated_at": iso(updated)}, Task)


def _fetch(cur: Cursor, n: int, *, lock: bool = False) -> Task:
    """Task ``n`` (its row locked for the transaction with ``lock``); `NotFound` if none."""
    cur.execute(f"{SELECT} WHERE id = %s{' FOR UPDATE' if lock else ''}", (n,))
    row = cur.fetchone()
    if row is None:
        raise NotFound(f"no task {format_task_id(n)}")
    return _task(row)
