"""`orchestrator board --watch` (issue 8): columns, teammates, redrawn from the change feed."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from orchestrator.board import init_repo, open_board
from orchestrator.board.mailboxes import LEAD, Mailbox
from orchestrator.board.teamstatus import FileTeamStatus
from orchestrator.cli.table import Piped
from orchestrator.cli.watch import column_of, frame, watch_board
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.team import status
from tests.test_team_support import wait_until


def fill_board(layout: Layout) -> dict[str, str]:
    """One task in every column (and a cancelled one), as the board's own calls make them."""
    ids: dict[str, str] = {}
    with open_board(layout) as board:
        for name in ("merged", "failed", "review", "waiting", "running"):
            task = board.add(f"a {name} task")
            claimed = board.claim("alice" if name == "running" else "bob", task_id=task.id)
            assert claimed is not None and claimed.lease is not None
            token = claimed.lease.token
            if name in ("merged", "review"):
                board.complete(task.id, token)
            if name == "merged":
                board.set_status(task.id, Status.MERGED, actor="test")
            if name == "failed":
                board.fail(task.id, token, "the tests broke\nmore detail", retry=False)
            if name == "waiting":
                board.update(task.id, token, waiting_for="req42")
            ids[name] = task.id
        ids["pending"] = board.add("a pending task", blocked_by=[ids["failed"]]).id
        ids["cancelled"] = board.cancel(board.add("a cancelled task").id).id
    return ids


def test_a_frame_has_every_column_and_the_teammates(repo: Path) -> None:
    layout = init_repo(repo)
    ids = fill_board(layout)
    me = os.getpid()  # a live pid, so the team shows as running
    status.write_json(status.daemon_file(layout), {"pid": me, "teammates": ["alice", "bob"]})
    FileTeamStatus(layout).publish("alice", "working", pid=me, task=ids["running"])
    FileTeamStatus(layout).publish("bob", "idle", pid=me)
    Mailbox(layout, LEAD).send("bob", "Bash(rm -rf build)", kind="permission_request",
                               request_id="req42")
    with open_board(layout) as board:
        expected = {"pending": "pending", "running": "in progress",
                    "waiting": "waiting for input", "review": "review", "merged": "merged",
                    "failed": "failed", "cancelled": None}
        assert {k: column_of(board.get(v)) for k, v in ids.items()} == expected
        text = "\n".join(frame(layout, board, Piped(200)))
    header = next(line for line in text.splitlines() if "pending (1)" in line)
    for col in ("pending (1)", "in progress (1)", "waiting for input (1)", "review (1)",
                "merged (1)", "failed (1)"):
        assert col in header, col
    row = next(line for line in text.splitlines() if ids["pending"] in line)
    # each task sits under its own column heading
    for name, col in expected.items():
        if col is not None:
            assert abs(row.index(ids[name]) - header.index(col)) < 8, (name, text)
    assert ids["cancelled"] not in text and "1 discarded or cancelled not shown" in text
    assert "awaits permission" in text and "@alice" in text and "the tests broke" in text
    assert f"after {ids['failed']}" in text
    assert "bob asks: Bash(rm -rf build)  (orchestrator approve|deny req42)" in text
    assert f"team: running, pid {me}" in text
    alice = next(line for line in text.splitlines() if line.strip().startswith("alice"))
    assert "working" in alice and ids["running"] in alice
    assert "idle" in next(line for line in text.splitlines() if line.strip().startswith("bob"))


def test_watch_redraws_when_the_board_changes(repo: Path) -> None:
    layout = init_repo(repo)
    out = io.StringIO()
    drawn: list[int] = []
    watcher = threading.Thread(target=lambda: drawn.append(
        watch_board(layout, Config.load(repo), frames=2, console=Piped(160), out=out)))
    watcher.start()
    try:
        wait_until(lambda: "pending (0)" in out.getvalue(), 30, "the first frame")
        with open_board(layout) as board:
            task = board.add("appears live")
        wait_until(lambda: "pending (1)" in out.getvalue(), 30, "the second frame")
    finally:
        watcher.join(30)
    assert drawn == [2]
    first, second = out.getvalue().split("pending (1)")
    assert task.id not in first and task.id in second


def test_board_watch_cli_draws_and_ends_on_ctrl_c(repo: Path) -> None:
    init_repo(repo)
    env = dict(os.environ, COLUMNS="160")
    res = subprocess.run([sys.executable, "-m", "orchestrator", "board", "--watch",
                          "--frames", "1"], cwd=repo, capture_output=True, text=True,
                         timeout=60, check=False, env=env)
    assert res.returncode == 0, res.stderr
    assert "waiting for input (0)" in res.stdout and "team: not running" in res.stdout
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "board", "--watch"],
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_reaches)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("team:"):
                break
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert "Traceback" not in (proc.stderr.read() if proc.stderr else "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()


def _ctrl_c_reaches() -> None:
    """As from a terminal: a suite started in the background (``cmd &``) passes SIGINT on
    ignored, and an ignored SIGINT never becomes Ctrl-C in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_a_subject_cannot_drive_the_terminal(repo: Path) -> None:
    """The frame goes through the one table renderer, whose cells are written out plain:
    an agent's or a dropped file's escape codes are shown, never sent to the terminal."""
    layout = init_repo(repo)
    with open_board(layout) as board:
        board.add("ok\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J")
    res = subprocess.run([sys.executable, "-m", "orchestrator", "board", "--watch",
                          "--frames", "1"], cwd=repo, capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout and "ok\\x1b]52;c;" in res.stdout
