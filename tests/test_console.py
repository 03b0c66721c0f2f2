"""What the foreground console says: waiting on an empty board, how to stop at once; and
tables that are never wrapped when piped."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from orchestrator.board import open_board
from orchestrator.layout import Layout
from tests.test_team_support import team_cleanup, team_env


def test_an_empty_board_says_it_waits_and_ctrl_c_says_how_to_stop_now(repo: Path) -> None:
    with team_cleanup(repo):
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "up", "-n", "1",
                                 "--command", "true"], cwd=repo, env=team_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if "waiting for tasks" in line:
                break
        assert "orchestrator add" in seen[-1]
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert "Ctrl-C again to stop now" in out
    assert proc.returncode == 0


def test_piped_tables_are_not_wrapped(repo: Path) -> None:
    subject = " ".join(f"word{i}" for i in range(60))
    with open_board(Layout.at(repo)) as board:
        board.add(subject)
    out = subprocess.run([sys.executable, "-m", "orchestrator", "list"], cwd=repo,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    [row] = [line for line in out.splitlines() if line.startswith("task_001")]
    assert subject in row
    assert all(line == line.rstrip() for line in out.splitlines())
