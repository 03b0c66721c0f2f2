"""A team across machines, simulated on one: a bare repository as the shared remote, three
clones each running its own `orchestrator up` (own process group, own .worktrees) on one
PostgreSQL board. Real git, real processes, real PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from orchestrator.board import open_board
from orchestrator.config import BoardConfig
from orchestrator.layout import Layout
from tests.helpers import child_pids, git, make_repo

AGENT = 'echo "done by $(basename $(git rev-parse --git-common-dir | xargs dirname))" ' \
        '> "$ORCH_TASK_ID.txt"'


def orch(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def machines(tmp_path: Path, url: str, n: int = 3) -> tuple[Path, list[Path]]:
    seed = make_repo(tmp_path / "seed", {"app.py": "print('hi')\n"})
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(bare)], check=True)
    clones = []
    for i in range(n):
        c = tmp_path / f"machine{i}"
        subprocess.run(["git", "clone", "-q", str(bare), str(c)], check=True)
        p = orch(c, "init", "--board", url)
        assert p.returncode == 0, p.stderr
        clones.append(c)
    return bare, clones


def up(clone: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "up", *args], cwd=clone,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group, like a machine


def kill_machine(lead: subprocess.Popen[str]) -> None:
    """The whole machine dies at once: every process of it (teammates and their agents run
    in process groups of their own), none able to write a last word."""
    doomed = [lead.pid, *child_pids(lead.pid)]
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    lead.communicate(timeout=30)


@pytest.mark.timeout(400)
def test_thirty_tasks_on_three_machines_each_reviewed_once_with_work_on_the_remote(
        tmp_path: Path, pg_board_url: str) -> None:
    bare, clones = machines(tmp_path, pg_board_url)
    with open_board(Layout.at(clones[0]), BoardConfig(url=pg_board_url)) as board:
        for i in range(30):
            board.add(f"task {i}")
    procs = [up(c, "--burst", "-n", "1", "--command", AGENT) for c in clones]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs

    tasks = json.loads(orch(clones[1], "list", "--json").stdout)
    assert len(tasks) == 30 and {t["status"] for t in tasks} == {"review"}
    events = [json.loads(x) for x in orch(clones[2], "events", "--json").stdout.splitlines()]
    completed = Counter(e["task"] for e in events if e["event"] == "task_completed")
    assert sorted(completed) == sorted(t["id"] for t in tasks)
    assert set(completed.values()) == {1}  # each in review exactly once
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    by_machine = Counter(e["machine"] for e in events if e["event"] == "task_claimed")
    assert len(by_machine) >= 2, by_machine  # the work really was shared out
    for t in tasks:  # every branch is on the remote, with the task's own work
        assert git(bare, "show", f"{t['branch']}:{t['id']}.txt").startswith("done by machine")

    # review and merge on a machine that did not run the task: it fetches the branch
    other = next(c for c in clones
                 if not (c / ".worktrees" / tasks[0]["id"]).exists())
    review = json.loads(orch(other, "review", "--json").stdout)
    assert len(review) == 30
    # in review with its branch pushed, a task's WIP snapshot is of no more use: gone
    assert not git(bare, "for-each-ref", "refs/orchestrator/wip/")
    assert not any(git(c, "for-each-ref", "refs/orchestrator/wip/") for c in clones)
    p = orch(other, "merge", tasks[0]["id"])
    assert p.returncode == 0, p.stderr
    assert git(bare, "show", f"main:{tasks[0]['id']}.txt").startswith("done by machine")
    # a machine whose main is now behind the remote refuses to merge, saying why
    behind = next(c for c in clones if c != other)
    p = orch(behind, "merge", tasks[1]["id"])
    assert p.returncode == 1 and "the remote moved" in p.stderr, p.stderr
    assert json.loads(orch(behind, "show", tasks[1]["id"], "--json").stdout)["status"] == \
        "review"


@pytest.mark.timeout(300)
def test_a_killed_machines_task_resumes_on_another_from_its_wip_snapshot(
        tmp_path: Path, pg_board_url: str) -> None:
    _, (a, b) = machines(tmp_path, pg_board_url, 2)
    for c in (a, b):  # short leases, so the dead machine's task comes back quickly
        with (c / "orchestrator.toml").open("a") as f:
            f.write("lease_seconds = 3\n")
    slow = ('if [ -f progress.txt ]; then echo resumed >> progress.txt; '
            'else echo started > progress.txt; sleep 60; fi')
    assert orch(a, "add", "long job").returncode == 0
    machine_a = up(a, "-n", "1", "--command", slow)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the snapshot of the half-done work is pushed
            if git(a, "ls-remote", "origin", "refs/orchestrator/wip/task_001"):
                break
            time.sleep(0.5)
        else:
            raise AssertionError("no WIP snapshot was pushed")
    finally:
        kill_machine(machine_a)
    time.sleep(4)  # its lease runs out on the database's clock
    machine_b = up(b, "--burst", "-n", "1", "--command", slow)
    out = machine_b.communicate(timeout=120)[0]
    assert machine_b.returncode == 0, out
    task = json.loads(orch(b, "show", "1", "--json").stdout)
    events = [(e["event"], e["machine"][-9:]) for e in map(
        json.loads, orch(b, "events", "--json").stdout.splitlines())]
    assert task["status"] == "review" and task["attempts"] == 1, events
    assert git(b, "show", f"{task['branch']}:progress.txt").split() == ["started", "resumed"]


@pytest.mark.timeout(400)
def test_diff_discard_retry_approve_deny_plan_and_mcp_on_a_postgresql_board(
        tmp_path: Path, pg_board_url: str) -> None:
    """The commands not run by the tests above, against a PostgreSQL board from two clones:
    diff on a machine that did not run the task, discard (its WIP snapshot goes from the
    remote and the clone), retry of a failed task that another machine then finishes,
    approve/deny of requests, plan, and `orchestrator mcp` over stdio."""
    from tests.test_mcp_server import call, data, text
    from tests.test_plan import GOAL, THREE_TASKS, script

    bare, (a, b) = machines(tmp_path, pg_board_url, 2)
    for c in (a, b):
        with (c / "orchestrator.toml").open("a") as f:
            f.write("max_attempts = 1\n")
    for subject in ("keep", "drop", "flaky"):
        assert orch(a, "add", subject).returncode == 0
    flaky = AGENT + '; [ "$ORCH_TASK_ID" != task_003 ]'  # task_003 fails its only attempt
    p = up(a, "--burst", "-n", "1", "--command", flaky)
    out = p.communicate(timeout=240)[0]
    assert p.returncode == 1 and "tasks failed" in out, out  # a burst with a failure
    status = {t["id"]: t["status"] for t in json.loads(orch(b, "list", "--json").stdout)}
    assert status == {"task_001": "review", "task_002": "review", "task_003": "failed"}
    # the failed run's work was pushed as its WIP snapshot after the run
    assert git(bare, "show", "refs/orchestrator/wip/task_003:task_003.txt") == "done by machine0"

    # diff on B, which never had the branch: fetched from the remote
    p = orch(b, "diff", "1")
    assert p.returncode == 0 and "+done by machine0" in p.stdout, p.stderr
    assert "task_001.txt" in orch(b, "diff", "1", "--stat").stdout

    # discard on A: its worktree and branch go (its WIP snapshot went at review)
    wip = "refs/orchestrator/wip/task_002"
    assert not git(bare, "for-each-ref", wip) and not git(a, "for-each-ref", wip)
    # its work is on the remote (the branch, and origin/<branch> here): nothing to lose
    branch = json.loads(orch(a, "show", "2", "--json").stdout)["branch"]
    p = orch(a, "discard", "2")
    assert p.returncode == 0, p.stderr
    assert not (a / ".worktrees" / "task_002").exists()
    assert git(bare, "rev-parse", branch)  # the task's branch on the remote stays

    # retry on B; B's teammate resumes the branch A made and finishes it
    p = orch(b, "retry", "3", "-m", "the flake is fixed")
    assert p.returncode == 0 and "pending again" in p.stdout, p.stderr
    p = up(b, "--burst", "-n", "1", "--command", AGENT)
    out = p.communicate(timeout=240)[0]
    assert p.returncode == 0, out
    task = json.loads(orch(a, "show", "3", "--json").stdout)
    assert task["status"] == "review" and task["feedback"] == ["the flake is fixed"]
    assert git(bare, "show", f"{task['branch']}:task_003.txt") == "done by machine1"
    # A still has the failed attempt's worktree on the older branch: it will not merge that
    p = orch(a, "merge", "3")
    assert p.returncode == 1 and "finished on another machine" in p.stderr, p.stderr

    # plan on B writes its tasks to the shared board
    p = orch(b, "plan", GOAL, "--script", script(tmp_path, THREE_TASKS), "--json")
    assert p.returncode == 0, p.stderr
    planned = [t["id"] for t in json.loads(p.stdout)["tasks"]]
    assert planned == ["task_004", "task_005", "task_006"]
    listed = json.loads(orch(a, "list", "--status", "pending", "--json").stdout)
    assert [t["id"] for t in listed] == planned and listed[2]["blocked_by"] == ["task_004"]

    # the board over MCP (stdio) from A
    _, res = call(a, [("list_tasks", {"status": ["review"]}), ("get_task", {"id": "3"}),
                      ("diff", {"id": "task_003"}), ("cancel_task", {"id": "6"}),
                      ("events", {"task": "task_002", "event": "discarded"})])
    assert [t["id"] for t in data(res[0])["tasks"]] == ["task_001", "task_003"]
    assert data(res[1])["feedback"] == ["the flake is fixed"]
    assert not res[2].is_error and "+done by machine1" in text(res[2])  # B's work, fetched
    assert data(res[3])["status"] == "cancelled"
    assert [e["event"] for e in data(res[4])["events"]] == ["discarded"]
    # approve/deny answer requests a teammate on another machine asked
    # (each asked by the run that holds its task: a request expires with its run)
    with open_board(Layout.at(a), BoardConfig(url=pg_board_url), actor="alice") as board:
        asking = board.claim("alice", task_id=board.add("asks").id)
        assert asking is not None and asking.lease is not None
        for rid in ("r-yes", "r-no"):
            board.requests.ask("permission", request_id=rid, sender="alice", task=asking.id,
                               body="bash(touch x)", tool="bash", subject="touch x",
                               token=asking.lease.token)
        p = orch(b, "approve", "r-yes", "-m", "fine")
        assert p.returncode == 0 and "approved bash(touch x)" in p.stdout, p.stderr
        p = orch(b, "deny", asking.id, "-m", "not here", "--json")
        assert p.returncode == 0 and json.loads(p.stdout)["request_id"] == "r-no", p.stderr
        yes, no = board.requests.answer_of("r-yes"), board.requests.answer_of("r-no")
        assert yes is not None and (yes.approved, yes.message) == (True, "fine")
        assert no is not None and (no.approved, no.message) == (False, "not here")
        assert board.requests.pending() == []
        p = orch(b, "deny", "r-no")
        assert p.returncode == 1 and "no pending permission request" in p.stderr

    events = [json.loads(x) for x in orch(b, "events", "--json").stdout.splitlines()]
    kinds = Counter(e["event"] for e in events)
    assert kinds["permission_answered"] == 2 and kinds["task_retried"] == 1
    assert kinds["plan_written"] == 1 and kinds["task_cancelled"] == 1


def test_teammates_share_psycopg_and_libpq_loaded_by_the_spawner_before_it_forks(
        tmp_path: Path, pg_board_url: str) -> None:
    """A PostgreSQL teammate does not load its own copy of the driver: the spawner has
    imported psycopg (and so mapped libpq) before it forks them, so their pages are shared."""
    _, (clone,) = machines(tmp_path, pg_board_url, 1)
    lead = up(clone, "-n", "2", "--command", "true")
    try:
        with open_board(Layout.at(clone), BoardConfig(url=pg_board_url)) as board:
            deadline = time.monotonic() + 60
            while {getattr(board.team.get(n), "state", None) for n in ("alice", "bob")} \
                    != {"idle"}:
                assert time.monotonic() < deadline, "the teammates did not start"
                time.sleep(0.1)
        [spawner] = [p for p in child_pids(lead.pid)
                     if Path(f"/proc/{p}/comm").read_text().strip() == "orch-spawner"]
        assert "libpq" in Path(f"/proc/{spawner}/maps").read_text()
    finally:
        lead.send_signal(signal.SIGTERM)
        out = lead.communicate(timeout=60)[0]
    assert lead.returncode == 0, out


@pytest.mark.timeout(200)
def test_down_stops_this_machines_team_and_down_all_every_machines(
        tmp_path: Path, pg_board_url: str) -> None:
    _, (a, b) = machines(tmp_path, pg_board_url, 2)
    teams = [up(c, "-n", "1", "--command", AGENT) for c in (a, b)]
    try:
        with open_board(Layout.at(a), BoardConfig(url=pg_board_url)) as board:
            def states() -> dict[str, str]:
                return {str(st.host): st.state for st in board.team.all()}

            deadline = time.monotonic() + 60
            while list(states().values()).count("idle") < 2:
                assert time.monotonic() < deadline, states()
                time.sleep(0.3)
            machine_b = next(h for h in states() if h.endswith(str(b)))
            p = orch(a, "down")
            assert p.returncode == 0 and p.stdout.startswith("stopped (pid"), p.stderr
            teams[0].communicate(timeout=60)
            time.sleep(2)  # what a stop request to every `alice` would have done by now
            assert teams[1].poll() is None and states()[machine_b] == "idle", states()

            # a message for the other machine's alice says so (`send` is this machine's)
            p = orch(a, "send", "alice", "hello over there", "--machine", machine_b)
            assert p.returncode == 0 and p.stdout.endswith(f"to alice on {machine_b}\n")
            with open_board(Layout.at(b), BoardConfig(url=pg_board_url)) as on_b:
                assert [m.body for m in on_b.mailboxes.read("alice")][-1] == \
                    "hello over there"
            assert "hello over there" not in [m.body for m in board.mailboxes.read("alice")]
            p = orch(a, "send", "alice", "x", "--machine", "nowhere")
            assert p.returncode == 1 and "no machine 'nowhere'" in p.stderr

            p = orch(a, "down", "--all")
            assert p.returncode == 0, p.stderr
            assert p.stdout.strip() == ("orchestrator is not running; asked the teams of 1 "
                                        f"other machine to stop: {machine_b}")
            out = teams[1].communicate(timeout=60)[0]
            assert teams[1].returncode == 0 and "shutdown requested" in out, out
            assert states()[machine_b] == "stopped"
    finally:
        for t in teams:
            if t.poll() is None:
                t.kill()
                t.communicate()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (needs root)")
@pytest.mark.timeout(200)
def test_a_full_disk_on_one_machine_hands_its_task_to_another_without_an_attempt(
        tmp_path: Path, pg_board_url: str) -> None:
    """Machine A's clone lives on a 2 MB file system: its agent's output fills it, so git
    cannot store the work (ENOSPC inside git). That is A's fault, not the task's: the task
    is handed back with no attempt counted, A stops claiming for a while, B does it."""
    bare, (_, b) = machines(tmp_path, pg_board_url, 2)
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)], check=True)
    try:
        a = small / "machine_a"
        subprocess.run(["git", "clone", "-q", str(bare), str(a)], check=True)
        assert orch(a, "init", "--board", pg_board_url).returncode == 0
        assert orch(a, "add", "big output").returncode == 0
        big = "head -c 1400000 /dev/urandom > big.bin"
        machine_a = up(a, "--burst", "-n", "1", "--command", big)
        with open_board(Layout.at(b), BoardConfig(url=pg_board_url)) as board:
            deadline = time.monotonic() + 60
            while not [e for e in board.events.read() if e.event == "task_released"]:
                assert time.monotonic() < deadline and machine_a.poll() is None
                time.sleep(0.3)
            machine_b = up(b, "--burst", "-n", "1", "--command", big)
            out_b = machine_b.communicate(timeout=120)[0]
            assert machine_b.returncode == 0, out_b
            out_a = machine_a.communicate(timeout=60)[0]
            task = board.get("task_001")
            released = [e for e in board.events.read() if e.event == "task_released"]
            completed = [e for e in board.events.read() if e.event == "task_completed"]
        assert task.status == "review" and task.attempts == 0, (task, out_a)
        assert "No space left on device" in released[0].fields["reason"], released
        assert [e.fields["machine"].endswith("machine_a") for e in released] == [True]
        assert [e.fields["machine"].endswith(str(b)) for e in completed] == [True]
        assert task.branch and git(bare, "cat-file", "-s", f"{task.branch}:big.bin") == \
            "1400000"
        assert "Traceback" not in out_a
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


@pytest.mark.timeout(300)
def test_land_pushes_what_it_merged_and_a_refused_push_leaves_the_task_in_review(
        tmp_path: Path, pg_board_url: str) -> None:
    bare, (a,) = machines(tmp_path, pg_board_url, 1)
    with open_board(Layout.at(a), BoardConfig(url=pg_board_url)) as board:
        first, second = board.add("first"), board.add("second")
    p = up(a, "--burst", "-n", "1", "--command", AGENT)
    out = p.communicate(timeout=200)[0]
    assert p.returncode == 0, out
    hook = bare / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'main is frozen today' >&2\nexit 1\n")
    hook.chmod(0o755)
    head = git(a, "rev-parse", "HEAD")

    p = orch(a, "land", first.id, "--verify", "true")
    assert p.returncode == 1, p.stdout + p.stderr
    shown = json.loads(orch(a, "show", first.id, "--json").stdout)
    assert shown["status"] == "review" and shown["wait"]["kind"] == "push_rejected"
    assert "pre-receive hook declined" in shown["wait"]["reason"]
    assert git(a, "rev-parse", "HEAD") == head  # moved back: main here is what the remote has
    assert f"orchestrator land {first.id}" in orch(a, "status").stdout

    hook.unlink()
    p = orch(a, "land", "--all-reviewed", "--verify", "true")
    assert p.returncode == 0, p.stdout + p.stderr
    for t in (first, second):
        assert git(bare, "show", f"main:{t.id}.txt").startswith("done by machine")
        shown = json.loads(orch(a, "show", t.id, "--json").stdout)
        assert shown["status"] == "merged" and shown["wait"] is None


@pytest.mark.timeout(120)
def test_a_command_agents_work_is_snapshotted_as_its_files_change(
        tmp_path: Path, pg_board_url: str) -> None:
    """With a 30 s lease the heartbeat pushes every 10 s; a change of the worktree is
    pushed within a second or two of it."""
    bare, (a,) = machines(tmp_path, pg_board_url, 1)
    assert orch(a, "add", "slow").returncode == 0
    team = up(a, "-n", "1", "--command", "sleep 2; echo one > a.txt; sleep 30")
    try:
        wip = "refs/orchestrator/wip/task_001"
        deadline = time.monotonic() + 60
        while "a.txt" not in git(bare, "ls-tree", "--name-only", wip) if git(
                bare, "for-each-ref", wip) else True:
            assert time.monotonic() < deadline, "no snapshot with a.txt was pushed"
            time.sleep(0.2)
        events = [json.loads(x) for x in orch(a, "events", "--json").stdout.splitlines()]
        claimed = next(e for e in events if e["event"] == "task_claimed")
        from datetime import datetime

        took = (datetime.now().astimezone() - datetime.fromisoformat(
            claimed["ts"].replace("Z", "+00:00"))).total_seconds()
        assert took < 8, took  # 2 s of sleep, then a snapshot in ~1 s: not the 10 s beat
    finally:
        for _ in range(2):  # cold: the agent is killed
            team.send_signal(signal.SIGINT)
            time.sleep(0.2)
        with contextlib.suppress(subprocess.TimeoutExpired):
            team.communicate(timeout=30)
        if team.poll() is None:
            team.kill()
            team.communicate()


@pytest.mark.timeout(120)
def test_an_agent_that_only_says_the_disk_is_full_still_burns_its_attempts(
        tmp_path: Path, pg_board_url: str) -> None:
    """What an agent prints is not proof of a machine fault: the disk is checked."""
    _, (a,) = machines(tmp_path, pg_board_url, 1)
    with (a / "orchestrator.toml").open("a") as f:
        f.write("max_attempts = 2\n")
    assert orch(a, "add", "liar").returncode == 0
    team = up(a, "--burst", "-n", "1", "--command",
              "echo 'fatal: No space left on device' >&2; exit 1")
    try:
        out = team.communicate(timeout=60)[0]
    finally:
        if team.poll() is None:
            os.killpg(team.pid, signal.SIGKILL)
            team.communicate()
    task = json.loads(orch(a, "show", "1", "--json").stdout)
    assert task["status"] == "failed" and task["attempts"] == 2, out


def test_an_idle_teammate_of_a_killed_machine_shows_gone_on_another(
        tmp_path: Path, pg_board_url: str) -> None:
    """An idle teammate writes its state each rescan period: `status` on another machine
    shows it idle while it lives, for longer than three periods, and gone once its machine
    died without a word (its lead could not even mark it stopped)."""
    _, (a, b) = machines(tmp_path, pg_board_url, 2)
    for c in (a, b):
        with (c / "orchestrator.toml").open("a") as f:
            f.write("rescan_seconds = 0.5\n")

    def alice_of_a() -> dict[str, object] | None:
        st = json.loads(orch(b, "status", "--json").stdout)
        return next((m for m in st["teammates"] if m.get("host") and m["name"] == "alice"),
                    None)

    machine_a = up(a, "-n", "1", "--command", "true")
    try:
        deadline = time.monotonic() + 60
        while (mate := alice_of_a()) is None or mate["state"] != "idle":
            assert time.monotonic() < deadline, mate
            time.sleep(0.2)
        time.sleep(2)  # four rescan periods: its heartbeats keep it idle
        mate = alice_of_a()
        assert mate is not None and mate["state"] == "idle", mate
    finally:
        kill_machine(machine_a)
    deadline = time.monotonic() + 30
    while (mate := alice_of_a()) is None or mate["state"] != "gone":
        assert time.monotonic() < deadline, mate
        time.sleep(0.2)
    assert mate["task"] is None
    line = next(x for x in orch(b, "status").stdout.splitlines() if " alice " in f" {x} "
                and "gone" in x)
    assert "gone (its machine stopped writing to the board)" in line, line
