"""Plan-first tasks: plan mode until the lead approves through the real CLI."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator import waits
from orchestrator.agent import permission_flow
from orchestrator.board import init_repo, open_board
from orchestrator.board.mailboxes import Mailbox
from orchestrator.model import Status
from tests.loopback import LoopbackAPI, tool_use
from tests.test_approve import Background, cli
from tests.test_backend_agent import Claimed, ClaimFn, api, claim  # noqa: F401 (fixtures)

MODEL = {"model": "claude-sonnet-4-6"}
WRITE = {"file_path": "feature.txt", "content": "built\n"}
PLAN = "# Add feature.txt\n- write feature.txt\n- check it reads back"


class Run(Background):
    """The teammate side on the anthropic backend (the loopback API), in a thread."""

    def _run(self) -> None:
        self.result = self.c.run("anthropic")


def last_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body["messages"][-1]["content"]


def wait_for_plan(run: Background) -> dict[str, Any]:
    try:
        request = run.wait_for_request()
    except BaseException:
        run.c.stop.set()
        raise
    assert request["kind"] == "plan_request"
    return request


def answer(run: Background, c: Claimed, *args: str) -> None:
    try:
        assert cli(*args, "-C", str(c.layout.root)) == 0
    except BaseException:
        c.stop.set()
        raise


def test_a_plan_first_task_cannot_write_before_approval_and_finishes_after(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent=MODEL, plan_first=True)
    api.reply(tool_use("write", WRITE, id="w1"))
    api.reply(tool_use("bash", {"command": "touch sneaky.txt"}, id="b1"))
    api.reply("Here is my plan.", tool_use("submit_plan", {"plan": PLAN}, id="s1"))
    api.reply(tool_use("write", WRITE, id="w2"))
    api.reply("Wrote feature.txt as planned.")
    run = Run(c)
    request = wait_for_plan(run)

    # Before approval: nothing written, the writes were refused by plan mode.
    assert not (c.workspace.path / "feature.txt").exists()
    assert not (c.workspace.path / "sneaky.txt").exists()
    refused = [last_results(api.requests[i])[0] for i in (1, 2)]
    assert all(r["is_error"] and "plan mode is read-only" in r["content"] for r in refused)
    assert "plan mode" in api.requests[0]["messages"][0]["content"][0]["text"]
    # The plan is in the lead's mailbox, the task waits, an event says so.
    task = c.board.get(c.task.id)
    assert isinstance(task.wait, waits.Plan) and task.status is Status.IN_PROGRESS
    assert task.wait.request_id == request["request_id"]
    assert request["plan"] == PLAN and request["task"] == c.task.id
    [event] = c.events("plan_submitted")
    assert event["request_id"] == request["request_id"] and event["plan"] == PLAN

    answer(run, c, "approve", c.task.id, "-m", "go ahead")
    result = run.finish()
    assert result.ok, result.error
    assert (c.workspace.path / "feature.txt").read_text() == "built\n"
    approved = last_results(api.requests[3])[0]
    assert "approved your plan" in approved["content"] and "go ahead" in approved["content"]
    assert not approved.get("is_error")
    assert not last_results(api.requests[4])[0].get("is_error")  # the write after approval
    task = c.board.get(c.task.id)
    assert task.plan == PLAN and task.wait is None
    assert c.events("plan_answered")[0]["approved"] is True
    assert permission_flow.pending(c.board) == []


def test_deny_sends_it_back_to_planning_with_the_reason(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent=MODEL, plan_first=True)
    api.reply(tool_use("submit_plan", {"plan": "rewrite everything"}, id="s1"))
    api.reply(tool_use("write", WRITE, id="w1"))
    api.reply(tool_use("submit_plan", {"plan": PLAN}, id="s2"))
    api.reply(tool_use("write", WRITE, id="w2"))
    api.reply("done")
    run = Run(c)
    first = wait_for_plan(run)
    answer(run, c, "deny", c.task.id, "-m", "too broad: only add feature.txt")
    # Back in planning: the reason reaches the model and writes are still refused.
    second = _wait_for_pending_other_than(run, first["request_id"])
    sent_back = last_results(api.requests[1])[0]
    assert "too broad: only add feature.txt" in sent_back["content"]
    assert "still in plan mode" in sent_back["content"]
    refused = last_results(api.requests[2])[0]
    assert refused["is_error"] and "plan mode is read-only" in refused["content"]
    assert second["plan"] == PLAN
    answer(run, c, "approve", second["request_id"])
    result = run.finish()
    assert result.ok, result.error
    assert (c.workspace.path / "feature.txt").exists()
    assert [e["approved"] for e in c.events("plan_answered")] == [False, True]
    responses = Mailbox(c.layout, "alice").find(kind="plan_response")
    assert [r["approved"] for r in responses] == [False, True]


def _wait_for_pending_other_than(run: Background, old: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        fresh = [r for r in permission_flow.pending(run.c.board) if r["request_id"] != old]
        waits_for = getattr(run.c.board.get(run.c.task.id).wait, "ident", None)
        if fresh and waits_for == fresh[0]["request_id"]:
            return fresh[0]
        assert run.thread.is_alive(), f"the run ended: {run.result}"
        time.sleep(0.02)
    run.c.stop.set()
    run.finish()
    raise AssertionError("no second plan arrived")


def test_a_run_that_ends_without_an_approved_plan_fails(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent=MODEL, plan_first=True)
    api.reply("I would add feature.txt.")
    result = c.run("anthropic")
    assert not result.ok and result.retry
    assert "without an approved plan" in (result.error or "")


def test_a_later_run_of_an_approved_task_keeps_normal_permissions(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent=MODEL, plan_first=True, plan=PLAN)
    api.reply(tool_use("write", WRITE, id="w1"))
    api.reply("done")
    result = c.run("anthropic")
    assert result.ok, result.error
    assert (c.workspace.path / "feature.txt").exists()
    assert "submit_plan" not in [t["name"] for t in api.requests[0]["tools"]]
    assert PLAN in api.requests[0]["messages"][0]["content"][0]["text"]


def test_a_warm_stop_ends_the_wait_for_approval(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent=MODEL, plan_first=True)
    api.reply(tool_use("submit_plan", {"plan": PLAN}, id="s1"))
    run = Run(c)
    wait_for_plan(run)
    c.stop.set()
    result = run.finish()
    assert result.stopped and c.board.get(c.task.id).wait is None
    assert c.board.get(c.task.id).plan is None


def test_an_ordinary_task_has_no_plan_phase(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent=MODEL)
    api.reply(tool_use("write", WRITE, id="w1"))
    api.reply("done")
    assert c.run("anthropic").ok
    assert "submit_plan" not in [t["name"] for t in api.requests[0]["tools"]]
    assert (c.workspace.path / "feature.txt").exists()


def test_add_plan_first_and_the_board_shows_the_wait(
        claim: ClaimFn, api: LoopbackAPI, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    c = claim(agent=MODEL, plan_first=True)
    root = str(c.layout.root)
    capsys.readouterr()
    assert cli("add", "Refactor the parser", "--plan-first", "--json", "-C", root) == 0
    added = json.loads(capsys.readouterr().out)
    assert added["plan_first"] is True and added["plan"] is None
    api.reply(tool_use("submit_plan", {"plan": PLAN}, id="s1"))
    api.reply("done")
    run = Run(c)
    request = wait_for_plan(run)
    try:
        assert cli("board", "-C", root) == 0
        row = next(line for line in capsys.readouterr().out.splitlines()
                   if line.startswith(c.task.id))
        assert "in_progress (waiting: plan approval)" in row
        assert cli("show", c.task.id, "-C", root) == 0
        out = capsys.readouterr().out
        rid = request["request_id"]
        assert f"waiting for approval of its plan ({rid}): orchestrator approve {rid}" in out
    finally:
        answer(run, c, "approve", request["request_id"])
        result = run.finish()
    assert result.ok, result.error
    assert "approved the plan of" in capsys.readouterr().out
    assert cli("show", c.task.id, "-C", root) == 0
    assert "approved plan:\n  # Add feature.txt\n  - write feature.txt" in (
        capsys.readouterr().out)


def test_dropped_files_can_ask_for_a_plan_first(repo: Path) -> None:
    layout = init_repo(repo)
    (layout.inbox / "a.json").write_text(json.dumps({"title": "A", "planFirst": True}))
    (layout.inbox / "b.md").write_text("---\nplan-first: true\n---\n# B\nbody\n")
    (layout.inbox / "c.json").write_text(json.dumps({"title": "C"}))
    with open_board(layout, actor="cli") as board:
        board.intake()
        tasks = {t.subject: t for t in board.list()}
    assert tasks["A"].plan_first and tasks["B"].plan_first and not tasks["C"].plan_first
    assert "planFirst" not in tasks["A"].metadata
