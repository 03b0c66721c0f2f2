"""`config` says what it did; a broken orchestrator.toml does not block looking or stopping."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.config import Config
from orchestrator.errors import ConfigError
from tests.test_cli_board import ok, run


def test_unset_and_set_none_say_the_truth_and_get_prints_what_set_takes(
        capsys: pytest.CaptureFixture[str], repo: Path) -> None:
    toml = repo / "orchestrator.toml"
    out = ok(capsys, repo, "config", "unset", "agent.model")
    assert out.startswith("agent.model was not set in") and "nothing changed" in out
    assert "removed" not in out and not toml.exists()
    out = ok(capsys, repo, "config", "set", "agent.max_cost_usd", "none")
    assert "was not set" in out and "nothing changed" in out and "(it is the default: none)" in out
    assert ok(capsys, repo, "config", "get", "agent.max_cost_usd") == "none\n"  # not null
    assert ok(capsys, repo, "config", "set", "agent.max_cost_usd", "5").startswith(
        "set agent.max_cost_usd = 5.0 in")
    assert "nothing changed" in ok(capsys, repo, "config", "set", "agent.max_cost_usd", "5")
    out = ok(capsys, repo, "config", "set", "agent.max_cost_usd", "none")
    assert out.startswith("removed agent.max_cost_usd from") and "default: none" in out
    assert "max_cost_usd" not in toml.read_text()
    out = ok(capsys, repo, "config", "get", "agent.max_cost_usd")
    assert ok(capsys, repo, "config", "set", "agent.max_cost_usd", out.strip())  # round trip


@pytest.mark.parametrize(("text", "says"), [
    ("[team]\nteammates = = 3\n", "orchestrator.toml: Invalid value (at line 2"),
    ('[team]\nbackend = "command"\nteammates = "many"\n', "orchestrator.toml, line 3:"),
])
def test_a_broken_file_does_not_stop_status_down_list_add(
        capsys: pytest.CaptureFixture[str], repo: Path, text: str, says: str) -> None:
    (repo / "orchestrator.toml").write_text(text)
    for args in (["add", "still works"], ["list"], ["show", "1"], ["status"], ["down"],
                 ["events"]):
        code, _, err = run(capsys, repo, *args)
        assert code == 0, (args, err)
        assert err.count("\n") == 1 and err.startswith("warning: ") and says in err, err
        assert "using the default settings" in err
    assert "still works" in run(capsys, repo, "list")[1]
    code, _, err = run(capsys, repo, "up", "--burst", "--command", "true")
    assert code == 1 and err.startswith("error: ") and says in err  # never runs on a guess


def test_a_bad_value_names_its_tables_header_line_and_says_the_validators_words(
        repo: Path) -> None:
    """A table written as ``[worktree.shared."../up"]`` is found by its header, and the
    message is the validator's own, without pydantic's "Value error, " before it."""
    toml = repo / "orchestrator.toml"
    toml.write_text('[team]\nteammates = 1\n\n[worktree.shared."../up"]\nlink = "symlink"\n')
    with pytest.raises(ConfigError) as exc:
        Config.load(repo)
    assert str(exc.value) == (f"config worktree.shared in {toml}, line 4: worktree.shared: "
                              "'../up' must be a folder path inside the worktree")
