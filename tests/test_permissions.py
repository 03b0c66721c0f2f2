"""The permission gate: rule syntax, evaluation order, modes, settings sources."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.permissions import PermissionGate, Rule
from orchestrator.agent.shell_parse import analyze
from orchestrator.agent.tools import default_tools
from orchestrator.config import AgentConfig, Config
from orchestrator.errors import ConfigError

TOOLS = {t.name: t for t in default_tools()}


class McpTool:
    read_only = False
    description = "an MCP tool"
    input_schema: dict[str, Any] = {"type": "object"}  # noqa: RUF012 - test double

    def __init__(self, name: str) -> None:
        self.name = name

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult("ok")


def gate(tmp_path: Path, mode: str = "default", **rules: list[str]) -> PermissionGate:
    return PermissionGate.from_rules(mode=mode, root=tmp_path, **rules)


def bash(g: PermissionGate, command: str) -> str:
    return g.check(TOOLS["bash"], {"command": command}).behavior


def test_bash_prefix_rule_allows_the_command_and_its_arguments_only(tmp_path: Path) -> None:
    g = gate(tmp_path, allow=["Bash(npm test:*)"])
    assert bash(g, "npm test") == "allow"
    assert bash(g, "npm test -- --watch=false") == "allow"
    assert bash(g, "npm testing") == "ask"
    assert bash(g, "npm install") == "ask"


def test_compound_commands_need_every_part_allowed(tmp_path: Path) -> None:
    g = gate(tmp_path, allow=["Bash(npm test:*)", "Bash(git diff)"])
    assert bash(g, "npm test && rm -rf /") == "ask"
    assert bash(g, "npm test; rm -rf /") == "ask"
    assert bash(g, "npm test | sh") == "ask"
    assert bash(g, "npm test\nrm -rf /") == "ask"
    assert bash(g, "npm test && git diff") == "allow"
    assert bash(g, "npm test 2>&1 | npm test") == "allow"
    assert bash(g, "npm test $(rm -rf /)") == "ask"
    assert bash(g, "npm test `rm -rf /`") == "ask"
    assert bash(g, "git diff --stat") == "ask"  # exact rule


def test_deny_rule_hits_any_part_and_beats_allow_and_bypass(tmp_path: Path) -> None:
    g = gate(tmp_path, mode="bypassPermissions", allow=["Bash"], deny=["Bash(rm:*)"])
    assert bash(g, "ls") == "allow"
    assert bash(g, "ls && rm -rf build") == "deny"
    assert bash(g, "FOO=1 rm x") == "deny"
    assert bash(g, "(cd src; rm x)") == "deny"
    d = g.check(TOOLS["bash"], {"command": "echo 'a;b' && rm x"})
    assert (d.behavior, d.rule) == ("deny", "Bash(rm:*)")
    assert "rules" in d.reason


def test_quoted_separators_do_not_split() -> None:
    def words(line: str) -> list[tuple[str | None, ...]]:
        return [c.words for c in analyze(line).walk()]

    assert words("echo 'a && b' && ls") == [("echo", "a && b"), ("ls",)]
    assert words('grep "x|y" f | wc -l') == [("grep", "x|y", "f"), ("wc", "-l")]
    assert words("make >out 2>&1 &") == [("make",)]


def test_ask_rule_beats_allow(tmp_path: Path) -> None:
    g = gate(tmp_path, mode="bypassPermissions", allow=["Bash"], ask=["Bash(git push:*)"])
    assert bash(g, "git push origin main") == "ask"
    assert bash(g, "git status") == "allow"


def test_edit_rules_cover_every_file_writing_tool(tmp_path: Path) -> None:
    g = gate(tmp_path, deny=["Edit(src/**)"])
    for name, args in [("write", {"file_path": "src/a.py", "content": ""}),
                       ("edit", {"file_path": "src/pkg/a.py", "old_string": "a",
                                 "new_string": "b"}),
                       ("multi_edit", {"file_path": "./src/a.py", "edits": []})]:
        assert g.check(TOOLS[name], args).behavior == "deny", name
    assert g.check(TOOLS["write"], {"file_path": "docs/a.md", "content": ""}).behavior == "ask"
    assert g.check(TOOLS["read"], {"file_path": "src/a.py"}).behavior == "allow"


def test_read_rules_cover_the_reading_tools_and_follow_symlinks(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("SECRET=1\n")
    (tmp_path / "innocent").symlink_to(tmp_path / ".env")
    g = gate(tmp_path, mode="bypassPermissions", deny=["Read(./.env)"])
    assert g.check(TOOLS["read"], {"file_path": ".env"}).behavior == "deny"
    assert g.check(TOOLS["read"], {"file_path": "innocent"}).behavior == "deny"
    assert g.check(TOOLS["grep"], {"pattern": "x", "path": ".env"}).behavior == "deny"
    assert g.check(TOOLS["read"], {"file_path": "README.md"}).behavior == "allow"
    assert g.denies_read(tmp_path / ".env")


def test_path_rule_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    root = tmp_path / "wt"
    g = PermissionGate.from_rules(
        deny=["Read(*.pem)", "Read(secrets)", f"Read(/{root}/abs.txt)", "Read(~/notes.txt)",
              "Read(/top.txt)"],
        mode="bypassPermissions", root=root)
    read = TOOLS["read"]

    def check(p: str) -> str:
        return g.check(read, {"file_path": p}).behavior

    assert check("deep/down/key.pem") == "deny"  # no slash: any depth
    assert check("secrets/db/password.txt") == "deny"  # a folder covers what is below it
    assert check("abs.txt") == "deny"  # //absolute
    assert check(str(home / "notes.txt")) == "deny"  # ~/ (confinement refuses it later anyway)
    assert check("top.txt") == "deny"  # /x: anchored at the worktree
    assert check("sub/top.txt") == "allow"
    assert check("key.pem.txt") == "allow"


def test_mcp_rules(tmp_path: Path) -> None:
    g = gate(tmp_path, allow=["mcp__github__*", "mcp__time"], deny=["mcp__github__delete_repo"])
    assert g.check(McpTool("mcp__github__list_issues"), {}).behavior == "allow"
    assert g.check(McpTool("mcp__github__delete_repo"), {}).behavior == "deny"
    assert g.check(McpTool("mcp__time__now"), {}).behavior == "allow"
    assert g.check(McpTool("mcp__timer__now"), {}).behavior == "ask"
    assert g.check(McpTool("mcp__other__x"), {}).behavior == "ask"


def test_webfetch_domain_rule(tmp_path: Path) -> None:
    class Fetch(McpTool):
        def permission_subject(self, args: dict[str, Any]) -> str | None:
            return str(args["url"])

    g = gate(tmp_path, allow=["WebFetch(domain:example.com)"])
    tool = Fetch("web_fetch")
    assert g.check(tool, {"url": "https://docs.example.com/x"}).behavior == "allow"
    assert g.check(tool, {"url": "https://example.com.evil.org/"}).behavior == "ask"


@pytest.mark.parametrize(("mode", "bash_", "write_in", "read", "board_write"), [
    ("default", "ask", "ask", "allow", "ask"),
    ("acceptEdits", "ask", "allow", "allow", "ask"),
    ("plan", "deny", "deny", "allow", "deny"),
    ("bypassPermissions", "allow", "allow", "allow", "allow"),
])
def test_modes(tmp_path: Path, mode: str, bash_: str, write_in: str, read: str,
               board_write: str) -> None:
    g = gate(tmp_path, mode=mode)
    assert bash(g, "make") == bash_
    assert g.check(TOOLS["write"], {"file_path": "a", "content": ""}).behavior == write_in
    assert g.check(TOOLS["grep"], {"pattern": "a"}).behavior == read
    assert g.check(TOOLS["task_list"], {}).behavior == "allow"
    assert g.check(TOOLS["task_create"], {"subject": "x"}).behavior == board_write


def test_plan_mode_overrides_allow_rules(tmp_path: Path) -> None:
    d = gate(tmp_path, mode="plan", allow=["Bash"]).check(TOOLS["bash"], {"command": "ls"})
    assert (d.behavior, d.reason) == ("deny", "plan mode is read-only")


def test_plan_mode_denies_what_only_a_rule_it_might_dodge_would_have_asked(
        tmp_path: Path) -> None:
    """A line that may match a rule, or cannot be known, asks in the other modes (a rule
    could be dodged); plan mode would deny it anyway, so it does. A sure ask rule asks."""
    g = gate(tmp_path, mode="plan", deny=["Bash(rm:*)"], ask=["Bash(git push:*)"])
    for line in ('eval "$X"', "$CMD x", "git $SUB", "echo rm x | fakeroot"):
        d = g.check(TOOLS["bash"], {"command": line})
        assert (d.behavior, d.reason) == ("deny", "plan mode is read-only"), line
    assert bash(g, "git push origin") == "ask"
    assert bash(g, "ls; rm x") == "deny"


def test_bad_rules_and_modes_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="bad allow rule 'Bash\\(npm'"):
        gate(tmp_path, allow=["Bash(npm"])
    with pytest.raises(ConfigError, match="bad deny rule"):
        gate(tmp_path, deny=["Read()"])
    with pytest.raises(ConfigError, match="unknown permission mode 'yolo'"):
        gate(tmp_path, mode="yolo")
    assert Rule.parse(" Bash(npm test:*) ", "allow", "x").specifier == "npm test:*"


def test_from_sources_merges_toml_and_claude_settings(repo: Path) -> None:
    (repo / "orchestrator.toml").write_text('[agent]\ndeny = ["Bash(curl:*)"]\n')
    (repo / ".claude").mkdir()
    (repo / ".claude/settings.json").write_text(json.dumps(
        {"permissions": {"allow": ["Bash(make:*)"], "defaultMode": "plan"}}))
    (repo / ".claude/settings.local.json").write_text(json.dumps(
        {"permissions": {"ask": ["Bash(make deploy:*)"]}}))
    g = PermissionGate.from_sources(Config.load(repo).agent, repo)
    assert g.mode == "plan"  # not set in orchestrator.toml, so defaultMode applies
    assert bash(g, "curl x") == "deny"
    assert bash(g, "make deploy") == "ask"
    assert bash(g, "make test") == "deny"  # plan mode
    reason = g.check(TOOLS["bash"], {"command": "curl x"}).reason
    assert "orchestrator.toml" in reason

    explicit = Config.load(repo, environ={"ORCH_AGENT_PERMISSION_MODE": "acceptEdits"}).agent
    g = PermissionGate.from_sources(explicit, repo)
    assert g.mode == "acceptEdits"
    assert bash(g, "make test") == "allow"


def test_broken_settings_file_is_a_clear_config_error(repo: Path) -> None:
    (repo / ".claude").mkdir()
    (repo / ".claude/settings.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"cannot read .*settings\.json"):
        PermissionGate.from_sources(AgentConfig(), repo)
    (repo / ".claude/settings.json").write_text('{"permissions": {"allow": "Bash"}}')
    with pytest.raises(ConfigError, match="must be a list"):
        PermissionGate.from_sources(AgentConfig(), repo)


def test_sandboxed_bash_runs_without_asking_but_rules_still_apply(repo: Path) -> None:
    agent = AgentConfig(deny=["Bash(rm:*)"], ask=["Bash(git push:*)"])
    confined = PermissionGate.from_sources(agent, repo, sandboxed=True)
    assert bash(confined, "make test") == "allow"
    assert bash(confined, "rm -rf build") == "deny"
    assert bash(confined, "git push origin main") == "ask"
    assert bash(PermissionGate.from_sources(agent, repo), "make test") == "ask"
    off = AgentConfig(auto_allow_sandboxed_bash=False)
    assert bash(PermissionGate.from_sources(off, repo, sandboxed=True), "make test") == "ask"
    plan = AgentConfig(permission_mode="plan")
    assert bash(PermissionGate.from_sources(plan, repo, sandboxed=True), "make test") == "deny"
