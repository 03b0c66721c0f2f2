"""Command-line agent presets (aider, codex, gemini, cli) with a real program as the agent.

The "agent" is a tiny Python script that records how it got the prompt (its
arguments, standard input, environment) into the worktree, so the teammate
commits what it saw.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends import load_backend
from orchestrator.board import open_board
from orchestrator.board.tasklogs import TaskLog
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.prompting import build_prompt
from orchestrator.protocols import RunContext, RunResult
from tests.test_backend_agent import ClaimFn, claim  # noqa: F401 (the fixture)
from tests.test_team_support import changed_files, cli, events, tasks, team_env

AGENT = f"""#!{sys.executable}
import json, os, sys
if os.environ.get("FAKE_WRITE", "1") == "1":
    got = {{"argv": sys.argv[1:], "stdin": sys.stdin.read(),
           "env": os.environ.get(os.environ.get("FAKE_ENV_NAME", "ORCH_PROMPT"))}}
    with open("received.json", "w") as f:
        json.dump(got, f)
print("agent: did the work")
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""
NASTY = 'Fix -rf "quoted" $HOME `whoami` it\'s'
DESCRIPTION = "line one\n--flag-looking line\n$(not a substitution)"


def install_agent(where: Path, name: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    path = where / name
    path.write_text(AGENT)
    path.chmod(0o755)
    return path


def test_the_aider_preset_gets_the_prompt_as_an_argument_and_its_work_is_committed(
        repo: Path, tmp_path: Path) -> None:
    install_agent(tmp_path / "bin", "aider")
    env = team_env()
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    with open_board(Layout.at(repo)) as board:
        task = board.add(NASTY, description=DESCRIPTION)
    res = cli(repo, "up", "--burst", "-n", "1", "--backend", "aider", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    [done] = tasks(repo)
    assert done.status == Status.REVIEW and done.branch
    assert changed_files(repo, done.branch) == ["received.json"]
    got = json.loads((repo / ".worktrees" / task.id / "received.json").read_text())
    assert got["argv"] == ["--yes-always", "--no-auto-commits", "--no-check-update",
                           "--message", build_prompt(done)]
    log = list(TaskLog(Layout.at(repo), task.id).read())
    assert any("agent: did the work" in r.get("text", "") for r in log if r["kind"] == "output")
    [finished] = [r for r in log if r["kind"] == "backend_finished"]
    assert finished["exit_code"] == 0 and finished["backend"] == "aider"


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    return install_agent(tmp_path / "bin", "agent")


RunCli = Callable[..., tuple[RunResult, RunContext]]


@pytest.fixture
def run_cli(repo: Path, agent: Path, claim: ClaimFn) -> RunCli:  # noqa: F811 (fixture)
    """Run the ``cli`` preset (or ``backend``) on a claimed task in its real worktree."""

    def run(commands: dict[str, Any] | None = None, backend: str = "cli",
            **agent_env: str) -> tuple[RunResult, RunContext]:
        if commands is None:
            commands = {"cli": {"argv": [str(agent), "--task", "{prompt}"], "env": agent_env}}
        c = claim(subject=NASTY, description=DESCRIPTION)
        config = Config.load(repo, environ={}, overrides={"commands": commands})
        ctx = c.ctx()
        return load_backend(backend, config, c.layout).run(ctx), ctx

    return run


@pytest.mark.parametrize("via", ["arg", "stdin", "env"])
def test_the_cli_preset_passes_the_prompt_by_argument_stdin_or_environment(
        run_cli: RunCli, agent: Path, via: str) -> None:
    argv = [str(agent), "--task", "{prompt}" if via == "arg" else "-"]
    result, ctx = run_cli({"cli": {"argv": argv, "prompt": via, "prompt_env": "MY_PROMPT",
                                   "env": {"FAKE_ENV_NAME": "MY_PROMPT"}}})
    assert result.ok, result.error
    assert "agent: did the work" in result.summary
    got = json.loads((ctx.workspace.path / "received.json").read_text())
    prompt = build_prompt(ctx.task)
    assert prompt.startswith(NASTY) and DESCRIPTION in prompt
    assert got["argv"] == ["--task", prompt if via == "arg" else "-"]
    assert got["stdin"] == (prompt if via == "stdin" else "")
    assert got["env"] == (prompt if via == "env" else None)
    assert not list((ctx.layout.run / "prompts").glob("*"))  # the stdin file is gone


def test_a_command_that_fails_at_once_without_changes_is_not_retried(run_cli: RunCli) -> None:
    result, _ = run_cli(FAKE_WRITE="0", FAKE_EXIT="2")
    assert not result.ok and result.retry is False
    assert "exited at once (exit code 2" in str(result.error)
    assert "agent: did the work" in str(result.error)


def test_a_command_that_failed_after_changing_the_worktree_is_retried(run_cli: RunCli) -> None:
    result, _ = run_cli(FAKE_EXIT="2")
    assert not result.ok and result.retry is True
    assert str(result.error).startswith("cli failed: exit code 2")


def test_with_startup_seconds_zero_every_failure_is_retried(run_cli: RunCli, agent: Path) -> None:
    result, _ = run_cli({"cli": {"argv": [str(agent)],
                                 "env": {"FAKE_WRITE": "0", "FAKE_EXIT": "1"}},
                         "startup_seconds": 0})
    assert not result.ok and result.retry is True


def test_a_command_the_shell_cannot_run_is_not_retried(run_cli: RunCli) -> None:
    result, _ = run_cli({"cli": {"argv": ["sh", "-c", "no-such-program-xyz"]},
                         "startup_seconds": 0})
    assert not result.ok and result.retry is False
    assert "cli cannot run (exit code 127)" in str(result.error)


def test_the_cli_backend_without_a_command_says_what_to_write(run_cli: RunCli) -> None:
    result, _ = run_cli({})
    assert not result.ok and result.retry is False
    assert "[commands.cli] argv" in str(result.error)


def test_a_built_in_preset_can_be_replaced_in_the_config(run_cli: RunCli, agent: Path
                                                          ) -> None:
    result, ctx = run_cli({"gemini": {"argv": [str(agent), "-p", "{prompt}"]}},
                          backend="gemini")
    assert result.ok, result.error
    got = json.loads((ctx.workspace.path / "received.json").read_text())
    assert got["argv"] == ["-p", build_prompt(ctx.task)]


def test_an_agent_that_is_not_installed_fails_each_task_once_saying_how_to_install(
        repo: Path) -> None:
    env = {**team_env(), "PATH": "/usr/bin:/bin"}
    with open_board(Layout.at(repo)) as board:
        board.add("One")
        board.add("Two")
    res = cli(repo, "up", "--burst", "-n", "1", "--backend", "codex", env=env)
    assert res.returncode == 1 and "tasks failed" in res.stdout + res.stderr
    done = tasks(repo)
    assert [(t.status, t.attempts) for t in done] == [(Status.FAILED, 1)] * 2
    assert len(events(repo, "task_claimed")) == 2
    assert "'codex' is not installed or not on PATH (install: npm install -g @openai/codex)" \
        in str(done[0].error)
