"""The agents' ``config`` / ``config_set`` tools: reading is free, writing asks a person
and is limited to agent-writable keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.agent.base import PermissionAsked, ToolContext
from orchestrator.agent.loop import AgentLoop, Limits
from orchestrator.agent.permission_flow import Answer
from orchestrator.agent.permissions import PermissionGate
from orchestrator.agent.prompt import Prompt
from orchestrator.agent.scripted import ScriptedModel
from orchestrator.agent.tools import default_tools
from orchestrator.agent.toolset import Toolset
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.transcript import LogEntry, record


class Log:
    def __init__(self) -> None:
        self.records: list[dict[str, object]] = []

    def write(self, entry: LogEntry) -> None:
        self.records.append(record(entry))


def toolset(repo: Path, mode: str = "acceptEdits", **rules: list[str]) -> Toolset:
    layout = Layout.at(repo)
    ctx = ToolContext(cwd=repo, env={}, layout=layout)
    return Toolset(default_tools(), PermissionGate.from_rules(mode=mode, root=repo, **rules), ctx)


def test_config_reads_without_asking(repo: Path) -> None:
    (repo / "orchestrator.toml").write_text("[team]\nteammates = 4\n")
    ts = toolset(repo, mode="default")
    one = ts.call("config", {"key": "team.teammates"})
    assert not one.is_error
    assert one.content.startswith("team.teammates = 4\nHow many teammate processes")
    assert "allowed: an integer >= 1 and <= 64" in one.content and "applies live" in one.content
    every = ts.call("config", {}).content.splitlines()
    assert "team.teammates = 4 (writable)" in every and "agent.allow = []" in every
    bad = ts.call("config", {"key": "team.size"})
    assert bad.is_error and "unknown setting 'team.size'" in bad.content


def test_config_set_asks_then_writes_the_project_file(repo: Path) -> None:
    toml = repo / "orchestrator.toml"
    toml.write_text("# team\n[team]\nteammates = 2\n")
    ts = toolset(repo)
    with pytest.raises(PermissionAsked) as asked:
        ts.call("config_set", {"key": "team.teammates", "value": 3})
    assert asked.value.tool == "config_set" and asked.value.subject == "team.teammates"
    assert toml.read_text() == "# team\n[team]\nteammates = 2\n"
    done = ts.call("config_set", {"key": "team.teammates", "value": 3}, approved=True)
    assert done.content == "set team.teammates = 3 in orchestrator.toml (live)"
    assert Config.load(repo).team.teammates == 3
    assert toml.read_text().startswith("# team\n")
    done = ts.call("config_set", {"key": "agent.model", "value": "claude-opus-4-1"},
                   approved=True)
    assert not done.is_error and Config.load(repo).agent.model == "claude-opus-4-1"


@pytest.mark.parametrize(("args", "message"), [
    ({"key": "agent.allow", "value": ["Bash"]},
     "config_set: agent.allow cannot be changed by an agent (agents may set: "),
    ({"key": "agent.permission_mode", "value": "bypassPermissions"},
     "config_set: agent.permission_mode cannot be changed by an agent"),
    ({"key": "team.teammates", "value": 500},
     "config_set: team.teammates: 500 is not allowed (allowed: an integer >= 1 and <= 64)"),
    ({"key": "team.mates", "value": 2}, "config_set: unknown setting 'team.mates'"),
])
def test_config_set_refuses_what_agents_may_not_do(repo: Path, args: dict[str, object],
                                                  message: str) -> None:
    result = toolset(repo).call("config_set", args, approved=True)
    assert result.is_error and result.content.startswith(message)
    assert not (repo / "orchestrator.toml").exists()


def test_rules_and_modes_decide_config_set_like_any_tool(repo: Path) -> None:
    denied = toolset(repo, mode="plan").call("config_set", {"key": "team.teammates",
                                                            "value": 2})
    assert denied.is_error and "plan mode is read-only" in denied.content
    allowed = toolset(repo, allow=["ConfigSet(team.teammates)"]).call(
        "config_set", {"key": "team.teammates", "value": "5"})
    assert not allowed.is_error and Config.load(repo).team.teammates == 5
    with pytest.raises(PermissionAsked):  # the rule names one key only
        toolset(repo, allow=["ConfigSet(team.teammates)"]).call(
            "config_set", {"key": "agent.model", "value": "m"})


def test_through_the_loop_a_person_approves_the_change(repo: Path) -> None:
    model = ScriptedModel([
        [{"tool": "config", "args": {"key": "team.teammates"}}],
        [{"tool": "config_set", "args": {"key": "team.teammates", "value": 4}}],
        "Asked for four teammates.",
    ])
    asked: list[PermissionAsked] = []

    def approve(request: PermissionAsked) -> Answer:
        asked.append(request)
        return Answer(approved=True)

    ts = toolset(repo)
    loop = AgentLoop(model, ts, Prompt(system=[], tools=ts.schemas(), first_message="go"),
                     Log(), limits=Limits(max_turns=5), max_tokens=100, ask=approve)
    assert loop.run() == "Asked for four teammates."
    assert [a.subject for a in asked] == ["team.teammates"]  # the read did not ask
    assert Config.load(repo).team.teammates == 4
