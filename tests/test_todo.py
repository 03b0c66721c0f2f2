"""``todo_write``: the agent's todo list on the task, shown by show and board."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.agent.base import ToolContext
from orchestrator.agent.permissions import PermissionGate
from orchestrator.agent.tools import default_tools
from orchestrator.agent.toolset import Toolset
from orchestrator.model import Todo, TodoStatus
from tests.loopback import LoopbackAPI, tool_use
from tests.test_approve import cli
from tests.test_backend_agent import Claimed, ClaimFn, api, claim  # noqa: F401 (fixtures)

TODOS = [
    {"content": "read the parser", "status": "completed"},
    {"content": "fix the off-by-one", "status": "in_progress"},
    {"content": "add a regression test", "status": "pending"},
]


def toolset(c: Claimed, *, token: int | None = None, mode: str = "acceptEdits") -> Toolset:
    ctx = ToolContext(cwd=c.workspace.path, env={}, task_id=c.task.id,
                      board=c.board, token=c.token if token is None else token)
    return Toolset(default_tools(), PermissionGate.from_rules(mode=mode, root=c.workspace.path),
                   ctx)


def show_json(c: Claimed, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert cli("show", c.task.id, "--json", "-C", str(c.layout.root)) == 0
    return json.loads(capsys.readouterr().out)


def test_the_agents_todo_list_is_visible_in_show_json(
        claim: ClaimFn, api: LoopbackAPI, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    c = claim(agent={"model": "claude-sonnet-4-6"})
    api.reply(tool_use("todo_write", {"todos": TODOS}, id="t1"))
    api.reply("Working through the list.")
    result = c.run("anthropic")
    assert result.ok, result.error
    saved = api.requests[1]["messages"][-1]["content"][0]
    assert not saved.get("is_error") and "1/3 done" in saved["content"]
    assert "[>] fix the off-by-one" in saved["content"]
    assert show_json(c, capsys)["todos"] == [
        {"content": "read the parser", "status": "done"},
        {"content": "fix the off-by-one", "status": "in_progress"},
        {"content": "add a regression test", "status": "pending"},
    ]


def test_each_call_replaces_the_list(claim: ClaimFn) -> None:  # noqa: F811
    c = claim()
    ts = toolset(c)
    assert not ts.call("todo_write", {"todos": TODOS}).is_error
    result = ts.call("todo_write", {"todos": [{"content": "  ship   it ", "status": "done"}]})
    assert not result.is_error
    assert c.board.get(c.task.id).todos == [Todo(content="ship it", status=TodoStatus.DONE)]
    assert ts.call("todo_write", {"todos": []}).content == "todo list cleared"
    assert c.board.get(c.task.id).todos == []


def test_it_works_in_plan_mode(claim: ClaimFn) -> None:  # noqa: F811
    c = claim()
    assert not toolset(c, mode="plan").call("todo_write", {"todos": TODOS}).is_error
    assert len(c.board.get(c.task.id).todos) == 3


@pytest.mark.parametrize(("todos", "expected"), [
    ([{"content": "   ", "status": "pending"}], "todos[0]: content is empty"),
    ([{"content": "x" * 501, "status": "pending"}], "longer than 500"),
    ([{"content": "x", "status": "later"}], "status must be one of"),
    ([{"content": "x"}], "missing required status"),
    ([{"content": f"item {i}", "status": "pending"} for i in range(101)], "at most 100"),
])
def test_bad_lists_are_refused_and_the_old_one_is_kept(
        claim: ClaimFn, todos: list[dict[str, Any]], expected: str) -> None:  # noqa: F811
    c = claim()
    ts = toolset(c)
    ts.call("todo_write", {"todos": TODOS})
    result = ts.call("todo_write", {"todos": todos})
    assert result.is_error and expected in result.content
    assert len(c.board.get(c.task.id).todos) == 3


def test_a_teammate_that_lost_its_lease_cannot_overwrite_the_list(claim: ClaimFn) -> None:  # noqa: F811
    c = claim()
    result = toolset(c, token=c.token - 1).call("todo_write", {"todos": TODOS})
    assert result.is_error and "todo_write:" in result.content
    assert c.board.get(c.task.id).todos == []


def test_without_a_board_it_says_so(claim: ClaimFn) -> None:  # noqa: F811
    c = claim()
    ctx = ToolContext(cwd=c.workspace.path, env={})
    ts = Toolset(default_tools(), PermissionGate(root=c.workspace.path), ctx)
    result = ts.call("todo_write", {"todos": TODOS})
    assert result.is_error and "no task board" in result.content


def test_show_and_board_display_the_list(
        claim: ClaimFn, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    c = claim()
    toolset(c).call("todo_write", {"todos": TODOS})
    root = str(c.layout.root)
    capsys.readouterr()
    assert cli("show", c.task.id, "-C", root) == 0
    out = capsys.readouterr().out
    assert "todos (1/3 done):\n  [x] read the parser\n  [>] fix the off-by-one\n" \
           "  [ ] add a regression test\n" in out
    assert "todos: [" not in out  # not dumped as raw JSON
    assert cli("board", "-C", root) == 0
    out = capsys.readouterr().out
    header, row = out.splitlines()[:2]
    assert header.split()[-1] == "todo" and row.split()[-1] == "1/3"


def test_board_leaves_out_the_todo_column_when_no_task_has_a_list(
        claim: ClaimFn, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    c = claim()
    capsys.readouterr()
    assert cli("board", "-C", str(c.layout.root)) == 0
    assert "todo" not in capsys.readouterr().out.splitlines()[0]
