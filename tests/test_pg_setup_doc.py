"""docs/postgresql.md's set-up, followed as written on a fresh cluster (issue 30, item 7).

The cluster asks both roles for their password (scram-sha-256, as a server reached over
the network does); the SQL is the document's own block, run as it says (the superuser
part, then ``init`` as the owner, then the owner's grants), the passwords come from the
``~/.pgpass`` lines the document shows, and the team role then uses the board.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import make_repo
from tests.pg import pg_bin, start_cluster

DOC = Path(__file__).resolve().parents[1] / "docs" / "postgresql.md"
PASSWORDS = {"orch_owner": "owner-pw-for-the-test", "orch": "team-pw-for-the-test"}

pytestmark = pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL is not installed")


def orch(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def statements(sql: str) -> list[str]:
    """The SQL with the document's '…' passwords filled in, one statement each."""
    out = []
    for stmt in re.sub(r"--[^\n]*", "", sql).split(";"):
        stmt = " ".join(stmt.split())
        if not stmt:
            continue
        m = re.match(r"CREATE ROLE (\w+) LOGIN PASSWORD '…'", stmt)
        if m:
            stmt = stmt.replace("'…'", f"'{PASSWORDS[m.group(1)]}'")
        out.append(stmt)
    return out


@pytest.mark.timeout(120)
def test_the_postgresql_set_up_works_as_written(tmp_path: Path) -> None:
    import psycopg

    text = DOC.read_text()
    sql = re.search(r"```sql\n(-- as a superuser\n.*?)```", text, re.S)
    pgpass = re.search(r"```\n(db:5432:app:orch_owner:[^\n]*\ndb:5432:app:orch:[^\n]*)\n```",
                       text)
    assert sql and pgpass, "the set-up's SQL and ~/.pgpass blocks are in the document"
    as_superuser, _, as_owner = sql.group(1).partition("-- after `orchestrator init")
    cluster = start_cluster()
    try:
        hba = cluster.data / "pg_hba.conf"
        hba.write_text("local all orch_owner scram-sha-256\nlocal all orch scram-sha-256\n"
                       + hba.read_text())
        cluster.run_as_owner("pg_ctl", "-D", str(cluster.data), "reload")
        for stmt in statements(as_superuser):
            cluster.sql(stmt)
        # ~/.pgpass as the document shows it, for the socket instead of the host `db`
        lines = [re.sub(r"^db:5432:", "*:*:", line).replace(
            "the-owner-password", PASSWORDS["orch_owner"]).replace(
            "the-team-password", PASSWORDS["orch"])
            for line in pgpass.group(1).splitlines()]
        passfile = Path(os.environ["HOME"]) / ".pgpass"
        passfile.write_text("\n".join(lines) + "\n")
        passfile.chmod(0o600)

        def url(role: str) -> str:
            return f"postgresql://{role}@/app?host={cluster.socket_dir}"

        owner_repo = make_repo(tmp_path / "owner")
        p = orch(owner_repo, "init", "--board", url("orch_owner"))
        assert p.returncode == 0, p.stdout + p.stderr
        with psycopg.connect(url("orch_owner"), autocommit=True) as conn:
            for stmt in statements(as_owner):
                conn.execute(stmt)  # type: ignore[arg-type]  # the document's own SQL
        team_repo = make_repo(tmp_path / "team")
        p = orch(team_repo, "init", "--board", url("orch"))
        assert p.returncode == 0, p.stdout + p.stderr
        assert orch(team_repo, "add", "works as written").returncode == 0
        listed = orch(owner_repo, "list")
        assert "works as written" in listed.stdout, listed.stdout + listed.stderr
        passfile.unlink()  # and without the password file, one clear line
        p = orch(team_repo, "list")
        assert p.returncode != 0 and "Traceback" not in p.stderr
    finally:
        cluster.stop("immediate")
        shutil.rmtree(cluster.folder, ignore_errors=True)


def test_no_text_installs_orchestrator_by_its_name_from_pypi() -> None:
    """``orchestrator`` on PyPI is an unrelated project: every install line and error
    message installs from the checkout (``scripts/install EXTRA``, ``pip install -e``)."""
    root = DOC.parents[1]
    texts = [root / "README.md", *sorted((root / "docs").glob("*.md")),
             *sorted((root / "orchestrator").rglob("*.py"))]
    bare = re.compile(r"pip install ['\"]?orchestrator\b")
    found = [f"{p.relative_to(root)}: {m.group(0)}" for p in texts
             for m in bare.finditer(p.read_text())]
    assert found == []
    from orchestrator.errors import install_hint

    assert install_hint("postgresql").startswith(str(root / "scripts" / "install"))
