"""Connecting to the PostgreSQL board and keeping its schema current.

The schema lives in the PostgreSQL schema ``orchestrator`` of the board's database;
its tables are made by the numbered SQL files in ``migrations/`` (``0001_initial.sql``
…), each applied once, in one transaction, under an advisory lock, so two machines
running ``orchestrator init`` at the same moment apply each migration exactly once.
``schema_version`` records what was applied.

Connection errors become one line saying what is wrong and what to do
(`BoardUnavailable`); a URL with a password in it is refused (`ConfigError`):
passwords come from ``PGPASSWORD`` or ``~/.pgpass``, as everywhere in libpq.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import BoardUnavailable, ConfigError, install_hint

if TYPE_CHECKING:
    import psycopg

SCHEMA = "orchestrator"
MIGRATION_RE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
MIGRATIONS = Path(__file__).parent / "migrations"
"""The numbered SQL files, shipped in the package."""
MIGRATE_LOCK = 0x6F726368  # "orch": the advisory lock key migrations are applied under
CONNECT_TIMEOUT = 5
OPTIONS = f"-c search_path={SCHEMA} -c TimeZone=UTC"
"""Every board connection's session settings: our schema first, and timestamps in UTC."""


def is_pg_url(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("postgresql://", "postgres://"))


def check_url(url: str) -> str:
    """The URL when it is a PostgreSQL URL without a password, else a one-line ConfigError."""
    if not is_pg_url(url):
        raise ConfigError(f"not a PostgreSQL URL: {redact_url(url)} "
                          "(expected postgresql://USER@HOST[:PORT]/DATABASE)")
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(url)
    except ImportError:
        raise _no_driver() from None
    except Exception as exc:  # psycopg.ProgrammingError on a malformed URL
        raise ConfigError(f"cannot read the board URL {redact_url(url)}: {exc}") from None
    if params.get("password"):
        raise ConfigError("the board URL holds a password: remove it and put it in PGPASSWORD "
                          "or ~/.pgpass (orchestrator never writes a password to a file)")
    return url


def redact_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (for messages and logs)."""
    url = re.sub(r"(://[^:/@?#]*:)[^@/?#]*@", r"\1***@", url)
    return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", url)


def _no_driver() -> ConfigError:
    return ConfigError(f"the PostgreSQL board needs psycopg: {install_hint('postgresql')}")


def connect(url: str, *, autocommit: bool = False,
            settings: str = "") -> psycopg.Connection[tuple[object, ...]]:
    """A connection to the board's database with its session `OPTIONS` (and ``settings``,
    more ``-c name=value`` of `bounds`), in UTF-8 whatever the database's encoding
    (psycopg decodes JSON as UTF-8)."""
    try:
        import psycopg
    except ImportError:
        raise _no_driver() from None
    check_url(url)
    try:
        return psycopg.connect(url, autocommit=autocommit, connect_timeout=CONNECT_TIMEOUT,
                               application_name="orchestrator", client_encoding="UTF8",
                               options=f"{OPTIONS} {settings}".strip())
    except psycopg.OperationalError as exc:
        raise unavailable(url, exc) from None


def bounds(*, lock_wait: float, statement: float, idle_in_transaction: float) -> str:
    """Session settings that keep one stuck participant from stalling the others: a lock
    is waited for at most ``lock_wait`` seconds, a statement runs at most ``statement``,
    and a session that sits inside a transaction for ``idle_in_transaction`` (its process
    frozen or cut off) is ended by the server, which lets go of every lock it held."""
    ms = {"lock_timeout": lock_wait, "statement_timeout": statement,
          "idle_in_transaction_session_timeout": idle_in_transaction}
    return " ".join(f"-c {k}={max(int(v * 1000), 1)}" for k, v in ms.items())


def unavailable(url: str, exc: BaseException) -> BoardUnavailable:
    """One line for a failed connection: what happened and what to do."""
    text = str(exc).strip()
    where = redact_url(url)
    low = text.lower()
    if "password authentication failed" in low or "no password supplied" in low:
        return BoardUnavailable(
            f"the board database {where} refused the login (wrong or missing password): "
            "set PGPASSWORD or add the password to ~/.pgpass")
    if "does not exist" in low and "database" in low:
        return BoardUnavailable(f"the board database {where} does not exist: create it "
                                "(createdb) or fix [board] url in orchestrator.toml")
    if "role" in low and "does not exist" in low:
        return BoardUnavailable(f"the board database {where} has no such user: "
                                "create the role or fix [board] url in orchestrator.toml")
    if "pg_hba.conf" in low:
        return BoardUnavailable(f"the board database {where} does not let this machine in "
                                "(pg_hba.conf): ask its administrator")
    first = text.splitlines()[0] if text else type(exc).__name__
    return BoardUnavailable(f"cannot reach the board database {where}: {first} "
                            "(is PostgreSQL running there and the address right?)")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str = field(repr=False)


def migrations() -> list[Migration]:
    """Every migration shipped with this code, in order."""
    out = []
    for entry in MIGRATIONS.iterdir():
        m = MIGRATION_RE.match(entry.name)
        if m:
            out.append(Migration(int(m.group(1)), m.group(2), entry.read_text()))
    return sorted(out, key=lambda m: m.version)


def latest_version() -> int:
    """The newest migration's version (from the files' names: none is read)."""
    return max((int(m.group(1)) for m in map(MIGRATION_RE.match, os.listdir(MIGRATIONS))
                if m), default=0)


def current_version(conn: psycopg.Connection[tuple[object, ...]]) -> int | None:
    """The schema's version, or None when the board's tables were never created."""
    row = conn.execute("SELECT to_regclass(%s)", (f"{SCHEMA}.schema_version",)).fetchone()
    if row is None or row[0] is None:
        return None
    got = conn.execute(f"SELECT max(version) FROM {SCHEMA}.schema_version").fetchone()
    return int(str(got[0])) if got and got[0] is not None else 0


def migrate(url: str) -> list[Migration]:
    """Apply the migrations the database lacks; returns those applied (maybe none).

    One transaction under an advisory lock: a second machine doing the same waits,
    then finds them applied. A schema newer than this code is refused untouched.
    """
    import psycopg

    applied: list[Migration] = []
    with connect(url) as conn:
        try:
            # the SQL files are UTF-8 and go as bytes, in the database's own encoding (a
            # LATIN1 database cannot take a "…" of a comment in the UTF-8 of our sessions)
            conn.execute("SELECT set_config('client_encoding', "
                         "current_setting('server_encoding'), false)")
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
                have = current_version(conn) or 0
                _refuse_newer(url, have)
                if have >= latest_version():
                    return []  # current: no DDL, so a role without DDL rights may check
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
                conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_version ("
                             "version integer PRIMARY KEY, name text NOT NULL, "
                             "applied_at timestamptz NOT NULL DEFAULT now())")
                for m in migrations():
                    if m.version <= have:
                        continue
                    conn.execute(m.sql.encode())
                    conn.execute(f"INSERT INTO {SCHEMA}.schema_version (version, name) "
                                 "VALUES (%s, %s)", (m.version, m.name))
                    applied.append(m)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise BoardUnavailable(
                f"the board database {redact_url(url)} does not let this user create the "
                f"schema ({str(exc).strip().splitlines()[0]}): run `orchestrator migrate` "
                "as the database's owner") from None
        except psycopg.OperationalError as exc:
            raise unavailable(url, exc) from None
    return applied


def check(conn: psycopg.Connection[tuple[object, ...]], url: str) -> int:
    """The schema version when it is the one this code needs; else a one-line error."""
    have = current_version(conn)
    want = latest_version()
    if have is None or have == 0:
        raise BoardUnavailable(f"the board database {redact_url(url)} has no orchestrator "
                               "schema: run `orchestrator init --board URL` (or "
                               "`orchestrator migrate`)")
    _refuse_newer(url, have)
    if have < want:
        raise BoardUnavailable(f"the board schema is at version {have}, this orchestrator "
                               f"needs {want}: run `orchestrator migrate`")
    return have


def _refuse_newer(url: str, have: int) -> None:
    want = latest_version()
    if have > want:
        raise BoardUnavailable(
            f"the board schema in {redact_url(url)} is at version {have}, newer than this "
            f"orchestrator knows ({want}): upgrade orchestrator on this machine")
