"""Live settings: a running daemon applies changed files (team size, per-task settings),
reports a broken file and keeps the last good settings."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from orchestrator.board import open_board
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.settings.live import ConfigWatcher, LiveConfig
from orchestrator.team import status
from tests.test_team_support import (
    add_tasks,
    cli,
    events,
    tasks,
    team_cleanup,
    team_env,
    wait_until,
)


def write(path: Path, text: str) -> None:
    """Replace the file, as an editor that saves through a temporary file does."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def test_live_config_reloads_reports_broken_files_and_keeps_the_last_good(repo: Path) -> None:
    toml = repo / "orchestrator.toml"
    toml.write_text("[team]\nteammates = 2\n")
    live = LiveConfig(repo, Config.load(repo))
    assert live.check() is None
    write(toml, '[team]\nteammates = 3\n[agent]\nmodel = "m2"\nallow = ["Read"]\n'
                '[worktree]\nbase = "dev"\n')
    change = live.check()
    assert change is not None and change.error is None
    got = {c.key: (c.old, c.new, c.live) for c in change.changed}
    assert got == {"team.teammates": (2, 3, True),
                   "agent.model": (Config().agent.model, "m2", True),
                   "agent.allow": ([], ["Read"], True), "worktree.base": ("HEAD", "dev", False)}
    assert live.config.team.teammates == 3 and live.check() is None
    write(toml, "[team\nteammates = 5\n")
    broken = live.check()
    assert broken is not None and "cannot read configuration" in (broken.error or "")
    assert live.config.team.teammates == 3
    write(toml, "[team]\nteammates = 0\n")
    bad = live.check()
    assert bad is not None and "team.teammates" in (bad.error or "")
    assert live.config.team.teammates == 3
    write(toml, '[team]\nteammates = 3\n[hooks]\nevents = { merged = ["./deploy"] }\n')
    assert live.check() is not None and live.config.hooks.events == {"merged": ["./deploy"]}
    write(toml, '[team]\nteammates = 3\n[hooks]\nevents = { merge = ["./deploy2"] }\n')
    typo = live.check()
    assert typo is not None and typo.error == (
        f"config hooks.events in {toml}, line 4: 'merge' is not an event type; "
        "did you mean merged or task_merged?")
    assert live.config.hooks.events == {"merged": ["./deploy"]}  # the last good hooks run
    write(toml, "[team]\nteammates = 4\n[agents.reviewer]\nmodel = \"opus\"\n")
    fixed = live.check()
    assert fixed is not None and fixed.has("agents")
    assert {c.key: c.new for c in fixed.changed}["team.teammates"] == 4
    assert live.error is None


def test_overrides_and_environment_still_win_after_a_reload(repo: Path) -> None:
    toml = repo / "orchestrator.toml"
    toml.write_text("[team]\nverify = \"a\"\n")
    live = LiveConfig(repo, Config.load(repo, overrides={"team": {"verify": "cli"}}),
                      overrides={"team": {"verify": "cli"}})
    write(toml, "[team]\nverify = \"b\"\nteammates = 5\n")
    change = live.check()
    assert change is not None and [c.key for c in change.changed] == ["team.teammates"]
    assert live.config.team.verify == "cli"


def test_the_watcher_calls_back_when_the_file_is_saved(repo: Path) -> None:
    toml = repo / "orchestrator.toml"
    seen = threading.Event()
    with ConfigWatcher([toml, repo / "pyproject.toml"], seen.set):
        (repo / "other.txt").write_text("x")  # other files do not count
        assert not seen.wait(0.3)
        write(toml, "[team]\nteammates = 3\n")
        assert seen.wait(30)


def active(repo: Path, *, via_cli: bool = True) -> list[dict[str, Any]]:
    if via_cli:
        res = cli(repo, "status", "--json")
        assert res.returncode == 0, res.stderr
        st = json.loads(res.stdout)
    else:  # `status` loads the configuration too, so it refuses while the file is broken
        with open_board(Layout.at(repo), create=False) as board:
            st = status.team_status(Layout.at(repo), board)
    return [m for m in st["teammates"] if m["state"] != "stopped"]


def count_is(repo: Path, n: int, *, via_cli: bool = True) -> list[dict[str, Any]] | None:
    mates = active(repo, via_cli=via_cli)
    return mates if len(mates) == n and all(m["pid"] for m in mates) else None


def test_a_running_daemon_follows_the_file(repo: Path) -> None:
    toml = repo / "orchestrator.toml"
    toml.write_text("# the team\n[team]\nteammates = 1\ncommand = \"echo v1 > out.txt\"\n")
    env = team_env(board_rescan_seconds=1)
    with team_cleanup(repo):
        res = cli(repo, "up", "--detach", env=env)
        assert res.returncode == 0, res.stderr
        [alice] = wait_until(lambda: count_is(repo, 1, via_cli=False), what="one teammate")

        res = cli(repo, "config", "set", "team.teammates", "3")  # the CLI writes the file
        assert res.returncode == 0, res.stderr
        wait_until(lambda: count_is(repo, 3, via_cli=False), what="three teammates")
        mates = count_is(repo, 3)  # what `orchestrator status --json` shows
        assert mates is not None
        assert [m["name"] for m in mates] == ["alice", "bob", "carol"]
        assert next(m for m in mates if m["name"] == "alice")["pid"] == alice["pid"]
        [changed] = events(repo, "config_changed")
        assert changed["changes"] == [{"key": "team.teammates", "old": 1, "new": 3,
                                       "live": True}]

        write(toml, toml.read_text().replace("teammates = 3", "teammates = 2"))  # by hand
        wait_until(lambda: count_is(repo, 2, via_cli=False), what="two teammates")
        mates = count_is(repo, 2)
        assert mates is not None
        assert [m["name"] for m in mates] == ["alice", "bob"]
        st = json.loads(cli(repo, "status", "--json").stdout)
        assert {m["name"]: m["state"] for m in st["teammates"]}["carol"] == "stopped"

        write(toml, "[team\nteammates = 9\n")  # broken: reported, nothing changes
        [rejected] = wait_until(lambda: events(repo, "config_rejected"), what="rejection")
        assert "cannot read configuration" in rejected["error"]
        assert count_is(repo, 2, via_cli=False)
        write(toml, '[team]\nteammates = 2\n[hooks.events]\ntask_complete = ["./notify"]\n')
        wait_until(lambda: len(events(repo, "config_rejected")) == 2, what="a hook's typo")
        assert events(repo, "config_rejected")[1]["error"] == (
            f"config hooks.events in {toml}, line 3: 'task_complete' is not an event type; "
            "did you mean task_completed or task_created?")

        # settings a teammate uses per task apply to the next task
        write(toml, "[team]\nteammates = 2\ncommand = \"echo v2 > out.txt\"\n")
        wait_until(lambda: len(events(repo, "config_changed")) == 3, what="the new command")
        [task] = add_tasks(repo, 1)
        wait_until(lambda: tasks(repo)[0].status == Status.REVIEW, what="the task to finish")
        assert (repo / ".worktrees" / task.id / "out.txt").read_text() == "v2\n"

        # a setting whose value holds sections (a shared folder) is recorded as plain data
        write(toml, toml.read_text() + '[worktree.shared.deps]\nkey_files = ["lock"]\n')
        wait_until(lambda: len(events(repo, "config_changed")) == 4, what="a shared folder")
        [shared] = events(repo, "config_changed")[3]["changes"]
        assert shared["key"] == "worktree.shared" and shared["old"] == {}
        assert shared["new"]["deps"]["key_files"] == ["lock"]

        assert cli(repo, "down").returncode == 0
    log = (repo / ".tasks" / ".run" / "daemon.log").read_text()
    assert "settings changed" in log and "configuration not applied" in log
