"""One process's connections to the board database: transactions and the change feed.

`Database.run(fn)` runs ``fn(cursor)`` in one transaction on a connection shared by the
process's threads (a lock keeps transactions apart). A connection lost before the commit
was sent (the database restarted, a network blip) is opened again and ``fn`` run once
more: the server rolled the first try back, so nothing happens twice. A connection lost
during the commit itself cannot tell whether it committed: that raises `BoardUnavailable`
and the caller treats it like any failed write (a claim then simply expires).

`Listener` holds a second connection in autocommit that ``LISTEN``s on the board's
channels (the triggers of ``0001_initial.sql`` notify at commit). Notifications are only
hints: after a lost connection the listener reconnects and reports a change, so its
waiter rescans and never misses a wake-up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from typing import TypeVar

import psycopg

from orchestrator.board.pg import schema
from orchestrator.errors import BoardUnavailable

T = TypeVar("T")
Cursor = psycopg.Cursor[tuple[object, ...]]
Conn = psycopg.Connection[tuple[object, ...]]

RETRY_DELAYS = (0.0, 0.2, 0.5, 1.0, 2.0, 3.0, 5.0)
"""Back-off between reconnects while the database is unreachable (then give up: the caller
sees `BoardUnavailable`, a daemon retries on its own schedule)."""


class Database:
    """A lazily opened, self-healing connection and a lock to keep transactions apart."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Conn | None = None
        self._checked = False
        self._lock = threading.RLock()
        self._after: list[Callable[[], None]] = []

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
            conn = schema.connect(self.url, autocommit=True)
            if not self._checked:
                try:
                    schema.check(conn, self.url)
                except BaseException:
                    conn.close()
                    raise
                self._checked = True
            self._conn = conn
        return conn

    def run(self, fn: Callable[[Cursor], T]) -> T:
        """``fn(cursor)`` in one transaction; retried on a fresh connection when the old one
        was lost before the commit."""
        last: BaseException | None = None
        for delay in RETRY_DELAYS:
            time.sleep(delay)
            committing = False
            with self._lock:
                self._after = []
                try:
                    conn = self.connection()
                    with conn.transaction():
                        with conn.cursor() as cur:
                            out = fn(cur)
                        committing = True
                    after, self._after = self._after, []
                    for hook in after:
                        hook()
                    return out
                except BoardUnavailable as exc:
                    last = exc  # could not connect: back off and try again
                except psycopg.OperationalError as exc:
                    if self._conn is not None and not self._conn.broken:
                        raise  # a statement failed, the connection is fine: not ours to retry
                    self.close()
                    if committing:
                        raise schema.unavailable(self.url, exc) from None
                    last = schema.unavailable(self.url, exc)
        assert last is not None
        raise last if isinstance(last, BoardUnavailable) else BoardUnavailable(str(last))


class Listener:
    """Waits for NOTIFY on ``channels``; a (re)connect counts as a change."""

    def __init__(self, url: str, channels: Collection[str]) -> None:
        self.url = url
        self.channels = tuple(channels)
        self._conn: Conn | None = None
        self._failures = 0

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def wait(self, timeout: float) -> bool:
        """True when a notification arrived (or the connection was new, so anything may
        have changed meanwhile); False when ``timeout`` passed quietly."""
        try:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self.close()
                conn = schema.connect(self.url, autocommit=True)
                for ch in self.channels:
                    conn.execute(f"LISTEN {ch}")
                self._conn = conn
                self._failures = 0
                return True
            got = False
            for _ in self._conn.notifies(timeout=max(timeout, 0.0), stop_after=1):
                got = True
            if got:  # take what else is queued, so the next wait does not return at once
                for _ in self._conn.notifies(timeout=0.001):
                    pass
            return got
        except (psycopg.OperationalError, BoardUnavailable):
            self.close()
            self._failures += 1
            time.sleep(min(timeout, RETRY_DELAYS[min(self._failures, len(RETRY_DELAYS) - 1)]))
            return True
