"""The daemon's lifecycle through the CLI: detach, refusal, status, send, handshake, stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.board.mailboxes import Mailbox
from orchestrator.board.tasklogs import TaskLog
from orchestrator.cli import main
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.team import status
from orchestrator.team.status import pid_alive
from orchestrator.transcript import Output
from tests.test_team_support import (
    add_tasks,
    cli,
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


def all_idle(repo: Path, names: tuple[str, ...]) -> bool:
    return all(mate(repo, n).get("state") == "idle" for n in names)


def test_detached_daemon_status_send_shutdown_handshake_and_down(repo: Path) -> None:
    layout = Layout.at(repo)
    with team_cleanup(repo):
        # idle teammates look at their mailbox each second; the log as JSON lines
        env = team_env(board_rescan_seconds=1, team_log_format="json")
        res = cli(repo, "up", "--detach", "-n", "2", "--command", "true", env=env)
        assert res.returncode == 0, res.stderr
        assert "running in the background" in res.stdout
        pid = int(status.pid_file(layout).read_text())
        assert pid_alive(pid)
        wait_until(lambda: all_idle(repo, ("alice", "bob")), what="teammates idle")

        again = cli(repo, "up", "-n", "1", "--command", "true")
        assert again.returncode == 1
        assert again.stderr.startswith("error: orchestrator is already running")
        assert str(pid) in again.stderr and "Traceback" not in again.stderr
        assert cli(repo, "up", "--detach", "--command", "true").returncode == 1

        st = json.loads(cli(repo, "status", "--json").stdout)
        assert st["running"] and st["pid"] == pid and st["uptime"] >= 0
        assert [(m["name"], m["state"]) for m in st["teammates"]] == [("alice", "idle"),
                                                                     ("bob", "idle")]
        human = cli(repo, "status").stdout
        assert f"pid {pid}" in human and "alice" in human and "idle" in human
        # an idle teammate writes its state each rescan period (a heartbeat); how long it
        # has been idle counts from when it became idle, not from its last write
        time.sleep(2.5)
        ages = {m["name"]: m["seconds"] for m in json.loads(
            cli(repo, "status", "--json").stdout)["teammates"]}
        assert min(ages.values()) >= 2, ages

        sent = cli(repo, "send", "alice", "please look at the flaky test")
        assert sent.returncode == 0 and "sent message" in sent.stdout
        [msg] = Mailbox(layout, "alice").find(kind="message")
        assert msg["body"] == "please look at the flaky test" and msg["from"] == "cli"

        # the shutdown handshake: a request id answered by the teammate, which then stops
        req = json.loads(cli(repo, "send", "bob", "time to go", "--kind", "shutdown_request",
                             "--json").stdout)[0]
        bob = mate(repo, "bob")["pid"]
        answer = wait_until(lambda: Mailbox(layout, "cli").find(
            kind="shutdown_response", request_id=req["request_id"]), 30, "the answer")
        assert answer[0]["from"] == "bob"
        wait_until(lambda: not pid_alive(bob), 30, "bob to stop")
        st = json.loads(cli(repo, "status", "--json").stdout)
        assert {m["name"]: m["state"] for m in st["teammates"]} == {"alice": "idle",
                                                                   "bob": "stopped"}

        down = cli(repo, "down")
        assert down.returncode == 0 and f"stopped (pid {pid})" in down.stdout
        assert not pid_alive(pid) and not status.pid_file(layout).exists()
        assert not json.loads(cli(repo, "status", "--json").stdout)["running"]
        assert "not running" in cli(repo, "down").stdout
    assert (layout.run / "daemon.log").exists()
    lines = [json.loads(x) for x in (layout.run / "daemon.log").read_text().splitlines()]
    assert {r.get("actor") for r in lines} >= {"lead", "alice", "bob"}


def test_warm_stop_releases_the_running_task_and_cold_stop_ends_it_now(repo: Path) -> None:
    [task] = add_tasks(repo, 1)
    env = team_env(board_lease_seconds=30)
    with team_cleanup(repo):
        proc = start(repo, "-n", "1", "--command", "sleep 60", env=env)
        wait_until(lambda: working_on(repo, task.id), what="the task to start")
        st = json.loads(cli(repo, "status", "--json").stdout)
        [alice] = st["teammates"]
        assert alice["state"] == "working" and alice["task"] == task.id
        assert alice["seconds"] is not None
        assert "working on task_001" in cli(repo, "status").stdout
        proc.send_signal(signal.SIGINT)  # Ctrl-C once: warm
        code, out = finish(proc)
    assert code == 0, out
    [t] = tasks(repo)
    assert t.status == Status.PENDING and t.attempts == 0 and t.lease is None
    [rel] = events(repo, "task_released")
    assert rel["actor"] == "alice" and "stopping" in rel["reason"]
    assert events(repo, "teammate_stopped")[0]["exit_code"] == 0


def test_down_now_is_a_cold_stop(repo: Path) -> None:
    [task] = add_tasks(repo, 1)
    # a backend that shrugs off SIGTERM: the cold stop must still end everything
    stubborn = "trap '' TERM; sleep 60"
    with team_cleanup(repo):
        cli(repo, "up", "--detach", "-n", "1", "--command", stubborn)
        st = wait_until(lambda: working_on(repo, task.id), what="the task to start")
        res = cli(repo, "down", "--now")
        assert res.returncode == 0, res.stderr
        assert not pid_alive(st["pid"])
        wait_until(lambda: not pid_alive(st["backend_pgid"]), 10, "the backend to die")
    [t] = tasks(repo)
    assert t.status == Status.PENDING and t.attempts == 0


def test_a_crashed_teammate_is_restarted_and_its_death_recorded(repo: Path) -> None:
    with team_cleanup(repo):
        proc = start(repo, "-n", "1", "--command", "true")
        first = wait_until(lambda: mate(repo, "alice").get("state") == "idle"
                           and mate(repo, "alice"), what="alice idle")
        os.kill(first["pid"], signal.SIGKILL)
        again = wait_until(lambda: (m := mate(repo, "alice")).get("state") == "idle"
                           and m["pid"] != first["pid"] and m, 30, "alice restarted")
        assert pid_alive(again["pid"])
        proc.send_signal(signal.SIGTERM)
        code, out = finish(proc)
    assert code == 0, out
    started = [e["pid"] for e in events(repo, "teammate_started")]
    assert started == [first["pid"], again["pid"]]
    stops = events(repo, "teammate_stopped")
    assert [e["exit_code"] for e in stops] == [-9, 0]


def test_bad_input_gets_one_clear_line(repo: Path, capsys: pytest.CaptureFixture[str],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo)
    cases = [
        (("up", "--backend", "nope"), "unknown backend 'nope'"),
        (("up", "--burst"), "the command backend needs a command"),
        (("up", "-n", "0", "--command", "true"), "-n must be between 1 and 64"),
        (("logs", "task_042"), "no task task_042"),
        (("logs", "banana"), "not a task id"),
        (("send", "../etc", "hi"), "not a mailbox name"),
    ]
    for args, wanted in cases:
        with pytest.raises(SystemExit) as exit_:
            main(list(args))
        err = capsys.readouterr().err
        assert exit_.value.code == 1, (args, err)
        assert err.startswith("error: ") and wanted in err and err.count("\n") == 1, (args, err)
    assert not (Layout.at(repo).run / "daemon.pid").exists()


def test_logs_prints_a_task_log_readably_and_as_json(repo: Path) -> None:
    add_tasks(repo, 1)
    with team_cleanup(repo):
        res = cli(repo, "up", "--burst", "-n", "1", "--command",
                  "echo first line; echo second line; echo x > f.txt")
    assert res.returncode == 0, res.stderr
    text = cli(repo, "logs", "1").stdout
    assert "first line\nsecond line" in text and "command started: echo first line" in text
    assert "committed " in text and "backend_started" in cli(repo, "logs", "1", "--raw").stdout
    recs = [json.loads(x) for x in cli(repo, "logs", "task_001", "--json").stdout.splitlines()]
    assert recs[0]["kind"] == "backend_started" and all("ts" in r for r in recs)


def test_logs_follow_prints_new_lines_as_they_come(repo: Path) -> None:
    [task] = add_tasks(repo, 1)
    cmd = [sys.executable, "-m", "orchestrator", "logs", task.id, "-f"]
    with subprocess.Popen(cmd, cwd=repo, stdout=subprocess.PIPE, text=True,
                          env=team_env()) as proc:
        try:
            TaskLog(Layout.at(repo), task.id).write(Output(text="appeared later\n"))
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "appeared later"
        finally:
            proc.kill()
