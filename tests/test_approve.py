"""An ``ask`` in a headless run: request to the lead, the task waits, approve/deny answer."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator import waits
from orchestrator.agent import permission_flow
from orchestrator.board.mailboxes import Mailbox
from orchestrator.cli import main
from orchestrator.errors import NotFound
from orchestrator.protocols import RunResult
from tests.test_backend_agent import Claimed, ClaimFn, claim  # noqa: F401 (fixture)

SCRIPT = [[{"tool": "bash", "args": {"command": "touch approved.txt"}}], "done"]
ASK_TOUCH = {"allow": ["Bash"], "ask": ["Bash(touch:*)"]}


def cli(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


class Background:
    """The teammate side: the backend runs in a thread until the request is answered."""

    def __init__(self, c: Claimed) -> None:
        self.c = c
        self.result: RunResult | None = None
        self.thread = threading.Thread(target=self._run, name="agent-run")
        self.thread.start()

    def _run(self) -> None:
        self.result = self.c.run()

    def wait_for_request(self, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = permission_flow.pending(self.c.board)
            if pending and self.c.board.get(self.c.task.id).wait:
                return pending[0]
            assert self.thread.is_alive(), f"the run ended without asking: {self.result}"
            time.sleep(0.02)
        self.c.stop.set()
        self.finish()
        raise AssertionError("no permission request arrived")

    def finish(self) -> RunResult:
        self.thread.join(timeout=60)
        assert self.result is not None
        return self.result


def test_approve_by_task_id_lets_the_agent_continue(claim: ClaimFn, repo: Path,  # noqa: F811
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    c = claim(SCRIPT, agent=ASK_TOUCH)
    run = Background(c)
    try:
        request = run.wait_for_request()
        assert request["tool"] == "bash" and request["subject"] == "touch approved.txt"
        assert request["task"] == c.task.id and request["from"] == "alice"
        wait = c.board.get(c.task.id).wait
        assert isinstance(wait, waits.Permission) and wait.request_id == request["request_id"]
        assert c.events("permission_requested")[0]["request_id"] == request["request_id"]
        assert cli("approve", c.task.id, "-C", str(repo)) == 0
    except BaseException:
        c.stop.set()  # do not leave the run waiting for an answer
        raise
    finally:
        result = run.finish()
    assert "approved bash(touch approved.txt)" in capsys.readouterr().out
    assert result.ok, result.error
    assert (c.workspace.path / "approved.txt").exists()
    assert c.board.get(c.task.id).wait is None
    assert c.events("permission_answered")[0]["approved"] is True
    assert permission_flow.pending(c.board) == []


def test_deny_by_request_id_gives_the_agent_the_reason(claim: ClaimFn, repo: Path  # noqa: F811
                                                       ) -> None:
    c = claim(SCRIPT, agent=ASK_TOUCH)
    run = Background(c)
    request = run.wait_for_request()
    assert cli("deny", request["request_id"], "-m", "not in this repo", "-C", str(repo)) == 0
    result = run.finish()
    assert result.ok
    assert not (c.workspace.path / "approved.txt").exists()
    [tool_result] = c.log("tool_result")
    assert tool_result["is_error"] and "denied by a person: not in this repo" in (
        tool_result["content"])
    assert c.board.get(c.task.id).wait is None
    answer = Mailbox(c.layout, "alice").find(kind="permission_response")[0]
    assert answer["approved"] is False and answer["message"] == "not in this repo"


def test_a_warm_stop_ends_the_wait(claim: ClaimFn) -> None:  # noqa: F811
    c = claim(SCRIPT, agent=ASK_TOUCH)
    run = Background(c)
    run.wait_for_request()
    c.stop.set()
    result = run.finish()
    assert result.stopped and c.board.get(c.task.id).wait is None


def test_approve_with_nothing_pending_is_one_clear_line(repo: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    assert cli("approve", "task_007", "-C", str(repo)) == 1
    err = capsys.readouterr().err
    assert err == "error: no pending permission request for task task_007\n"
    assert cli("deny", "abc123", "-C", str(repo)) == 1
    assert "no pending permission request for request 'abc123'" in capsys.readouterr().err


def test_answering_the_same_request_twice_is_refused(claim: ClaimFn) -> None:  # noqa: F811
    c = claim(SCRIPT, agent=ASK_TOUCH)
    Mailbox(c.layout, "lead").send("alice", kind="permission_request", request_id="r1",
                                   task=c.task.id, tool="bash", subject="touch x")
    permission_flow.answer(c.board, "r1", approved=True)
    with pytest.raises(NotFound):
        permission_flow.answer(c.board, c.task.id, approved=False)


def test_a_request_expires_with_the_run_that_asked_it(claim: ClaimFn, repo: Path,  # noqa: F811
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """Stopped and released, then claimed again under a new lease: the old request is
    no one's; approving it says so in one line, status drops it, the next run asks again."""
    c = claim(SCRIPT, agent=ASK_TOUCH)
    run = Background(c)
    old = run.wait_for_request()
    c.stop.set()
    assert run.finish().stopped
    c.board.release(c.task.id, c.token, reason="teammate stopping")
    again = c.board.claim("bob", task_id=c.task.id)
    assert again is not None and again.lease is not None and again.lease.token > c.token
    assert permission_flow.pending(c.board) == []
    capsys.readouterr()
    assert cli("approve", old["request_id"], "-C", str(repo)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has expired" in err and old["request_id"] in err, err
    assert cli("status", "--json", "-C", str(repo)) == 0
    assert json.loads(capsys.readouterr().out)["permission_requests"] == []

    second = Claimed(c.layout, c.config, c.board, again, again.lease.token, c.workspace,
                     threading.Event())
    rerun = Background(second)
    new = rerun.wait_for_request()
    assert new["request_id"] != old["request_id"] and new["token"] == again.lease.token
    assert cli("approve", c.task.id, "-C", str(repo)) == 0
    assert rerun.finish().ok and (c.workspace.path / "approved.txt").exists()
