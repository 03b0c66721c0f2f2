"""What review learns about a pair of commits, kept: git answers it once per pair.

A kept branch's facts depend only on commits: where it forks from its base (the merge
base of the tip and the base's commit), its changes from there (commits, diffstat,
symlinks), and whether it merges cleanly into the target (``git merge-tree`` of the
target's commit and the tip). Commits never change, so each answer is kept under the
commits it was asked of, in one sqlite file in the repository's git dir
(``.git/orchestrator/review.sqlite``), shared by the CLI, the web board and the MCP
server. ``review`` with 2,000 branches then runs git a handful of times instead of
five times per branch; a branch that moved, or a target that moved, is asked again.

A file that cannot be opened or written (read-only, corrupt) only costs speed: the
answers are then kept in memory for the call.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from types import TracebackType
from typing import Any

FILE = "review.sqlite"
SCHEMA = 3

_TABLES = """
CREATE TABLE IF NOT EXISTS forks (tip TEXT, base TEXT, fork TEXT, PRIMARY KEY (tip, base));
CREATE TABLE IF NOT EXISTS facts (fork TEXT, tip TEXT, data TEXT, PRIMARY KEY (fork, tip));
CREATE TABLE IF NOT EXISTS merges (target TEXT, tip TEXT, data TEXT,
                                   PRIMARY KEY (target, tip));
CREATE INDEX IF NOT EXISTS merges_by_tip ON merges (tip);
"""
EARLIER = 3
"""How many earlier answers about a tip `earlier` offers (the newest first)."""


class PairCache:
    """Answers per pair of commits: ``fork``, ``facts`` and ``merge`` (JSON values)."""

    def __init__(self, git_dir: Path | None) -> None:
        self.db: sqlite3.Connection | None = None
        self.new: dict[str, list[tuple[str, str, str]]] = {"forks": [], "facts": [],
                                                            "merges": []}
        self.mem: dict[tuple[str, str, str], str] = {}
        if git_dir is not None:
            path = git_dir / "orchestrator" / FILE
            try:
                self.db = _open(path)
            except sqlite3.DatabaseError:  # not a database (torn, overwritten): start afresh
                with contextlib.suppress(sqlite3.Error, OSError):
                    path.unlink(missing_ok=True)
                    self.db = _open(path)
            except (sqlite3.Error, OSError):
                pass

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
        """Write what was learnt (a failure costs speed only)."""
        if self.db is None or not any(self.new.values()):
            return
        with contextlib.suppress(sqlite3.Error):
            with self.db:
                for table, rows in self.new.items():
                    if rows:
                        self.db.executemany(f"INSERT OR REPLACE INTO {table} VALUES (?, ?, ?)",
                                            rows)
            for rows in self.new.values():
                rows.clear()

    def close(self) -> None:
        if self.db is not None:
            with contextlib.suppress(sqlite3.Error):
                self.db.close()
            self.db = None


def _open(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, timeout=5, isolation_level=None)
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA:
            db.executescript("DROP TABLE IF EXISTS forks; DROP TABLE IF EXISTS facts; "
                             "DROP TABLE IF EXISTS merges;")
        db.execute("PRAGMA journal_mode = WAL")
        db.executescript(_TABLES + f"PRAGMA user_version = {SCHEMA};")
    except sqlite3.Error:
        db.close()
        raise
    db.isolation_level = "DEFERRED"
    return db


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def loads(text: str) -> Any:
    return json.loads(text)
