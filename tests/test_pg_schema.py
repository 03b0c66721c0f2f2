"""The PostgreSQL board's schema: versioned migrations, `init --board`, `migrate`, and the
one-line errors for a database that cannot be used. Real PostgreSQL (tests/pg.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from orchestrator.board.pg import schema
from orchestrator.errors import BoardUnavailable, ConfigError
from orchestrator.transcript import Output
from tests.pg import PASSWORD, PASSWORD_ROLE, Cluster, db_of


def orch(repo: Path, *args: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                          capture_output=True, text=True, timeout=90,
                          env={**os.environ, **(env or {})})


def versions(cluster: Cluster, url: str) -> list[str]:
    db = db_of(url)
    return cluster.sql("SELECT version FROM orchestrator.schema_version ORDER BY 1",
                       db).splitlines()


def test_the_fixture_runs_a_real_server_on_a_private_socket(pg_cluster: Cluster,
                                                            pg_url: str) -> None:
    assert pg_cluster.sql("SHOW server_version").startswith(("15", "16", "17"))
    assert pg_cluster.sql("SHOW listen_addresses") == ""  # no TCP port to collide on
    sock = pg_cluster.sql("SHOW unix_socket_directories")
    assert Path(sock) == pg_cluster.folder and (pg_cluster.folder / ".s.PGSQL.5432").exists()
    # each test has its own database
    assert db_of(pg_url) != "postgres"


def test_init_creates_the_schema_once_from_two_machines_at_the_same_moment(
        pg_cluster: Cluster, pg_url: str, tmp_path: Path) -> None:
    from tests.helpers import make_repo

    clones = [make_repo(tmp_path / f"clone{i}") for i in range(3)]
    procs = [subprocess.Popen([sys.executable, "-m", "orchestrator", "init", "--board", pg_url],
                              cwd=c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in clones]
    outs = [p.communicate(timeout=90) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    created = [o for o, _ in outs if "created the schema" in o]
    current = [o for o, _ in outs if "the schema is current" in o]
    assert len(created) == 1 and len(current) == 2, outs
    assert versions(pg_cluster, pg_url) == [str(m.version) for m in schema.migrations()]
    for c in clones:
        conf = tomllib.loads((c / "orchestrator.toml").read_text())
        assert conf["board"]["url"] == pg_url
        assert "password" not in (c / "orchestrator.toml").read_text().lower()
        # the folders are made too, and git status stays clean apart from the config file
        assert (c / ".tasks").is_dir()
    assert orch(clones[0], "migrate").stdout.startswith("the schema is current")


def test_init_refuses_a_url_with_a_password_and_writes_nothing(repo: Path) -> None:
    for url in ("postgresql://orch:hunter22@db.internal/app",
                "postgresql://orch@db.internal/app?password=hunter22"):
        p = orch(repo, "init", "--board", url)
        assert p.returncode == 1
        assert p.stderr.count("\n") == 1 and "PGPASSWORD" in p.stderr, p.stderr
        assert "hunter22" not in p.stderr + p.stdout
        assert not (repo / "orchestrator.toml").exists()


def test_unreachable_database_and_wrong_password_are_one_line_each(
        pg_cluster: Cluster, pg_url: str, repo: Path, tmp_path: Path) -> None:
    p = orch(repo, "init", "--board", f"postgresql://orch@/app?host={tmp_path}/nothing")
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert p.stderr.startswith("error: cannot reach the board database")
    assert not (repo / "orchestrator.toml").exists()

    db = db_of(pg_url)
    as_pw = pg_cluster.url(db, PASSWORD_ROLE)
    p = orch(repo, "init", "--board", as_pw, env={"PGPASSWORD": "not-the-password"})
    assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
    assert "refused the login" in p.stderr and "not-the-password" not in p.stderr
    p = orch(repo, "init", "--board", pg_cluster.url("no_such_db"))
    assert p.returncode == 1 and "does not exist" in p.stderr, p.stderr
    # the right password from PGPASSWORD works; a role without CREATE gets told who can
    p = orch(repo, "init", "--board", as_pw, env={"PGPASSWORD": PASSWORD})
    assert p.returncode == 1 and "as the database's owner" in p.stderr, p.stderr
    pg_cluster.sql(f"GRANT CREATE ON DATABASE \"{db}\" TO {PASSWORD_ROLE}")
    p = orch(repo, "init", "--board", as_pw, env={"PGPASSWORD": PASSWORD})
    assert p.returncode == 0, p.stderr
    assert PASSWORD not in (repo / "orchestrator.toml").read_text()


def test_missing_old_and_newer_schemas_are_refused_with_what_to_do(
        pg_cluster: Cluster, pg_url: str) -> None:
    with schema.connect(pg_url) as conn:
        with pytest.raises(BoardUnavailable, match=r"no orchestrator schema.*init --board"):
            schema.check(conn, pg_url)
    assert [m.version for m in schema.migrate(pg_url)] == [m.version
                                                          for m in schema.migrations()]
    assert schema.migrate(pg_url) == []
    with schema.connect(pg_url) as conn:
        assert schema.check(conn, pg_url) == schema.latest_version()
    db = db_of(pg_url)
    newer = schema.latest_version() + 1
    pg_cluster.sql(f"INSERT INTO orchestrator.schema_version VALUES ({newer}, 'future')", db)
    with schema.connect(pg_url) as conn:
        with pytest.raises(BoardUnavailable, match=r"newer than this orchestrator.*upgrade"):
            schema.check(conn, pg_url)
    with pytest.raises(BoardUnavailable, match="newer than this orchestrator"):
        schema.migrate(pg_url)
    assert versions(pg_cluster, pg_url)[-1] == str(newer)  # left untouched
    pg_cluster.sql(f"DELETE FROM orchestrator.schema_version WHERE version >= "
                   f"{schema.latest_version()}", db)
    with schema.connect(pg_url) as conn:
        with pytest.raises(BoardUnavailable, match="orchestrator migrate"):
            schema.check(conn, pg_url)


def test_urls_are_checked_and_passwords_never_echoed() -> None:
    with pytest.raises(ConfigError, match="not a PostgreSQL URL"):
        schema.check_url("mysql://x@y/z")
    with pytest.raises(ConfigError, match="PGPASSWORD") as exc:
        schema.check_url("postgresql://a:topsecret1@h/d")
    assert "topsecret1" not in str(exc.value)
    assert schema.redact_url("postgresql://a:pw@h/d?password=x&sslmode=require") == \
        "postgresql://a:***@h/d?password=***&sslmode=require"


def team_role(pg_cluster: Cluster, pg_url: str, monkeypatch: pytest.MonkeyPatch,
              tables: str = "SELECT, INSERT, UPDATE, DELETE") -> str:
    """The board's schema made by its owner, and the URL of a team role with the
    documented grants (``tables`` on every table)."""
    schema.migrate(pg_url)
    db = db_of(pg_url)
    for grant in ("USAGE ON SCHEMA orchestrator",
                  f"{tables} ON ALL TABLES IN SCHEMA orchestrator",
                  "USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA orchestrator"):
        pg_cluster.sql(f"GRANT {grant} TO {PASSWORD_ROLE}", db)
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    return pg_cluster.url(db, PASSWORD_ROLE)


def test_a_team_role_without_ddl_rights_runs_the_board_with_the_documented_grants(
        pg_cluster: Cluster, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.board import open_board
    from orchestrator.config import BoardConfig
    from orchestrator.layout import Layout

    team_url = team_role(pg_cluster, pg_url, monkeypatch)
    # a hardened server may refuse the WAL message fast commits wait on: plain commits then
    pg_cluster.sql("REVOKE EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) "
                   "FROM PUBLIC", db_of(pg_url))
    assert schema.migrate(team_url) == []  # a current schema is only checked: no DDL
    with open_board(Layout.at(tmp_path), BoardConfig(url=team_url), actor="alice") as b:
        from orchestrator.board.pg.store import PgBoard

        assert isinstance(b, PgBoard) and not b.db.fast_commit
        b.add("a")
        t = b.claim("alice")
        assert t is not None and t.lease is not None
        b.complete(t.id, t.lease.token)
        b.mailboxes.send("lead", "alice", "done")
        b.logs.append(t.id, Output(text="x"))
        b.team.publish("alice", "idle")
        b.requests.ask("plan", request_id="q1", sender="alice", task=t.id, body="plan")
        assert [e.event for e in b.events.read()] == ["task_created", "task_claimed",
                                                      "task_completed"]
    with schema.connect(team_url) as conn:
        with pytest.raises(Exception, match=r"permission denied|must be owner"):
            conn.execute("DROP TABLE orchestrator.events")


def test_the_team_role_cannot_delete_events_or_answer_requests(
        pg_cluster: Cluster, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29 item 10: with the documented grants (every table), the team's role still
    cannot delete or rewrite the event log, nor answer, insert answered or remove a
    request; the schema's owner (a person's role) can answer."""
    from orchestrator.board import open_board
    from orchestrator.config import BoardConfig
    from orchestrator.errors import OrchestratorError
    from orchestrator.layout import Layout

    team_url = team_role(pg_cluster, pg_url, monkeypatch,
                         tables="SELECT, INSERT, UPDATE, DELETE, TRUNCATE")
    with open_board(Layout.at(tmp_path), BoardConfig(url=team_url), actor="alice") as b:
        t = b.add("a")
        b.requests.ask("permission", request_id="r1", sender="alice", task=t.id, body="rm")
        with pytest.raises(OrchestratorError, match="only a person"):
            b.requests.answer("r1", approved=True)
    with schema.connect(team_url) as conn:
        for statement in ("DELETE FROM orchestrator.events",
                          "UPDATE orchestrator.events SET event = 'x'",
                          "TRUNCATE orchestrator.events",
                          "UPDATE orchestrator.requests SET answer = '{\"approved\": true}'",
                          "DELETE FROM orchestrator.requests",
                          "TRUNCATE orchestrator.requests",
                          "INSERT INTO orchestrator.requests (id, kind, data, answer) VALUES "
                          "('r2', 'permission', '{}', '{\"approved\": true}')"):
            with pytest.raises(Exception, match=r"append-only|only a person"):
                conn.execute(statement)
            conn.rollback()
        conn.execute("SET ROLE NONE")
        assert conn.execute("SELECT count(*) FROM orchestrator.events").fetchone()[0] >= 1
    with open_board(Layout.at(tmp_path), BoardConfig(url=pg_url), actor="cli") as b:
        b.requests.answer("r1", approved=True)  # the owner: a person
        assert b.requests.answer_of("r1") is not None
