"""Teammates forked from the spawner; the exec fallback; a teammate frozen holding a lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.board import init_repo
from orchestrator.config import BoardConfig, Config
from orchestrator.events import LandNote, event_status, last_status_event
from orchestrator.model import Status
from orchestrator.procutil import pid_alive, process_state, stat_fields
from orchestrator.team.lead import Child, Lead
from tests.helpers import cmdline
from tests.test_team_support import (
    add_tasks,
    events,
    finish,
    mate,
    start,
    tasks,
    team_cleanup,
    team_env,
    wait_until,
    working_on,
)


def _parent(pid: int) -> int:
    fields = stat_fields(pid)
    assert fields is not None, f"no process {pid}"
    return int(fields[1])


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def _spawner_of(pid: int) -> int | None:
    parent = _parent(pid)
    return parent if _comm(parent) == "orch-spawner" else None


@pytest.mark.slow
def test_teammates_are_forked_by_the_spawner_and_their_exits_reach_the_lead(repo: Path) -> None:
    [task] = add_tasks(repo, 1)
    with team_cleanup(repo):
        proc = start(repo, "-n", "2", "--command", "sleep 60", env=team_env())
        victim = wait_until(lambda: working_on(repo, task.id), what="the task to start")
        other = mate(repo, "bob" if victim["name"] == "alice" else "alice")
        for st in (victim, other):
            spawner = _spawner_of(st["pid"])
            assert spawner is not None and _parent(spawner) == proc.pid
            assert _comm(st["pid"]) == f"orch-{st['name']}"  # named by now: it is working
        os.kill(victim["pid"], signal.SIGKILL)
        wait_until(lambda: events(repo, "task_requeued"), what="the dead teammate's task back")
        restarted = wait_until(lambda: (m := mate(repo, victim["name"])).get("pid") not in
                               (None, victim["pid"]) and pid_alive(m["pid"]) and m,
                               what="the restart")  # no status at all between death and restart
        assert _spawner_of(restarted["pid"]) == _spawner_of(other["pid"])
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)
        finish(proc)
        assert not pid_alive(spawner), "the spawner outlived the lead"
    deaths = [e for e in events(repo, "teammate_stopped") if e["exit_code"] == -9]
    assert [e["teammate"] for e in deaths] == [victim["name"]]


@pytest.mark.slow
def test_without_the_spawner_teammates_start_as_fresh_interpreters(repo: Path) -> None:
    add_tasks(repo, 1)
    with team_cleanup(repo):
        proc = start(repo, "-n", "1", "--command", "sleep 60", env=team_env())
        first = wait_until(lambda: (m := mate(repo, "alice")).get("state") == "working" and m,
                           what="alice to work")
        spawner = _spawner_of(first["pid"])
        assert spawner is not None
        os.kill(spawner, signal.SIGKILL)  # then alice dies too: her exit code is unknown
        os.kill(first["pid"], signal.SIGKILL)
        again = wait_until(lambda: (m := mate(repo, "alice")).get("pid") not in
                           (None, first["pid"]) and pid_alive(m["pid"]) and m,
                           what="alice to be restarted")  # no status between death and restart
        # (read it again until the exec is through: under load it can be caught mid-exec)
        wait_until(lambda: "orchestrator.team.teammate" in cmdline(again["pid"]), 30,
                   "alice to run as a fresh interpreter")
        assert _parent(again["pid"]) == proc.pid
        wait_until(lambda: [t for t in tasks(repo) if t.owner == "alice"],
                   what="the task taken again")
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)
        _, out = finish(proc)
    assert "the spawner is gone" in out


def test_the_spawner_is_forked_from_the_lead_and_holds_none_of_its_files(repo: Path) -> None:
    """The spawner starts as a fork of the lead (what the lead imported is loaded already),
    not as a fresh interpreter; and neither it nor a teammate holds a file of the lead's
    open: the lead's lock must go with the lead, its log and pipes are its own."""
    with team_cleanup(repo):
        proc = start(repo, "-n", "1", "--command", "true", env=team_env())
        alice = wait_until(lambda: (m := mate(repo, "alice")).get("state") == "idle" and m,
                           what="alice to wait for work")
        spawner = _spawner_of(alice["pid"])
        assert spawner is not None and _parent(spawner) == proc.pid
        assert cmdline(spawner) == cmdline(proc.pid)
        lead_files = {os.readlink(f"/proc/{proc.pid}/fd/{fd}")
                      for fd in os.listdir(f"/proc/{proc.pid}/fd")} - {"/dev/null"}
        assert any(f.endswith("daemon.lock") for f in lead_files), lead_files
        for pid in (spawner, alice["pid"]):
            held = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")
                    if int(fd) > 2}
            # files by path, pipes by inode (a teammate shares one with the lead on purpose:
            # it closes when the lead dies); "anon_inode:…" names a kind, not one object
            shared = {f for f in held & lead_files if not f.startswith("anon_inode:")}
            allowed = set() if pid == spawner else {f for f in shared if f.startswith("pipe:")}
            assert len(allowed) <= 1 and not shared - allowed, (pid, shared)
        proc.send_signal(signal.SIGTERM)
        assert finish(proc)[0] == 0


HOLD_LOCK = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
if sys.argv[2] == "lock":
    fcntl.flock(fd, fcntl.LOCK_EX)
print("ready", flush=True)
time.sleep(120)
"""


def test_a_teammate_stopped_past_its_lease_holding_a_lock_is_killed(repo: Path) -> None:
    layout = init_repo(repo)
    config = Config(board=BoardConfig(lease_seconds=1))
    lead = Lead(layout, config, teammates=2)
    procs = [subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(repo / f"{how}.lock"), how],
                              stdout=subprocess.PIPE, text=True) for how in ("lock", "nolock")]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
            os.kill(p.pid, signal.SIGSTOP)
        holder, idle = procs
        lead.children = [Child("alice", proc=holder), Child("bob", proc=idle)]
        wait_until(lambda: all(process_state(p.pid) == "T" for p in procs), 10,
                   "both to stop")
        lead.kill_frozen()  # stopped, but not yet for a lease
        assert holder.poll() is None and idle.poll() is None
        wait_until(lambda: (lead.kill_frozen(), holder.poll())[1] is not None, 10,
                   "the lock holder to be killed")
        assert holder.returncode == -signal.SIGKILL
        assert idle.poll() is None, "a stopped teammate holding no lock is left alone"
    finally:
        for p in procs:
            p.kill()
            p.wait()
            assert p.stdout is not None
            p.stdout.close()
        lead.waker.close()


def test_the_spawner_forks_a_teammate_passes_its_lead_pipe_and_reports_its_exit(
        repo: Path) -> None:
    """The protocol on its own: a module that cannot be preloaded is skipped, the lead
    pipe reaches the teammate (closing it stops the teammate), the exit code comes back."""
    from orchestrator.team.spawner import Spawner

    init_repo(repo)
    spawner = Spawner().start(preload=["orchestrator.no_such_module"])
    r, w = os.pipe()
    try:
        child = spawner.spawn(["--root", str(repo), "--name", "zed", "--lead-fd", "{lead_fd}"], r)
        os.close(r)
        assert child.poll() is None
        wait_until(lambda: _comm(child.pid) == "orch-zed", 10, "the child to name itself")
        wait_until(lambda: (mate(repo, "zed") or {}).get("state") == "idle", 30,
                   "zed to wait for work")
        os.close(w)  # the lead is gone: the teammate stops on its own
        w = -1
        assert child.wait() == 0
        assert mate(repo, "zed")["state"] == "stopped"
    finally:
        if w >= 0:
            os.close(w)
        spawner.close()
    assert spawner.pid is None


def test_a_hung_spawner_cannot_hang_the_lead(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.team import spawner as mod

    monkeypatch.setattr(mod, "EXIT_TIMEOUT", 1.0)
    init_repo(repo)
    spawner = mod.Spawner().start()
    r, w = os.pipe()
    try:
        child = spawner.spawn(["--root", str(repo), "--name", "zed", "--lead-fd", "{lead_fd}"], r)
        os.close(r)
        assert spawner.pid is not None
        frozen = spawner.pid
        os.kill(frozen, signal.SIGSTOP)  # it can no longer report exits
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait() == -signal.SIGKILL  # told by nobody: taken as killed
        assert spawner.sock is None and not pid_alive(frozen), "the hung spawner was stopped"
        with pytest.raises(mod.SpawnerGone):
            spawner.spawn(["--name", "again"], w)
    finally:
        os.close(w)
        spawner.close()


def test_the_lead_logs_the_last_board_write_of_a_teammate_killed_before_logging_it(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.board import open_board
    from orchestrator.model import Status

    layout = init_repo(repo)
    lead = Lead(layout, Config(), teammates=1)
    with open_board(layout, actor="alice") as alice, open_board(layout, actor="lead") as board:
        lead.board = board
        done, running, again = (alice.add(s) for s in ("done", "running", "again"))
        tokens = {t.id: alice.claim("alice", task_id=t.id).fence for t in (done, running, again)}
        alice.release(again.id, tokens[again.id])
        alice.claim("bob", task_id=again.id)  # taken again since: not alice's write to log
        with monkeypatch.context() as m:  # the board write lands; the event never does
            m.setattr(alice.events, "emit", lambda *a, **k: {})
            alice.complete(done.id, tokens[done.id])
        for t in (done, running, again):
            lead.log_lost_write("alice", t.id)
        last = {t.id: last_status_event(board.events, t.id) for t in (done, running, again)}
        assert board.get(done.id).status is Status.REVIEW
    assert last[done.id] is not None and last[done.id]["event"] == "task_completed"
    assert last[done.id]["actor"] == "alice" and last[done.id]["recovered"] is True
    assert last[done.id]["token"] == tokens[done.id]
    for t in (running, again):  # still running, or someone else's now: nothing added
        assert last[t.id] is not None and event_status(last[t.id]) == "in_progress"
        assert "recovered" not in last[t.id]
    lead.waker.close()


def test_the_tail_of_the_events_log_skips_a_torn_line(repo: Path) -> None:
    from orchestrator.board.eventlog import EventLog

    log = EventLog(repo / "events.jsonl")
    for i in range(300):
        log.emit(LandNote(note="x" * (i % 37)), f"task_{i:03d}")
    with (repo / "events.jsonl").open("ab") as fh:
        fh.write(b'{"torn": ')  # a writer killed mid-line
    assert [e["task"] for e in log.tail(300)] == [f"task_{i:03d}" for i in range(300)]
    assert [e["task"] for e in log.tail(2)] == ["task_298", "task_299"]
    assert [e.seq for e in log.tail(5, task="task_007")] == [8]


LEAD_FORKS = """
import sys
from pathlib import Path
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.team.lead import Lead

lead = Lead(Layout.at(Path(sys.argv[1])), Config.model_validate(
    {"board": {"url": "postgresql:///nowhere?host=/nonexistent"}}))
assert "psycopg" not in sys.modules, "imported before the fork: nothing to test"
lead.start_spawner()
assert lead.spawner is not None and lead.spawner.pid is not None
print("psycopg" in sys.modules, flush=True)
lead.spawner.close()
"""


def test_a_postgresql_lead_imports_its_driver_once_before_it_forks_the_spawner(
        repo: Path) -> None:
    # the lead opens the board right after the fork: imported before it, psycopg is paid
    # once (shared by the spawner and every teammate), not again by the lead after it
    out = subprocess.run([sys.executable, "-c", LEAD_FORKS, str(repo)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out == "True\n"


def test_bubblewrap_is_probed_once_for_the_whole_team(repo: Path, tmp_path: Path) -> None:
    # the lead probes it before it forks the spawner: each teammate inherits the answer
    # instead of starting a process in namespaces of its own before its first claim
    import shutil

    real = shutil.which("bwrap")
    if real is None:
        pytest.skip("bubblewrap is not installed")
    add_tasks(repo, 3)
    calls = tmp_path / "bwrap-calls"
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "bwrap").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {calls}\n'
                                f'exec {real} "$@"\n')
    (shim / "bwrap").chmod(0o755)
    env = team_env(agent_sandbox="on")
    env["PATH"] = f"{shim}:{env['PATH']}"
    with team_cleanup(repo):
        code, out = finish(start(repo, "--burst", "-n", "3", "--command",
                                 "echo hi > out.txt", env=env))
    assert code == 0, out
    assert all(t.status.value == "review" for t in tasks(repo)), out
    runs = calls.read_text().splitlines()
    probes = [r for r in runs if r.endswith(" true")]  # what the tasks run ends in their command
    assert (len(probes), len(runs)) == (1, 4), runs


def test_a_burst_is_not_drained_by_an_attempt_that_fails_between_its_reads(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the burst ended with the task pending for its retry (test_pg_machines' disk-full test
    # caught it under load): the lead asked 'anything claimable?' (no: it ran), the attempt
    # failed back to pending, then 'anything running?' (no)
    from orchestrator.board import open_board

    layout = init_repo(repo)
    config = Config.load(repo)
    lead = Lead(layout, config, burst=True)
    with open_board(layout, config.board, actor="lead") as board:
        lead.board = board
        board.add("fails once")
        task = board.claim("alice")
        assert task is not None and task.lease is not None
        token = task.lease.token
        ready = board.ready

        def then_the_attempt_fails() -> object:
            answer = ready()
            if board.get(task.id).status is Status.IN_PROGRESS:
                board.fail(task.id, token, "exit code 1")  # back to pending: a retry
            return answer

        monkeypatch.setattr(board, "ready", then_the_attempt_fails)
        assert board.get(task.id).status is Status.IN_PROGRESS
        assert not lead.drained()
        assert board.get(task.id).status is Status.PENDING
