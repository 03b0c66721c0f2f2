"""What git answers about a pair of commits, kept: git is asked once per pair.

A kept branch's facts depend only on commits: where it forks from its base (the merge
base of the tip and the base's commit), its changes from there (commits, diffstat,
symlinks), and whether it merges cleanly into the target (``git merge-tree`` of the
target's commit and the tip). Commits never change, so each answer is kept under the
commits it was asked of, in one sqlite file in the repository's git dir
(``.git/orchestrator/review.sqlite``), shared by the CLI, the web board, the MCP server
and the teammates that fill it as their tasks reach review. ``review`` with 2,000
branches then runs git a handful of times instead of five times per branch; a branch
that moved, or a target that moved, is asked again.

Many processes use the file at once: readers see the last committed answers (WAL), each
writer saves in one ``BEGIN IMMEDIATE`` transaction (writers take turns, waiting up to
`TIMEOUT`), and a file that is not ready (new, of an older schema, no database at all:
torn, overwritten) is made ready by one process at a time, under a lock. A file that
still cannot be opened or written (read-only, locked too long) only costs speed: the
answers are then kept in memory for the call, and `PairCache.problem` says why.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from types import TracebackType
from typing import Any

from orchestrator.errors import Conflict
from orchestrator.flock import flocked

FILE = "review.sqlite"
SCHEMA = 3
TIMEOUT = 5.0
"""How long a writer waits for another's transaction (seconds)."""

_TABLES = (
    "DROP TABLE IF EXISTS forks", "DROP TABLE IF EXISTS facts", "DROP TABLE IF EXISTS merges",
    "CREATE TABLE forks (tip TEXT, base TEXT, fork TEXT, PRIMARY KEY (tip, base))",
    "CREATE TABLE facts (fork TEXT, tip TEXT, data TEXT, PRIMARY KEY (fork, tip))",
    "CREATE TABLE merges (target TEXT, tip TEXT, data TEXT, PRIMARY KEY (target, tip))",
    "CREATE INDEX merges_by_tip ON merges (tip)",
)
EARLIER = 3
"""How many earlier answers about a tip `earlier` offers (the newest first)."""
_BROKEN = (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT)
"""What makes a file worth making afresh (not a lock held too long, not a read-only disk)."""


class PairCache:
    """Answers per pair of commits: ``fork``, ``facts`` and ``merge`` (JSON values)."""

    def __init__(self, git_dir: Path | None) -> None:
        self.db: sqlite3.Connection | None = None
        self.problem: str | None = None
        """Why answers are not kept in the file (it cannot be opened, or a save failed)."""
        self.new: dict[str, list[tuple[str, str, str]]] = {"forks": [], "facts": [],
                                                            "merges": []}
        self.mem: dict[tuple[str, str, str], str] = {}
        if git_dir is None:
            self.problem = "no git dir"
            return
        try:
            self.db = _connect(git_dir / "orchestrator" / FILE)
        except (sqlite3.Error, OSError, Conflict) as exc:  # Conflict: the lock of `_connect`
            self.problem = f"{type(exc).__name__}: {exc}"

    def __enter__(self) -> PairCache:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def get_many(self, table: str, pairs: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
        """The kept answers of ``pairs`` in ``table`` (missing pairs are left out)."""
        out = {p: v for p in pairs if (v := self.mem.get((table, *p))) is not None}
        if self.db is None or not pairs:
            return out
        cols = {"forks": ("tip", "base", "fork"), "facts": ("fork", "tip", "data"),
                "merges": ("target", "tip", "data")}[table]
        query = f"SELECT {cols[2]} FROM {table} WHERE {cols[0]} = ? AND {cols[1]} = ?"
        with contextlib.suppress(sqlite3.Error):
            for pair in pairs:  # point look-ups on the primary key: microseconds each
                if pair not in out:
                    row = self.db.execute(query, pair).fetchone()
                    if row is not None:
                        out[pair] = row[0]
        return out

    def earlier(self, table: str, tip: str) -> list[tuple[str, str]]:
        """The newest answers kept about ``tip`` against other commits (``forks``: (base,
        fork); ``merges``: (target, answer)), for reuse when those moved a little."""
        if self.db is None:
            return []
        query = {"forks": "SELECT base, fork FROM forks WHERE tip = ?",
                 "merges": "SELECT target, data FROM merges WHERE tip = ?"}[table]
        with contextlib.suppress(sqlite3.Error):
            return [(a, v) for a, v in self.db.execute(
                f"{query} ORDER BY rowid DESC LIMIT {EARLIER}", (tip,))]
        return []

    def put(self, table: str, a: str, b: str, value: str) -> None:
        self.mem[(table, a, b)] = value
        self.new[table].append((a, b, value))

    def save(self) -> None:
        """Write what was learnt, in one transaction (a failure costs speed only: it is
        kept in `problem`)."""
        if self.db is None or not any(self.new.values()):
            return
        try:
            with self.db:
                for table, rows in self.new.items():
                    if rows:
                        self.db.executemany(f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?)",
                                            rows)
        except sqlite3.Error as exc:
            self.problem = f"{type(exc).__name__}: {exc}"
            return
        for rows in self.new.values():
            rows.clear()

    def close(self) -> None:
        if self.db is not None:
            with contextlib.suppress(sqlite3.Error):
                self.db.close()
            self.db = None


def _connect(path: Path) -> sqlite3.Connection:
    """The cache at ``path``; when it is not ready (new, an older schema, no database at
    all) it is made ready by one process at a time, under a lock (sqlite answers "locked"
    at once, without waiting, to a second process turning a new file to WAL)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = _open(path)
    try:
        if _version(db) == SCHEMA:
            return _for_saves(db)
    except sqlite3.DatabaseError as exc:
        if exc.sqlite_errorcode & 0xFF not in _BROKEN:
            db.close()
            raise
    db.close()
    with flocked(path.with_name(f"{FILE}.lock"), timeout=TIMEOUT):
        return _made_ready(path)


def _made_ready(path: Path) -> sqlite3.Connection:
    """Open the cache and make its tables unless they are there at `SCHEMA` (another
    process may have made them meanwhile); a file that is no database (torn, overwritten)
    is made afresh."""
    try:
        return _ready(_open(path))
    except sqlite3.DatabaseError as exc:
        if exc.sqlite_errorcode & 0xFF not in _BROKEN:
            raise
    for name in (f"{FILE}-wal", f"{FILE}-shm", FILE):  # the log first: never replayed
        path.with_name(name).unlink(missing_ok=True)   # into a new file
    return _ready(_open(path))


def _open(path: Path) -> sqlite3.Connection:
    """A connection to the file at ``path`` that commits as it goes (a save opens its own
    transaction) and waits `TIMEOUT` for another writer."""
    return sqlite3.connect(path, timeout=TIMEOUT, isolation_level=None)


def _ready(db: sqlite3.Connection) -> sqlite3.Connection:
    try:
        db.execute("PRAGMA journal_mode = WAL")
        if _version(db) != SCHEMA:
            db.execute("BEGIN IMMEDIATE")  # readers see the old tables or the new ones
            for statement in _TABLES:
                db.execute(statement)
            db.execute(f"PRAGMA user_version = {SCHEMA}")
            db.execute("COMMIT")
    except sqlite3.Error:
        db.close()
        raise
    return _for_saves(db)


def _for_saves(db: sqlite3.Connection) -> sqlite3.Connection:
    """``db`` set for saves: each takes the write lock before it reads, and waits for no
    disk (a cache: in WAL mode the file stays whole, and a power cut loses at most the
    last answers, which are asked again)."""
    db.execute("PRAGMA synchronous = NORMAL")
    db.isolation_level = "IMMEDIATE"
    return db


def _version(db: sqlite3.Connection) -> int:
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def loads(text: str) -> Any:
    return json.loads(text)
