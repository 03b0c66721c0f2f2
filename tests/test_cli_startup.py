"""CLI start-up: the command table agrees with the modules, and cheap answers stay cheap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import COMMANDS, _load_commands
from orchestrator.cli.app import app

HEAVY = ("typer", "click", "pydantic", "rich", "structlog", "anthropic", "mcp", "watchdog")


def imported(*args: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                           set[str]]:
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "orchestrator", *args],
                       capture_output=True, text=True, cwd=cwd, timeout=60)
    names = {line.rsplit("|", 1)[1].strip() for line in p.stderr.splitlines()
             if line.startswith("import time:") and "|" in line}
    return p, names


def test_every_registered_command_is_in_the_table_with_its_module_and_summary() -> None:
    _load_commands()
    registered: dict[str, tuple[str, str]] = {}
    for info in app.registered_commands:
        assert info.callback is not None
        name = info.name or info.callback.__name__.replace("_", "-")
        doc = info.help or info.callback.__doc__ or ""
        registered[name] = (info.callback.__module__, " ".join(doc.split("\n\n")[0].split()))
    for group in app.registered_groups:
        assert group.name and group.typer_instance is not None
        registered[group.name] = (group.typer_instance.registered_commands[0].callback.__module__,  # type: ignore[union-attr]
                                  str(group.typer_instance.info.help))
    table = {name: (f"orchestrator.cli.{module}", summary)
             for name, (module, summary) in COMMANDS.items()}
    assert table == registered


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["nosuchcommand"], ["--bogus"]])
def test_answers_without_typer_pydantic_or_rich(args: list[str]) -> None:
    p, names = imported(*args)
    assert not names & set(HEAVY), sorted(names & set(HEAVY))
    assert p.returncode == (0 if args[0] in ("--version", "--help") else 2)
    if args == ["--version"]:
        assert p.stdout.startswith("orchestrator ")
    if args == ["--help"]:
        for name in COMMANDS:
            assert f"│ {name} " in p.stdout
        assert "Usage: orchestrator [OPTIONS] COMMAND [ARGS]..." in p.stdout
    if args == ["nosuchcommand"]:
        assert "No such command 'nosuchcommand'." in p.stderr and "Traceback" not in p.stderr
    if args == ["--bogus"]:
        assert "No such option: --bogus" in p.stderr


def test_a_close_command_is_suggested_and_typer_still_runs_the_real_ones(repo: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "orchestrator", "lst"], capture_output=True,
                       text=True, cwd=repo, timeout=60)
    assert p.returncode == 2 and "Did you mean 'list'?" in p.stderr
    p = subprocess.run([sys.executable, "-m", "orchestrator", "add", "--help"],
                       capture_output=True, text=True, cwd=repo, timeout=60)
    assert p.returncode == 0 and "--priority" in p.stdout


def test_board_commands_import_only_what_they_use(repo: Path) -> None:
    p, names = imported("status", cwd=repo)
    assert p.returncode == 0, p.stderr
    assert not names & {"structlog", "anthropic", "mcp", "orchestrator.team.daemon",
                        "orchestrator.cli.board", "orchestrator.worktree"}
    p, names = imported("add", "one", cwd=repo)
    assert p.returncode == 0, p.stderr
    assert not names & {"rich", "structlog", "anthropic", "mcp", "orchestrator.cli.team",
                        "orchestrator.team.daemon"}
