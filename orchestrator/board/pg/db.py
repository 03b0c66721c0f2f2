"""One process's connections to the board database: transactions and the change feed.

`Database.run(fn)` runs ``fn(cursor)`` in one transaction on a connection shared by the
process's threads (a lock keeps transactions apart). A connection lost before the commit
was sent (the database restarted, a network blip) is opened again and ``fn`` run once
more: the server rolled the first try back, so nothing happens twice. A connection lost
during the commit itself cannot tell whether it committed: that raises `BoardUnavailable`
and the caller treats it like any failed write (a claim then simply expires).

**Commits in event order, durably, without a queue.** An event's ``seq`` must follow
commit order (a reader that saw seq N never later finds a smaller one appear), so a
transaction that appends an event holds the advisory lock ``EVENTS_LOCK`` from its insert
to its commit. Waiting for the disk under that lock would put every commit's fsync in one
line (no group commit: ~1 ms each, whatever the number of teammates), so such a
transaction commits asynchronously (``synchronous_commit`` off for it alone: the lock is
held for microseconds) and then, lock released, waits for the disk with `FLUSH`: a tiny
transactional WAL record whose synchronous commit flushes the WAL up to itself, hence up
to the commit before it; concurrent flushes share one fsync. The caller gets its answer
(a claim, an event) only once it is on disk, so a server crash never takes back what a
caller was told (but for `Database.hint`'s writes, which the file board does not fsync
either). What others may see for that millisecond is a change not yet on disk:
a server crash in it undoes the change (for a claim: the task is pending again, and the
claimer, whose flush failed, was never told it had it). A role without the right to
call ``pg_logical_emit_message`` gets plain synchronous commits under the lock (correct,
slower).

**A claim is one round trip.** `Database.trip` sends, as ONE simple query, ``BEGIN``, the
claim as a server-side prepared statement (``PREPARE``d once per connection, its plan kept:
``plan_cache_mode`` is forced to the generic plan for it, since PostgreSQL would otherwise
plan it afresh on every call because of its optional task id), ``COMMIT`` and the `FLUSH`
(the commit before it asynchronous as above): the server runs them in turn, so the claimer
waits once, and its answer still comes only after the disk has it.

`Listener` holds a second connection in autocommit that ``LISTEN``s on the board's
channels (the triggers of ``0001_initial.sql`` notify at commit). It sleeps in ``select``
on the connection's socket until the server sends something (psycopg's ``notifies()``
wakes every 100 ms to look: 300 times in 30 s for each idle teammate), then reads what
came with libpq's ``consume_input`` / ``notifies``. Notifications are only hints: after a
lost connection the listener reconnects and reports a change, so its waiter rescans and
never misses a wake-up.
"""

from __future__ import annotations

import select
import threading
import time
from collections.abc import Callable, Collection
from contextlib import nullcontext
from typing import TYPE_CHECKING, TypeVar

from orchestrator.board.pg import schema
from orchestrator.errors import BoardUnavailable

if TYPE_CHECKING:  # psycopg is imported when a connection is first made
    import psycopg
    from psycopg.types.json import Jsonb

    Cursor = psycopg.Cursor[tuple[object, ...]]
    Conn = psycopg.Connection[tuple[object, ...]]

T = TypeVar("T")

FLUSH = "SELECT pg_logical_emit_message(true, 'orchestrator', 'flush')"
"""Commits with a WAL record of its own, so a synchronous commit waits for the disk."""
CAN_FLUSH = ("SELECT has_function_privilege('pg_logical_emit_message(boolean, text, text)', "
             "'EXECUTE')")

NO_WAIT = "(SELECT set_config('synchronous_commit', 'off', true)) AS no_wait"
"""In the FROM list of a statement run with `Database.hint`: its commit does not wait for
the disk."""

ANSWER = "orchestrator.answer"
"""The session setting a `Database.trip` statement leaves its answer in."""

EVENTS_LOCK = 0x6F726365
"""The advisory lock an event's transaction holds from its insert to its commit."""

RETRY_DELAYS = (0.0, 0.2, 0.5, 1.0, 2.0, 3.0, 5.0)
"""Back-off between reconnects while the database is unreachable (then give up: the caller
sees `BoardUnavailable`, a daemon retries on its own schedule)."""


def jsonb(value: object) -> Jsonb:
    """``value`` as a ``jsonb`` parameter."""
    from psycopg.types.json import Jsonb

    return Jsonb(value)


class Database:
    """A lazily opened, self-healing connection and a lock to keep transactions apart."""

    def __init__(self, url: str, settings: str = "") -> None:
        self.url = url
        self.settings = settings
        """More session settings for each connection (`schema.bounds`)."""
        self._conn: Conn | None = None
        self._checked = False
        self._lock = threading.RLock()
        self.lock = self._lock
        """Held by whoever talks to the database on this process's behalf."""
        self._after: list[Callable[[], None]] = []
        self._flush = False
        self._prepared: set[str] = set()
        """The statements `trip` has prepared on the current connection."""
        self._trips: dict[tuple[str, tuple[object, ...]], bytes] = {}
        """`trip`'s queries by statement and arguments, their literals rendered."""
        self.fast_commit = False
        """Whether event-ordered transactions commit asynchronously and then `FLUSH`."""

    def ordered(self) -> str:
        """SQL for the select list of a statement that appends an event: it takes the
        events lock and, when `fast_commit`, makes this transaction's commit asynchronous;
        `appended` then makes the transaction wait for the disk before it returns."""
        sync = ", set_config('synchronous_commit', 'off', true)" if self.fast_commit else ""
        return f"pg_advisory_xact_lock({EVENTS_LOCK}){sync}"

    def appended(self) -> None:
        """An event was appended with `ordered`: `FLUSH` after the commit."""
        self._flush = self.fast_commit

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once the current transaction has committed (never if it rolls back)."""
        self._after.append(fn)

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def connection(self) -> Conn:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            self._conn = None
            conn = schema.connect(self.url, autocommit=True, settings=self.settings)
            self._prepared = set()
            self._trips.clear()  # literals are rendered for a connection's settings
            if not self._checked:
                try:
                    schema.check(conn, self.url)
                except BaseException:
                    conn.close()
                    raise
                self._checked = True
                row = conn.execute(CAN_FLUSH).fetchone()
                self.fast_commit = bool(row and row[0])
            self._conn = conn
        return conn

    def run(self, fn: Callable[[Cursor], T]) -> T:
        """``fn(cursor)`` in one transaction; retried on a fresh connection when the old one
        was lost before the commit."""
        return self._retried(lambda conn: _with_cursor(conn, fn), transaction=True, write=True)

    def statement(self, fn: Callable[[Cursor], T], *, write: bool) -> T:
        """``fn(cursor)``, which runs ONE statement, as its own transaction: one round trip
        (no BEGIN, no COMMIT). A read is retried on a fresh connection like `run`; a
        ``write`` lost on the way cannot tell whether it committed and raises
        `BoardUnavailable` (as a lost commit does in `run`)."""
        return self._retried(lambda conn: _with_cursor(conn, fn), transaction=False,
                             write=write)

    def hint(self, fn: Callable[[Cursor], T], *, repeatable: bool) -> T:
        """``fn(cursor)``, ONE statement that has `NO_WAIT` in its FROM list, as its own
        transaction, committed without waiting for the disk: for what the file board does not
        fsync either (a teammate's status, a transcript line). The next durable commit on
        the server flushes the log up to it; a server crash before that may lose it. Retried
        on a fresh connection when ``repeatable`` (an upsert); otherwise a statement lost on
        the way cannot tell whether it committed and raises, as `statement`'s write does
        (an insert repeated would be there twice)."""
        return self._retried(lambda conn: _with_cursor(conn, fn), transaction=False,
                             write=not repeatable)

    def trip(self, name: str, types: str, sql: Callable[[], str], args: tuple[object, ...],
             then: Callable[[str], T]) -> T:
        """``then(answer)`` of ``sql()``: ONE statement that appends an event with `ordered`
        (``$1``… for ``args`` of the SQL ``types``) and leaves its answer, text, in the
        session setting `ANSWER` (``set_config(ANSWER, …, false)``); run as its own
        transaction and made durable in one round trip (see the module doc). ``sql`` is
        called once connected (`ordered` depends on the connection); ``then`` runs before the
        after-commit hooks. Like a write of `statement`: a connection lost on the way raises
        `BoardUnavailable`.

        The round trip is libpq's own ``PQexec`` (psycopg's ``pgconn.exec_``, which lets
        other threads run while it waits): it answers the last statement's result, hence
        the setting, read by the last statement."""
        import psycopg
        from psycopg.pq import ExecStatus, TransactionStatus
        from psycopg.sql import Literal

        def run(conn: Conn) -> T:
            prepare = name not in self._prepared
            query = self._trips.get((name, args))
            if query is None:  # a claimer sends the same arguments each time: render once
                if len(self._trips) > 64:
                    self._trips.clear()
                values = ", ".join(Literal(a).as_string(conn) for a in args)
                query = self._trips[(name, args)] = (
                    "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; "
                    f"EXECUTE {name}({values}); COMMIT; SELECT current_setting('{ANSWER}')"
                    f"{FLUSH.replace('SELECT', ',') if self.fast_commit else ''}"
                ).encode()
            head = f"PREPARE {name}({types}) AS {sql()}; ".encode() if prepare else b""
            res = conn.pgconn.exec_(head + query)
            if res.status != ExecStatus.TUPLES_OK:
                if conn.broken:
                    raise psycopg.OperationalError(
                        (conn.pgconn.error_message or b"").decode(errors="replace"))
                err = psycopg.errors.error_from_result(res, encoding=conn.info.encoding)
                if conn.info.transaction_status == TransactionStatus.INERROR:
                    conn.execute("ROLLBACK")  # the BEGIN above is ours to end
                if isinstance(err, psycopg.errors.InvalidSqlStatementName) and not prepare:
                    # dropped behind our back: psycopg sends DEALLOCATE ALL after a rollback
                    # once it has prepared statements of its own; prepare it again
                    self._prepared.discard(name)
                    return run(conn)
                if conn.execute("SELECT FROM pg_prepared_statements WHERE name = %s",
                                (name,)).fetchone() is not None:
                    self._prepared.add(name)
                else:
                    self._prepared.discard(name)
                raise err
            self._prepared.add(name)
            answer = res.get_value(0, 0)
            out = then(answer.decode() if answer else "")
            self._flush = False  # the trip has flushed already
            return out

        return self._retried(run, transaction=False, write=True)

    def _retried(self, fn: Callable[[Conn], T], *, transaction: bool, write: bool) -> T:
        import psycopg

        last: BaseException | None = None
        for delay in RETRY_DELAYS:
            if delay:
                time.sleep(delay)
            committing = False  # once set, a lost connection cannot tell what happened
            with self._lock:
                self._after = []
                self._flush = False
                try:
                    conn = self.connection()
                    with conn.transaction() if transaction else nullcontext():
                        committing = write and not transaction
                        out = fn(conn)
                        committing = write
                    self._finish(conn)
                    return out
                except BoardUnavailable as exc:
                    last = exc  # could not connect: back off and try again
                except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as exc:
                    if self._conn is None or self._conn.broken:
                        raise
                    # waited too long for a lock a stuck participant holds (or ran too long):
                    # the transaction was rolled back, so trying again is safe
                    last = BoardUnavailable(f"the board database is busy: {_first_line(exc)}")
                except psycopg.OperationalError as exc:
                    if self._conn is not None and not self._conn.broken:
                        raise  # a statement failed, the connection is fine: not ours to retry
                    self.close()
                    if committing:
                        raise schema.unavailable(self.url, exc) from None
                    last = schema.unavailable(self.url, exc)
        assert last is not None
        raise last if isinstance(last, BoardUnavailable) else BoardUnavailable(str(last))

    def _finish(self, conn: Conn) -> None:
        """After a commit: wait for the disk if the commit was asynchronous (see the module
        doc), then run the after-commit hooks."""
        if self._flush:
            self._flush = False
            conn.execute(FLUSH)
        after, self._after = self._after, []
        for hook in after:
            hook()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _with_cursor(conn: Conn, fn: Callable[[Cursor], T]) -> T:
    with conn.cursor() as cur:
        return fn(cur)


class Listener:
    """Waits for NOTIFY on ``channels``; a (re)connect counts as a change. ``wanted``
    picks the payloads worth waking for (default: every one)."""

    def __init__(self, url: str, channels: Collection[str],
                 wanted: Callable[[str], bool] | None = None) -> None:
        self.url = url
        self.channels = tuple(channels)
        self.wanted = wanted
        self._conn: Conn | None = None
        self._failures = 0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def wait(self, timeout: float) -> bool:
        """True when a notification arrived (or the connection was new, so anything may
        have changed meanwhile); False when ``timeout`` passed quietly."""
        import psycopg

        try:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self.close()
                conn = schema.connect(self.url, autocommit=True)
                for ch in self.channels:
                    conn.execute(f"LISTEN {ch}")
                self._conn = conn
                self._failures = 0
                return True
            pgconn = self._conn.pgconn
            end = time.monotonic() + max(timeout, 0.0)
            while True:
                # everything that came, at once: the next wait does not return again for
                # the rest of the same burst
                pgconn.consume_input()  # raises OperationalError on a lost connection
                seen = []
                while (note := pgconn.notifies()) is not None:
                    seen.append(note.extra.decode(errors="replace"))
                if seen and (self.wanted is None or any(map(self.wanted, seen))):
                    return True
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return False
                select.select([pgconn.socket], [], [], remaining)
        except (psycopg.OperationalError, BoardUnavailable):
            self.close()
            self._failures += 1
            time.sleep(min(timeout, RETRY_DELAYS[min(self._failures, len(RETRY_DELAYS) - 1)]))
            return True
