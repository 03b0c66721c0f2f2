"""A throwaway PostgreSQL cluster for the tests, from the Debian binaries.

`pg_cluster` (session) runs ``initdb`` into a fresh folder under the system temp dir
and ``pg_ctl start`` with only a Unix socket in that folder (no TCP port, so tests
running at the same moment never collide), as the ``postgres`` user when we are root
(PostgreSQL refuses to run as root). It is stopped, and the folder removed, at the
end of the session. `pg_url` gives each test a database of its own, made with
``CREATE DATABASE … TEMPLATE``.

The tests skip, saying why, only when the binaries are missing (`scripts/test-deps`
installs the ``postgresql`` package).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PG_BIN_DIRS = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin",
               "/usr/lib/postgresql/17/bin")
PASSWORD_ROLE = "orch_pw"
"""A role that must log in with a password (scram-sha-256), for the wrong-password tests."""
PASSWORD = "s3cret-test-only"
_counter = itertools.count(1)


def db_of(url: str) -> str:
    """The database name of a URL made by `Cluster.url`."""
    return url.split("://", 1)[1].split("/", 1)[1].split("?", 1)[0]


def pg_bin() -> Path | None:
    """The folder with ``initdb`` and ``pg_ctl``, or None when PostgreSQL is not installed."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).parent
    for d in PG_BIN_DIRS:
        if (Path(d) / "initdb").exists() and (Path(d) / "pg_ctl").exists():
            return Path(d)
    return None


@dataclass
class Cluster:
    """A running cluster: ``url(db)`` connects to a database on its socket."""

    bin: Path
    folder: Path
    user: str

    @property
    def socket_dir(self) -> Path:
        return self.folder

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def url(self, dbname: str = "postgres", user: str | None = None) -> str:
        return f"postgresql://{user or self.user}@/{dbname}?host={self.socket_dir}"

    def run_as_owner(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a PostgreSQL binary as the cluster's owner (``runuser`` when we are root)."""
        cmd = [str(self.bin / argv[0]), *argv[1:]]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120,
                              env={**os.environ, "LC_ALL": "C"})

    def sql(self, statement: str, dbname: str = "postgres") -> str:
        import psycopg

        with psycopg.connect(self.url(dbname), autocommit=True) as conn:
            cur = conn.execute(statement)  # type: ignore[arg-type]  # our own literal SQL
            return "" if cur.description is None else "\n".join(
                "|".join(str(v) for v in row) for row in cur.fetchall())

    def stop(self, mode: str = "fast") -> None:
        self.run_as_owner("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop",
                          check=False)

    def start(self) -> None:
        self.run_as_owner("pg_ctl", "-D", str(self.data), "-l", str(self.folder / "log"),
                          "-w", "-t", "60", "start")

    def new_database(self, prefix: str = "t", template: str = "template1") -> str:
        name = f"{prefix}_{os.getpid()}_{next(_counter)}"
        self.sql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return name


def start_cluster(*, durable: bool = False) -> Cluster:
    """initdb + pg_ctl start in a new temp folder; raises RuntimeError with the log.
    ``durable``: fsync and synchronous commits on, as on a real server (benchmarks);
    off by default, since a test's cluster is thrown away."""
    bin_dir = pg_bin()
    if bin_dir is None:
        raise FileNotFoundError("PostgreSQL binaries not found")
    root = os.geteuid() == 0
    user = "postgres" if root else (os.environ.get("USER") or "postgres")
    # Directly under the system temp dir: pytest's own tmp folders are private to root,
    # and a Unix socket path must stay short (107 bytes).
    folder = Path(tempfile.mkdtemp(prefix="orch-pg-"))
    if root:
        shutil.chown(folder, user, user)
    cluster = Cluster(bin=bin_dir, folder=folder, user=user)
    try:
        cluster.run_as_owner("initdb", "-D", str(cluster.data), "-U", user, "-A", "trust",
                             "-E", "UTF8", "--locale=C", "--no-sync")
        (cluster.data / "pg_hba.conf").write_text(
            f"local all {PASSWORD_ROLE} scram-sha-256\n"
            "local all all trust\n")
        with (cluster.data / "postgresql.conf").open("a") as f:
            f.write(f"listen_addresses = ''\nunix_socket_directories = '{folder}'\n"
                    "max_connections = 200\nshared_buffers = 128MB\n")
            if not durable:
                f.write("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
        if root:
            shutil.chown(cluster.data / "pg_hba.conf", user, user)
        cluster.start()
        cluster.sql(f"CREATE ROLE {PASSWORD_ROLE} LOGIN PASSWORD '{PASSWORD}'")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        log = (folder / "log").read_text() if (folder / "log").exists() else ""
        out = getattr(exc, "stderr", "") or ""
        cluster.stop("immediate")
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"could not start PostgreSQL: {out}\n{log}") from exc
    return cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """One PostgreSQL cluster for the whole test session (skips when not installed)."""
    if pg_bin() is None:
        pytest.skip("PostgreSQL is not installed (scripts/test-deps installs the "
                    "`postgresql` package)")
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e .[test])")
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop("immediate")
        with contextlib.suppress(OSError):
            shutil.rmtree(cluster.folder)


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> Iterator[str]:
    """A database of this test's own (empty), dropped afterwards."""
    name = pg_cluster.new_database()
    yield pg_cluster.url(name)
    with contextlib.suppress(Exception):
        pg_cluster.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def pg_template(pg_cluster: Cluster) -> str:
    """A database with the board's schema, copied by `pg_board_url` (migrated once)."""
    from orchestrator.board.pg import schema

    name = pg_cluster.new_database("board_template")
    schema.migrate(pg_cluster.url(name))
    return name


@pytest.fixture
def pg_board_url(pg_cluster: Cluster, pg_template: str) -> Iterator[str]:
    """A database of this test's own with the board's schema in place."""
    name = pg_cluster.new_database(template=pg_template)
    yield pg_cluster.url(name)
    with contextlib.suppress(Exception):
        pg_cluster.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
