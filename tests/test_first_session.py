"""The README's "first session" runs exactly as written on a fresh repository.

The commands and their expected output are read from README.md, so the test fails as soon
as the README and the tool's behaviour diverge.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import make_repo

README = Path(__file__).resolve().parent.parent / "README.md"


def first_session() -> list[tuple[str, list[str]]]:
    """(command, expected output lines) for each ``$ `` line of the session's console block."""
    text = README.read_text()
    section = text[text.index("## A first session in your own repository"):]
    block = section[section.index("```console\n") + 11:]
    block = block[:block.index("```")]
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps and line.strip():
            steps[-1][1].append(line)
    return steps


def token_pattern(token: str) -> str:
    if re.fullmatch(r"\d+s", token):
        return r"\d+[smhd]"  # an age
    if re.fullmatch(r"[0-9a-f]{12}", token):
        return "[0-9a-f]{12}"  # a commit
    return ".*".join(re.escape(part) for part in token.split("…"))


def matches(expected: list[str], actual: list[str]) -> bool:
    if expected == ["…"]:
        return True
    if len(expected) != len(actual):
        return False
    for want, got in zip(expected, actual, strict=True):
        pattern = r"\s+".join(token_pattern(t) for t in want.split())
        if not re.fullmatch(pattern, got.strip()):
            return False
    return True


def test_the_readmes_first_session_works_as_written(tmp_path: Path) -> None:
    steps = first_session()
    assert steps[0][0] == "cd my-repo" and any("up --burst" in c for c, _ in steps)
    cwd = make_repo(tmp_path / "my-repo")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for command, expected in steps[1:]:
        out = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                             text=True, timeout=90, stdin=subprocess.DEVNULL, check=False)
        assert out.returncode == 0, f"{command}\n{out.stdout}\n{out.stderr}"
        actual = [line for line in out.stdout.splitlines() if line.strip()]
        assert matches(expected, actual), f"{command}\nREADME:\n" + "\n".join(expected) + \
            "\nactual:\n" + "\n".join(actual)
    assert (cwd / "hello.txt").read_text() == "Write the greeting\n"  # merged into main


def test_a_relative_command_that_exists_nowhere_is_refused_at_start_up(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["orchestrator", "add", "x"], cwd=repo, env=env, check=True,
                   capture_output=True)
    out = subprocess.run(["orchestrator", "up", "--burst", "--command", "./nope.sh"], cwd=repo,
                         env=env, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "./nope.sh" in out.stderr
    assert "worktree" in out.stderr and "commit it" in out.stderr
    assert not (repo / ".tasks" / ".run" / "daemon.log").exists()  # nothing was started


def test_scripts_run_gives_options_alone_to_the_demo(tmp_path: Path) -> None:
    """``scripts/run --dir X`` is ``orchestrator demo --dir X`` (a folder that is not empty
    makes the demo refuse at once, which shows where the option went)."""
    (tmp_path / "taken").write_text("x")
    out = subprocess.run([str(README.parent / "scripts" / "run"), "--dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 1, out.stderr
    assert "not empty" in out.stderr and "No such option" not in out.stderr


def test_the_demo_hint_names_a_command_that_runs_from_another_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli.agent import command_name

    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    script = venv_bin / "orchestrator"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script), "demo"])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert command_name() == str(script)  # scripts/run: .venv/bin is not on PATH
    monkeypatch.setenv("PATH", f"{venv_bin}:/usr/bin:/bin")
    assert command_name() == "orchestrator"  # activated, or installed
