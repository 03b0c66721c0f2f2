"""MCP servers in a real teammate run: the scripted backend calls MCP tools through the
same loop, toolset and permission gate as the native tools, in the task's worktree."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from orchestrator.backends import load_backend
from orchestrator.board import init_repo, open_board
from orchestrator.board.tasklogs import TaskLog
from orchestrator.config import Config
from orchestrator.protocols import RunContext
from orchestrator.worktree.manager import WorktreeManager, binding
from tests.helpers import child_pids
from tests.test_mcp_client import RAW_SERVER


def test_a_scripted_run_uses_mcp_tools_in_its_worktree(repo: Path, tmp_path: Path) -> None:
    script = tmp_path / "raw_server.py"
    script.write_text(RAW_SERVER)
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "raw": {"command": sys.executable, "args": [str(script)]},
        "broken": {"command": "sh", "args": ["-c", "echo 'no licence' >&2; exit 2"]},
    }}))
    layout = init_repo(repo)
    config = Config.load(repo, environ={}, overrides={"agent": {
        "sandbox": "off", "allow": ["mcp__raw"], "deny": ["mcp__raw__a_b_2"]}})
    steps: list[Any] = [
        [{"tool": "mcp__raw__cwd", "args": {}}],
        [{"tool": "mcp__raw__env", "args": {}}],
        [{"tool": "mcp__raw__a_b_2", "args": {}}],
        "Used the MCP tools.",
    ]
    before = set(child_pids())
    with open_board(layout, config.board, actor="alice") as board:
        added = board.add("Use MCP", metadata={"script": steps})
        task = board.claim("alice", task_id=added.id)
        assert task is not None and task.lease is not None
        ws = WorktreeManager(layout, config.worktree, board).create(task)
        task = board.update(task.id, task.lease.token, **binding(ws))
        ctx = RunContext(task=task, token=task.lease.token, teammate="alice",  # type: ignore[union-attr]
                         workspace=ws, board=board, layout=layout,
                         log=TaskLog(layout, task.id, actor="alice"), stop=threading.Event())
        result = load_backend("scripted", config, layout).run(ctx)
        events = list(board.events.read(task=task.id))

    # (without the allow rule the gate would ask a person: MCP tools are never read-only)
    assert result.ok, result.error
    assert set(child_pids()) - before == set()  # the servers stopped with the run
    log = list(TaskLog(layout, task.id).read())
    results = [r["content"] for r in log if r["kind"] == "tool_result"]
    assert results[0] == str(ws.path)  # started in the task's worktree, not the main checkout
    assert results[1].startswith(f"{task.id}|")  # with the run's environment
    assert "permission denied" in results[2] and "mcp__raw__a_b_2" in results[2]
    called = [(e["tool"], e["decision"]) for e in events if e["event"] == "tool_called"]
    assert called == [("mcp__raw__cwd", "allow"), ("mcp__raw__env", "allow"),
                      ("mcp__raw__a_b_2", "deny")]
    failed = [e for e in events if e["event"] == "mcp_server_failed"]
    assert [e["server"] for e in failed] == ["broken"] and "no licence" in failed[0]["error"]
    assert any(r["kind"] == "mcp" and r.get("server") == "broken" for r in log)
