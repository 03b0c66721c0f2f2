"""The ``claude-code`` backend with the real Claude Code CLI (from npm) on a loopback API.

A real team (`orchestrator up --burst` as a subprocess) or the backend on a real
board and worktree; Claude Code is driven by `ClaudeScript` through
``ANTHROPIC_BASE_URL``. Only the network is fake.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.permission_flow import answer, pending
from orchestrator.board import open_board
from orchestrator.board.tasklogs import TaskLog
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.protocols import RunResult
from tests.loopback import LoopbackAPI
from tests.test_backend_agent import ClaimFn, claim  # noqa: F401 (the fixture)
from tests.test_claude_code_support import (
    ClaudeScript,
    bash,
    claude_binary,
    claude_env,
    edit,
    read,
    said,
    write,
)
from tests.test_team_support import changed_files, cli, events, tasks, team_env, wait_until


def git_show(repo: Path, rev: str) -> str:
    return subprocess.run(["git", "show", rev], cwd=repo, check=True, capture_output=True,
                          text=True).stdout


def log(repo: Path, task_id: str, kind: str) -> list[dict[str, Any]]:
    return [r for r in TaskLog(Layout.at(repo), task_id).read() if r["kind"] == kind]


def test_a_teammate_runs_claude_code_to_review_with_usage_and_a_retry_resumes_the_session(
        repo: Path) -> None:
    claude_binary()
    user = Path(os.environ["HOME"]) / ".claude"
    user.mkdir()
    (user / "settings.json").write_text(json.dumps({"model": "claude-from-user-settings"}))
    user_before = sorted(p.name for p in user.iterdir())

    def script(wt: Path) -> list[Any]:
        return [write(wt / "hello.txt", "hello\n"), read(wt / "README.md"),
                edit(wt / "README.md", "# sample", "# sample, edited by Claude Code"),
                "Wrote hello.txt and edited README.md.",
                # the retry, resumed in the same session
                read(wt / "hello.txt"), edit(wt / "hello.txt", "hello\n", "hello\nagain\n"),
                "Said hello again."]

    with LoopbackAPI() as api:
        cc = ClaudeScript(api, script)
        env = {**team_env(), **claude_env(api)}
        with open_board(Layout.at(repo)) as board:
            board.add("Greet the world", description="Write hello.txt, edit the README.")
        res = cli(repo, "up", "--burst", "-n", "1", "--backend", "claude-code", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        [task] = tasks(repo)
        assert task.status == Status.REVIEW, task.error
        assert task.session_id and task.branch
        assert task.usage.cost_usd > 0 and task.usage.input_tokens > 0
        assert task.usage.output_tokens > 0 and task.usage.cache_write_tokens > 0
        assert sorted(changed_files(repo, task.branch)) == ["README.md", "hello.txt"]
        assert git_show(repo, f"{task.branch}:hello.txt") == "hello\n"
        assert "edited by Claude Code" in git_show(repo, f"{task.branch}:README.md")
        called = [e["tool"] for e in events(repo, "tool_called")]
        assert called == ["Write", "Read", "Edit"]
        assert sorted(e["path"] for e in events(repo, "file_modified")) == [
            "README.md", "hello.txt"]
        # the teammate's own config folder, with the user's settings honoured and untouched
        mine = repo / ".tasks" / ".run" / "claude" / "alice"
        assert (mine / "settings.json").resolve() == (user / "settings.json").resolve()
        assert (mine / ".claude.json").is_file()
        assert {r["model"] for r in cc.conversations()} == {"claude-from-user-settings"}
        assert sorted(p.name for p in user.iterdir()) == user_before
        first_run = len(api.requests)

        with open_board(Layout.at(repo)) as board:
            board.set_status(task.id, Status.PENDING, actor="cli",
                             feedback=["Say hello again in hello.txt"])
        res = cli(repo, "up", "--burst", "-n", "1", "--backend", "claude-code", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        [again] = tasks(repo)
        assert again.status == Status.REVIEW, again.error
        assert again.session_id == task.session_id
        assert again.usage.cost_usd > task.usage.cost_usd
        started = log(repo, task.id, "backend_started")
        assert started[-1]["resume"] == task.session_id
        assert "--resume" in started[-1]["argv"] and "--resume" not in started[0]["argv"]
        resumed = [r for r in api.requests[first_run:] if r.get("tools")]
        assert said(resumed, "Say hello again in hello.txt")
        assert said(resumed[:1], "Greet the world")  # the first run's conversation came back
        assert git_show(repo, f"{task.branch}:hello.txt") == "hello\nagain\n"
        assert cc.problems == [] and api.errors == []


def failed_once(repo: Path, env: dict[str, str], n: int = 1) -> list[Any]:
    """Run ``n`` tasks through a one-teammate burst that must fail each exactly once."""
    with open_board(Layout.at(repo)) as board:
        for i in range(n):
            board.add(f"Task {i}")
    res = cli(repo, "up", "--burst", "-n", "1", "--backend", "claude-code", env=env)
    assert res.returncode == 1 and "tasks failed" in res.stdout + res.stderr
    done = tasks(repo)
    assert [(t.status, t.attempts) for t in done] == [(Status.FAILED, 1)] * n
    assert len(events(repo, "task_claimed")) == n  # no retry storm
    shown = cli(repo, "show", done[0].id)
    assert done[0].error and done[0].error.splitlines()[0] in shown.stdout
    return done


def test_claude_code_not_installed_fails_each_task_once_with_a_clear_error(repo: Path) -> None:
    env = {**team_env(), "ORCH_CLAUDE_CODE_BINARY": str(repo / "no" / "claude")}
    for task in failed_once(repo, env, n=2):
        assert "Claude Code CLI not found" in str(task.error)
        assert "npm install -g @anthropic-ai/claude-code" in str(task.error)


def test_claude_code_that_exits_at_once_fails_without_retry_with_what_it_said(
        repo: Path, claim: ClaimFn) -> None:  # noqa: F811
    from orchestrator.backends.claude_code import ClaudeCodeBackend

    fake = repo.parent / "claude"
    fake.write_text("#!/bin/sh\necho 'claude: broken install, cannot find node' >&2\nexit 3\n")
    fake.chmod(0o755)
    c = claim()
    config = Config.load(repo, environ={}, overrides={"claude_code": {"binary": str(fake)}})
    result = ClaudeCodeBackend(config, c.layout).run(c.ctx())
    assert not result.ok and result.retry is False
    assert str(result.error) == ("Claude Code exited at once (exit code 3): "
                                 "claude: broken install, cannot find node")


def test_claude_code_not_logged_in_fails_without_retry_saying_so(
        repo: Path, claim: ClaimFn, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from orchestrator.backends.claude_code import ClaudeCodeBackend

    c = claim()
    config = Config.load(repo, environ={}, overrides={
        "claude_code": {"binary": str(claude_binary())}})
    with LoopbackAPI() as api:
        for k, v in claude_env(api).items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("ANTHROPIC_API_KEY")
        result = ClaudeCodeBackend(config, c.layout).run(c.ctx())
        assert api.requests == []
    assert not result.ok and result.retry is False
    assert str(result.error).startswith("Claude Code is not logged in: Not logged in")


APPROVED = "git commit --allow-empty -qm approved-by-lead"


def test_a_denied_tool_becomes_a_permission_request_and_approval_resumes_the_session(
        repo: Path, claim: ClaimFn, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from orchestrator.backends.claude_code import ClaudeCodeBackend

    time_server = Path(sys.executable).parent / "mcp-server-time"
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {"time": {
        "command": str(time_server), "args": ["--local-timezone", "UTC"]}}}))
    subprocess.run(["git", "add", ".mcp.json"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "mcp"], cwd=repo, check=True)
    c = claim(subject="Tag the release", metadata={"max_turns": 9})
    layout, board, task = c.layout, c.board, c.task
    config = Config.load(repo, environ={}, overrides={
        "claude_code": {"binary": str(claude_binary())},
        "agent": {"permission_mode": "acceptEdits", "deny": ["Bash(curl:*)"]}})

    def script(wt: Path) -> list[Any]:
        return [bash("curl -s http://127.0.0.1:9/"), bash(APPROVED),
                "Both were denied; waiting.", bash(APPROVED), "Tagged."]

    def tagged() -> bool:
        return "approved-by-lead" in subprocess.run(  # on the task's branch, imported
            ["git", "log", "--all", "--format=%s"], cwd=repo, check=True, capture_output=True,
            text=True).stdout

    with LoopbackAPI() as api:
        cc = ClaudeScript(api, script)
        for k, v in claude_env(api).items():
            monkeypatch.setenv(k, v)  # the teammate's environment
        ctx = c.ctx()
        out: list[RunResult] = []
        runner = threading.Thread(target=lambda: out.append(
            ClaudeCodeBackend(config, layout).run(ctx)))
        runner.start()
        try:
            [req] = wait_until(lambda: pending(board), 90, "a permission request")
            assert req["task"] == task.id and req["tool"] == "Bash"
            assert req["subject"] == APPROVED
            wait_until(lambda: getattr(board.get(task.id).wait, "ident", None)
                       == req["request_id"], 30, "the task to show what it waits for")
            assert not tagged()
            answer(board, task.id, approved=True)
        finally:
            if pending(board):
                ctx.stop.set()  # a failed assertion: end the wait
            runner.join(90)
        [result] = out
        assert cc.problems == [] and api.errors == []
    assert result.ok, result.error
    assert tagged()
    assert board.get(task.id).wait is None
    evs = list(board.events.read(task=task.id))
    assert [e["tool"] for e in evs if e["event"] == "permission_requested"] == ["Bash"]
    [denied] = [e for e in evs if e["event"] == "permission_denied"]
    assert denied["rule"] == "Bash(curl:*)"  # a deny rule is final: never asked
    started = [r for r in TaskLog(layout, task.id).read() if r["kind"] == "backend_started"]
    assert len(started) == 2 and started[1]["resume"] == result.session_id
    assert "Bash(git commit --allow-empty -qm approved-by-lead)" in started[1]["argv"]
    assert "Bash(curl:*)" in started[0]["argv"]  # the deny rule, as --disallowedTools
    argv = started[0]["argv"]
    assert argv[argv.index("--max-turns") + 1] == "9"  # from the task
    # the project's MCP server reached Claude Code through --mcp-config (it connects
    # in the background: "pending" at start, never "failed")
    inits = [r["message"] for r in TaskLog(layout, task.id).read()
             if r["kind"] == "claude_code" and r["message"].get("subtype") == "init"]
    assert [[(s["name"], s["status"] in ("pending", "connected")) for s in i["mcp_servers"]]
            for i in inits] == [[("time", True)]] * 2
    assert said(cc.conversations()[-1:], "The lead approved")


def test_max_turns_from_the_task_ends_the_run_without_retry_and_keeps_the_usage(
        repo: Path, claim: ClaimFn, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from orchestrator.backends.claude_code import ClaudeCodeBackend

    c = claim(subject="Write two files", metadata={"max_turns": 1})
    config = Config.load(repo, environ={}, overrides={
        "claude_code": {"binary": str(claude_binary())}})
    with LoopbackAPI() as api:
        ClaudeScript(api, lambda wt: [write(wt / "one.txt", "1\n"), write(wt / "two.txt", "2\n"),
                                      "Done."])
        for k, v in claude_env(api).items():
            monkeypatch.setenv(k, v)
        result = ClaudeCodeBackend(config, c.layout).run(c.ctx())
    assert not result.ok and result.retry is False
    assert str(result.error).startswith("budget: Claude Code stopped: error_max_turns")
    assert result.usage.cost_usd > 0 and result.session_id
    assert (c.workspace.path / "one.txt").exists() and not (c.workspace.path / "two.txt").exists()


SLOW_MCP_SERVER = r'''
import json, sys, time
time.sleep(float(sys.argv[1]))  # a server that takes its time to start
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "slow", "version": "1"}}
    elif msg["method"] == "tools/list":
        result = {"tools": [{"name": "ping", "description": "Answers pong.",
                             "inputSchema": {"type": "object", "properties": {}}}]}
    elif msg["method"] == "tools/call":
        result = {"content": [{"type": "text", "text": "pong"}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                          "error": {"code": -32601, "message": "no such method"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
'''


def test_a_slow_mcp_server_s_tools_are_there_on_the_first_turn(repo: Path) -> None:
    claude_binary()
    (repo / "slow_mcp.py").write_text(SLOW_MCP_SERVER)
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {"slow": {
        "command": sys.executable, "args": [str(repo / "slow_mcp.py"), "2.5"]}}}))
    subprocess.run(["git", "add", "slow_mcp.py", ".mcp.json"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "a slow MCP server"], cwd=repo, check=True)
    with LoopbackAPI() as api:
        cc = ClaudeScript(api, lambda wt: [write(wt / "done.txt", "done\n"), "Done."])
        with open_board(Layout.at(repo)) as board:
            board.add("Use the tools you have")
        res = cli(repo, "up", "--burst", "-n", "1", "--backend", "claude-code",
                  env={**team_env(), **claude_env(api)})
        assert res.returncode == 0, res.stdout + res.stderr
        first = cc.conversations()[0]
        assert "mcp__slow__ping" in {t["name"] for t in first["tools"]}


def test_a_message_sent_while_claude_code_works_resumes_its_session_with_it(
        repo: Path) -> None:
    """`orchestrator send alice …` while alice's Claude Code turn runs: when the turn ends
    the teammate resumes the same session with the message, and the agent acts on it
    (a real team, the real CLI; the first turn waits until the message was delivered)."""
    from tests.test_team_support import finish, start, team_cleanup, working_on

    claude_binary()
    messages = repo / ".tasks" / ".run" / "messages" / "task_001.md"

    def script(wt: Path) -> list[Any]:
        return ["First pass done.",  # the turn the message arrives in
                write(wt / "v2.txt", "v2\n"), "Switched to v2."]

    with LoopbackAPI() as api:
        cc = ClaudeScript(api, script)
        scripted = cc.respond

        def respond(body: dict[str, Any]) -> Any:
            if body.get("tools") and not any(m.get("role") == "assistant"
                                             for m in body.get("messages", [])):
                wait_until(lambda: messages.exists() and "use the v2 API" in
                           messages.read_text(), 60, "the message to be delivered")
            return scripted(body)

        api.responder = respond
        with open_board(Layout.at(repo)) as board:
            task = board.add("Build the client")
        with team_cleanup(repo):
            proc = start(repo, "--burst", "-n", "1", "--backend", "claude-code",
                         env={**team_env(), **claude_env(api)})
            wait_until(lambda: working_on(repo, task.id), 90, "Claude Code to start")
            out = cli(repo, "send", "alice", "use the v2 API")
            assert out.returncode == 0, out.stderr
            code, said_out = finish(proc, 120)
        assert code == 0, said_out
        assert cc.problems == [] and api.errors == []
        talks = cc.conversations()
        assert not said(talks[:1], "use the v2 API")  # it came after the turn started
        assert said(talks[1:2], "use the v2 API") and said(talks[1:2], "from cli")
    [done] = tasks(repo)
    assert done.status is Status.REVIEW, done.error
    assert git_show(repo, f"{done.branch}:v2.txt") == "v2\n"
    started = log(repo, task.id, "backend_started")
    assert len(started) == 2 and started[1]["resume"] == done.session_id
    assert [r["text"] for r in log(repo, task.id, "messages_delivered")] == [
        messages.read_text().strip()]
