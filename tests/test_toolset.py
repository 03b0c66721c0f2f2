"""The toolset: argument checks, confinement, the gate, spilling and events, end to end."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.agent.base import PermissionAsked, ToolContext, ToolResult
from orchestrator.agent.permissions import PermissionGate
from orchestrator.agent.tools import default_tools
from orchestrator.agent.toolset import EVENT_SUBJECT_CHARS, Toolset, check_args
from orchestrator.board.eventlog import EventLog
from orchestrator.errors import ConfigError
from orchestrator.sandbox import safe_env
from tests.helpers import git

API_KEY = "sk-ant-api03-test-secret-value-1234567890"


class FakeMcp:
    read_only = True
    description = "returns a lot"
    input_schema: dict[str, Any] = {  # noqa: RUF012 - test double
        "type": "object", "properties": {}, "additionalProperties": False}

    def __init__(self, name: str, output: str = "ok", boom: bool = False) -> None:
        self.name, self.output, self.boom = name, output, boom

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        return None

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if self.boom:
            raise RuntimeError("server went away")
        return ToolResult(self.output)


@pytest.fixture
def worktree(repo: Path) -> Path:
    git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(repo.parent / "wt"))
    return repo.parent / "wt"


def make(worktree: Path, mode: str = "bypassPermissions", **rules: list[str]) -> Toolset:
    ctx = ToolContext(
        cwd=worktree, env=safe_env(os.environ), task_id="task_001",
        spill_dir=worktree.parent / "spill",
        events=EventLog(worktree.parent / "events.jsonl", "alice"), teammate="alice",
    )
    gate = PermissionGate.from_rules(mode=mode, root=worktree, **rules)
    return Toolset(default_tools(board=False), gate, ctx)


def events(ts: Toolset) -> list[dict[str, Any]]:
    assert ts.ctx.events is not None
    return [e.to_dict() for e in ts.ctx.events.read()]


def test_schemas_are_api_tool_definitions_in_a_stable_order(worktree: Path) -> None:
    ts = make(worktree)
    ts.add(FakeMcp("mcp__b__x"))
    ts.add(FakeMcp("mcp__a__y"))
    names = [s["name"] for s in ts.schemas()]
    assert names == ["bash", "read", "write", "edit", "multi_edit", "glob", "grep", "ls",
                     "notebook_edit", "web_fetch", "mcp__a__y", "mcp__b__x"]
    assert names == ts.names()
    for s in ts.schemas():
        assert set(s) == {"name", "description", "input_schema"}
        schema = s["input_schema"]
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        for prop in schema["properties"].values():
            assert prop["description"]
    with pytest.raises(ConfigError, match="two tools are named 'mcp__a__y'"):
        ts.add(FakeMcp("mcp__a__y"))


def test_unknown_tool_and_bad_arguments_are_error_results(worktree: Path) -> None:
    ts = make(worktree)
    r = ts.call("rm_rf", {})
    assert r.is_error and "unknown tool 'rm_rf'" in r.content and "bash" in r.content
    assert "missing required file_path" in ts.call("read", {}).content
    assert "unknown mode" in ts.call("read", {"file_path": "a", "mode": 1}).content
    assert "must be of type integer" in ts.call("read", {"file_path": "a", "offset": "3"}).content
    assert "must be of type object" in ts.call("read", "README.md").content
    r = ts.call("grep", {"pattern": "x", "output_mode": "everything"})
    assert r.is_error and "must be one of" in r.content
    r = ts.call("multi_edit", {"file_path": "a", "edits": [{"old_string": "x"}]})
    assert "edits[0]: missing required new_string" in r.content


def test_check_args_rejects_booleans_as_integers() -> None:
    assert check_args({"type": "integer"}, True) is not None
    assert check_args({"type": "number", "minimum": 1}, 0.5) is not None
    assert check_args({"type": "number"}, 3) is None


def test_deny_rule_hit_is_an_error_result_naming_the_rule(worktree: Path) -> None:
    ts = make(worktree, deny=["Bash(git push:*)", "Edit(README.md)"])
    r = ts.call("bash", {"command": "git status && git push origin main"})
    assert r.is_error and "Bash(git push:*)" in r.content
    r = ts.call("write", {"file_path": "README.md", "content": "gone\n"})
    assert r.is_error and "Edit(README.md)" in r.content
    assert (worktree / "README.md").read_text() == "# sample\n"
    denied = [e for e in events(ts) if e["event"] == "tool_called"]
    assert [(e["tool"], e["decision"], e["rule"]) for e in denied] == [
        ("bash", "deny", "Bash(git push:*)"), ("write", "deny", "Edit(README.md)")]


def test_ask_raises_permission_asked_then_runs_once_approved(worktree: Path) -> None:
    ts = make(worktree, mode="default", deny=["Bash(rm:*)"])
    with pytest.raises(PermissionAsked) as asked:
        ts.call("bash", {"command": "echo hello > out.txt"})
    assert asked.value.tool == "bash" and asked.value.subject == "echo hello > out.txt"
    assert asked.value.request_id
    assert not (worktree / "out.txt").exists()
    r = ts.call("bash", {"command": "echo hello > out.txt"}, approved=True)
    assert not r.is_error and (worktree / "out.txt").read_text() == "hello\n"
    r = ts.call("bash", {"command": "rm out.txt"}, approved=True)  # deny still wins
    assert r.is_error and (worktree / "out.txt").exists()
    assert [e["decision"] for e in events(ts)] == ["ask", "approved", "deny"]


@pytest.mark.parametrize("mode", ["default", "acceptEdits", "bypassPermissions"])
def test_path_escapes_are_refused_in_every_mode(worktree: Path, mode: str) -> None:
    outside = worktree.parent / "outside.txt"
    outside.write_text("keep me\n")
    (worktree / "link").symlink_to(outside)
    (worktree / "linkdir").symlink_to(worktree.parent)
    ts = make(worktree, mode=mode, allow=["Edit", "Read"])
    attempts: list[tuple[str, dict[str, Any]]] = [
        ("read", {"file_path": "../outside.txt"}),
        ("read", {"file_path": str(outside)}),
        ("read", {"file_path": "link"}),
        ("read", {"file_path": "/etc/passwd"}),
        ("write", {"file_path": "../outside.txt", "content": "x"}),
        ("write", {"file_path": "linkdir/new.txt", "content": "x"}),
        ("edit", {"file_path": "link", "old_string": "keep", "new_string": "lose"}),
        ("multi_edit", {"file_path": str(outside),
                        "edits": [{"old_string": "keep", "new_string": "lose"}]}),
        ("grep", {"pattern": "keep", "path": ".."}),
        ("glob", {"pattern": "*", "path": "linkdir"}),
        ("ls", {"path": "../"}),
    ]
    for name, args in attempts:
        r = ts.call(name, args)
        assert r.is_error and "outside the worktree" in r.content, (name, args, r)
    assert outside.read_text() == "keep me\n"
    assert not (worktree.parent / "new.txt").exists()
    assert ts.call("glob", {"pattern": "../*"}).is_error


def test_large_results_spill_to_a_file_the_read_tool_can_open(worktree: Path) -> None:
    ts = make(worktree)
    big = "".join(f"line {i}\n" for i in range(20_000))
    ts.add(FakeMcp("mcp__big__dump", big))
    r = ts.call("mcp__big__dump", {})
    assert len(r.content) < 10_000 and "line 0\n" in r.content and "line 19999" in r.content
    path = Path(r.content.split("the full text is in ")[1].split(";")[0])
    assert path.parent == worktree.parent / "spill" and path.read_text() == big
    page = ts.call("read", {"file_path": str(path), "offset": 15_001, "limit": 2})
    assert page.content.splitlines()[:2] == [" 15001\tline 15000", " 15002\tline 15001"]
    assert ts.call("write", {"file_path": str(path), "content": ""}).is_error  # read-only


def test_tool_crash_becomes_an_error_result(worktree: Path) -> None:
    ts = make(worktree)
    ts.add(FakeMcp("mcp__x__y", boom=True))
    r = ts.call("mcp__x__y", {})
    assert r.is_error and "RuntimeError: server went away" in r.content


def test_events_record_calls_and_file_changes(worktree: Path) -> None:
    ts = make(worktree, mode="acceptEdits")
    ts.call("write", {"file_path": "src/new.py", "content": "x = 1\n"})
    ts.call("read", {"file_path": "src/new.py"})
    ts.call("edit", {"file_path": "src/new.py", "old_string": "nope", "new_string": "y"})
    got = [(e["event"], e.get("tool"), e.get("path"), e.get("is_error")) for e in events(ts)]
    assert got == [("tool_called", "write", None, False),
                   ("file_modified", "write", "src/new.py", None),
                   ("tool_called", "read", None, False),
                   ("tool_called", "edit", None, True)]
    assert {(e["task"], e["actor"]) for e in events(ts)} == {("task_001", "alice")}
    ts.call("bash", {"command": "echo " + "y" * 5000}, approved=True)
    assert len(events(ts)[-1]["subject"]) == EVENT_SUBJECT_CHARS + 1


def test_api_key_is_absent_from_the_bash_environment_and_events(
        worktree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", API_KEY)
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_notreallyatoken123")
    monkeypatch.setenv("HARMLESS_SETTING", "visible")
    ts = make(worktree)
    r = ts.call("bash", {"command": "env; echo key=${ANTHROPIC_API_KEY:-absent}"})
    assert "key=absent" in r.content and "HARMLESS_SETTING=visible" in r.content
    assert API_KEY not in r.content and "GITHUB_TOKEN" not in r.content
    ts.call("bash", {"command": f"echo {API_KEY}"})  # the model typed the secret itself
    log = (worktree.parent / "events.jsonl").read_text()
    assert API_KEY not in log and "***" in log
    kept = safe_env({"ANTHROPIC_API_KEY": API_KEY, "PATH": "/bin"}, ["ANTHROPIC_API_KEY"])
    assert kept == {"ANTHROPIC_API_KEY": API_KEY, "PATH": "/bin"}
    assert safe_env({"GIT_AUTHOR_NAME": "Ann", "MY_AUTH": "x"}) == {"GIT_AUTHOR_NAME": "Ann"}
