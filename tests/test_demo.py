"""``orchestrator demo``: the real CLI, a real team of scripted teammates, offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from orchestrator.board import open_board
from orchestrator.layout import Layout
from tests.helpers import git


def orchestrator(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True,
                          text=True, timeout=110, stdin=subprocess.DEVNULL, check=False)


def test_demo_runs_four_tasks_to_review_with_real_edits(tmp_path: Path) -> None:
    where = tmp_path / "demo"
    out = orchestrator("demo", "--dir", str(where), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["dir"] == str(where.resolve()) and report["exit_code"] == 0
    rows = {r["id"]: r for r in report["tasks"]}
    assert [r["status"] for r in rows.values()] == ["review"] * 4
    assert all(r["checks"] == "passed" for r in rows.values())
    with open_board(Layout.at(where)) as board:
        first, second = board.get("task_001"), board.get("task_002")
    assert second.blocked_by == ["task_001"]
    assert second.base_commit == git(where, "rev-parse", first.branch or "")  # stacked work
    calc = git(where, "show", f"{second.branch}:calc.py")
    assert "def multiply" in calc and "def divide" in calc and "ZeroDivisionError" in calc
    assert "# Changelog" in git(where, "show", "task/task_003-start-a-changelog:CHANGELOG.md")
    assert "def multiply" not in (where / "calc.py").read_text()  # main checkout untouched
    changed = git(where, "diff", "--name-only", f"main...{first.branch}").split()
    assert sorted(changed) == ["calc.py", "test_calc.py"]  # no bytecode from the checks
    assert git(where, "status", "--porcelain") == ""
    log = (where / ".tasks" / "logs" / "task_001.jsonl").read_text()
    assert '"kind": "tool_call"' in log and '"name": "bash"' in log


def test_demo_refuses_a_folder_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    out = orchestrator("demo", "--dir", str(tmp_path))
    assert out.returncode == 1
    assert out.stderr == f"error: {tmp_path} is not empty; give --dir a new or empty folder\n"
    assert (tmp_path / "keep.txt").read_text() == "mine"
