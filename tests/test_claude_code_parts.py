"""The claude-code backend's parts: rule translation, the per-teammate config folder,
the MCP file, budgets, and the stream parser fed real-shaped output in odd chunks."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgspec
import pytest

from orchestrator.backends.claude_code import (
    ClaudeStream,
    Denial,
    budget,
    config_dir,
    mcp_args,
    permission_args,
)
from orchestrator.backends.claude_code.process import PROJECT_NPM_BIN, find_binary
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Usage
from orchestrator.transcript import Output
from tests.test_backend_agent import ClaimFn, claim  # noqa: F401 (the fixture)


def config(tmp: Path, **sections: dict[str, Any]) -> Config:
    return Config.load(tmp, environ={}, overrides=sections)


def test_rules_and_modes_become_claude_code_flags(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps(
        {"permissions": {"allow": ["Bash(npm test:*)"]}}))
    c = config(tmp_path, agent={"allow": ["bash(git diff)", "multi_edit", "mcp__github__*"],
                                "ask": ["Bash(git push:*)"], "deny": ["Read(./.env)", "WebFetch"],
                                "permission_mode": "plan"})
    args, rules = permission_args(c, tmp_path, root=False)
    assert args[:2] == ["--permission-mode", "plan"]
    assert rules["allow"] == ["Bash(git diff)", "MultiEdit", "mcp__github__*", "Bash(npm test:*)"]
    settings = json.loads(args[args.index("--settings") + 1])
    assert settings == {"permissions": {"ask": ["Bash(git push:*)"]}}
    deny = args[args.index("--disallowedTools") + 1:]
    assert deny == ["Read(./.env)", "WebFetch"]


def test_bypass_as_root_becomes_accept_edits_with_every_tool_allowed(tmp_path: Path) -> None:
    c = config(tmp_path, agent={"permission_mode": "bypassPermissions", "deny": ["Bash(rm:*)"],
                                "allow_unsandboxed_bash": True})
    args, rules = permission_args(c, tmp_path, root=True)
    assert args[:2] == ["--permission-mode", "acceptEdits"]
    assert {"Bash", "Edit", "Write", "WebFetch"} <= set(rules["allow"])
    assert rules["deny"] == ["Bash(rm:*)"]  # deny still applies
    args, _ = permission_args(c, tmp_path, root=False)
    assert args[:2] == ["--permission-mode", "bypassPermissions"]


def test_unconfined_bash_asks_unless_the_user_opted_in(tmp_path: Path) -> None:
    c = config(tmp_path, agent={"permission_mode": "bypassPermissions",
                                "allow": ["Bash", "Bash(npm test:*)"]})
    for root in (True, False):
        args, rules = permission_args(c, tmp_path, root=root)
        assert args[:2] == ["--permission-mode", "acceptEdits"]
        assert "Bash" not in rules["allow"] and "Bash(npm test:*)" in rules["allow"]
        assert {"Edit", "Write", "Read", "WebFetch"} <= set(rules["allow"])


def test_a_denial_under_a_deny_rule_is_final_and_others_are_allowed_narrowly() -> None:
    rules = ["Bash(curl:*)", "WebFetch", "Edit(./secrets/**)"]
    assert Denial("Bash", {"command": "cd x && curl -s http://h"}).denied_by(rules) == \
        "Bash(curl:*)"
    assert Denial("WebFetch", {"url": "https://x"}).denied_by(rules) == "WebFetch"
    assert Denial("Bash", {"command": "curlish"}).denied_by(rules) is None
    assert Denial("Bash", {"command": "npm publish"}).rule == "Bash(npm publish)"
    assert Denial("Bash", {"command": "echo $(date)"}).rule == "Bash"
    assert Denial("Write", {"file_path": "/w/a"}).rule == "Write"


def test_each_teammate_gets_its_own_config_folder_seeded_from_the_users(tmp_path: Path) -> None:
    home = tmp_path / "home"
    user = home / ".claude"
    (user / "agents").mkdir(parents=True)
    (user / ".credentials.json").write_text('{"token": "t"}')
    (user / "settings.json").write_text('{"model": "m"}')
    (user / "history.jsonl").write_text("private\n")
    (home / ".claude.json").write_text('{"oauthAccount": {"email": "u@x"}}')
    layout = Layout.at(tmp_path / "repo")
    c = config(tmp_path)
    before = {p: p.read_bytes() for p in user.rglob("*") if p.is_file()}
    alice = config_dir(layout, c, "alice", {"HOME": str(home)})
    bob = config_dir(layout, c, "bob", {"HOME": str(home)})
    assert alice == layout.run / "claude" / "alice" and alice != bob
    for mine in (alice, bob):
        assert (mine / ".credentials.json").resolve() == (user / ".credentials.json").resolve()
        assert (mine / "settings.json").is_symlink() and (mine / "agents").is_symlink()
        assert not (mine / "history.jsonl").exists()  # the user's history stays theirs
        state = mine / ".claude.json"
        assert not state.is_symlink() and json.loads(state.read_text())["oauthAccount"]
        assert oct(state.stat().st_mode & 0o777) == "0o600"
        assert (mine / "projects").resolve() == (layout.run / "claude" / "projects").resolve()
    (alice / ".claude.json").write_text('{"changed": "by claude code"}')
    (alice / "projects" / "s.jsonl").write_text("session\n")
    config_dir(layout, c, "alice", {"HOME": str(home)})  # the next run keeps Claude Code's state
    assert json.loads((alice / ".claude.json").read_text()) == {"changed": "by claude code"}
    assert (bob / "projects" / "s.jsonl").exists()  # any teammate can resume the session
    assert {p: p.read_bytes() for p in user.rglob("*") if p.is_file()} == before
    assert not (home / ".claude.json").read_text().count("changed")


def test_an_explicit_user_folder_and_config_root(tmp_path: Path) -> None:
    user = tmp_path / "elsewhere"
    user.mkdir()
    (user / "settings.json").write_text("{}")
    (user / ".claude.json").write_text('{"from": "CLAUDE_CONFIG_DIR"}')
    c = config(tmp_path, claude_code={"config_root": str(tmp_path / "root")})
    mine = config_dir(Layout.at(tmp_path), c, "carol",
                      {"HOME": str(tmp_path / "nohome"), "CLAUDE_CONFIG_DIR": str(user)})
    assert mine == tmp_path / "root" / "carol"
    assert (mine / "settings.json").resolve() == (user / "settings.json").resolve()
    assert json.loads((mine / ".claude.json").read_text()) == {"from": "CLAUDE_CONFIG_DIR"}


def test_the_projects_mcp_servers_go_to_a_private_mcp_config_file(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:
    monkeypatch.setenv("TOKEN", "s3cret")
    (tmp_path / ".mcp.json").write_text(json.dumps({"mcpServers": {
        "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
        "api": {"type": "http", "url": "http://127.0.0.1:1/mcp",
                "headers": {"Authorization": "Bearer ${TOKEN}"}},
        "broken": {"command": "x", "env": {"A": "${NOT_SET_ANYWHERE}"}}}}))
    c = config(tmp_path, mcp={"user_plugin_dir": str(tmp_path / "none")})
    into = tmp_path / "cfg"
    into.mkdir()
    args = mcp_args(c, tmp_path, into)
    assert args == ["--mcp-config", str(into / "mcp.json"), "--strict-mcp-config"]
    servers = json.loads((into / "mcp.json").read_text())["mcpServers"]
    assert servers["time"] == {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"],
                               "env": {}}
    assert servers["api"]["headers"] == {"Authorization": "Bearer s3cret"}
    assert "broken" not in servers
    assert oct((into / "mcp.json").stat().st_mode & 0o777) == "0o600"
    # no servers: still strict, so the worktree's own .mcp.json is never read
    assert mcp_args(c, tmp_path / "cfg", into) == args
    assert json.loads((into / "mcp.json").read_text()) == {"mcpServers": {}}


def test_turns_and_dollars_come_from_the_task_then_the_config(claim: ClaimFn  # noqa: F811
                                                              ) -> None:
    c = claim(metadata={"max_turns": 7, "max_cost_usd": 2.0})
    cfg = config(c.layout.root, agent={"max_turns": 30, "max_cost_usd": 9.0})
    assert budget(c.task, cfg) == (7, 2.0)
    spent = msgspec.structs.replace(c.task, usage=Usage(cost_usd=1.5), metadata={})
    assert budget(spent, cfg) == (30, 7.5)
    assert budget(spent, config(c.layout.root)) == (50, None)


def stream_lines(wt: Path) -> list[dict[str, Any]]:
    use = {"type": "tool_use", "id": "t1", "name": "Write",
           "input": {"file_path": str(wt / "src" / "a.py"), "content": "x"}}
    denied = {"type": "tool_use", "id": "t2", "name": "Edit",
              "input": {"file_path": str(wt / "b.py"), "old_string": "a", "new_string": "b"}}
    usage = {"input_tokens": 10, "output_tokens": 0, "cache_read_input_tokens": 5,
             "cache_creation_input_tokens": 100}
    return [
        {"type": "system", "subtype": "init", "session_id": "sess-1"},
        {"type": "assistant", "message": {"id": "m1", "content": [{"type": "text", "text": "hi"}],
                                          "usage": usage}},
        {"type": "assistant", "message": {"id": "m1", "content": [use, denied], "usage": usage}},
        {"type": "user", "message": {"content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "denied", "is_error": True}]}},
        {"type": "result", "subtype": "success", "is_error": False, "session_id": "sess-1",
         "total_cost_usd": 0.25, "result": "done",
         "usage": {"input_tokens": 20, "output_tokens": 7, "cache_read_input_tokens": 5,
                   "cache_creation_input_tokens": 100},
         "permission_denials": [{"tool_name": "Edit", "tool_use_id": "t2",
                                 "tool_input": denied["input"]}]},
    ]


def test_the_stream_is_parsed_as_it_arrives_in_any_chunking(claim: ClaimFn  # noqa: F811
                                                            ) -> None:
    c = claim()
    ctx = c.ctx()
    seen: list[Usage] = []
    stream = ClaudeStream(ctx, on_usage=seen.append)
    raw = "".join(json.dumps(m) + "\n" for m in stream_lines(c.workspace.path))
    raw = "not json: a warning on stderr\n" + raw
    for i in range(0, len(raw), 7):  # chunks that cut lines anywhere
        stream.write(Output(text=raw[i:i + 7]))
    stream.close()
    assert stream.session_id == "sess-1" and c.board.get(c.task.id).session_id == "sess-1"
    assert seen[0] == Usage(input_tokens=10, cache_read_tokens=5, cache_write_tokens=100)
    assert seen[1] == seen[0]  # one API message repeated per block counts once
    assert stream.usage == Usage(input_tokens=20, output_tokens=7, cache_read_tokens=5,
                                 cache_write_tokens=100, cost_usd=0.25)
    assert [(d.tool, d.subject) for d in stream.denials] == [
        ("Edit", str(c.workspace.path / "b.py"))]
    assert stream.other == ["not json: a warning on stderr"]
    assert [e["tool"] for e in c.events("tool_called")] == ["Write", "Edit"]
    assert [e["path"] for e in c.events("file_modified")] == [os.path.join("src", "a.py")]
    logged = [r["message"]["type"] for r in c.log("claude_code")]
    assert logged == ["system", "assistant", "assistant", "user", "result"]


@pytest.mark.skipif(not (PROJECT_NPM_BIN / "claude").exists(),
                    reason="Claude Code is not installed in .venv/npm (scripts/test-deps)")
def test_claude_code_installed_by_the_projects_set_up_is_found() -> None:
    """Not on PATH: the one scripts/test-deps put in .venv/npm is used (issue 30)."""
    found = find_binary("claude", {"PATH": "/usr/bin:/bin"})
    assert found == str(PROJECT_NPM_BIN / "claude")
    assert find_binary("no-such-claude", {"PATH": "/usr/bin:/bin"}) is None
