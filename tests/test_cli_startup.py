"""CLI start-up: one parser (typer) for every command, and commands import only what they
use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import load_app


def imported(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None
             ) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "orchestrator", *args],
                       capture_output=True, text=True, cwd=cwd, timeout=60, env=env)
    names = {line.rsplit("|", 1)[1].strip() for line in p.stderr.splitlines()
             if line.startswith("import time:") and "|" in line}
    return p, names


def test_every_command_is_in_the_help_and_usage_errors_are_typers(repo: Path) -> None:
    app = load_app()
    names = [c.name or c.callback.__name__.replace("_", "-")  # type: ignore[union-attr]
             for c in app.registered_commands] + [g.name for g in app.registered_groups]
    p = subprocess.run([sys.executable, "-m", "orchestrator", "--help"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "COLUMNS": "100"})
    assert p.returncode == 0 and "Usage: orchestrator [OPTIONS] COMMAND [ARGS]..." in p.stdout
    for name in names:
        assert f"│ {name} " in p.stdout, name
    assert "([board] url)" in p.stdout  # help text is not taken for style tags
    p = subprocess.run([sys.executable, "-m", "orchestrator", "--version"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.startswith("orchestrator ")
    p = subprocess.run([sys.executable, "-m", "orchestrator", "lst"], capture_output=True,
                       text=True, cwd=repo, timeout=60)
    assert p.returncode == 2 and "Did you mean 'list'?" in p.stderr
    p = subprocess.run([sys.executable, "-m", "orchestrator", "--bogus"], capture_output=True,
                       text=True, cwd=repo, timeout=60)
    assert p.returncode == 2 and "No such option: --bogus" in p.stderr
    p = subprocess.run([sys.executable, "-m", "orchestrator", "list", "--status", "bogus",
                        "--json"], capture_output=True, text=True, cwd=repo, timeout=60)
    assert p.returncode == 2 and json.loads(p.stderr)["type"] == "UsageError"
    p = subprocess.run([sys.executable, "-m", "orchestrator", "add", "--help"],
                       capture_output=True, text=True, cwd=repo, timeout=60)
    assert p.returncode == 0 and "--priority" in p.stdout


def test_board_commands_import_only_what_they_use(repo: Path) -> None:
    """Every command module is loaded (one parser), each importing the library inside its
    commands: a board command does not pay for the team, the agents or the worktrees."""
    heavy = {"structlog", "anthropic", "mcp", "orchestrator.team.daemon", "orchestrator.worktree",
             "orchestrator.review", "orchestrator.config", "pydantic", "watchdog"}
    for args in (["status"], ["add", "one"], ["--version"], ["--help"]):
        p, names = imported(*args, cwd=repo)
        assert p.returncode == 0, p.stderr
        assert not names & heavy, (args, sorted(names & heavy))


def test_one_task_commands_and_list_skip_pydantic_once_the_settings_are_checked(
        repo: Path) -> None:
    """The first command checks orchestrator.toml (pydantic); later ones read the checked
    board settings from the cache and never import pydantic or watchdog."""
    (repo / "orchestrator.toml").write_text("[board]\nmax_attempts = 5\n")
    p, names = imported("add", "first", cwd=repo)
    assert p.returncode == 0 and "pydantic" in names, p.stderr
    for args in (["add", "second"], ["show", "2"], ["list"], ["list", "--json"],
                 ["cancel", "1"], ["events"], ["status"]):
        p, names = imported(*args, cwd=repo)
        assert p.returncode == 0, (args, p.stderr)
        assert not names & {"pydantic", "watchdog", "orchestrator.config"}, \
            (args, sorted(names & {"pydantic", "watchdog", "orchestrator.config"}))
    assert '"max_attempts": 5' in subprocess.run(
        [sys.executable, "-m", "orchestrator", "show", "2", "--json"], capture_output=True,
        text=True, cwd=repo, timeout=60).stdout.replace('":5', '": 5')


def test_a_repository_without_settings_never_loads_the_settings_models(repo: Path) -> None:
    """No orchestrator.toml, pyproject.toml, user file or ORCH_* variable: the defaults,
    from the first command on (what a new user runs first, and every fresh bench board)."""
    import os

    assert not any((repo / name).exists() for name in ("orchestrator.toml", "pyproject.toml"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env["XDG_CONFIG_HOME"] = str(repo / "no-such-config-home")
    for args in (["list"], ["add", "first", "--json"], ["show", "1"], ["status"]):
        p, names = imported(*args, cwd=repo, env=env)
        assert p.returncode == 0, (args, p.stderr)
        assert not names & {"pydantic", "orchestrator.config"}, args
    assert '"max_attempts":3' in subprocess.run(
        [sys.executable, "-m", "orchestrator", "show", "1", "--json"], capture_output=True,
        text=True, cwd=repo, timeout=60, env=env).stdout.replace(" ", "")
    (repo / "pyproject.toml").write_text("[tool.orchestrator.board]\nmax_attempts = 2\n")
    p, names = imported("add", "second", cwd=repo, env=env)
    assert p.returncode == 0 and "pydantic" in names, p.stderr  # a file: checked


def test_the_settings_cache_follows_the_file_the_environment_and_a_broken_file(
        repo: Path) -> None:
    def max_attempts_of_a_new_task(env: dict[str, str] | None = None) -> int:
        import json
        import os

        p = subprocess.run([sys.executable, "-m", "orchestrator", "add", "t", "--json"],
                           capture_output=True, text=True, cwd=repo, timeout=60,
                           env={**os.environ, **(env or {})})
        assert p.returncode == 0, p.stderr
        return int(json.loads(p.stdout)["max_attempts"])

    toml = repo / "orchestrator.toml"
    assert max_attempts_of_a_new_task() == 3
    toml.write_text("[board]\nmax_attempts = 4\n")
    assert max_attempts_of_a_new_task() == 4
    assert max_attempts_of_a_new_task() == 4  # from the cache now
    assert max_attempts_of_a_new_task({"ORCH_BOARD_MAX_ATTEMPTS": "6"}) == 6
    assert max_attempts_of_a_new_task() == 4
    toml.write_text("[board]\nmax_attempts = 0\n")  # broken: a warning every time, defaults
    for _ in range(2):
        p = subprocess.run([sys.executable, "-m", "orchestrator", "list"], capture_output=True,
                           text=True, cwd=repo, timeout=60)
        assert p.returncode == 0 and p.stderr.startswith("warning: ") and \
            "max_attempts" in p.stderr, p.stderr


def test_the_cached_board_settings_have_every_field_of_the_board_section() -> None:
    from orchestrator.board.settings import CheckedBoardSettings
    from orchestrator.config import BoardConfig

    assert list(CheckedBoardSettings.__struct_fields__) == list(BoardConfig.model_fields)
    from orchestrator.board.settings import DEFAULT_BOARD
    from orchestrator.config import Config

    assert DEFAULT_BOARD == CheckedBoardSettings(**BoardConfig().model_dump(mode="json"))
    assert Config().worktree.root is None  # what a repository without settings uses


def test_the_checked_settings_live_in_the_index_and_junk_there_is_ignored(
        repo: Path) -> None:
    """The checked settings are an entry of the board's one derived index (no file of
    their own): junk in that entry is ignored, a damaged index is made afresh, and a
    settings file too big to hash whole is never remembered."""
    import sqlite3

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "orchestrator", *args],
                              capture_output=True, text=True, cwd=repo, timeout=30)

    (repo / "orchestrator.toml").write_text("[board]\nmax_attempts = 3\n")  # to be kept
    assert run("add", "first").returncode == 0
    assert sorted(p.name for p in (repo / ".tasks").iterdir() if p.is_file()) == [
        ".seq", "task_001.json"]
    index = repo / ".tasks" / ".index" / "board.sqlite"
    for junk in ("[]", '{"key": 1}', "not json", '{"key": "x", "board": {"url": 5}}', 5, None):
        with sqlite3.connect(index) as db:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('settings', ?)", (junk,))
        db.close()
        p = run("list")
        assert p.returncode == 0 and "first" in p.stdout, p.stderr
    p, names = imported("show", "1", cwd=repo)  # remembered again by the list above
    assert p.returncode == 0 and "pydantic" not in names, p.stderr
    for suffix in ("-wal", "-shm"):
        (index.parent / f"board.sqlite{suffix}").unlink(missing_ok=True)
    index.write_bytes(b"not a database " * 100)
    p = run("show", "1")
    assert p.returncode == 0 and "first" in p.stdout, p.stderr
    (repo / "orchestrator.toml").write_text(
        "[board]\nmax_attempts = 4\n" + "# padding\n" * (500_000))  # over 4 MiB
    for title in ("second", "third"):
        p, names = imported("add", title, cwd=repo)
        assert p.returncode == 0 and "pydantic" in names  # checked each time: not kept


def test_the_repository_root_and_its_first_commit_are_found_as_git_finds_them(
        tmp_path: Path) -> None:
    """What a command takes for its repository is what ``git rev-parse`` answers, in a
    subfolder and a linked worktree; whether it has a commit too."""

    from orchestrator.errors import UserError
    from orchestrator.layout import find_root
    from orchestrator.repo import require_commit

    def git_says(where: Path) -> Path | None:
        out = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=where,
                             capture_output=True, text=True, check=False)
        return Path(out.stdout.strip()).resolve() if out.returncode == 0 else None

    repo = tmp_path / "r"
    (repo / "a" / "b").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    with pytest.raises(UserError, match="no commits yet"):
        require_commit(repo)  # unborn branch: git says so
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                    "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    require_commit(repo)
    wt = repo / ".worktrees" / "w"
    subprocess.run(["git", "-C", str(repo), "worktree", "add", "-q", str(wt)], check=True)
    (wt / "deep").mkdir()
    for where in (repo, repo / "a" / "b", wt, wt / "deep"):
        assert git_says(where) == find_root(where)
    with pytest.raises(UserError, match="not inside a git repository"):
        find_root(repo / ".git" / "refs")
    subprocess.run(["git", "-C", str(repo), "pack-refs", "--all"], check=True)
    assert not (repo / ".git" / "refs" / "heads" / "main").exists()
    require_commit(repo)
    subprocess.run(["git", "-C", str(repo), "checkout", "-q", "--detach"], check=True)
    require_commit(repo)
    (tmp_path / "plain").mkdir()
    with pytest.raises(UserError, match="not inside a git repository"):
        find_root(tmp_path / "plain")
    (tmp_path / "fake" / ".git").mkdir(parents=True)  # no HEAD: not a repository to git
    with pytest.raises(UserError, match="not inside a git repository"):
        find_root(tmp_path / "fake")
