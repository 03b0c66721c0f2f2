"""``orchestrator mcp`` (the board over stdio) driven by the SDK's client and by the MCP
Inspector CLI; ``orchestrator mcp-status`` against real servers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client

from orchestrator.board import init_repo, open_board
from orchestrator.layout import Layout
from orchestrator.mcp.status import render
from orchestrator.model import Status
from tests.helpers import git

ROOT = Path(__file__).resolve().parent.parent
INSPECTOR_PKG = ROOT / ".venv" / "npm" / "node_modules" / "@modelcontextprotocol" / "inspector-cli"
INSPECTOR = ROOT / ".venv" / "npm" / "node_modules" / ".bin" / "mcp-inspector-cli"
TIME = Path(sys.executable).parent / "mcp-server-time"
TOOLS = {"add_task", "list_tasks", "get_task", "cancel_task", "review", "diff", "merge",
         "discard", "events", "answer", "resume", "retry"}
SERVE = [sys.executable, "-m", "orchestrator", "mcp"]


def call(repo: Path, steps: list[tuple[str, dict[str, Any]]]) -> tuple[list[Any], list[Any]]:
    """Start the board server in ``repo`` with the SDK's client; list its tools and run the
    calls in order. Returns (tools, results)."""
    async def main() -> tuple[list[Any], list[Any]]:
        params = StdioServerParameters(command=SERVE[0], args=SERVE[1:], cwd=repo)
        async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            return tools, [await session.call_tool(n, a) for n, a in steps]
    return anyio.run(main)


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content)


def data(result: Any) -> Any:
    assert not result.is_error, text(result)
    return json.loads(text(result))


def test_board_over_mcp_with_the_sdk_client(repo: Path) -> None:
    tools, res = call(repo, [
        ("add_task", {"subject": "Write the parser", "description": "with tests",
                      "priority": 5}),
        ("add_task", {"subject": "Use the parser", "blocked_by": ["1"]}),
        ("list_tasks", {}),
        ("list_tasks", {"status": ["cancelled"]}),
        ("get_task", {"id": "task_002"}),
        ("cancel_task", {"id": "2"}),
        ("cancel_task", {"id": "2"}),
        ("get_task", {"id": "99"}),
        ("get_task", {"id": "not-an-id"}),
        ("add_task", {"subject": ""}),
        ("add_task", {"subject": "x", "blocked_by": ["task_042"]}),
        ("list_tasks", {"status": ["sleeping"]}),
        ("events", {"task": "2"}),
        ("events", {"event": "task_created", "limit": 1}),
        ("list_tasks", {"status": "cancelled"}),  # one status, not only a list
        ("list_tasks", {"status": "sleeping"}),
        ("add_task", {"subject": "Budgeted", "budget_usd": 2, "timeout": "30m"}),
        ("add_task", {"subject": "Bad budget", "timeout": "soon"}),
        ("list_tasks", {"status": ["pending"]}),
    ])
    by_name = {t.name: t for t in tools}
    assert set(by_name) == TOOLS
    add = by_name["add_task"].input_schema
    assert add["required"] == ["subject"]
    assert set(add["properties"]) == {"subject", "description", "blocked_by", "priority",
                                      "budget_usd", "budget_tokens", "timeout"}
    assert add["properties"]["subject"]["minLength"] == 1
    assert add["properties"]["blocked_by"]["type"] == "array"
    assert by_name["get_task"].input_schema["required"] == ["id"]
    assert "cancelled" in json.dumps(by_name["list_tasks"].input_schema)

    first, second = data(res[0]), data(res[1])
    assert (first["id"], first["priority"], first["description"]) == ("task_001", 5, "with tests")
    assert second["blocked_by"] == ["task_001"]
    listed = data(res[2])["tasks"]
    assert [(t["id"], t["status"]) for t in listed] == [("task_001", "pending"),
                                                        ("task_002", "pending")]
    assert data(res[3]) == {"tasks": []}
    assert data(res[4])["subject"] == "Use the parser"
    assert data(res[5])["status"] == "cancelled"
    assert res[6].is_error and "cannot go from cancelled" in text(res[6])
    assert res[7].is_error and "no task task_099" in text(res[7])
    assert res[8].is_error and "not a task id" in text(res[8])
    assert res[9].is_error and "subject" in text(res[9]) and "\n" not in text(res[9])
    assert res[10].is_error and "unknown blocker task_042" in text(res[10])
    assert res[11].is_error and "status" in text(res[11])
    tail = data(res[12])["events"]
    assert [(e["event"], e["actor"]) for e in tail] == [("task_created", "mcp"),
                                                        ("task_cancelled", "mcp")]
    assert [t["id"] for t in data(res[14])["tasks"]] == ["task_002"]
    assert res[15].is_error and "status" in text(res[15])
    last = data(res[13])["events"]
    assert len(last) == 1 and last[0]["task"] == "task_002"
    assert data(res[16])["budget"] == {"usd": 2.0, "tokens": None, "seconds": 1800.0}
    assert res[17].is_error and "timeout" in text(res[17])
    spent = {t["id"]: t["spent"] for t in data(res[18])["tasks"]}
    assert spent == {"task_001": "$0.00", "task_003": "$0.00/$2.00 0s/30m"}

    # what the server did is on disk, where every other part of orchestrator reads it
    with open_board(Layout.at(repo)) as board:
        assert board.get("task_002").status == Status.CANCELLED
        assert board.get("task_001").subject == "Write the parser"


def _kept_for_review(repo: Path, subject: str, files: dict[str, str]) -> str:
    """A task as a teammate leaves it: claimed, work committed on its branch, in review."""
    with open_board(init_repo(repo)) as board:
        task = board.add(subject)
        claimed = board.claim("alice", task_id=task.id)
        assert claimed is not None and claimed.lease is not None
        base = git(repo, "rev-parse", "HEAD")
        branch = f"task/{task.id}"
        git(repo, "checkout", "-q", "-b", branch)
        for name, body in files.items():
            (repo / name).write_text(body)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", subject)
        git(repo, "checkout", "-q", "main")
        board.complete(task.id, claimed.lease.token, branch=branch, base_commit=base)
    return task.id


def test_review_and_diff_over_mcp(repo: Path) -> None:
    a = _kept_for_review(repo, "Parser", {"parser.py": "def parse():\n    return 1\n",
                                           "README.md": "# sample\nparser\n"})
    b = _kept_for_review(repo, "Docs", {"README.md": "# sample\ndocs\n"})
    _, res = call(repo, [
        ("review", {}),
        ("diff", {"id": a}),
        ("diff", {"id": a, "stat": True}),
        ("add_task", {"subject": "not started"}),
        ("diff", {"id": "3"}),
        ("merge", {"id": a}),
        ("discard", {"id": b, "force": True}),
        ("merge", {"id": a, "strategy": "octopus"}),
    ])
    queue = {t["id"]: t for t in data(res[0])["tasks"]}
    assert set(queue) == {a, b}
    assert queue[a]["branch"] == f"task/{a}"
    assert {f["path"] for f in queue[a]["diffstat"]["files"]} == {"parser.py", "README.md"}
    assert queue[a]["diffstat"]["added"] == 3
    assert queue[a]["overlaps"] == [{"task": b, "status": "review", "files": ["README.md"]}]
    assert queue[b]["overlaps"] == [{"task": a, "status": "review", "files": ["README.md"]}]
    assert "+def parse():" in text(res[1]) and "+++ b/parser.py" in text(res[1])
    assert "parser.py" in text(res[2]) and "+def parse" not in text(res[2])
    assert res[4].is_error and "has no branch yet" in text(res[4])
    assert not res[5].is_error and data(res[5])["result"]["task"]["status"] == "merged"
    assert not res[6].is_error and data(res[6])["result"]["task"]["status"] == "discarded"
    assert res[7].is_error and "strategy" in text(res[7])


# --- a third-party client: the MCP Inspector CLI -----------------------------------------


def inspector(repo: Path, *args: str) -> Any:
    if not INSPECTOR.exists():
        if shutil.which("npm") is None:
            pytest.skip("npm is missing, so @modelcontextprotocol/inspector-cli is not installed")
        pytest.fail("the MCP Inspector CLI is not installed: run scripts/test-deps")
    # inspector-cli 1.0.3 looks for its package.json relative to the cwd, so it runs from its
    # build folder; the server is pointed at the repository with -C.
    out = subprocess.run(
        [str(INSPECTOR), "--cli", *args, "--", *SERVE, "-C", str(repo)],
        cwd=INSPECTOR_PKG / "build", capture_output=True, text=True, timeout=90,
        env={**os.environ, "NO_COLOR": "1"})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_board_over_mcp_with_the_inspector_cli(repo: Path) -> None:
    listed = inspector(repo, "--method", "tools/list")
    assert {t["name"] for t in listed["tools"]} == TOOLS
    added = inspector(repo, "--tool-arg", "subject=From the inspector", "priority=3",
                      "--method", "tools/call", "--tool-name", "add_task")
    assert added["structuredContent"]["id"] == "task_001"
    assert json.loads((repo / ".tasks" / "task_001.json").read_text())["priority"] == 3
    missing = inspector(repo, "--tool-arg", "id=7", "--method", "tools/call",  # a number
                        "--tool-name", "cancel_task")
    assert missing["isError"] is True and "no task task_007" in missing["content"][0]["text"]


# --- mcp-status ------------------------------------------------------------------------------


def orchestrator(repo: Path, *args: str, env: dict[str, str] | None = None
                 ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                          capture_output=True, text=True, timeout=90,
                          env={**os.environ, **(env or {})})


def test_mcp_status_shows_plugin_server_tool_hierarchy(repo: Path, tmp_path: Path) -> None:
    if not TIME.exists():
        pytest.fail("mcp-server-time is not installed: run scripts/test-deps")
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "time": {"command": str(TIME)},
        "exits": {"command": "sh", "args": ["-c", "echo 'bad token' >&2; exit 1"]},
        "needs.key": {"command": "x", "env": {"K": "${MCP_TEST_UNSET_KEY}"}},
    }}))
    plugins = tmp_path / "plugins"
    manifest = plugins / "clock" / ".claude-plugin" / "plugin.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"name": "clock", "mcpServers": {
        "time": {"command": str(TIME), "args": ["--local-timezone", "UTC"]}}}))
    env = {"ORCH_MCP_USER_PLUGIN_DIR": str(plugins)}

    # a generous start-up time: the machine is shared; the broken servers fail at once anyway
    out = orchestrator(repo, "mcp-status", "--json", "--timeout", "60", env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    groups = {g["plugin"]: {s["server"]: s for s in g["servers"]} for g in report["plugins"]}
    project = groups["(project .mcp.json)"]
    assert project["time"]["state"] == "connected"
    assert {t["as"] for t in project["time"]["tools"]} == {
        "mcp__time__get_current_time", "mcp__time__convert_time"}
    assert project["time"]["has_resources"] is True and project["time"]["resources"] == []
    assert project["exits"]["state"] == "failed" and "bad token" in project["exits"]["error"]
    assert project["needs_key"]["state"] == "invalid"
    assert "MCP_TEST_UNSET_KEY is not set" in project["needs_key"]["error"]
    clock = groups["clock"]["time_2"]
    assert clock["state"] == "connected" and "already taken" in clock["renamed"]
    assert "mcp__time_2__get_current_time" in {t["as"] for t in clock["tools"]}

    lines = render(report).splitlines()  # what `mcp-status` prints without --json
    assert lines[0] == "(project .mcp.json)"
    assert "plugin clock" in lines
    assert any(ln.strip().startswith("tool mcp__time_2__convert_time") for ln in lines)
    assert any("error:" in ln and "bad token" in ln for ln in lines)


def test_mcp_status_without_servers_and_with_a_broken_file(repo: Path) -> None:
    out = orchestrator(repo, "mcp-status")
    assert out.returncode == 0 and "no MCP servers configured" in out.stdout
    (repo / ".mcp.json").write_text("{oops")
    out = orchestrator(repo, "mcp-status")
    assert out.returncode == 0, out.stderr
    assert "problem:" in out.stdout and "invalid JSON" in out.stdout
    assert "Traceback" not in out.stderr
