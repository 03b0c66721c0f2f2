"""The PostgreSQL board (orchestrator.board.pg) on a real PostgreSQL: claims from several
processes, fencing, leases on the database clock, owners per machine, events in seq order,
wake-ups by LISTEN/NOTIFY, and a database restart under running claimers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator.board import open_board
from orchestrator.board.pg.store import PgBoard
from orchestrator.config import BoardConfig
from orchestrator.errors import LeaseLost, NotFound
from orchestrator.events import ForgeWebhook
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from orchestrator.transcript import Output
from tests.helpers import during
from tests.pg import Cluster, db_of

ROOT = Path(__file__).resolve().parents[1]

CLAIMER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from orchestrator.board import open_board
    from orchestrator.config import BoardConfig
    from orchestrator.errors import BoardUnavailable
    from orchestrator.layout import Layout
    url, machine, name, root, idle = sys.argv[1:6]
    board = open_board(Layout.at(Path(root)), BoardConfig(url=url, machine=machine),
                       actor=name)
    done = []
    quiet = time.monotonic()
    while time.monotonic() - quiet < float(idle):
        try:
            t = board.claim(name)
            if t is None:
                board.wait_for_ready(0.2)
                continue
            board.complete(t.id, t.lease.token, branch="task/" + t.id)
        except BoardUnavailable:
            continue  # the database restarted under us: a claim may expire, never doubles
        quiet = time.monotonic()
        done.append(t.id)
    print(json.dumps(done))
""")


def board_at(tmp_path: Path, url: str, machine: str = "m1", actor: str = "cli",
             **kw: float) -> PgBoard:
    b = open_board(Layout.at(tmp_path / machine), BoardConfig(url=url, machine=machine, **kw),
                   actor=actor)
    assert isinstance(b, PgBoard)
    return b


@pytest.fixture
def board(tmp_path: Path, pg_board_url: str) -> Iterator[PgBoard]:
    with board_at(tmp_path, pg_board_url) as b:
        yield b


def claimers(url: str, tmp_path: Path, n: int, idle: float = 1.5) -> list[subprocess.Popen[str]]:
    return [subprocess.Popen(
        [sys.executable, "-c", CLAIMER, url, f"m{i % 3}", f"w{i}", str(tmp_path / f"m{i % 3}"),
         str(idle)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(n)]


def test_open_board_picks_postgresql_from_the_config(board: PgBoard) -> None:
    t = board.add("one", description="d", priority=2, metadata={"k": [1, 2]})
    got = board.get("1")
    assert (got.id, got.subject, got.priority, got.metadata) == ("task_001", "one", 2,
                                                                 {"k": [1, 2]})
    assert got.created_at == t.created_at and got.status is Status.PENDING
    with pytest.raises(NotFound):
        board.get("task_999")
    with pytest.raises(NotFound, match="unknown blocker"):
        board.add("two", blocked_by=["task_042"])
    assert board.ids.high_water() == 1  # the refused add spent no id


def test_four_processes_on_three_machines_claim_each_task_exactly_once(
        tmp_path: Path, pg_board_url: str) -> None:
    with board_at(tmp_path, pg_board_url) as b:
        for i in range(80):
            b.add(f"task {i}", priority=i % 3)
        procs = claimers(pg_board_url, tmp_path, 4, idle=1.0)
        outs = [p.communicate(timeout=120) for p in procs]
        assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
        done = [t for o, _ in outs for t in json.loads(o)]
        assert sorted(done) == sorted(t.id for t in b.list())  # every task, once
        assert len(done) == len(set(done)) == 80
        assert {t.status for t in b.list()} == {Status.REVIEW}
        claimed = Counter(e.task for e in b.events.read() if e.event == "task_claimed")
        assert set(claimed.values()) == {1}
        # the audit log is in true order: strictly increasing seq, each task created first
        seen: dict[str, list[str]] = {}
        last = 0
        for e in b.events.read():
            assert e.seq > last
            last = e.seq
            seen.setdefault(str(e.task), []).append(e.event)
        assert all(v[:3] == ["task_created", "task_claimed", "task_completed"]
                   for v in seen.values())
        assert [e.event for e in b.events.read(task="task_007")] == seen["task_007"]
        assert [e.seq for e in b.events.read(since=last - 2)] == [last - 1, last]


def test_fencing_and_leases_on_the_database_clock(board: PgBoard, tmp_path: Path) -> None:
    board.add("a")
    t = board.claim("alice", lease_seconds=0.3)
    assert t is not None and t.lease is not None and t.lease.token == 1 and t.fence == 1
    assert board.requeue_expired() == []  # the lease is live
    time.sleep(0.5)
    [requeued] = board.requeue_expired()
    assert requeued.status is Status.PENDING and requeued.attempts == 1
    with pytest.raises(LeaseLost):
        board.update(t.id, 1, branch="x")
    with pytest.raises(LeaseLost):
        board.complete(t.id, 1)
    t2 = board.claim("bob")
    assert t2 is not None and t2.lease is not None and t2.lease.token == 2
    board.renew(t2.id, 2)
    with pytest.raises(LeaseLost, match="held by bob with token 2"):
        board.renew(t2.id, 1)
    done = board.complete(t2.id, 2, branch="task/a")
    assert (done.status, done.branch, done.lease, done.owner) == (Status.REVIEW, "task/a",
                                                                  None, None)
    ev = board.events.tail(1)[0]
    assert (ev.event, ev.actor, ev.get("machine")) == ("task_completed", "bob", "m1")
    # the same machine's events land in its local events.jsonl too
    local = [json.loads(x) for x in (tmp_path / "m1/.worktrees/events.jsonl").read_text()
             .splitlines()]
    assert [e["seq"] for e in local] == [e.seq for e in board.events.read()]
    assert local == [e.to_dict() for e in board.events.read()]  # to the field (claims too)


def test_requeue_owner_touches_only_this_machines_teammate(tmp_path: Path,
                                                           pg_board_url: str) -> None:
    with board_at(tmp_path, pg_board_url, "m1") as m1, \
            board_at(tmp_path, pg_board_url, "m2") as m2:
        m1.add("a")
        m1.add("b")
        a = m1.claim("alice")
        b = m2.claim("alice")  # every machine has an alice
        assert a is not None and b is not None and a.id != b.id
        [back] = m1.requeue_owner("alice", reason="process died")
        assert back.id == a.id and back.status is Status.PENDING
        assert m2.get(b.id).status is Status.IN_PROGRESS
        m1.team.publish("alice", "working", pid=1, task=back.id)
        m2.team.publish("alice", "working", pid=2, task=b.id)
        assert sorted((s.host, s.pid) for s in m1.team.all()) == [("m1", 1), ("m2", 2)]
        # `status` on m1 shows m2's teammate too, with its host and last heartbeat
        from orchestrator.team.status import format_status, team_status

        st = team_status(Layout.at(tmp_path / "m1"), m1)
        [remote] = [m for m in st["teammates"] if m.get("host") == "m2"]
        assert (remote["name"], remote["pid"], remote["task"]) == ("alice", 2, b.id)
        [line] = [x for x in format_status(st).splitlines() if x.split()[:2] == ["m2", "alice"]]
        assert f"working on {b.id}" in line and "last heartbeat" in line, line
        assert format_status(st).splitlines()[1].split() == ["machine", "teammate", "state"]


def test_a_machine_that_died_shows_as_gone_once_its_lease_expires(
        tmp_path: Path, pg_board_url: str) -> None:
    from orchestrator.team.status import format_status, team_status

    with board_at(tmp_path, pg_board_url, "m1") as m1, \
            board_at(tmp_path, pg_board_url, "m2") as m2:
        m1.add("a")
        a = m2.claim("alice", lease_seconds=1.5)
        assert a is not None
        m2.team.publish("alice", "working", pid=2, task=a.id)
        # m2 dies here: nothing renews the lease
        [remote] = [m for m in team_status(Layout.at(tmp_path / "m1"), m1)["teammates"]
                    if m["machine"] == "m2"]
        assert remote["state"] == "working"
        time.sleep(2)
        st = team_status(Layout.at(tmp_path / "m1"), m1)
        [remote] = [m for m in st["teammates"] if m["machine"] == "m2"]
        assert remote["state"] == "gone" and remote["task"] is None
        [line] = [x for x in format_status(st).splitlines() if x.split()[:2] == ["m2", "alice"]]
        assert "gone" in line and "working" not in line, line


def test_an_idle_waiter_wakes_on_another_machines_add(tmp_path: Path, pg_board_url: str) -> None:
    with board_at(tmp_path, pg_board_url, "m1") as m1, \
            board_at(tmp_path, pg_board_url, "m2", rescan_seconds=30) as m2:
        assert m2.wait_for_ready(0.2) is False
        woke: list[float] = []

        def wait() -> None:
            m2.wait_for_ready(20)
            woke.append(time.monotonic())

        th = threading.Thread(target=wait)
        th.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        m1.add("wake up")
        th.join(10)
        assert woke and woke[0] - t0 < 2.0  # a NOTIFY, not the 30 s rescan
        assert m2.claim("bob") is not None


def test_a_waiting_lead_wakes_on_an_event_alone(tmp_path: Path, pg_board_url: str) -> None:
    """A webhook's ``forge_webhook`` event changes no task: the lead still hears it (and
    pokes its forge thread), as the file board's lead does on an append to events.jsonl."""
    with board_at(tmp_path, pg_board_url, "m1") as m1, \
            board_at(tmp_path, pg_board_url, "m2", rescan_seconds=30) as m2:
        m2.wait_for_change(0.2)  # its listener's first connect counts as a change
        assert m2.wait_for_change(0.2) is False
        timer = threading.Timer(0.3, lambda: m1.events.emit(ForgeWebhook(hook="check_run")))
        timer.start()
        t0 = time.monotonic()
        try:
            assert m2.wait_for_change(20) is True
        finally:
            timer.join()
        assert time.monotonic() - t0 < 2.0  # a NOTIFY, not the 30 s rescan


def test_a_waiting_teammate_sleeps_through_events_and_running_tasks(
        tmp_path: Path, pg_board_url: str) -> None:
    """A teammate follows the board without events (``events=False``) and without the claims
    and writes of running tasks (``running=False``): a task appends ~6 events and makes ~4
    such writes, and each woke every teammate of the team (a running one's heartbeat read
    its task again). A task that may be claimed, or one that ends, still wakes it at once."""
    with board_at(tmp_path, pg_board_url, "m1") as m1, \
            board_at(tmp_path, pg_board_url, "m2", rescan_seconds=30) as m2:
        m2.wait_for_change(0.2, events=False, running=False)  # the first connect is a change

        def quiet(step: Callable[[], object]) -> None:
            assert during(lambda: m2.wait_for_change(1.0, events=False, running=False),
                          step, 0.1)[0] is False

        def wakes(step: Callable[[], object]) -> None:
            ended, took = during(lambda: m2.wait_for_change(20, events=False, running=False),
                                 step, 0.3)
            assert ended is True
            assert took < 2.0  # a NOTIFY, not the 30 s rescan

        quiet(lambda: m1.events.emit(ForgeWebhook(hook="check_run")))
        wakes(lambda: m1.add("wake up"))
        claimed: list[Task | None] = []
        quiet(lambda: claimed.append(m1.claim("alice")))
        [task] = claimed
        assert task is not None and task.lease is not None
        token = task.lease.token
        quiet(lambda: m1.update(task.id, token, session_id="s"))
        wakes(lambda: m1.complete(task.id, token))


def test_a_lead_without_a_forge_sleeps_through_events_but_not_through_claims(
        tmp_path: Path, pg_board_url: str) -> None:
    """Only a lead with a forge thread follows events (``events=False`` otherwise); a lead
    still wakes on a claim (``running`` stays on: it times the lease's expiry from it)."""
    with board_at(tmp_path, pg_board_url, "m1") as m1, \
            board_at(tmp_path, pg_board_url, "m2", rescan_seconds=30) as m2:
        m1.add("a")
        m2.wait_for_change(0.2, events=False)  # its listener's first connect is a change
        for step, woke in ((lambda: m1.events.emit(ForgeWebhook(hook="check_run")), False),
                           (lambda: m1.claim("alice"), True)):
            ended, took = during(lambda: m2.wait_for_change(1.5, events=False), step, 0.2)
            assert ended is woke
            assert (took < 1.0) is woke  # a NOTIFY, not the wait's end


@pytest.mark.parametrize("repeatable", [True, False])
def test_a_hint_whose_answer_was_lost_is_repeated_only_when_harmless(
        board: PgBoard, pg_board_url: str, repeatable: bool) -> None:
    """`Database.hint` commits without waiting for the disk; when the connection is lost
    after the statement ran, an upsert is sent again, an insert (a transcript line) is not:
    it cannot tell whether it committed, and a second would be there twice."""
    import psycopg

    from orchestrator.board.pg.db import NO_WAIT
    from orchestrator.errors import BoardUnavailable

    url = pg_board_url
    board.db.run(lambda cur: cur.execute("CREATE TABLE hints (n int)"))
    sent: list[int] = []

    def insert(cur: psycopg.Cursor[tuple[object, ...]]) -> None:
        cur.execute(f"INSERT INTO hints SELECT 1 FROM {NO_WAIT}")
        sent.append(1)
        if len(sent) == 1:  # it ran (and committed); then the server drops the connection
            pid = cur.connection.info.backend_pid
            with psycopg.connect(url, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", (pid,))
            cur.execute("SELECT 1")  # as the lost answer is noticed: the connection is broken

    if repeatable:
        board.db.hint(insert, repeatable=True)
    else:
        with pytest.raises(BoardUnavailable):
            board.db.hint(insert, repeatable=False)
    rows = board.db.run(lambda cur: cur.execute("SELECT count(*) FROM hints").fetchone())
    assert rows == (2 if repeatable else 1,) and len(sent) == rows[0]


def test_the_listener_sleeps_on_its_socket_until_a_wanted_notify_comes(
        pg_cluster: Cluster, pg_board_url: str) -> None:
    """An idle waiter costs nothing: over a quiet 1.5 s its thread sleeps once or twice
    (psycopg's notifies() woke it every 100 ms: 15 times), and a NOTIFY it wants wakes it
    at once, while one it does not want (another teammate's claim) leaves it asleep."""
    import resource

    from orchestrator.board.pg.db import Listener

    def sleeps() -> int:  # voluntary context switches of this thread: each time it blocked
        return resource.getrusage(resource.RUSAGE_THREAD).ru_nvcsw

    listener = Listener(pg_board_url, ["orch_tasks"], lambda p: p.endswith(" pending"))
    try:
        assert listener.wait(1.0)  # the first wait connects: anything may have changed
        before, t0 = sleeps(), time.monotonic()
        assert listener.wait(1.5) is False
        assert time.monotonic() - t0 >= 1.4 and sleeps() - before <= 3
        db = db_of(pg_board_url)
        for payload, wanted in (("7 in_progress", False), ("8 pending", True)):
            timer = threading.Timer(0.3, pg_cluster.sql,
                                    (f"NOTIFY orch_tasks, '{payload}'", db))
            timer.start()
            t0 = time.monotonic()
            assert listener.wait(2.0) is wanted, payload
            took = time.monotonic() - t0
            timer.join()
            assert took >= 1.9 if not wanted else took < 1.0, (payload, took)
    finally:
        listener.close()


def test_a_database_restart_under_running_claimers_loses_nothing_and_doubles_nothing(
        tmp_path: Path, pg_cluster: Cluster, pg_board_url: str) -> None:
    with board_at(tmp_path, pg_board_url, lease_seconds=2) as b:
        for i in range(100):
            b.add(f"task {i}")
        procs = claimers(pg_board_url, tmp_path, 3, idle=3)
        deadline = time.monotonic() + 60  # every claimer has its board open and is claiming
        while time.monotonic() < deadline and {"w0", "w1", "w2"} - {
                e.actor for e in b.events.read() if e.event == "task_claimed"}:
            time.sleep(0.05)
        pg_cluster.stop("fast")  # every connection is cut
        time.sleep(0.5)
        pg_cluster.start()
        outs = [p.communicate(timeout=120) for p in procs]
        assert all(p.returncode == 0 for p in procs), [e for _, e in outs]
        # a claim whose commit reply was lost expires and is claimed again: reap and finish
        deadline = time.monotonic() + 30
        while b.list(Status.IN_PROGRESS) and time.monotonic() < deadline:
            time.sleep(0.5)
            b.requeue_expired()
            while (t := b.claim("sweeper")) is not None:
                assert t.lease is not None
                b.complete(t.id, t.lease.token)
        tasks = b.list()
        assert len(tasks) == 100 and {t.status for t in tasks} == {Status.REVIEW}
        completed = Counter(e.task for e in b.events.read() if e.event == "task_completed")
        assert set(completed.values()) == {1}  # no task completed twice


def test_mailboxes_logs_status_and_requests_as_rows(tmp_path: Path, pg_board_url: str) -> None:
    with board_at(tmp_path, pg_board_url, "m1") as m1, \
            board_at(tmp_path, pg_board_url, "m2") as m2:
        first = m1.mailboxes.send("lead", "alice", "hello")
        second = m2.mailboxes.send("lead", "bob", "done", kind="shutdown_response",
                                   request_id="r9", machine="m1")
        # each machine has its own lead (and alice): m2's own lead mailbox is another one
        own = m2.mailboxes.send("lead", "carol", "mine")
        assert [m.id for m in m2.mailboxes.read("lead")] == [own.id]
        assert [m.id for m in m1.mailboxes.unread("lead")] == [first.id, second.id]
        m1.mailboxes.ack("lead", first.id)
        assert [m.id for m in m1.mailboxes.unread("lead")] == [second.id]
        assert [m.id for m in m1.mailboxes.unread("lead", reader="ui")] == [first.id,
                                                                          second.id]
        assert m1.mailboxes.find("lead", request_id="r9")[0].get("from") == "bob"
        assert len(m1.mailboxes.read("lead")) == 2  # reading never deletes

        m1.logs.writer("task_001", actor="alice").write(Output(text="x" * 70_000))
        [rec] = m2.logs.read("task_001")
        assert rec.kind == "output" and rec.actor == "alice" and "more characters cut" in \
            rec.get("text")
        assert m2.logs.names("task_00") == ["task_001"] and not m2.logs.exists("task_1")

        m1.team.publish("alice", "working", pid=11, task="task_001")
        m2.team.publish("alice", "idle", pid=22)
        states = m1.team.all()
        assert sorted((s.state, s.pid) for s in states) == [("idle", 22), ("working", 11)]
        got = m1.team.get("alice")
        assert got is not None and got.pid == 11  # this machine's alice first
        m1.team.remove("alice")
        assert [s.pid for s in m2.team.all()] == [22]

        m1.requests.ask("permission", request_id="p1", sender="alice", task="task_001",
                        body="rm -rf build?", tool="Bash")
        assert [r.id for r in m2.requests.pending()] == ["p1"]
        answer: list[object] = []
        th = threading.Thread(target=lambda: answer.append(m1.requests.wait("p1", timeout=10)))
        th.start()
        m2.requests.answer("p1", approved=False, message="no", actor="lead")
        th.join(10)
        assert answer and getattr(answer[0], "approved", None) is False
        with pytest.raises(NotFound):
            m2.requests.answer("p1", approved=True)  # at most once
        assert m1.requests.pending() == []


def test_files_dropped_into_a_clones_inbox_land_on_the_shared_board(
        board: PgBoard, tmp_path: Path) -> None:
    inbox = tmp_path / "m1" / ".tasks" / "inbox"
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / "fix.md").write_text("---\npriority: 2\n---\n# Fix the login\n\nIt 500s.\n")
    (inbox / "bad.json").write_text("{not json")
    old = time.time() - 60  # settled files (intake waits for files still being written)
    for f in inbox.iterdir():
        os.utime(f, (old, old))
    [task] = board.intake()
    assert (task.subject, task.priority, task.description.strip()) == ("Fix the login", 2,
                                                                       "It 500s.")
    assert board.get(task.id).source == "inbox/fix.md"
    assert [p.name for p in inbox.iterdir() if not p.name.startswith(".")] == []
    rejected = tmp_path / "m1" / ".tasks" / "rejected"
    assert (rejected / "bad.json").exists() and (rejected / "bad.json.error.txt").exists()
    assert sorted(e.event for e in board.events.read()) == ["task_created", "task_rejected"]


def test_what_a_claimer_was_told_survives_a_server_crash_right_after(
        tmp_path: Path, pg_cluster: Cluster, pg_board_url: str) -> None:
    """Claims commit asynchronously under the events lock, then wait for the disk (see
    orchestrator.board.pg.db): a crash (stop -m immediate: WAL not yet written is gone)
    just after the answers takes none of them back."""
    pg_cluster.sql(f'ALTER DATABASE "{db_of(pg_board_url)}" SET synchronous_commit = on')
    with board_at(tmp_path, pg_board_url) as b:
        assert b.db.fast_commit  # the fast path is the one under test
        for i in range(30):
            b.add(f"task {i}")
        told = [t for _ in range(30) if (t := b.claim("alice")) is not None]
        pg_cluster.stop("immediate")
    pg_cluster.start()
    with board_at(tmp_path, pg_board_url) as b:
        assert [(t.id, t.fence) for t in b.list(Status.IN_PROGRESS)] == \
            [(t.id, t.fence) for t in told] and len(told) == 30
        claimed = [e.task for e in b.events.read() if e.event == "task_claimed"]
        assert claimed == [t.id for t in told]


def test_a_teammates_status_and_transcript_do_not_wait_for_the_disk(
        tmp_path: Path, pg_cluster: Cluster, pg_board_url: str) -> None:
    """A teammate's status and its transcript lines are not fsynced on the file board; on
    PostgreSQL they commit without waiting for the disk either (a few per task, each ~5 ms
    on a real server). Shown with a synchronous standby that never comes: a commit that
    waits for its flush waits for it forever, one that does not returns."""
    pg_cluster.sql(f'ALTER DATABASE "{db_of(pg_board_url)}" SET synchronous_commit = on')
    done = threading.Event()
    with board_at(tmp_path, pg_board_url, actor="alice") as b:
        b.add("a task")  # connected, and a durable commit made before the standby is named
        pg_cluster.sql("ALTER SYSTEM SET synchronous_standby_names = 'nobody'")
        pg_cluster.sql("SELECT pg_reload_conf()")
        try:
            def hints() -> None:
                b.team.publish("alice", "working", task="task_001", pid=os.getpid())
                b.logs.append("task_001", Output(text="step 1"))
                done.set()

            threading.Thread(target=hints, daemon=True).start()
            assert done.wait(5), "a status or transcript write waited for the disk"
        finally:  # releases a commit still waiting for the standby
            pg_cluster.sql("ALTER SYSTEM RESET synchronous_standby_names")
            pg_cluster.sql("SELECT pg_reload_conf()")
        assert done.wait(10)
        assert b.team.get("alice").task == "task_001"  # type: ignore[union-attr]
        assert [r.kind for r in b.logs.read("task_001")] == ["output"]


def test_a_claim_that_fails_in_the_database_leaves_the_board_usable(
        board: PgBoard, pg_cluster: Cluster, pg_board_url: str) -> None:
    """A claim is one round trip of PREPARE/BEGIN/EXECUTE/COMMIT/flush (Database.trip): when
    the statement fails, the transaction it began is rolled back, nothing is taken, and the
    next claim on the same connection works (its statement stays prepared, not re-made)."""
    pg_cluster.sql("CREATE FUNCTION orchestrator.boom() RETURNS trigger LANGUAGE plpgsql AS "
                   "$$ BEGIN IF NEW.actor = 'boom' THEN RAISE 'no claims for boom'; END IF; "
                   "RETURN NEW; END $$", db_of(pg_board_url))
    pg_cluster.sql("CREATE TRIGGER boom BEFORE INSERT ON orchestrator.events FOR EACH ROW "
                   "EXECUTE FUNCTION orchestrator.boom()", db_of(pg_board_url))
    a, b = board.add("a"), board.add("b")
    conn = board.db.connection()
    for _ in range(2):  # the first try also prepares the statement
        with pytest.raises(Exception, match="no claims for boom"):
            board.claim("boom")
        assert board.db.connection() is conn and not conn.broken
    assert [t.status for t in board.list()] == [Status.PENDING, Status.PENDING]
    t = board.claim("alice")
    assert t is not None and t.id == a.id and t.lease is not None and t.lease.token == 1
    t2 = board.claim("bob", task_id=b.id)
    assert t2 is not None and t2.id == b.id and board.db.connection() is conn
    assert [(e.event, e.actor) for e in board.events.read()][-2:] == [
        ("task_claimed", "alice"), ("task_claimed", "bob")]
    assert board.claim("alice") is None
    with pytest.raises(NotFound):
        board.claim("alice", task_id="task_999")


def test_a_fresh_boards_first_claim_commits_the_fast_way(
        tmp_path: Path, pg_board_url: str) -> None:
    """The claim's statement is prepared on the connection its first call opens, and only
    then knows whether commits go the fast way (asynchronously under the events lock, then
    a flush: see pg.db); made before, it held the lock over every fsync (8 claimers: 3x
    slower)."""
    with board_at(tmp_path, pg_board_url) as first:
        first.add("a")
    with PgBoard(Layout.at(tmp_path / "m1"), BoardConfig(url=pg_board_url, machine="m1")
                 ) as fresh:
        assert fresh.get("task_001").status is Status.PENDING
        assert fresh.claim("bob") is not None and fresh.db.fast_commit
        [text] = fresh.db.connection().execute(
            "SELECT statement FROM pg_prepared_statements WHERE name = 'orch_claim'"
        ).fetchone() or [""]
        assert "set_config('synchronous_commit', 'off', true)" in str(text)


def test_list_and_show_in_a_fresh_cli_process_go_through_psycopg(tmp_path: Path,
                                                                  pg_board_url: str) -> None:
    """One way to the database, the library's (issue 31): the ctypes shadow of libpq that
    read for one-shot commands is gone."""
    from importlib.util import find_spec

    assert find_spec("orchestrator.board.pg.lite") is None
    repo = tmp_path / "clone"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "orchestrator.toml").write_text(f'[board]\nurl = "{pg_board_url}"\n')
    with board_at(tmp_path, pg_board_url) as b:
        ids = [b.add(f"task {i}").id for i in range(3)]
        t = b.claim("alice")
        assert t is not None
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "orchestrator", "list",
                        "--status", "pending"], cwd=repo, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    assert [line.split()[0] for line in p.stdout.splitlines()[1:]] == ids[1:]
    assert "psycopg" in p.stderr
    p = subprocess.run([sys.executable, "-m", "orchestrator", "show", ids[0]], cwd=repo,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "in_progress" in p.stdout and "alice" in p.stdout, p.stdout


def test_a_board_refuses_a_password_a_missing_or_newer_schema_and_no_server_in_one_line(
        tmp_path: Path, pg_cluster: Cluster, pg_url: str, pg_board_url: str) -> None:
    from orchestrator.board.pg import schema
    from orchestrator.errors import BoardUnavailable, ConfigError

    with pytest.raises(ConfigError, match="holds a password"):  # past the config's own check
        PgBoard(Layout.at(tmp_path), BoardConfig.model_construct(url=pg_board_url.replace(
            "postgres@", "postgres:pw@")))
    with pytest.raises(BoardUnavailable, match="no orchestrator schema"):
        PgBoard(Layout.at(tmp_path), BoardConfig(url=pg_url))
    with pytest.raises(BoardUnavailable) as exc:
        schema.connect(f"postgresql://orch@/app?host={tmp_path}/nothing")
    text = str(exc.value)  # psycopg puts "connection is bad: " before libpq's words
    assert text.startswith("cannot reach the board database postgresql://orch@/app")
    assert "No such file or directory (is PostgreSQL running" in text and "\n" not in text
    pg_cluster.sql("UPDATE orchestrator.schema_version SET version = 99 WHERE version = "
                   "(SELECT max(version) FROM orchestrator.schema_version)",
                   db_of(pg_board_url))
    with pytest.raises(BoardUnavailable, match="newer than this orchestrator"):
        PgBoard(Layout.at(tmp_path), BoardConfig(url=pg_board_url))


def test_a_latin1_database_reads_back_what_was_written(tmp_path: Path,
                                                       pg_cluster: Cluster) -> None:
    from orchestrator.board.pg import schema

    name = f"latin1_{os.getpid()}"
    pg_cluster.sql(f'CREATE DATABASE "{name}" ENCODING \'LATIN1\' TEMPLATE template0 '
                   "LC_COLLATE 'C' LC_CTYPE 'C'")
    try:
        url = pg_cluster.url(name)
        schema.migrate(url)
        with board_at(tmp_path, url) as heavy:
            t = heavy.add("Grüße, façade, ½ ¼ - and ÿ", description="é" * 300)
            with PgBoard(Layout.at(tmp_path / "m1"), BoardConfig(url=url, machine="m1")
                         ) as other:
                assert other.get(t.id) == heavy.get(t.id) == t
                assert other.list() == [t]
    finally:
        pg_cluster.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_waiting_teammate_of_a_machine_that_died_shows_as_gone(
        tmp_path: Path, pg_board_url: str) -> None:
    """An idle teammate writes its state each rescan period; one that has been silent for
    three shows as gone, as a working one does once its lease expires."""
    from orchestrator.team.status import format_status, team_status

    with board_at(tmp_path, pg_board_url, "m1", rescan_seconds=0.4) as m1, \
            board_at(tmp_path, pg_board_url, "m2") as m2:
        m2.team.publish("alice", "idle", pid=2)
        m2.team.publish("bob", "stopped", pid=3)

        def states() -> dict[str, str]:
            return {m["name"]: m["state"] for m in team_status(
                Layout.at(tmp_path / "m1"), m1)["teammates"] if m["machine"] == "m2"}

        assert states() == {"alice": "idle", "bob": "stopped"}
        time.sleep(0.8)
        m2.team.publish("alice", "idle", pid=2)  # its heartbeat: still there
        assert states()["alice"] == "idle"
        time.sleep(1.4)  # m2 dies here: three rescan periods without a write
        assert states() == {"alice": "gone", "bob": "stopped"}
        st = team_status(Layout.at(tmp_path / "m1"), m1)
        [line] = [x for x in format_status(st).splitlines() if x.split()[:2] == ["m2", "alice"]]
        assert "gone (its machine stopped writing to the board)" in line, line
