"""`orchestrator worktrees` and `orchestrator gc`, run as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import Result
from typer.testing import CliRunner

from orchestrator.board import init_repo, open_board
from orchestrator.cli import load_app
from orchestrator.config import WorktreeConfig
from orchestrator.model import Status
from orchestrator.worktree import WorktreeManager, binding
from tests.helpers import git


def cli(repo: Path, *args: str) -> Result:
    """In-process, as the installed command runs it (error mapping is tested below)."""
    return CliRunner().invoke(load_app(), [*args, "--repo", str(repo)], catch_exceptions=False)


def cli_process(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd,
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=60)


def populate(repo: Path) -> dict[str, str]:
    """A merged task, a cancelled one with uncommitted work, one in review, and an orphan."""
    layout = init_repo(repo)
    ids = {}
    with open_board(layout) as board:
        m = WorktreeManager(layout, WorktreeConfig(), board)
        for name in ("merged", "cancelled", "review"):
            task = board.add(f"The {name} one")
            claimed = board.claim("alice", task_id=task.id)
            assert claimed is not None and claimed.lease is not None
            ws = m.create(claimed)
            board.update(task.id, claimed.lease.token, **binding(ws))
            (ws.path / f"{name}.txt").write_text(name)
            if name != "cancelled":
                git(ws.path, "add", "-A")
                git(ws.path, "commit", "-qm", name)
            board.complete(task.id, claimed.lease.token)
            ids[name] = task.id
        git(repo, "merge", "-q", "--no-ff", "-m", "merge", board.get(ids["merged"]).branch or "")
        board.set_status(ids["merged"], Status.MERGED, actor="lead")
        board.cancel(ids["cancelled"])
    git(repo, "worktree", "add", "-q", "-b", "stray", str(layout.worktree_root / "stray"))
    return ids


def test_worktrees_lists_every_task_worktree_and_orphans(repo: Path) -> None:
    ids = populate(repo)
    out = cli(repo, "worktrees", "--json")
    assert out.exit_code == 0, out.output
    rows = {r["task"]: r for r in json.loads(out.stdout)}
    assert set(rows) == {*ids.values(), None}
    assert rows[ids["cancelled"]]["dirty"] is True and rows[ids["cancelled"]]["changes"] == 1
    assert rows[ids["review"]]["dirty"] is False and rows[ids["review"]]["ahead"] == 1
    assert rows[ids["merged"]]["ahead"] == 0 and rows[ids["merged"]]["disk_bytes"] > 0
    assert rows[None]["status"] == "orphan" and rows[None]["branch"] == "stray"

    text = cli(repo, "worktrees").stdout
    assert text.splitlines()[0].split() == ["TASK", "STATUS", "BRANCH", "STATE", "AHEAD",
                                            "DISK", "PATH"]
    review_line = next(line for line in text.splitlines() if line.startswith(ids["review"]))
    assert review_line.split()[1:4] == ["review", f"task/{ids['review']}-the-review-one",
                                        "clean"]
    assert "orphan (no task with this id); left untouched" in text

    # a folder name cannot drive the terminal: its controls are written out
    (repo / ".worktrees" / "evil\x1b[2J\u202etxt.exe").mkdir()
    text = cli(repo, "worktrees").stdout
    assert "\x1b" not in text and "\u202e" not in text
    assert "evil\\x1b[2J\\u202etxt.exe" in text


def test_gc_dry_run_then_gc(repo: Path) -> None:
    ids = populate(repo)
    dry = cli(repo, "gc", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert f"would remove {ids['merged']} (merged)" in dry.stdout
    assert f"skipped {ids['cancelled']} (cancelled): 1 uncommitted or untracked change(s): " \
           "cancelled.txt" in dry.stdout
    assert ids["review"] not in dry.stdout
    assert (repo / ".worktrees" / ids["merged"]).exists()

    done = cli(repo, "gc", "--json")
    report = json.loads(done.stdout)
    assert [r["task"] for r in report["removed"]] == [ids["merged"]]
    assert [r["task"] for r in report["skipped"]] == [ids["cancelled"]]
    assert not (repo / ".worktrees" / ids["merged"]).exists()
    assert (repo / ".worktrees" / "stray").exists()  # orphans are never touched
    assert cli(repo, "gc").stdout.startswith(f"skipped {ids['cancelled']}")


def test_bad_configuration_is_one_line(repo: Path, tmp_path: Path) -> None:
    out = cli_process(repo, "worktrees", env={"ORCH_WORKTREE_BRANCH_PREFIX": "../escape/"})
    assert out.returncode == 1
    assert out.stderr.startswith("error: branch prefix") and "Traceback" not in out.stderr
    outside = cli_process(tmp_path, "gc", env={})
    assert outside.returncode == 1 and outside.stderr.startswith("error: not inside a git")
