"""The user's environment is the agent's (issue 30, item 6): with orchestrator's own
virtualenv activated, agents and checks run without it on PATH or in VIRTUAL_ENV; the
project's own virtualenv (inside the repository) stays.

A real `orchestrator up --burst` with a command agent and a verify check, each writing
what it got; the team runs from this test suite's virtualenv, which lies outside the
generated repository, as orchestrator's own does in its checkout.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from orchestrator.procutil import user_environ
from tests.test_team_support import cli, tasks, team_cleanup, team_env

ENV_OF = 'printf "%s\\n%s\\n" "${VIRTUAL_ENV:-none}" "$PATH" > '


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="runs from a virtualenv")
def test_agents_and_checks_run_without_orchestrators_virtualenv(repo: Path) -> None:
    ours = Path(sys.prefix)
    project = repo / ".venv" / "bin"
    project.mkdir(parents=True)
    env = team_env(team_verify=f"{ENV_OF}check-env.txt")
    env.update(VIRTUAL_ENV=str(ours),
               PATH=os.pathsep.join([str(ours / "bin"), str(project), env["PATH"]]))
    assert cli(repo, "add", "look around").returncode == 0
    with team_cleanup(repo):
        res = cli(repo, "up", "--burst", "-n", "1", "--command", f"{ENV_OF}agent-env.txt",
                  env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    [task] = tasks(repo)
    worktree = Path(task.worktree or "")
    for name in ("agent-env.txt", "check-env.txt"):
        venv, path = (worktree / name).read_text().splitlines()
        entries = path.split(os.pathsep)
        assert venv == "none", (name, venv)
        assert str(ours / "bin") not in entries, (name, path)
        assert str(project) in entries, (name, path)  # the project's own stays


def test_user_environ_keeps_a_virtualenv_inside_the_repository(tmp_path: Path) -> None:
    environ = {"PATH": f"{sys.prefix}/bin{os.pathsep}/usr/bin", "VIRTUAL_ENV": sys.prefix}
    inside = Path(sys.prefix).parent
    assert user_environ(inside, environ) == environ
    stripped = user_environ(tmp_path, environ)
    if sys.prefix != sys.base_prefix:
        assert stripped == {"PATH": "/usr/bin"}
