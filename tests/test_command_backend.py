"""The command backend and the process runner under it: real shells, real process groups."""

from __future__ import annotations

import os
import resource
import threading
import time
from pathlib import Path

import pytest

from orchestrator.backends.command import CommandBackend
from orchestrator.board import open_board
from orchestrator.board.tasklogs import TaskLog
from orchestrator.checks import run_checks
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.process import MAX_LOGGED_BYTES
from orchestrator.protocols import RunContext, Workspace
from tests.helpers import child_pids


@pytest.fixture
def setup(repo: Path):  # type: ignore[no-untyped-def]
    layout = Layout.at(repo).ensure()
    board = open_board(layout)
    ws_path = repo.parent / "ws"
    ws_path.mkdir()
    yield layout, board, ws_path
    board.close()


def make_ctx(setup, command: str | None = None, timeout: float | None = None,  # type: ignore[no-untyped-def]
             stop: threading.Event | None = None, **task_fields) -> RunContext:
    layout, board, ws_path = setup
    task = Task(id="task_007", subject="Add a greeting", description="Say hello",
                feedback=["use French"], **task_fields)
    ws = Workspace(task_id=task.id, path=ws_path, branch="task/007-x", base="main",
                   base_commit=None, env={"ORCH_PORT_BASE": "20010"})
    return RunContext(task=task, token=1, teammate="alice", workspace=ws, board=board,
                      layout=layout, log=TaskLog(layout, task.id, actor="alice"),
                      stop=stop or threading.Event(), timeout=timeout, command=command or None)


def log_text(layout: Layout, task_id: str = "task_007") -> str:
    return "".join(r.get("text", "") for r in TaskLog(layout, task_id).read())


def test_runs_in_the_worktree_with_the_task_in_its_environment(setup) -> None:  # type: ignore[no-untyped-def]
    layout, _, ws_path = setup
    cmd = ('printf "%s|%s|%s|%s|%s" "$ORCH_TASK_ID" "$ORCH_TASK_SUBJECT" '
           '"$ORCH_TASK_DESCRIPTION" "$ORCH_PORT_BASE" "$ORCH_TEAMMATE" > seen.txt; '
           'printf "%s" "$ORCH_PROMPT" > prompt.txt; echo hello from the agent')
    res = CommandBackend(Config(), layout).run(make_ctx(setup, cmd))
    assert res.ok, res.error
    assert (ws_path / "seen.txt").read_text() == "task_007|Add a greeting|Say hello|20010|alice"
    prompt = (ws_path / "prompt.txt").read_text()
    assert "Add a greeting" in prompt and "Say hello" in prompt and "use French" in prompt
    assert "hello from the agent" in log_text(layout)
    kinds = [r["kind"] for r in TaskLog(layout, "task_007").read()]
    assert kinds[0] == "backend_started" and kinds[-1] == "backend_finished"


def test_the_team_command_is_the_default(setup) -> None:  # type: ignore[no-untyped-def]
    layout, _, ws_path = setup
    config = Config.load(layout.root, overrides={"team": {"command": "touch made.txt"}})
    assert CommandBackend(config, layout).run(make_ctx(setup)).ok
    assert (ws_path / "made.txt").exists()


def test_no_command_is_an_error_that_retrying_cannot_fix(setup) -> None:  # type: ignore[no-untyped-def]
    layout, _, _ = setup
    res = CommandBackend(Config(), layout).run(make_ctx(setup))
    assert not res.ok and res.retry is False and "needs a command" in (res.error or "")


def test_a_failing_command_reports_its_exit_code_and_last_output(setup) -> None:  # type: ignore[no-untyped-def]
    layout, _, _ = setup
    res = CommandBackend(Config(), layout).run(make_ctx(setup, "echo something broke; exit 3"))
    assert not res.ok and res.retry
    assert "exit code 3" in (res.error or "") and "something broke" in (res.error or "")


def test_a_hanging_command_is_killed_with_its_whole_process_group(setup) -> None:  # type: ignore[no-untyped-def]
    layout, _, ws_path = setup
    # the shell starts a grandchild that ignores SIGTERM: only the group SIGKILL ends it
    cmd = "sh -c 'trap \"\" TERM; echo $$ > grandchild.pid; sleep 300' & wait"
    res = CommandBackend(Config(), layout).run(make_ctx(setup, cmd, timeout=1.5))
    assert not res.ok and "timed out" in (res.error or "")
    assert (ws_path / "grandchild.pid").exists()
    deadline = time.monotonic() + 10
    while child_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child_pids() == []


def test_a_stop_ends_the_run_as_stopped_not_failed(setup) -> None:  # type: ignore[no-untyped-def]
    layout, _, _ = setup
    stop = threading.Event()
    timer = threading.Timer(0.5, stop.set)
    timer.start()
    try:
        res = CommandBackend(Config(), layout).run(make_ctx(setup, "sleep 300", stop=stop))
    finally:
        timer.cancel()
        timer.join()
    assert res.stopped and not res.ok


def test_megabytes_of_output_do_not_fill_memory_or_the_log(setup) -> None:  # type: ignore[no-untyped-def]
    layout, _, _ = setup
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    cmd = "yes 'a line of agent chatter that goes on and on' | head -c 60000000; echo; echo END"
    res = CommandBackend(Config(), layout).run(make_ctx(setup, cmd))
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert res.ok
    assert grown_mb < 30, f"the runner grew by {grown_mb:.0f} MB for 60 MB of output"
    size = (layout.logs / "task_007.jsonl").stat().st_size
    assert size < MAX_LOGGED_BYTES * 1.5
    assert "more bytes of output not logged" in log_text(layout)
    finished = [r for r in TaskLog(layout, "task_007").read() if r["kind"] == "backend_finished"]
    assert finished[0]["output_bytes"] > 60_000_000


def test_verification_output_lands_in_the_log(setup) -> None:  # type: ignore[no-untyped-def]
    layout, _, ws_path = setup
    log = TaskLog(layout, "task_007")
    ok = run_checks("echo all good", cwd=ws_path, env=dict(os.environ), log=log, timeout=30)
    bad = run_checks("echo 2 tests failed; exit 1", cwd=ws_path, env=dict(os.environ),
                     log=log, timeout=30)
    slow = run_checks("sleep 300", cwd=ws_path, env=dict(os.environ), log=log, timeout=0.5)
    assert ok.passed and ok.exit_code == 0
    assert not bad.passed and bad.exit_code == 1 and "2 tests failed" in bad.output_tail
    assert not slow.passed and "timed out" in slow.result
    text = log_text(layout)
    assert "all good" in text and "2 tests failed" in text
