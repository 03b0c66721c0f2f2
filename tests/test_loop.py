"""The master loop with the real model client (loopback API), real tools and the real gate."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.anthropic_model import AnthropicModel
from orchestrator.agent.base import LimitExceeded, Stopped, ToolContext, ToolResult
from orchestrator.agent.loop import CONTINUE, AgentLoop, Limits
from orchestrator.agent.permissions import PermissionGate
from orchestrator.agent.prompt import PromptSources, build_prompt
from orchestrator.agent.tools import default_tools
from orchestrator.agent.toolset import Toolset
from orchestrator.board.tasklogs import TaskLog
from orchestrator.errors import BackendError
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.sandbox import safe_env
from tests.loopback import LoopbackAPI, check_pairing, tool_use

MODEL = "claude-sonnet-4-6"


@pytest.fixture
def api() -> Iterator[LoopbackAPI]:
    with LoopbackAPI() as server:
        yield server


class Run:
    def __init__(self, repo: Path, api: LoopbackAPI, limits: Limits | None = None,
                 **gate: Any) -> None:
        self.repo = repo
        self.api = api
        self.log = TaskLog(Layout.at(repo), "task_001")
        ctx = ToolContext(cwd=repo, env=safe_env(os.environ), task_id="task_001")
        self.toolset = Toolset(default_tools(board=False),
                               PermissionGate.from_rules(root=repo, **gate), ctx)
        task = Task(id="task_001", subject="Add a greeting", description="Write hello.txt")
        prompt = build_prompt(task, self.toolset.schemas(), PromptSources(repo, home=repo))
        self.model = AnthropicModel(MODEL, api_key="sk-test", base_url=api.url,
                                    retry_delay=0.01)
        self.stop = threading.Event()
        self.loop = AgentLoop(self.model, self.toolset, prompt, self.log,
                              limits=limits or Limits(max_turns=20), max_tokens=1024,
                              stop=self.stop)

    def __call__(self) -> str:
        try:
            return self.loop.run()
        finally:
            self.model.close()

    def records(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.log.read() if r["kind"] == kind]


def results(body: dict[str, Any]) -> list[dict[str, Any]]:
    last = body["messages"][-1]["content"]
    return [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]


def test_tool_calls_run_and_their_results_go_back_paired(repo: Path, api: LoopbackAPI) -> None:
    api.reply("I will write it.", tool_use("write", {"file_path": "hello.txt",
                                                     "content": "hello\n"}, id="t1"))
    api.reply(tool_use("read", {"file_path": "hello.txt"}, id="t2"),
              tool_use("bash", {"command": "wc -l hello.txt"}, id="t3"))
    api.reply("Done: hello.txt has one line.")
    run = Run(repo, api, allow=["Bash(wc:*)"], mode="acceptEdits")
    assert run() == "Done: hello.txt has one line."
    assert (repo / "hello.txt").read_text() == "hello\n"
    second, third = api.requests[1], api.requests[2]
    assert [r["tool_use_id"] for r in results(second)] == ["t1"]
    assert [r["tool_use_id"] for r in results(third)] == ["t2", "t3"]
    assert "hello" in results(third)[0]["content"] and "1 hello.txt" in results(third)[1]["content"]
    assert not any(r.get("is_error") for r in results(third))
    for body in api.requests:
        check_pairing(body["messages"])
        assert json.dumps(body).count('"cache_control"') == min(4, len(body["messages"]) + 2)
    kinds = [r["kind"] for r in run.log.read()]
    assert kinds[0] == "agent_start" and kinds[-1] == "agent_end"
    assert [r["name"] for r in run.records("tool_call")] == ["write", "read", "bash"]
    assert run.records("agent_end")[0]["outcome"] == "finished"
    assert run.loop.state.usage.cache_read_tokens > 0


def test_after_change_runs_after_a_step_whose_tools_may_have_changed_files(
        repo: Path, api: LoopbackAPI) -> None:
    """The hook a teammate across machines pushes its WIP snapshot from: not after a step of
    read-only tools, nor after a failed call; after a successful write."""
    api.reply(tool_use("read", {"file_path": "README.md"}, id="t1"))
    api.reply(tool_use("write", {"file_path": "x.txt", "content": "x\n"}, id="t2"))
    api.reply(tool_use("write", {"file_path": "/proc/nope/x", "content": "x"}, id="t3"))
    api.reply("Done.")
    run = Run(repo, api, mode="acceptEdits")
    steps: list[int] = []
    run.loop.after_change = lambda: steps.append(len(api.requests))
    assert run() == "Done."
    assert steps == [2] and (repo / "x.txt").exists()
    assert results(api.requests[3])[0].get("is_error")


def test_a_deny_rule_hit_comes_back_as_an_error_and_the_model_goes_on(
        repo: Path, api: LoopbackAPI) -> None:
    api.reply(tool_use("bash", {"command": "rm -rf src"}, id="t1"))
    api.reply("Understood, I will not delete it.")
    run = Run(repo, api, deny=["Bash(rm:*)"], allow=["Bash"])
    assert run() == "Understood, I will not delete it."
    [result] = results(api.requests[1])
    assert result["is_error"] is True and "denied" in result["content"]
    assert "Bash(rm:*)" in result["content"]


def test_an_ask_without_anyone_to_answer_is_an_error_result(repo: Path,
                                                            api: LoopbackAPI) -> None:
    api.reply(tool_use("bash", {"command": "git push"}, id="t1"))
    api.reply("ok")
    run = Run(repo, api, ask=["Bash(git push:*)"])
    run()
    [result] = results(api.requests[1])
    assert result["is_error"] and "no one can approve" in result["content"]


def test_a_max_tokens_stop_continues_without_the_cut_tool_call(repo: Path,
                                                                api: LoopbackAPI) -> None:
    api.reply("Here is the first half of my pl", tool_use("write", {"file_path": "x"}),
              stop_reason="max_tokens")
    api.reply("an. All done.")
    assert Run(repo, api)() == "an. All done."
    messages = api.requests[1]["messages"]
    assert messages[-2] == {"role": "assistant", "content": [
        {"type": "text", "text": "Here is the first half of my pl"}]}
    assert messages[-1]["content"][0]["text"] == CONTINUE
    assert not (repo / "x").exists()


def test_prompt_too_long_compacts_keeping_pairs_and_continues(repo: Path,
                                                              api: LoopbackAPI) -> None:
    for i in range(6):
        api.reply(f"step {i}", tool_use("ls", {}, id=f"t{i}"))
    api.too_long()
    api.reply("finished after compaction")
    run = Run(repo, api)
    assert run() == "finished after compaction"
    before, after = api.requests[-2], api.requests[-1]
    assert before["messages"] == api.requests[6]["messages"]
    assert len(after["messages"]) < len(before["messages"])
    first = after["messages"][0]
    assert first["role"] == "user" and "compacted" in first["content"][0]["text"]
    assert "ls({}) ->" in first["content"][0]["text"] and "Add a greeting" in str(first)
    assert after["messages"][1]["role"] == "assistant"
    check_pairing(after["messages"])
    assert run.loop.state.compactions == 1 and run.records("compacted")


def test_compaction_that_cannot_shrink_fails_clearly(repo: Path, api: LoopbackAPI) -> None:
    api.too_long()
    with pytest.raises(BackendError, match="too long"):
        Run(repo, api)()


@pytest.mark.parametrize(("limits", "reason"), [
    (Limits(max_turns=2), "turn limit reached: 2 of 2 turns"),
    (Limits(max_total_tokens=10), "token budget spent"),
    (Limits(max_cost_usd=0.000001), "cost budget spent"),
    (Limits(max_seconds=1e-9), "time budget spent"),
])
def test_budgets_end_the_run_with_a_clear_reason(repo: Path, api: LoopbackAPI,
                                                 limits: Limits, reason: str) -> None:
    for i in range(3):
        api.reply(tool_use("ls", {}, id=f"t{i}"))
    run = Run(repo, api, limits=limits)
    with pytest.raises(LimitExceeded, match=reason):
        run()
    assert run.records("agent_end")[0]["outcome"] == "LimitExceeded"


def test_a_warm_stop_ends_the_loop_between_steps(repo: Path, api: LoopbackAPI) -> None:
    api.reply(tool_use("ls", {}, id="t1"))
    run = Run(repo, api)
    real_call = run.toolset.call

    def call_then_stop(name: str, args: dict[str, Any], *, approved: bool = False) -> ToolResult:
        run.stop.set()  # the stop arrives while a tool runs: the step finishes first
        return real_call(name, args, approved=approved)

    run.loop.toolset = type("T", (), {"call": staticmethod(call_then_stop)})()
    with pytest.raises(Stopped):
        run()
    assert len(api.requests) == 1
    assert run.records("tool_result")[0]["is_error"] is False


def test_a_model_error_is_raised_and_the_transcript_still_closes(repo: Path,
                                                                 api: LoopbackAPI) -> None:
    api.fail(401, "authentication_error", "invalid x-api-key")
    run = Run(repo, api)
    with pytest.raises(BackendError, match="refused the credentials") as exc:
        run()
    assert exc.value.retry is False  # bad credentials: a retry cannot help, the task fails once
    assert run.records("agent_end")[0]["outcome"] == "error"
