"""Issue 16.2 and 22's intake items: one bad file in the inbox never stops the board.

Hostile drops of our own (beyond the issue's three): a 250-character name, 100k-deep
JSON, a FIFO, a socket, a symlink to /dev/zero, a folder named x.json, a 50 MB file,
invalid UTF-8 (content and name), NUL bytes, deep front matter, an error of our own
for one file. Each is rejected alone, unopened where it is not a regular file, and
``list``, ``up --burst`` and SIGTERM keep working.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.board import FileBoard, init_repo, open_board
from orchestrator.layout import Layout
from orchestrator.model import Status, Task, Todo, Usage
from orchestrator.record import decode, to_json
from tests.test_team_support import cli, start, team_cleanup, team_env, wait_until, working_on

SETTLED = time.time() - 60


def drop(folder: Path, name: str | bytes, data: bytes | None = None) -> Path:
    path = folder / name if isinstance(name, str) else Path(os.fsdecode(
        os.fsencode(folder) + b"/" + name))
    if data is not None:  # written and dated under a hidden name, then moved in whole:
        hidden = path.with_name("." + path.name + ".tmp")  # a running intake skips it
        hidden.write_bytes(data)
        os.utime(hidden, (SETTLED, SETTLED))
        os.rename(hidden, path)
    return path


def hostile_inbox(inbox: Path, tmp: Path) -> dict[str, str]:
    """Every kind of bad drop; name in rejected/ -> a word of the reason."""
    drop(inbox, "n" * 245 + ".json", b'{"title": "long name"}')
    drop(inbox, "deep.json", b'{"title": "x", "a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    drop(inbox, "deep40.json", b'{"title": "x", "a": ' + b"[" * 40 + b"]" * 40 + b"}")
    drop(inbox, "deep.md", b"---\nblocks: " + b"[" * 5000 + b"]" * 5000 + b"\n---\n# x\n")
    os.mkfifo(inbox / "fifo.json")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(inbox / "sock.json"))
    sock.close()
    (inbox / "zero.json").symlink_to("/dev/zero")
    (inbox / "x.json").mkdir()
    (inbox / "x.json" / "inner.json").write_text('{"title": "inside a folder"}')
    with open(inbox / "huge.json", "wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    os.utime(inbox / "huge.json", (SETTLED, SETTLED))
    drop(inbox, "latin.json", b'{"title": "caf\xe9"}')
    drop(inbox, "nul.md", b"# title\x00\n")
    drop(inbox, b"name-\xff.json", b'{"title": "bad name"}')
    return {"n" * 100: "over the 150-byte limit", "deep.json": "nested more than",
            "deep40.json": "nested more than", "deep.md": "a list inside a list",
            "fifo.json": "a FIFO", "sock.json": "a socket", "zero.json": "symlink to /dev/zero",
            "x.json": "a folder", "huge.json": "over the 1 MiB limit",
            "latin.json": "not UTF-8", "nul.md": "NUL", "name-\ufffd.json": "not UTF-8"}


@pytest.fixture
def board(repo: Path):
    with open_board(init_repo(repo)) as b:
        yield b


def reasons(board: FileBoard) -> dict[str, str]:
    return {p.name.removesuffix(".error.txt"): p.read_text()
            for p in board.layout.rejected.glob("*.error.txt")}


def test_each_hostile_drop_is_rejected_alone_and_good_ones_go_through(
        board: FileBoard, tmp_path: Path) -> None:
    expected = hostile_inbox(board.layout.inbox, tmp_path)
    drop(board.layout.inbox, "good.json", b'{"title": "still works"}')
    started = time.monotonic()
    created = board.intake()
    assert time.monotonic() - started < 10
    assert [t.subject for t in created] == ["still works"]
    got = reasons(board)
    for name, why in expected.items():
        [match] = [r for n, r in got.items() if n.startswith(name)]
        assert why in match, (name, match)
        assert "\n" not in match.strip()
    assert len(board.rejected_files) == len(expected)
    assert [p.name for p in board.layout.inbox.iterdir()] == [".processing"]
    rejected = board.layout.rejected
    assert (rejected / "fifo.json").is_fifo() and (rejected / "zero.json").is_symlink()
    assert (rejected / "x.json" / "inner.json").exists()  # nothing the user wrote is lost
    assert (rejected / "huge.json").stat().st_size == 50 * 1024 * 1024
    assert all(len(p.name.encode()) < 255 for p in rejected.iterdir())


def test_bad_task_files_in_tasks_do_not_stop_the_board(board: FileBoard) -> None:
    board.add("a real task")
    os.mkfifo(board.layout.tasks / "task_005.json")
    (board.layout.tasks / "task_006.json").mkdir()
    drop(board.layout.tasks, "task_007.json",
         b'{"id": "task_007", "subject": "x", "metadata": {"a": ' + b"[" * 100_000
         + b"]" * 100_000 + b"}}")
    board.intake()
    assert [t.subject for t in board.list()] == ["a real task"]
    got = reasons(board)
    assert "FIFO" in got["task_005.json"] and "folder" in got["task_006.json"]
    assert "task_007.json" in got


def test_an_error_of_ours_for_one_file_rejects_that_file_only(
        board: FileBoard, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.board import intake, store

    real = intake.convert

    def validate(data, cls):  # type: ignore[no-untyped-def]
        if data.get("subject") == "trips a bug":
            raise RuntimeError("a bug in intake")
        return real(data, cls)

    monkeypatch.setattr(intake, "convert", validate)  # a task file's
    monkeypatch.setattr(store, "convert", validate)  # a dropped file's
    drop(board.layout.inbox, "a.json", b'{"title": "trips a bug"}')
    drop(board.layout.inbox, "b.json", b'{"title": "fine"}')
    assert [t.subject for t in board.intake()] == ["fine"]
    assert "RuntimeError: a bug in intake" in reasons(board)["a.json"]


def test_a_file_that_cannot_be_moved_is_left_with_one_warning(
        board: FileBoard, caplog: pytest.LogCaptureFixture) -> None:
    board.layout.rejected.rmdir()
    board.layout.rejected.write_text("not a folder")  # every rejection fails
    drop(board.layout.inbox, "bad.json", b"{")
    drop(board.layout.inbox, "good.json", b'{"title": "fine"}')
    with caplog.at_level(logging.WARNING):
        assert [t.subject for t in board.intake()] == ["fine"]
    [warning] = [r.getMessage() for r in caplog.records if "left" in r.getMessage()]
    assert "inbox/bad.json" in warning and "\n" not in warning
    assert (board.layout.inbox / "bad.json").read_text() == "{"  # put back, not lost


def test_list_says_what_it_rejected_and_the_settle_delay_holds_a_burst(repo: Path) -> None:
    layout = init_repo(repo)
    (layout.inbox / "bad.json").write_text("{ not json")  # fresh: still settling
    with team_cleanup(repo):
        res = cli(repo, "up", "--burst", "-n", "1", "--command", "true")
    assert res.returncode == 1, res.stdout + res.stderr  # not 0 before it was rejected
    assert (layout.rejected / "bad.json").exists()
    assert "1 file rejected: .tasks/rejected/bad.json — see bad.json.error.txt" in res.stderr
    drop(layout.inbox, "worse.json", b"[")
    res = cli(repo, "list")
    assert res.returncode == 0, res.stderr
    assert res.stderr.strip() == ("1 file rejected: .tasks/rejected/worse.json — see "
                                  "worse.json.error.txt")


def test_up_burst_and_list_with_a_hostile_inbox_and_sigterm_stops_it(
        repo: Path, tmp_path: Path) -> None:
    layout = init_repo(repo)
    hostile_inbox(layout.inbox, tmp_path)
    with open_board(layout) as board:
        slow = board.add("runs until stopped")
    with team_cleanup(repo):
        proc = start(repo, "--burst", "-n", "1", "--command", "sleep 120",
                     env=team_env(board_lease_seconds=30))
        wait_until(lambda: working_on(repo, slow.id), 60, "the slow task to start")
        res = cli(repo, "list", "--json")
        assert res.returncode == 0, res.stderr
        assert [t["id"] for t in json.loads(res.stdout)] == [slow.id]
        os.mkfifo(layout.inbox / "late.json")  # a FIFO arriving while it runs
        drop(layout.inbox, "late-good.json", b'{"title": "taken while running"}')
        wait_until(lambda: (layout.rejected / "late.json").exists()
                   and not (layout.inbox / "late-good.json").exists(), 30, "the late drops")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        stopped_in = time.monotonic() - sent
    assert stopped_in < 20, out
    assert "Traceback" not in out
    with open_board(Layout.at(repo)) as board:
        subjects = {t.subject: t.status for t in board.list()}
    assert subjects["taken while running"] is Status.PENDING  # the one teammate was busy


def test_a_broken_config_is_one_line_naming_the_file_and_line(repo: Path) -> None:
    init_repo(repo)
    (repo / "orchestrator.toml").write_text("[team]\nteammates = 2\nbackend = \n")
    res = subprocess.run([sys.executable, "-m", "orchestrator", "up", "--burst"], cwd=repo,
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    [line] = res.stderr.strip().splitlines()
    assert "orchestrator.toml" in line and "line 3" in line


def test_the_leads_housekeeping_steps_fail_alone(repo: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.config import Config
    from orchestrator.settings.live import LiveConfig
    from orchestrator.team.hooks import Hooks
    from orchestrator.team.lead import Lead

    layout = init_repo(repo)
    config = Config.load(repo)
    lead = Lead(layout, config)
    with open_board(layout, config.board, actor="lead") as board:
        lead.board, lead.live = board, LiveConfig(layout.root, config)
        lead.hooks = Hooks(layout, config.hooks, board)
        task = board.add("its lease runs out")
        board.claim("alice", lease_seconds=0.05)
        time.sleep(0.1)

        def boom() -> list[object]:
            raise RecursionError("maximum recursion depth exceeded")

        monkeypatch.setattr(board, "intake", boom)
        monkeypatch.setattr(lead, "route_mail", lambda: 1 / 0)
        lead.tick()
        assert board.get(task.id).status is Status.PENDING  # reaping ran all the same
        assert set(lead.faults) == {"intake", "reading the lead's mailbox"}
        assert "RecursionError" in lead.faults["intake"]
        lead.hooks.close()


def test_a_fifo_under_a_settings_files_name_is_refused_without_blocking(repo: Path) -> None:
    """Every settings file is opened without blocking: a FIFO named like one is one clear
    error (or one problem line), never a hang."""
    import threading

    from orchestrator import profiles
    from orchestrator.agent import permissions
    from orchestrator.config import Config
    from orchestrator.errors import ConfigError
    from orchestrator.mcp import config as mcp_config

    (repo / ".claude" / "agents").mkdir(parents=True)
    paths = [repo / n for n in ("orchestrator.toml", ".claude/settings.json", ".mcp.json",
                                ".claude/agents/helper.md")]
    for p in paths:
        os.mkfifo(p)

    def settings() -> str:
        with pytest.raises(ConfigError, match="not a regular file"):
            permissions._read_settings(paths[1])
        return "ok"

    def mcp() -> str:
        setup = mcp_config.McpSetup()
        assert mcp_config._read_object(paths[2], setup) is None
        return setup.problems[0]

    def toml() -> str:
        with pytest.raises(ConfigError, match=r"orchestrator\.toml"):
            Config.load(repo)
        (paths[0]).unlink()
        return "ok"

    def agents() -> str:
        return str(profiles.load_profiles(repo, Config.load(repo)).broken)

    for check in (settings, mcp, toml, agents):
        out: list[str] = []
        t = threading.Thread(target=lambda c=check, o=out: o.append(c()), daemon=True)
        t.start()
        t.join(10)
        assert not t.is_alive(), f"{check.__name__} blocked on a FIFO"
        assert (out and "not a regular file" in out[0]) or out == ["ok"], (check.__name__, out)


@pytest.mark.parametrize("fields", [
    {"priority": "high"}, {"priority": 2**80}, {"max_attempts": 0},
    {"budget": {"usd": 1e308 * 10}}, {"budget": {"usd": -1}}, {"todos": [{"content": ""}]},
    {"todos": "not a list"}, {"lease": {"owner": "x"}}, {"blocked_by": ["nope"]},
    {"subject": "two\u2028lines"}, {"usage": {"cost_usd": "lots"}}, {"status": "done"},
])
def test_wrong_types_in_a_task_file_never_reach_the_board(
        board: FileBoard, fields: dict[str, object]) -> None:
    """A task file written by hand is checked field by field: it is rejected (naming what
    is wrong), or repaired as a dropped file is (what a drop does not know goes to
    metadata); either way every task on the board has fields of the right types."""
    data = {"id": "task_003", "subject": "hand written", **fields}
    drop(board.layout.tasks, "task_003.json",
         json.dumps(data, allow_nan=True).replace("Infinity", "1e999").encode())
    board.add("a real task")
    board.intake()
    tasks = board.list()
    assert "a real task" in [t.subject for t in tasks]
    for t in tasks:
        assert decode(to_json(t), Task) == t
        assert isinstance(t.priority, int) and abs(t.priority) <= 10**9
        assert all(isinstance(x, Todo) for x in t.todos) and isinstance(t.usage, Usage)
        assert t.lease is None and t.status is Status.PENDING
    if len(tasks) == 1:  # rejected: the reason names the field
        key = next(iter(fields))
        assert key in reasons(board)["task_003.json"] or "line" in reasons(board)["task_003.json"]


# --- issue 29 item 11: hostile text and sizes stay one file's problem -----------------
SURROGATES = {
    "title.json": b'{"title": "\\ud800"}',
    "key.json": b'{"title": "ok", "\\udfff": 1}',
    "nested.json": b'{"title": "ok", "metadata": {"a": [{"b": "x\\udc80y"}]}}',
    "desc.json": b'{"subject": "ok", "description": "pair \\ud83d\\ude00 then \\ud83d"}',
    "blocks.json": b'{"title": "ok", "labels": ["\\ud800\\ud800"]}',
}


def test_an_unpaired_surrogate_rejects_that_drop_and_list_and_add_still_work(
        repo: Path) -> None:
    layout = init_repo(repo)
    for name, data in SURROGATES.items():
        drop(layout.inbox, name, data)
    drop(layout.inbox, "paired.json", b'{"title": "smile \\ud83d\\ude00"}')
    res = cli(repo, "list", "--json")
    assert res.returncode == 0, res.stderr
    assert [t["subject"] for t in json.loads(res.stdout)] == ["smile \U0001F600"]
    for name in SURROGATES:
        assert "surrogate" in (layout.rejected / f"{name}.error.txt").read_text(), name
        assert (layout.rejected / name).read_bytes() == SURROGATES[name]  # kept as written
    res = cli(repo, "add", "after the bad drops")
    assert res.returncode == 0, res.stderr
    res = cli(repo, "add", os.fsdecode(b"bad \xff byte"))  # argv's surrogateescape
    assert res.returncode != 0 and "Traceback" not in res.stderr
    [line] = res.stderr.strip().splitlines()
    assert "not Unicode" in line
    res = cli(repo, "list", "--json")
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)) == 2


@pytest.mark.parametrize("name,data", [
    # compact JSON that pretty-printing (one list item a line) makes ~4x larger
    ("list.json", b'{"title": "x", "a": [' + b"0," * 400_000 + b"0]}"),
    # a control character in Markdown is one byte in the drop, six (\u0001) in JSON
    ("ctrl.md", b"# ctrl\n" + b"\x01" * 900_000),
    # a tab or a quote is one byte in Markdown, two (\t, \") in JSON
    ("tabs.md", b"# tabs\n" + b'\t"' * 500_000),
])
def test_a_drop_under_the_size_limit_never_becomes_a_task_file_over_it(
        board: FileBoard, name: str, data: bytes) -> None:
    assert len(data) <= 1 << 20
    drop(board.layout.inbox, name, data)
    made = board.intake()
    with open_board(board.layout) as fresh:  # the next process's scan
        subjects = [t.subject for t in fresh.list()]
    assert [t.subject for t in made] == subjects  # nothing taken in vanishes
    if not made:
        assert "limit" in reasons(board)[name]
        assert (board.layout.rejected / name).read_bytes() == data
    for f in board.layout.tasks.glob("task_*.json"):
        assert f.stat().st_size <= 1 << 20


def test_a_task_never_grows_into_a_file_the_next_scan_rejects(board: FileBoard) -> None:
    from orchestrator.errors import InvalidInput

    task = board.add("grows", description="d" * (700 * 1024))
    with pytest.raises(InvalidInput, match="limit"):
        board.edit(task.id, actor="cli", description="d" * (1100 * 1024))
    with open_board(board.layout) as fresh:
        assert len(fresh.get(task.id).description) == 700 * 1024
