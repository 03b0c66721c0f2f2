"""The settings registry and ``orchestrator config``: built from the config models,
validation that says what is allowed, edits that keep the rest of the file."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from orchestrator.config import Config, user_config_file
from orchestrator.errors import ConfigError
from orchestrator.settings import tomlfile
from orchestrator.settings.registry import Registry
from tests.test_cli_board import ok, run

# --- the registry ---------------------------------------------------------------------

def test_every_config_field_is_a_setting_with_a_description_and_metadata() -> None:
    reg = Registry()
    for section, sfield in Config.model_fields.items():
        if section == "agents":
            continue
        for name in sfield.annotation.model_fields:  # type: ignore[union-attr]
            s = reg.get(f"{section}.{name}")
            assert s.description, f"{s.key} has no description"
            assert s.allowed and s.scope in ("project", "user")
    assert "agents.reviewer" not in reg.settings
    assert reg.get("team.teammates").live and reg.get("team.teammates").agent_writable
    assert not reg.get("worktree.root").live
    assert not reg.get("agent.allow").agent_writable  # an agent never widens its permissions
    assert reg.get("claude_code.binary").scope == "user"
    assert reg.get("agent.sandbox").allowed == "one of auto, on, off"
    assert reg.get("team.teammates").allowed == "an integer >= 1 and <= 64"
    assert "scripted" in reg.get("team.backend").allowed


@pytest.mark.parametrize(("key", "raw", "want"), [
    ("team.teammates", "3", 3),
    ("board.fsync", "false", False),
    ("agent.allow", '["Read", "Bash(npm test:*)"]', ["Read", "Bash(npm test:*)"]),
    ("agent.deny", "Read(./.env)", ["Read(./.env)"]),
    ("agent.max_cost_usd", "none", None),
    ("agent.max_cost_usd", "2.5", 2.5),
    ("agent.model", "claude-opus-4-1", "claude-opus-4-1"),
    ("agent.permission_mode", "plan", "plan"),
])
def test_parse_values_typed_on_the_command_line(key: str, raw: str, want: object) -> None:
    assert Registry().get(key).parse(raw) == want


@pytest.mark.parametrize(("key", "raw", "allowed"), [
    ("team.teammates", "0", "an integer >= 1 and <= 64"),
    ("team.teammates", "many", "an integer >= 1 and <= 64"),
    ("agent.sandbox", "maybe", "one of auto, on, off"),
    ("agent.permission_mode", "yolo", "one of default, acceptEdits, plan, bypassPermissions"),
    ("team.backend", "nope", "one of "),
    ("agent.max_cost_usd", "-1", "a number > 0, or none"),
    ("board.fsync", "perhaps", "true or false"),
])
def test_bad_values_name_what_is_allowed(key: str, raw: str, allowed: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: .* is not allowed \(allowed: ") as exc:
        Registry().get(key).parse(raw)
    assert allowed in str(exc.value)


def test_unknown_keys_suggest_and_list() -> None:
    reg = Registry()
    with pytest.raises(ConfigError) as exc:
        reg.get("agent.modle")
    assert "did you mean agent.model?" in str(exc.value)
    assert "agent settings: model, max_turns" in str(exc.value)
    with pytest.raises(ConfigError, match=r"sections: agent, board, .*team, worktree"):
        reg.get("nope.key")


# --- editing TOML --------------------------------------------------------------------

def test_edit_keeps_comments_order_and_other_tables() -> None:
    text = ("# project settings\n[team]\nteammates = 2  # two is plenty\nverify = \"pytest\"\n\n"
            "[agent]\nallow = [\n  \"Read\",  # reading is fine\n  \"Bash(ls)\",\n]\n"
            "[agents.reviewer]\nmodel = \"m\"\n")
    out = tomlfile.edit(text, "team", "teammates", 4)
    assert out == text.replace("teammates = 2", "teammates = 4")
    out = tomlfile.edit(out, "agent", "allow", ["Edit(src/**)"])
    assert 'allow = ["Edit(src/**)"]\n[agents.reviewer]' in out
    assert "# project settings" in out and "# two is plenty" in out
    out = tomlfile.edit(out, "agent", "model", 'say "hi"\\')
    out = tomlfile.edit(out, "board", "fsync", False)
    data = tomllib.loads(out)
    assert data["agent"] == {"allow": ["Edit(src/**)"], "model": 'say "hi"\\'}
    assert data["board"] == {"fsync": False} and data["agents"] == {"reviewer": {"model": "m"}}
    assert data["team"] == {"teammates": 4, "verify": "pytest"}
    out = tomlfile.edit(out, "team", "verify", None, remove=True)
    assert tomllib.loads(out)["team"] == {"teammates": 4}


def test_edit_refuses_what_it_cannot_change_safely() -> None:
    with pytest.raises(ConfigError, match="edit the file by hand"):
        tomlfile.edit('team = { teammates = 2 }\n', "team", "teammates", 3)
    with pytest.raises(ConfigError, match="edit the file by hand"):
        tomlfile.edit('[tool]\norchestrator.team.teammates = 2\n', "tool.orchestrator.team",
                      "teammates", 3)


def test_edit_plain_cases() -> None:
    assert tomlfile.edit("", "team", "teammates", 3) == "[team]\nteammates = 3\n"
    assert tomlfile.edit("[team]\n", "team", "teammates", 3) == "[team]\nteammates = 3\n"


# --- the CLI ---------------------------------------------------------------------------

def test_config_set_get_list_unset(capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    (repo / "orchestrator.toml").write_text("# mine\n[team]\nteammates = 2\n")
    out = ok(capsys, repo, "config", "set", "team.teammates", "5")
    assert out == f"set team.teammates = 5 in {repo / 'orchestrator.toml'}\n"
    assert ok(capsys, repo, "config", "get", "team.teammates") == "5\n"
    got = json.loads(ok(capsys, repo, "config", "get", "agent.model", "--json"))
    assert got["value"] == Config().agent.model and got["source"] == "default"
    assert got["live"] and got["agent_writable"] and got["type"] == "str"
    ok(capsys, repo, "config", "set", "agent.allow", '["Read", "Bash(npm test:*)"]')
    out = ok(capsys, repo, "config", "set", "worktree.base", "dev")
    assert "applies this after a restart" in out
    text = (repo / "orchestrator.toml").read_text()
    assert text.startswith("# mine\n[team]\nteammates = 5\n")
    assert Config.load(repo).agent.allow == ["Read", "Bash(npm test:*)"]
    rows = json.loads(ok(capsys, repo, "config", "list", "--json"))
    by_key = {r["key"]: r for r in rows}
    teammates = by_key["team.teammates"]
    assert teammates["value"] == 5 and teammates["source"] == "project"
    assert by_key["worktree.base"]["value"] == "dev"
    assert len(rows) == len(Registry().settings)
    human = ok(capsys, repo, "config", "list")
    assert "team.teammates = 5  (project)" in human and "How many teammate processes" in human
    out = ok(capsys, repo, "config", "unset", "worktree.base")
    assert out.startswith("removed worktree.base")
    assert Config.load(repo).worktree.base == "HEAD"


@pytest.mark.parametrize(("args", "message"), [
    (("team.teamates", "3"), "error: unknown setting 'team.teamates'; did you mean "
                             "team.teammates? (team settings: teammates, backend, "),
    (("team.teammates", "0"), "error: team.teammates: '0' is not allowed "
                              "(allowed: an integer >= 1 and <= 64)\n"),
    (("agent.sandbox", "maybe"), "error: agent.sandbox: 'maybe' is not allowed "
                                 "(allowed: one of auto, on, off)\n"),
    (("hooks.events", "{}"), "error: hooks.events is a table: edit it in orchestrator.toml\n"),
])
def test_config_set_bad_input_fails_clearly_and_writes_nothing(
        capsys: pytest.CaptureFixture[str], repo: Path, args: tuple[str, str],
        message: str) -> None:
    before = "[team]\nteammates = 2\n"
    (repo / "orchestrator.toml").write_text(before)
    code, out, err = run(capsys, repo, "config", "set", *args)
    assert code == 1 and out == ""
    assert err.startswith(message) and err.count("\n") == 1
    assert (repo / "orchestrator.toml").read_text() == before


def test_config_set_in_a_subprocess_is_one_line_exit_1(repo: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "orchestrator", "config", "set", "nope.x", "1"],
                       cwd=repo, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.startswith("error: unknown setting 'nope.x' (sections: agent, board")
    assert p.stderr.count("\n") == 1


def test_a_broken_file_is_reported_and_not_overwritten(
        capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    (repo / "orchestrator.toml").write_text("[team\nteammates = 2\n")
    code, _, err = run(capsys, repo, "config", "set", "team.teammates", "3")
    assert code == 1 and "cannot read configuration" in err
    assert (repo / "orchestrator.toml").read_text() == "[team\nteammates = 2\n"
    # a valid file with a bad value elsewhere: the change is refused, the file untouched
    (repo / "orchestrator.toml").write_text("[agent]\nsandbox = \"maybe\"\n")
    code, _, err = run(capsys, repo, "config", "set", "team.teammates", "3")
    assert code == 1 and "agent.sandbox" in err
    assert (repo / "orchestrator.toml").read_text() == "[agent]\nsandbox = \"maybe\"\n"


def test_pyproject_settings_are_edited_in_place(capsys: pytest.CaptureFixture[str],
                                                repo: Path) -> None:
    py = repo / "pyproject.toml"
    py.write_text('[project]\nname = "x"\n\n[tool.orchestrator.team]\nteammates = 2\n')
    ok(capsys, repo, "config", "set", "team.teammates", "6")
    ok(capsys, repo, "config", "set", "agent.model", "m2")
    assert not (repo / "orchestrator.toml").exists()
    data = tomllib.loads(py.read_text())
    assert data["project"] == {"name": "x"}
    assert data["tool"]["orchestrator"] == {"team": {"teammates": 6}, "agent": {"model": "m2"}}
    assert Config.load(repo).team.teammates == 6


def test_set_writes_the_project_file_unless_user_and_the_project_wins(
        capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    out = ok(capsys, repo, "config", "set", "claude_code.binary", "/opt/claude", "--user")
    user = user_config_file()
    assert str(user) in out and user.is_relative_to(Path.home())
    assert Config.load(repo).claude_code.binary == "/opt/claude"
    out = ok(capsys, repo, "config", "set", "claude_code.binary", "/srv/claude")
    assert str(repo / "orchestrator.toml") in out  # a user-scope setting too: the project
    assert Config.load(repo).claude_code.binary == "/srv/claude"
    ok(capsys, repo, "config", "unset", "claude_code.binary")
    ok(capsys, repo, "config", "set", "agent.model", "user-model", "--scope", "user")
    assert json.loads(ok(capsys, repo, "config", "get", "agent.model", "--json"))["source"] \
        == "user"
    ok(capsys, repo, "config", "set", "agent.model", "project-model")
    assert Config.load(repo).agent.model == "project-model"
    assert not (repo / "orchestrator.toml").read_text().count("binary")


def test_environment_wins_and_set_says_so(capsys: pytest.CaptureFixture[str], repo: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ORCH_TEAM_TEAMMATES", "7")
    out = ok(capsys, repo, "config", "set", "team.teammates", "3")
    assert "ORCH_TEAM_TEAMMATES is set in the environment and wins" in out
    got = json.loads(ok(capsys, repo, "config", "get", "team.teammates", "--json"))
    assert got["value"] == 7 and got["source"] == "env"
