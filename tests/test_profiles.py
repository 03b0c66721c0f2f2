"""Agent profiles: Claude Code's agent files and [agents.<name>], and a task's profile
changing the model, tools, prompt and permission mode its run sees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.config import Config
from orchestrator.errors import ConfigError
from orchestrator.profiles import load_profiles, parse_agent_file
from tests import test_backend_agent as backend_tests
from tests.loopback import LoopbackAPI, tool_use
from tests.test_cli_board import ok, run

claim = backend_tests.claim
api = backend_tests.api
ClaimFn = backend_tests.ClaimFn

REVIEWER = """---
name: reviewer
description: Reviews a change. Use after edits.
tools: Read, Grep, Glob
model: haiku
permissionMode: plan
maxTurns: 7
color: blue
---
You review code. Never edit files.

Report problems as a list.
"""


def agents_dir(repo: Path) -> Path:
    d = repo / ".claude" / "agents"
    d.mkdir(parents=True, exist_ok=True)
    return d


# --- parsing -----------------------------------------------------------------------

def test_front_matter_fields_and_body() -> None:
    data = parse_agent_file(REVIEWER, "reviewer.md")
    assert data == {"name": "reviewer", "description": "Reviews a change. Use after edits.",
                    "tools": "Read, Grep, Glob", "model": "haiku", "permissionMode": "plan",
                    "maxTurns": 7,
                    "prompt": "You review code. Never edit files.\n\nReport problems as a list."}


def test_front_matter_lists_quotes_and_blocks() -> None:
    text = ("---\nname: 'writer'\ntools:\n  - Read\n  - \"Edit\"\n  - mcp__github__*\n"
            "description: >\n  Writes docs\n  for people.\nmodel: inherit  # keep\n"
            "other: [a, b]\n---\nBody\n")
    data = parse_agent_file(text, "w.md")
    assert data["name"] == "writer" and data["tools"] == ["Read", "Edit", "mcp__github__*"]
    assert data["description"] == "Writes docs\nfor people." and data["model"] == "inherit"
    assert "other" not in data and data["prompt"] == "Body"


@pytest.mark.parametrize(("text", "message"), [
    ("no front matter", r"x\.md: no front matter"),
    ("---\nname: a\n", r"x\.md: the front matter opened with '---' is never closed"),
    ("---\nname a\n---\n", r"x\.md: line 2: expected 'key: value', got 'name a'"),
    ("---\ntools: [Read, Grep\n---\n", r"x\.md: line 2: a list must close on the same line"),
])
def test_bad_front_matter_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_agent_file(text, "x.md")


def test_files_and_toml_tables_merge_by_name(repo: Path) -> None:
    (agents_dir(repo) / "reviewer.md").write_text(REVIEWER)
    (agents_dir(repo) / "broken.md").write_text("---\nmaxTurns: lots\n---\nx\n")
    (agents_dir(repo) / "bad-mode.md").write_text("---\npermissionMode: yolo\n---\nx\n")
    (repo / "orchestrator.toml").write_text(
        '[agents.reviewer]\nmodel = "claude-opus-4-1"\n\n'
        '[agents.fixer]\ndescription = "Fixes bugs"\ntools = ["Read", "Edit", "Bash"]\n'
        'prompt = "Fix the bug, add a test."\nmax_turns = 20\n')
    found = load_profiles(repo, Config.load(repo, environ={}))
    rev = found.get("reviewer")
    assert rev.model == "claude-opus-4-1"  # the toml overrides the file's haiku
    assert rev.settings.tools == ["Read", "Grep", "Glob"] and rev.settings.max_turns == 7
    assert rev.settings.permission_mode == "plan" and rev.source == ".claude/agents/reviewer.md"
    fixer = found.get("fixer")
    assert fixer.source == "orchestrator.toml" and fixer.settings.max_turns == 20
    assert found.names == ["bad-mode", "broken", "fixer", "reviewer"]
    with pytest.raises(ConfigError, match=r"agent profile 'broken' is broken: .*broken\.md: "
                                          r"maxTurns: Input should be a valid integer"):
        found.get("broken")
    with pytest.raises(ConfigError, match=r"bad-mode.md: permissionMode: Input should be"):
        found.get("bad-mode")
    with pytest.raises(ConfigError, match=r"unknown agent profile 'nope' \(profiles: fixer, "
                                          r"reviewer; define one in \.claude/agents/nope\.md"):
        found.get("nope")


def test_tool_names_match_claude_codes_and_ours(repo: Path) -> None:
    (repo / "orchestrator.toml").write_text(
        '[agents.a]\ntools = ["MultiEdit", "LS", "Task", "task_list", "mcp__gh__*", '
        '"mcp__db"]\n')
    a = load_profiles(repo, Config.load(repo, environ={})).get("a")
    offered = [n for n in ("multi_edit", "ls", "agent", "task_list", "mcp__gh__issue",
                           "mcp__db__query", "edit", "bash", "mcp__dbx__q", "submit_plan")
               if a.offers(n)]
    assert offered == ["multi_edit", "ls", "agent", "task_list", "mcp__gh__issue",
                       "mcp__db__query", "submit_plan"]


# --- a task's profile in a run ------------------------------------------------------

def test_a_profile_changes_the_model_tools_and_prompt_seen_by_the_api(
        claim: ClaimFn, api: LoopbackAPI, repo: Path) -> None:
    (agents_dir(repo) / "reviewer.md").write_text(REVIEWER)
    plain = claim(agent={"model": "claude-sonnet-4-6"}, subject="Plain task")
    api.reply("nothing to do")
    assert plain.run("anthropic").ok
    c = claim(agent={"model": "claude-sonnet-4-6"}, subject="Review it")
    c.board.edit(c.task.id, actor="cli", agent="reviewer")
    c.task = c.board.get(c.task.id)
    api.reply(tool_use("grep", {"pattern": "sample"}, id="g1"),
              tool_use("write", {"file_path": "x.txt", "content": "x"}, id="w1"))
    api.reply("Looks fine.")
    result = c.run("anthropic")
    assert result.ok, result.error
    first, second, third = api.requests
    assert first["model"] == "claude-sonnet-4-6"
    assert "bash" in [t["name"] for t in first["tools"]]
    assert second["model"] == third["model"] == "claude-haiku-4-5"
    assert [t["name"] for t in second["tools"]] == ["read", "glob", "grep"]
    system = json.dumps(second["system"])
    assert "Your role: the reviewer agent" in system and "Never edit files." in system
    results = third["messages"][-1]["content"]
    assert "README.md" in results[0]["content"]
    assert results[1]["is_error"] and "unknown tool 'write'" in results[1]["content"]
    assert not (c.workspace.path / "x.txt").exists()
    [rec] = c.log("profile")
    assert rec["name"] == "reviewer" and rec["permission_mode"] == "plan"
    assert "bash" in rec["dropped"] and "read" not in rec["dropped"]


def test_a_profiles_permission_mode_and_turns_apply(claim: ClaimFn, repo: Path) -> None:
    (repo / "orchestrator.toml").write_text(
        '[agents.cautious]\npermission_mode = "plan"\nmax_turns = 2\n')
    c = claim([[{"tool": "write", "args": {"file_path": "a.txt", "content": "a"}}],
               [{"tool": "ls", "args": {}}], "done"], agent={"permission_mode": "acceptEdits"})
    c.board.edit(c.task.id, actor="cli", agent="cautious")
    c.task = c.board.get(c.task.id)
    result = c.run()
    assert not result.ok and "turn limit reached: 2 of 2" in (result.error or "")
    [denied] = c.log("tool_result")[:1]
    assert denied["is_error"] and "permission denied" in denied["content"]
    assert not (c.workspace.path / "a.txt").exists()


def test_an_unknown_profile_fails_the_run_without_retry(claim: ClaimFn, repo: Path) -> None:
    c = claim(["done"])
    c.board.edit(c.task.id, actor="cli", agent="ghost")
    c.task = c.board.get(c.task.id)
    result = c.run()
    assert not result.ok and not result.retry
    assert "unknown agent profile 'ghost'" in (result.error or "")


def test_add_agent_checks_the_name_when_given(capsys: pytest.CaptureFixture[str],
                                             repo: Path) -> None:
    code, _, err = run(capsys, repo, "add", "Before any profile", "--agent", "later")
    assert code == 1 and "unknown agent profile 'later' (profiles: none defined" in err
    (agents_dir(repo) / "reviewer.md").write_text(REVIEWER)
    out = json.loads(ok(capsys, repo, "add", "Review", "--agent", "reviewer", "--json"))
    assert out["agent"] == "reviewer"
    code, _, err = run(capsys, repo, "add", "Typo", "--agent", "reviwer")
    assert code == 1 and err.startswith("error: unknown agent profile 'reviwer' "
                                        "(profiles: reviewer;")
    assert err.count("\n") == 1
    assert len(json.loads(ok(capsys, repo, "list", "--json"))) == 1
