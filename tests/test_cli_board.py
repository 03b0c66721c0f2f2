"""The board CLI: in-process through `orchestrator.cli.main`, and a few real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.events import LandNote


def run(capsys: pytest.CaptureFixture[str], repo: Path, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main([*args, "--repo", str(repo)])
    out, err = capsys.readouterr()
    return int(exc.value.code or 0), out, err


def ok(capsys: pytest.CaptureFixture[str], repo: Path, *args: str) -> str:
    code, out, err = run(capsys, repo, *args)
    assert code == 0, err
    return out


def orch(repo: Path, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                          capture_output=True, text=True, timeout=60, **kw)  # type: ignore[call-overload]


def test_subprocess_init_add_list_show(repo: Path) -> None:
    assert orch(repo, "init").returncode == 0
    p = orch(repo, "add", "Fix login", "-d", "it 500s", "--priority", "2", "--json")
    assert p.returncode == 0, p.stderr
    task = json.loads(p.stdout)
    assert (task["id"], task["subject"], task["priority"]) == ("task_001", "Fix login", 2)
    p = orch(repo, "board", "--json")
    [listed] = json.loads(p.stdout)
    assert listed["id"] == "task_001" and listed["problem"] is None
    p = orch(repo, "show", "1")
    assert "task_001" in p.stdout and "it 500s" in p.stdout
    status = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True,
                            text=True, check=True).stdout
    assert status == ""


def test_subprocess_errors_are_one_line(repo: Path) -> None:
    p = orch(repo, "show", "task_404")
    assert p.returncode == 1 and p.stderr == "error: no task task_404\n"
    p = orch(repo, "list", "--status", "bogus")
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_errors_in_process(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    code, _, err = run(capsys, repo, "add", "x", "--blocked-by", "../../etc")
    assert code == 1 and err.startswith("error: not a task id") and err.count("\n") == 1
    code, _, err = run(capsys, repo, "add", "x", "--blocked-by", "task_009")
    assert code == 1 and err == "error: unknown blocker task_009: no such task\n"
    code, _, err = run(capsys, repo, "show", "/etc/passwd")
    assert code == 1 and "not a task id" in err
    assert run(capsys, repo, "add")[0] == 2
    assert run(capsys, repo, "add", "x", "--priority", "high")[0] == 2
    assert run(capsys, repo, "list", "--json")[1] == "[]\n"


def test_subprocess_events_follow(repo: Path) -> None:
    orch(repo, "add", "first")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "events", "-f", "--json"],
                            cwd=repo, stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(proc.stdout.readline())["event"] == "task_created"
        orch(repo, "cancel", "1")
        rec = json.loads(proc.stdout.readline())
        assert (rec["event"], rec["task"]) == ("task_cancelled", "task_001")
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()


def test_add_list_cancel_in_process(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    assert ok(capsys, repo, "add", "one") == "added task_001: one\n"
    (repo / "orchestrator.toml").write_text('[agents.reviewer]\nprompt = "Review."\n')
    out = ok(capsys, repo, "add", "two", "-b", "1", "-b", "task_001",
                       "--backend", "command", "--agent", "reviewer", "--json")
    two = json.loads(out)
    assert two["blocked_by"] == ["task_001", "task_001"] and two["agent"] == "reviewer"
    out = ok(capsys, repo, "list")
    assert "task_001" in out and "task_002" in out and "pending" in out
    out = ok(capsys, repo, "cancel", "2", "--json")
    assert json.loads(out)["status"] == "cancelled"
    out = ok(capsys, repo, "list", "--status", "cancelled", "--json")
    assert [t["id"] for t in json.loads(out)] == ["task_002"]
    out = ok(capsys, repo, "list", "-s", "pending", "-s", "review", "--json")
    assert [t["id"] for t in json.loads(out)] == ["task_001"]
    code, _, err = run(capsys, repo, "cancel", "2")
    assert code == 1 and err.startswith("error: task_002: cannot go from cancelled")


def test_list_shows_problems_and_runs_intake(capsys: pytest.CaptureFixture[str],
                                             repo: Path) -> None:
    run(capsys, repo, "init")
    inbox = repo / ".tasks" / "inbox"
    (inbox / "a.json").write_text('{"title": "dropped", "blockedBy": [42]}')
    (inbox / "b.json").write_text("{broken")
    old = time.time() - 60
    for f in inbox.iterdir():
        os.utime(f, (old, old))
    out = ok(capsys, repo, "list")
    assert "dropped" in out and "task_042, which does not exist" in out
    out = ok(capsys, repo, "list", "--json")
    [t] = json.loads(out)
    assert "task_042" in t["problem"]
    out = ok(capsys, repo, "show", "1", "--json")
    assert "task_042" in json.loads(out)["problem"]
    assert (repo / ".tasks" / "rejected" / "b.json.error.txt").exists()
    out = ok(capsys, repo, "events", "--json")
    kinds = [json.loads(line)["event"] for line in out.splitlines()]
    assert kinds == ["task_created", "task_rejected"]
    out = ok(capsys, repo, "events", "--task", "1")
    assert "task_created" in out and "task_rejected" not in out


def test_empty_board(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    assert run(capsys, repo, "list")[1] == "no tasks\n"
    assert run(capsys, repo, "list", "--json")[1] == "[]\n"
    assert run(capsys, repo, "events")[1] == ""


def test_not_a_repository(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, tmp_path, "list")
    assert code == 1 and err.startswith("error: not inside a git repository")


def test_events_since_a_seq(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    for subject in ("one", "two", "three"):
        ok(capsys, repo, "add", subject)
    ok(capsys, repo, "cancel", "2")
    everything = [json.loads(line) for line in ok(capsys, repo, "events", "--json").splitlines()]
    assert [e["seq"] for e in everything] == [1, 2, 3, 4]
    later = [json.loads(line) for line in
             ok(capsys, repo, "events", "--since", "2", "--json").splitlines()]
    assert [(e["seq"], e["event"], e["task"]) for e in later] == [
        (3, "task_created", "task_003"), (4, "task_cancelled", "task_002")]
    assert ok(capsys, repo, "events", "--since", "4") == ""
    human = ok(capsys, repo, "events", "--since", "3", "--task", "2").splitlines()
    assert len(human) == 1 and human[0].split()[0] == "4" and "task_cancelled" in human[0]
    code, _, err = run(capsys, repo, "events", "--since", "-1")
    assert code == 2 and "since" in err.lower()


def test_events_tail_on_a_terminal_and_everything_when_piped(repo: Path) -> None:
    from orchestrator.board import open_board
    from orchestrator.cli.board import TAIL_ON_TERMINAL
    from orchestrator.layout import Layout
    from tests.helpers import run_on_terminal

    total = TAIL_ON_TERMINAL + 30
    with open_board(Layout.at(repo).ensure()) as board:
        for i in range(total):
            board.events.emit(LandNote(note=str(i)), f"task_{i % 3 + 1:03d}")
    with Layout.at(repo).events.open("a") as fh:
        fh.write('{"torn')
    out = run_on_terminal(repo, ["events"], rows=500, cols=200)
    shown = [int(line.split("note=")[1].split()[0]) for line in out.splitlines()
             if "note=" in line]
    assert shown == list(range(30, total)) and "-n 0 prints them all" in out
    piped = orch(repo, "events", "--json")
    assert [int(json.loads(x)["note"]) for x in piped.stdout.splitlines()] == list(range(total))
    assert piped.stderr == ""
    last = orch(repo, "events", "-n", "2", "--task", "2", "--json")
    assert [json.loads(x)["note"] for x in last.stdout.splitlines()] == ["124", "127"]
    assert orch(repo, "events", "-n", "-1").returncode == 2
