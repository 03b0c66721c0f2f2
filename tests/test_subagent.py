"""Sub-agents (the ``agent`` tool) through the real SDK against the loopback Messages API."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.board.tasklogs import read_jsonl
from tests.loopback import LoopbackAPI, check_pairing, tool_use
from tests.test_backend_agent import ClaimFn, api, claim  # noqa: F401 (fixtures)

MODEL = {"model": "claude-sonnet-4-6"}
PARENT_SECRET = "parent-only-detail-7f3a"


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["name"] for t in body["tools"]]


def everything_said(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"])


def test_a_sub_agent_starts_fresh_and_only_its_answer_comes_back(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent=MODEL, description=f"Remember {PARENT_SECRET}.")
    (c.workspace.path / "notes.txt").write_text("the answer is 42\n")
    api.reply(tool_use("ls", {}, id="p1"))
    api.reply("Let me delegate.", tool_use("agent", {
        "description": "find the answer", "prompt": "Read notes.txt and tell me the answer.",
        "tools": ["read", "grep"]}, id="p2"))
    api.reply(tool_use("read", {"file_path": "notes.txt"}, id="c1"))
    api.reply("The answer is 42.")
    api.reply("Done: the answer is 42.")
    result = c.run("anthropic")
    assert result.ok, result.error
    parent_first, parent_second, child_first, child_second, parent_last = api.requests

    # The child's conversation starts with the prompt alone: no parent message, no parent
    # tool result, not the task (which only the parent's system prompt carries).
    assert child_first["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Read notes.txt and tell me the answer.",
         "cache_control": {"type": "ephemeral"}}]}]
    child_all = everything_said(child_first) + everything_said(child_second)
    for parent_message in parent_second["messages"]:
        assert json.dumps(parent_message["content"])[:60] not in child_all
    assert "Begin work on" not in child_all and "p1" not in child_all
    assert PARENT_SECRET not in json.dumps(child_first)
    assert PARENT_SECRET in json.dumps(parent_first["system"])
    # Its tools are the grants (no agent tool: tools were named without it).
    assert tool_names(child_first) == ["read", "grep"]
    assert "agent" in tool_names(parent_first) and "todo_write" in tool_names(parent_first)
    # The child's own tool result stays with the child.
    assert "the answer is 42" in everything_said(child_second)
    assert "the answer is 42\\n" not in everything_said(parent_last)

    # Exactly one tool result comes back: the child's final text.
    check_pairing(parent_last["messages"])
    last_user = parent_last["messages"][-1]["content"]
    assert [(b["type"], b["tool_use_id"], b["content"]) for b in last_user] == [
        ("tool_result", "p2", "The answer is 42.")]
    assert len(parent_last["messages"]) == len(parent_second["messages"]) + 2


def test_the_transcript_sits_beside_the_tasks_and_the_budget_is_shared(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent=MODEL)
    api.reply(tool_use("agent", {"prompt": "List the files."}, id="p1"))
    api.reply(tool_use("ls", {}, id="c1"))
    api.reply("README.md")
    api.reply("done")
    result = c.run("anthropic")
    assert result.ok, result.error

    sub = c.layout.logs / f"{c.task.id}.sub-1.jsonl"
    records = list(read_jsonl(sub))
    assert [r["kind"] for r in records if r["kind"] in ("agent_start", "agent_end")] == [
        "agent_start", "agent_end"]
    assert records[0]["first_message"] == "List the files."
    assert [r["name"] for r in records if r["kind"] == "tool_call"] == ["ls"]
    [pointer] = c.log("subagent")
    assert pointer["transcript"] == sub.name and pointer["depth"] == 1
    # The child's turns and tokens count toward the task: 2 parent + 2 child turns.
    [end] = c.log("agent_end")
    assert end["turns"] == 4
    billed = sum(u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens
                 for u in api.usages)
    assert result.usage.input_tokens + result.usage.cache_read_tokens + \
        result.usage.cache_write_tokens == billed
    assert c.board.get(c.task.id).usage == result.usage


def test_the_task_turn_limit_covers_its_sub_agents(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent={**MODEL, "max_turns": 3})
    api.reply(tool_use("agent", {"prompt": "Keep looking."}, id="p1"))
    api.reply(tool_use("ls", {}, id="c1"))
    api.reply(tool_use("ls", {}, id="c2"))
    result = c.run("anthropic")
    assert not result.ok and not result.retry
    assert "turn limit reached: 3 of 3" in (result.error or "")
    assert len(api.requests) == 3  # 1 parent + 2 child turns, then the shared budget is spent
    [child_end] = [r for r in read_jsonl(c.layout.logs / f"{c.task.id}.sub-1.jsonl")
                   if r["kind"] == "agent_end"]
    assert child_end["outcome"] == "LimitExceeded"


def test_nesting_is_bounded(claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent=MODEL)
    api.reply(tool_use("agent", {"prompt": "level one"}, id="a"))
    api.reply(tool_use("agent", {"prompt": "level two"}, id="b"))
    api.reply("deepest answer")
    api.reply("middle answer")
    api.reply("done")
    assert c.run("anthropic").ok
    top, one, two = api.requests[:3]
    assert "agent" in tool_names(top) and "agent" in tool_names(one)
    assert "agent" not in tool_names(two)  # depth 2 is the floor
    assert api.requests[3]["messages"][-1]["content"][0]["content"] == "deepest answer"
    assert sorted(p.name for p in c.layout.logs.glob(f"{c.task.id}.sub-*.jsonl")) == [
        f"{c.task.id}.sub-1.jsonl", f"{c.task.id}.sub-2.jsonl"]
    [inner] = [r for r in read_jsonl(c.layout.logs / f"{c.task.id}.sub-1.jsonl")
               if r["kind"] == "subagent"]
    assert inner["depth"] == 2 and inner["transcript"] == f"{c.task.id}.sub-2.jsonl"


def test_sub_agent_tools_go_through_the_same_gate(
        claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent={**MODEL, "deny": ["Write(secret.txt)"]})
    api.reply(tool_use("agent", {"prompt": "write it"}, id="p1"))
    api.reply(tool_use("write", {"file_path": "secret.txt", "content": "x"}, id="c1"))
    api.reply("could not")
    api.reply("done")
    assert c.run("anthropic").ok
    denied = api.requests[2]["messages"][-1]["content"][0]
    assert denied["is_error"] and "deny rule Write(secret.txt)" in denied["content"]
    assert not (c.workspace.path / "secret.txt").exists()


@pytest.mark.parametrize(("args", "expected"), [
    ({"prompt": "x", "tools": ["rm_rf"]}, "cannot grant rm_rf"),
    ({"prompt": "x", "tools": ["todo_write"]}, "cannot grant todo_write"),
    ({"prompt": "x", "agent": "reviewer"}, "'reviewer'"),
])
def test_bad_requests_are_clear_errors_for_the_model(
        claim: ClaimFn, api: LoopbackAPI, args: dict[str, Any], expected: str) -> None:  # noqa: F811
    c = claim(agent=MODEL)
    api.reply(tool_use("agent", args, id="p1"))
    api.reply("ok")
    assert c.run("anthropic").ok
    [result] = api.requests[1]["messages"][-1]["content"]
    assert result["is_error"] and expected in result["content"]
    assert not list(c.layout.logs.glob("*.sub-*.jsonl"))


def test_a_named_sub_agent_uses_its_profile(claim: ClaimFn, api: LoopbackAPI) -> None:  # noqa: F811
    c = claim(agent=MODEL)
    agents = c.layout.root / ".claude" / "agents"  # the main checkout's: the person's
    agents.mkdir(parents=True)
    (agents / "scout.md").write_text("---\nname: scout\ndescription: finds things\n"
                                     "tools: Read, Grep, Bash\n---\nAnswer in one line.\n")
    api.reply(tool_use("agent", {"prompt": "where is main?", "agent": "scout"}, id="p1"))
    api.reply("in main.py")
    api.reply("done")
    assert c.run("anthropic").ok
    child = api.requests[1]
    assert tool_names(child) == ["bash", "read", "grep"]
    assert "# The scout agent\nAnswer in one line." in child["system"][-1]["text"]
    [pointer] = c.log("subagent")
    assert pointer["agent"] == "scout"
