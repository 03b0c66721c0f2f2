"""One participant's trouble never stalls the PostgreSQL board: a process frozen inside a
transaction, a connection whose prepared statements were dropped, a machine whose clock is
off. Real PostgreSQL, real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator.errors import LeaseLost
from orchestrator.model import Status
from tests.pg import Cluster
from tests.test_pg_board import ROOT, board_at

FROZEN = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from orchestrator.board import open_board
    from orchestrator.board.pg.store import _fetch
    from orchestrator.config import BoardConfig
    from orchestrator.events import LandNote
    from orchestrator.layout import Layout
    url, root = sys.argv[1:3]
    board = open_board(Layout.at(Path(root)), BoardConfig(
        url=url, machine="frozen", idle_in_transaction_seconds=1.0), actor="zed")
    def stuck(cur):
        _fetch(cur, 1, lock=True)  # the row of task_001, locked
        board.events.insert(cur, LandNote(note="frozen"), "task_001", "zed")  # the events lock
        print("in", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)  # frozen before the commit
    board.db.run(stuck)
""")


@pytest.mark.timeout(60)
def test_a_participant_frozen_inside_a_transaction_does_not_stall_the_others(
        tmp_path: Path, pg_board_url: str) -> None:
    with board_at(tmp_path, pg_board_url, actor="alice", lock_wait_seconds=0.5) as board:
        for i in range(4):
            board.add(f"t{i}")
        frozen = subprocess.Popen([sys.executable, "-c", FROZEN, pg_board_url,
                                   str(tmp_path / "frozen")], cwd=ROOT, text=True,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert frozen.stdout is not None and frozen.stdout.readline() == "in\n", \
                frozen.communicate()
            started = time.monotonic()
            done = []
            while (t := board.claim("alice")) is not None:  # every claim appends an event
                assert t.lease is not None
                done.append(board.complete(t.id, t.lease.token).id)
            # task_001 itself is claimed too, once the server ended the frozen session
            assert sorted(done) == ["task_001", "task_002", "task_003", "task_004"]
            assert time.monotonic() - started < 20
            assert {t.status for t in board.list()} == {Status.REVIEW}
            assert "land_note" not in [e.event for e in board.events.read()]  # rolled back
        finally:
            frozen.send_signal(signal.SIGKILL)
            frozen.communicate()


def test_a_claim_after_a_rolled_back_transaction_prepares_its_statement_again(
        tmp_path: Path, pg_board_url: str) -> None:
    """psycopg prepares a query it has run often (five times by default) and, after any
    rollback on a connection where it did, sends DEALLOCATE ALL: that also drops the claim's
    own prepared statement, which the next claim must make again instead of failing."""
    with board_at(tmp_path, pg_board_url, actor="alice") as board:
        for i in range(3):
            board.add(f"t{i}")
        first = board.claim("alice")
        assert first is not None and first.lease is not None
        for _ in range(8):  # psycopg prepares this fenced write's statements
            board.update(first.id, first.lease.token, session_id="x")
        with pytest.raises(LeaseLost):  # a refused fenced write: its transaction rolls back
            board.update(first.id, first.lease.token + 7, session_id="y")
        conn = board.db.connection()
        names = [r[0] for r in conn.execute("SELECT name FROM pg_prepared_statements")]
        assert "orch_claim" not in names  # what happened behind the claim's back
        second = board.claim("alice")
        assert second is not None and second.id == "task_002"
        by_id = board.claim("alice", task_id="task_003")
        assert by_id is not None and by_id.id == "task_003"


def test_session_bounds_reach_every_board_connection(tmp_path: Path, pg_board_url: str) -> None:
    with board_at(tmp_path, pg_board_url, actor="alice", lock_wait_seconds=1.5,
                  statement_seconds=20, idle_in_transaction_seconds=4) as board:
        conn = board.db.connection()
        got = [conn.execute(f"SHOW {k}").fetchone() for k in (
            "lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout")]
        assert got == [("1500ms",), ("20s",), ("4s",)]


def test_a_lease_that_ran_out_while_the_database_was_down_gets_a_term_after_its_restart(
        tmp_path: Path, pg_cluster: Cluster, pg_board_url: str) -> None:
    with board_at(tmp_path, pg_board_url, actor="alice") as board:
        board.add("long job")
        task = board.claim("alice", lease_seconds=2)
        assert task is not None and task.lease is not None
        pg_cluster.stop("fast")
        time.sleep(2.5)  # the lease runs out while nobody can renew it
        pg_cluster.start()
        assert board.requeue_expired() == []  # no attempt burned by the outage
        board.renew(task.id, task.lease.token, lease_seconds=2)  # its teammate is back
        assert board.get(task.id).attempts == 0
        assert [t.id for t in board.requeue_expired(now=time.time() + 60)] == [task.id]


def test_a_teammate_whose_clock_is_minutes_ahead_still_obeys_a_stop_request(
        tmp_path: Path, pg_board_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop request's time is the database's; a teammate takes its own start from the
    same clock, so a machine 5 minutes ahead does not take every request for an old one."""
    from datetime import UTC, datetime, timedelta

    from orchestrator.config import BoardConfig, Config
    from orchestrator.layout import Layout
    from orchestrator.team import teammate

    def ahead() -> str:
        t = datetime.now(UTC) + timedelta(minutes=5)
        return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    monkeypatch.setattr(teammate, "utcnow", ahead)
    layout = Layout.at(tmp_path / "m1")
    layout.root.mkdir()
    config = Config(board=BoardConfig(url=pg_board_url, machine="m1"))
    mate = teammate.Teammate(layout, config, "alice")
    mate.lead_started_at = ahead()  # the lead's clock is this machine's too
    with board_at(tmp_path, pg_board_url, "m1", actor="alice") as board:
        mate.board = board
        try:
            mate.start_on_board_clock()
            board.mailboxes.send("alice", "lead", "stop after this step",
                                 kind="shutdown_request", request_id="r1")
            mate.read_mail()
            assert mate.warm.is_set()
        finally:
            mate.waker.close()


def test_a_machine_whose_clock_is_off_reads_leases_by_the_databases_clock(
        tmp_path: Path, pg_board_url: str) -> None:
    """`show` on a machine 5 minutes ahead (every Python process of it: `time.time` shifted
    through sitecustomize) says a fresh 30 s lease expires in about 30 s, not that it ran
    out minutes ago; the board's `now` is the database's."""
    skew = tmp_path / "skew"
    skew.mkdir()
    (skew / "sitecustomize.py").write_text(
        "import time as _t\n_real = _t.time\n_t.time = lambda: _real() + 300.0\n")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "x"],
                   check=True)
    env = {**os.environ, "PYTHONPATH": f"{skew}{os.pathsep}{ROOT}"}

    def orch(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                              env=env, capture_output=True, text=True, timeout=60)

    assert orch("init", "--board", pg_board_url).returncode == 0
    assert orch("add", "job").returncode == 0
    with board_at(tmp_path, pg_board_url, actor="alice") as board:
        assert board.claim("alice", lease_seconds=30) is not None
        assert abs(board.now() - time.time()) < 5
    out = orch("show", "1").stdout
    left = int(out.split("(in ", 1)[1].split("s)", 1)[0]) if "(in " in out else -1
    assert 20 <= left <= 30, out
