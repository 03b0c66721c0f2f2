"""A light, read-only way to the board's database for a one-shot command: libpq through ctypes.

Importing psycopg costs a fresh CLI process about 0.15 s (it loads asyncio, importlib.metadata,
ctypes.util and every type adapter), more than the rest of `orchestrator list`. A command that
only reads (``list``, ``show``) needs one connection and a few queries, so `PgBoard` starts
with this instead: the same libpq that psycopg uses (the one bundled with ``psycopg_binary``,
else the system's ``libpq.so.5``), text results, each query answering ONE value (a JSON
document built by the server), so no per-column conversion happens in Python.

It is only a shortcut: anything unexpected (no libpq found, a schema that is not current, an
error in a query) raises `LiteUnavailable`, and the caller goes the usual way through
psycopg, which says what is wrong in one line and retries as it does. A connection refused
is that same line at once (`orchestrator.board.pg.schema.unavailable`). Writes always go
through psycopg.
"""

from __future__ import annotations

import ctypes
import os
from importlib.util import find_spec
from pathlib import Path

from orchestrator.board.pg.schema import CONNECT_TIMEOUT, OPTIONS, latest_version, unavailable

CONNECTION_OK = 0
PGRES_TUPLES_OK = 2


class LiteUnavailable(Exception):
    """The light way cannot serve this: take the usual one."""


class _Option(ctypes.Structure):
    _fields_ = [("keyword", ctypes.c_char_p), ("envvar", ctypes.c_char_p),
                ("compiled", ctypes.c_char_p), ("val", ctypes.c_char_p),
                ("label", ctypes.c_char_p), ("dispchar", ctypes.c_char_p),
                ("dispsize", ctypes.c_int)]


_LIB: list[ctypes.CDLL | None] = []


def libpq() -> ctypes.CDLL | None:
    """psycopg's libpq (``psycopg_binary`` bundles one), else the system's; None if neither."""
    if _LIB:
        return _LIB[0]
    names: list[str] = []
    spec = find_spec("psycopg_binary")  # finds, does not import
    if spec is not None and spec.origin:
        libs = Path(spec.origin).parent.parent / "psycopg_binary.libs"
        try:
            names += sorted(str(libs / n) for n in os.listdir(libs) if n.startswith("libpq-"))
        except OSError:
            pass
    names.append("libpq.so.5")
    lib = None
    for name in names:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError:
            continue
    if lib is not None:
        _declare(lib)
    _LIB.append(lib)
    return lib


def _declare(lib: ctypes.CDLL) -> None:
    p, s, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for name, res, args in (
            ("PQconnectdbParams", p, [ctypes.POINTER(s), ctypes.POINTER(s), i]),
            ("PQstatus", i, [p]), ("PQfinish", None, [p]), ("PQerrorMessage", s, [p]),
            ("PQexecParams", p, [p, s, i, p, ctypes.POINTER(s), p, p, i]),
            ("PQresultStatus", i, [p]), ("PQclear", None, [p]),
            ("PQntuples", i, [p]), ("PQgetisnull", i, [p, i, i]),
            ("PQgetvalue", s, [p, i, i]),
            ("PQconninfoParse", ctypes.POINTER(_Option), [s, ctypes.POINTER(s)]),
            ("PQconninfoFree", None, [ctypes.POINTER(_Option)]), ("PQfreemem", None, [p])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args


def has_password(lib: ctypes.CDLL, url: str) -> bool:
    """Whether ``url`` holds a password (libpq's own reading of it); True when unreadable,
    so the caller goes the usual way, which explains."""
    err = ctypes.c_char_p()
    opts = lib.PQconninfoParse(url.encode(), ctypes.byref(err))
    if not opts:
        if err:
            lib.PQfreemem(err)
        return True
    try:
        k = 0
        while opts[k].keyword is not None:
            if opts[k].keyword == b"password" and opts[k].val:
                return True
            k += 1
        return False
    finally:
        lib.PQconninfoFree(opts)


class LiteConnection:
    """One libpq connection, used from one thread at a time (the caller's lock)."""

    def __init__(self, url: str) -> None:
        lib = libpq()
        if lib is None or has_password(lib, url):
            raise LiteUnavailable("no libpq, or a URL to refuse")
        self._lib = lib
        # what psycopg's connection has (schema.connect), and text in UTF-8 whatever the
        # database's encoding, as it is decoded here
        keys = (ctypes.c_char_p * 6)(b"dbname", b"options", b"connect_timeout",
                                      b"application_name", b"client_encoding", None)
        values = (ctypes.c_char_p * 6)(url.encode(), OPTIONS.encode(),
                                        str(CONNECT_TIMEOUT).encode(), b"orchestrator",
                                        b"UTF8", None)
        self._conn: int | None = lib.PQconnectdbParams(keys, values, 1)
        if not self._conn:
            raise LiteUnavailable("out of memory")
        if lib.PQstatus(self._conn) != CONNECTION_OK:
            # the one line psycopg's path would give (its message is libpq's too), without
            # making a user wait for a second connect timeout
            text = (lib.PQerrorMessage(self._conn) or b"").decode(errors="replace")
            self.close()
            raise unavailable(url, ConnectionError(text))
        if self.value("SELECT max(version) FROM schema_version") != str(latest_version()):
            self.close()
            raise LiteUnavailable("the schema is missing or not current")

    def close(self) -> None:
        if self._conn:
            self._lib.PQfinish(self._conn)
        self._conn = None

    def value(self, sql: str, *params: str | None) -> str | None:
        """The one value ``sql`` answers (text), None for SQL NULL or no row."""
        if not self._conn:
            raise LiteUnavailable("closed")
        lib = self._lib
        vals = (ctypes.c_char_p * max(len(params), 1))(
            *[None if v is None else v.encode() for v in params])
        res = lib.PQexecParams(self._conn, sql.encode(), len(params), None, vals, None, None, 0)
        try:
            if not res or lib.PQresultStatus(res) != PGRES_TUPLES_OK:
                raise LiteUnavailable("the query failed")  # psycopg will say why, if it is real
            if lib.PQntuples(res) < 1 or lib.PQgetisnull(res, 0, 0):
                return None
            out: bytes = lib.PQgetvalue(res, 0, 0)
            return out.decode()
        finally:
            if res:
                lib.PQclear(res)
