"""The anthropic and scripted backends on a real board, in a real git worktree."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends import load_backend
from orchestrator.backends.agent import AnthropicBackend, ScriptedBackend
from orchestrator.board import init_repo, open_board
from orchestrator.board.store import FileBoard
from orchestrator.board.tasklogs import TaskLog
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Status, Task, Usage
from orchestrator.protocols import RunContext, RunResult, Workspace
from orchestrator.worktree.manager import WorktreeManager, binding
from tests.loopback import LoopbackAPI, tool_use

SECRET = "sk-ant-api03-TOPSECRETvalue0123456789"


@dataclass
class Claimed:
    """A task claimed by teammate ``alice`` in its own worktree, ready for a backend."""

    layout: Layout
    config: Config
    board: FileBoard
    task: Task
    token: int
    workspace: Workspace
    stop: threading.Event

    def ctx(self) -> RunContext:
        return RunContext(task=self.task, token=self.token, teammate="alice",
                          workspace=self.workspace, board=self.board, layout=self.layout,
                          log=TaskLog(self.layout, self.task.id, actor="alice"), stop=self.stop)

    def run(self, backend: str = "scripted") -> RunResult:
        return load_backend(backend, self.config, self.layout).run(self.ctx())

    def log(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in TaskLog(self.layout, self.task.id).read() if r["kind"] == kind]

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.board.events.read(task=self.task.id) if e["event"] == name]


ClaimFn = Callable[..., Claimed]


@pytest.fixture
def claim(repo: Path) -> Iterator[ClaimFn]:
    boards: list[FileBoard] = []

    def make(script: Any = None, agent: dict[str, Any] | None = None,
             subject: str = "Add a greeting", **fields: Any) -> Claimed:
        layout = init_repo(repo)
        # no sandbox (faster), opted in as a user must be for unsandboxed bash to run
        config = Config.load(repo, environ={}, overrides={"agent": {
            "sandbox": "off", "allow_unsandboxed_bash": True, **(agent or {})}})
        board = open_board(layout, config.board, actor="alice")
        boards.append(board)
        if script is not None:
            fields.setdefault("metadata", {})["script"] = script
        added = board.add(subject, **fields)
        task = board.claim("alice", task_id=added.id)
        assert task is not None and task.lease is not None
        ws = WorktreeManager(layout, config.worktree, board).create(task)
        task = board.update(task.id, task.lease.token, **binding(ws))
        return Claimed(layout, config, board, task, task.lease.token, ws,  # type: ignore[union-attr]
                       threading.Event())

    yield make
    for b in boards:
        b.close()


WRITE_AND_FINISH = [
    [{"tool": "write", "args": {"file_path": "greeting.txt", "content": "hello\n"}}],
    [{"tool": "read", "args": {"file_path": "greeting.txt"}}],
    "Wrote greeting.txt.",
]


def test_scripted_backend_makes_real_edits_through_the_loop(claim: ClaimFn) -> None:
    c = claim(WRITE_AND_FINISH)
    result = c.run()
    assert result.ok and result.summary == "Wrote greeting.txt."
    assert (c.workspace.path / "greeting.txt").read_text() == "hello\n"
    assert not (c.layout.root / "greeting.txt").exists()  # the main checkout is untouched
    assert [r["name"] for r in c.log("tool_call")] == ["write", "read"]
    assert "hello" in c.log("tool_result")[1]["content"]
    assert {e["tool"] for e in c.events("tool_called")} == {"write", "read"}
    assert c.events("file_modified")


def test_script_from_a_file_named_in_the_task(claim: ClaimFn, repo: Path) -> None:
    (repo / "plan.json").write_text(json.dumps({"steps": WRITE_AND_FINISH}))
    c = claim("plan.json")
    assert c.run().ok


def test_a_script_that_ends_early_fails_loudly_without_retry(claim: ClaimFn) -> None:
    c = claim([[{"tool": "ls", "args": {}}]])
    result = c.run()
    assert not result.ok and not result.retry
    assert "unexpected model call #2" in (result.error or "")


def test_unused_script_steps_fail_loudly(claim: ClaimFn) -> None:
    c = claim(["done", [{"tool": "ls", "args": {}}], "really done"])
    result = c.run()
    assert not result.ok and not result.retry and "2 later steps are unused" in (
        result.error or "")


def test_a_task_without_a_script_is_a_clear_error(claim: ClaimFn) -> None:
    result = claim().run()
    assert not result.ok and not result.retry and "needs a script" in (result.error or "")


def test_a_budget_ends_the_task_without_retry(claim: ClaimFn) -> None:
    c = claim([[{"tool": "ls", "args": {}}]] * 3 + ["done"], agent={"max_turns": 2})
    result = c.run()
    assert not result.ok and not result.retry and "turn limit" in (result.error or "")


def test_a_warm_stop_is_reported_as_stopped(claim: ClaimFn) -> None:
    c = claim(WRITE_AND_FINISH)
    c.stop.set()
    result = c.run()
    assert result.stopped and not result.ok


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackAPI]:
    with LoopbackAPI() as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
        yield server


def test_anthropic_backend_keeps_the_api_key_out_of_tools_events_and_logs(
        claim: ClaimFn, api: LoopbackAPI) -> None:
    c = claim(agent={"model": "claude-sonnet-4-6", "allow": ["Bash"]})
    api.reply(tool_use("bash", {"command": "env; echo key=$ANTHROPIC_API_KEY"}, id="t1"))
    api.reply(tool_use("write", {"file_path": "env.txt", "content": SECRET}, id="t2"))
    api.reply("checked the environment")
    result = c.run("anthropic")
    assert result.ok, result.error
    env_output = api.requests[1]["messages"][-1]["content"][0]["content"]
    assert "ORCH_TASK_ID=" in env_output and "key=\n" in env_output + "\n"
    assert SECRET not in env_output and "ANTHROPIC_API_KEY" not in env_output
    assert SECRET in (c.workspace.path / "env.txt").read_text()  # the model saw it: it's logged
    assert SECRET not in c.layout.events.read_text()
    assert SECRET not in (c.layout.logs / f"{c.task.id}.jsonl").read_text()
    assert "***" in (c.layout.logs / f"{c.task.id}.jsonl").read_text()


def test_anthropic_backend_records_usage_and_cost_on_the_task_as_it_goes(
        claim: ClaimFn, api: LoopbackAPI) -> None:
    c = claim(agent={"model": "claude-sonnet-4-6"})
    seen: list[Usage] = []
    api.reply(tool_use("ls", {}, id="t1"))

    def second(body: dict[str, Any]) -> Any:
        seen.append(c.board.get(c.task.id).usage)  # written before the next request
        api.reply("done")
        return api.queue.popleft()

    api.responder = second
    result = c.run("anthropic")
    assert result.ok
    assert seen[0].input_tokens + seen[0].cache_write_tokens > 0 and seen[0].cost_usd > 0
    on_task = c.board.get(c.task.id).usage
    assert on_task == result.usage and result.usage.cache_read_tokens > 0
    assert c.board.get(c.task.id).status is Status.IN_PROGRESS  # the teammate completes it


def test_anthropic_backend_without_credentials_fails_without_retry(
        claim: ClaimFn, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = claim().run("anthropic")
    assert not result.ok and not result.retry and "ANTHROPIC_API_KEY" in (result.error or "")


def test_anthropic_backend_api_failure_is_a_retryable_error(claim: ClaimFn,
                                                            api: LoopbackAPI) -> None:
    api.fail(400, "invalid_request_error", "messages: bad")
    result = claim(agent={"model": "claude-sonnet-4-6"}).run("anthropic")
    assert not result.ok and result.retry and "messages: bad" in (result.error or "")


def test_backends_are_registered_by_name(claim: ClaimFn) -> None:
    c = claim()
    assert isinstance(load_backend("scripted", c.config, c.layout), ScriptedBackend)
    assert isinstance(load_backend("anthropic", c.config, c.layout), AnthropicBackend)


def test_project_permission_rules_come_from_the_main_checkout(claim: ClaimFn,
                                                              repo: Path) -> None:
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.local.json").write_text(
        json.dumps({"permissions": {"deny": ["Bash(touch:*)"]}}))
    c = claim([[{"tool": "bash", "args": {"command": "touch x"}}], "done"],
              agent={"allow": ["Bash"]})
    assert c.run().ok
    assert not (c.workspace.path / "x").exists()
    [result] = c.log("tool_result")
    assert result["is_error"] and "Bash(touch:*)" in result["content"]
