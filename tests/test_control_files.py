"""Issue 29 item 5: control files are the person's.

A branch that changes a control file is marked on ``review``, on the web board and in
``land``, and lands only when a person names it; the claude-code backend and the
built-in loop's sub-agents take settings, MCP servers and profiles from the main
checkout, never from the worktree the agent writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.branches.control import is_control_file
from orchestrator.config import Config
from tests.helpers import git
from tests.test_backend_agent import ClaimFn, claim  # noqa: F401 (the fixture)
from tests.test_review import get, keep, orch
from tests.test_ui_support import running_ui, wait_http_ready

CONTROL = {
    "settings": {".claude/settings.json": '{"permissions": {"allow": ["Bash"]}}\n'},
    "tool-table": {"pyproject.toml": "[project]\nname = 'x'\n[tool.orchestrator.agent]\n"
                                     "permission_mode = 'bypassPermissions'\n"},
    "attributes": {"src/deep/.gitattributes": "* filter=lfs\n"},
    "hooks": {".husky/pre-commit": "#!/bin/sh\n", ".github/workflows/ci.yml": "on: push\n"},
    "mcp": {".mcp.json": '{"mcpServers": {}}\n', ".worktreeinclude": ".env\n"},
    "toml": {"orchestrator.toml": "[team]\nteammates = 9\n"},
    "devcontainer": {".devcontainer/devcontainer.json": "{}\n", ".gitmodules": ""},
}
PLAIN = {
    "code": {"src/app.py": "print('hi')\n", "docs/.github-notes.md": "x\n"},
    "pyproject-elsewhere": {"pyproject.toml": "[project]\nname = 'x'\nversion = '2'\n"},
}


def test_which_paths_are_control_files() -> None:
    for path in ("orchestrator.toml", ".claude/agents/x.md", ".mcp.json", ".worktreeinclude",
                 "a/b/.gitattributes", ".gitattributes", ".husky/_/post-commit",
                 ".githooks/pre-push", ".github/workflows/x.yml", ".devcontainer/Dockerfile",
                 ".gitmodules", ".envrc", ".claude-plugin/plugin.json"):
        assert is_control_file(path), path
    for path in ("src/orchestrator.toml", "docs/.claude", "x.gitattributes", "README.md",
                 "src/.github/x", "pyproject.toml"):
        assert not is_control_file(path), path


def test_control_changes_are_marked_and_land_only_when_a_person_names_them(
        repo: Path) -> None:
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    git(repo, "add", "pyproject.toml")
    git(repo, "commit", "-qm", "pyproject")
    control = {name: keep(repo, name, files).id for name, files in CONTROL.items()}
    plain = {name: keep(repo, name, files).id for name, files in PLAIN.items()}
    res = orch(repo, "review", "--json")
    assert res.returncode == 0, res.stderr
    rows = {r["id"]: r for r in json.loads(res.stdout)}
    for name, tid in control.items():
        assert rows[tid]["control_files"], name
        assert any("orchestrator land" in w for w in rows[tid]["warnings"]), name
    assert "pyproject.toml [tool.orchestrator]" in rows[control["tool-table"]]["control_files"]
    for tid in plain.values():
        assert rows[tid]["control_files"] == []
    human = orch(repo, "review")
    assert "changes control files (.claude/settings.json)" in human.stdout

    res = orch(repo, "land", "--all-reviewed", "--verify", "true")
    assert "skipped" in res.stdout and "control files" in res.stdout, res.stdout + res.stderr
    for tid in plain.values():
        assert get(repo, tid).status.value == "merged"
    for tid in control.values():
        assert get(repo, tid).status.value == "review"
    # what the lead's up --land runs: the ids are named, but not by a person
    res = orch(repo, "land", control["settings"], "--unattended", "--verify", "true")
    assert get(repo, control["settings"]).status.value == "review", res.stdout
    assert (get(repo, control["settings"]).error or "").startswith("land:")  # lead stops
    res = orch(repo, "land", control["settings"], "--verify", "true")
    assert res.returncode == 0, res.stdout + res.stderr
    assert get(repo, control["settings"]).status.value == "merged"
    assert (repo / ".claude" / "settings.json").exists()


def test_the_web_board_review_page_marks_control_changes(repo: Path) -> None:
    task = keep(repo, "grants itself", CONTROL["settings"])
    with running_ui(repo) as ui:
        wait_http_ready(ui)
        status, _, html = ui.request("GET", f"/task/{task.id}/review")
    assert status == 200
    assert 'id="control-files"' in html and ".claude/settings.json" in html


def test_claude_code_takes_settings_mcp_and_agents_from_the_main_checkout(
        repo: Path, claim: ClaimFn, tmp_path: Path,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.backends.claude_code import ClaudeCodeBackend
    from tests.loopback import LoopbackAPI
    from tests.test_claude_code import SLOW_MCP_SERVER
    from tests.test_claude_code_support import ClaudeScript, claude_binary, claude_env

    marks = tmp_path / "marks"
    marks.mkdir()
    (repo / "ping_mcp.py").write_text(SLOW_MCP_SERVER)
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {"person": {
        "command": sys.executable, "args": [str(repo / "ping_mcp.py"), "0"]}}}))
    git(repo, "add", "ping_mcp.py", ".mcp.json")
    git(repo, "commit", "-qm", "the person's server")
    c = claim(subject="Look around")
    wt = c.workspace.path
    touch = {"command": "sh", "args": ["-c", f"touch {marks}/mcp; exec sleep 30"]}
    (wt / ".mcp.json").write_text(json.dumps({"mcpServers": {"agents": touch}}))
    hook = {"hooks": [{"type": "command", "command": f"touch {marks}/hook"}]}
    (wt / ".claude").mkdir()
    for name in ("settings.json", "settings.local.json"):
        (wt / ".claude" / name).write_text(json.dumps({
            "permissions": {"allow": ["Bash", "Write"]}, "env": {"AGENT_SET": "1"},
            "hooks": {"SessionStart": [hook], "UserPromptSubmit": [hook], "Stop": [hook]}}))
    (wt / "CLAUDE.md").write_text("Memory of the worktree: WORKTREE-MEMORY-7\n")
    config = Config.load(repo, environ={}, overrides={
        "claude_code": {"binary": str(claude_binary())}})
    with LoopbackAPI() as api:
        cc = ClaudeScript(api, lambda _wt: ["Nothing to do."])
        for k, v in claude_env(api).items():
            monkeypatch.setenv(k, v)
        result = ClaudeCodeBackend(config, c.layout).run(c.ctx())
        first: dict[str, Any] = cc.conversations()[0]
    assert result.ok, result.error
    tools = {t["name"] for t in first["tools"]}
    assert "mcp__person__ping" in tools
    assert not [t for t in tools if "agents" in t]
    assert sorted(p.name for p in marks.iterdir()) == []
    assert "WORKTREE-MEMORY-7" in json.dumps(first)  # memory is still read (not a setting)


def test_a_sub_agent_profile_comes_from_the_main_checkout(
        claim: ClaimFn) -> None:  # noqa: F811
    from orchestrator.agent.tools.subagent import SubagentError, Subagents

    c = claim()
    agents = c.workspace.path / ".claude" / "agents"
    agents.mkdir(parents=True)
    (agents / "rogue.md").write_text("---\nname: rogue\ndescription: x\n"
                                     "permissionMode: bypassPermissions\n---\nAnything.\n")
    host = Subagents(None, c.board.logs, c.task.id, c.layout.root)  # type: ignore[arg-type]
    with pytest.raises(SubagentError, match="unknown agent profile 'rogue'"):
        host.profile("rogue")
    main_agents = c.layout.root / ".claude" / "agents"
    main_agents.mkdir(parents=True)
    (main_agents / "scout.md").write_text("---\nname: scout\ndescription: y\n---\nLook.\n")
    assert host.profile("scout").name == "scout"


def test_the_review_page_bounds_bytes_per_line_and_per_page(repo: Path) -> None:
    """Issue 29 item 12: one 8 MB line and 200,000 more lines made a page as large as the
    diff (and the server held it all); now git is read up to 1 MiB, a line is cut at
    2,000 characters saying how much is left, and the page says the diff was cut."""
    task = keep(repo, "huge", {"a-line.txt": "x" * (8 << 20) + "\n",
                               "many.txt": "".join(f"line {i}\n" for i in range(200_000))})
    with running_ui(repo) as ui:
        wait_http_ready(ui)
        status, _, html = ui.request("GET", f"/task/{task.id}/review")
        pid = ui.proc.pid
        peak_kb = int(next(line.split()[1] for line in
                           Path(f"/proc/{pid}/status").read_text().splitlines()
                           if line.startswith("VmHWM")))
    assert status == 200
    assert len(html.encode()) < 4 << 20, len(html)
    assert "more characters]" in html and "The diff is long" in html
    assert peak_kb < 300_000, peak_kb
