"""The same end-to-end run with git worktrees and with hook-made plain directory copies:
``orchestrator up --burst -n 2 --backend command``, tasks reach review, then discard
and gc remove the workspaces without losing the work."""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

import pytest

from orchestrator.layout import Layout
from orchestrator.model import Status
from tests.test_team_support import add_tasks, cli, events, tasks, team_cleanup, team_env
from tests.test_worktree_hooks import CREATE, REMOVE

WRITE_FILE = 'echo "$ORCH_TASK_SUBJECT" > "$ORCH_TASK_ID.txt"'


def configure(repo: Path, tmp_path: Path, isolation: str) -> None:
    if isolation == "git":
        return
    (tmp_path / "create.py").write_text(CREATE)
    (tmp_path / "remove.py").write_text(REMOVE)
    py = sys.executable
    (repo / "orchestrator.toml").write_text(
        "[worktree]\n"
        f'create_command = "{py} {tmp_path / "create.py"} {tmp_path / "created.log"}"\n'
        f'remove_command = "{py} {tmp_path / "remove.py"} {tmp_path / "removed.log"}"\n')


@pytest.mark.parametrize("isolation", ["git", "hooks"])
def test_burst_to_review_then_discard_and_gc(repo: Path, tmp_path: Path, isolation: str) -> None:
    configure(repo, tmp_path, isolation)
    add_tasks(repo, 3)
    with team_cleanup(repo):
        res = cli(repo, "up", "--burst", "-n", "2", "--backend", "command", "--command",
                  WRITE_FILE, env=team_env(board_lease_seconds=10))
    assert res.returncode == 0, res.stdout + res.stderr
    done = tasks(repo)
    assert [t.status for t in done] == [Status.REVIEW] * 3
    for t in done:
        assert t.worktree and Path(t.worktree).parent == Layout.at(repo).worktree_root
        assert (Path(t.worktree) / f"{t.id}.txt").read_text().strip() == t.subject
        story = [e["event"] for e in events(repo) if e.get("task") == t.id]
        wanted = ["task_claimed", "worktree_created", "task_completed", "worktree_kept"]
        assert [e for e in story if e in wanted] == wanted, f"{t.id}: {story}"
    kept = {e["task"]: e for e in events(repo, "worktree_kept")}
    if isolation == "git":
        assert len(events(repo, "commit")) == 3  # the agent's file, committed on its branch
    else:
        assert not events(repo, "commit") and (tmp_path / "created.log").exists()
        for t in done:  # the snapshot stands in for the commit
            with tarfile.open(kept[t.id]["snapshot"]) as tar:
                member = tar.extractfile(f"{t.id}/{t.id}.txt")
                assert member is not None and member.read().decode().strip() == t.subject
    first, second, third = done
    # nothing is lost: a discard without --force is refused while the work is only there
    (Path(first.worktree or "") / "late.txt").write_text("edited after review")
    res = cli(repo, "discard", first.id)
    assert res.returncode == 1 and "not removing" in res.stderr, res.stderr
    assert res.stderr.count("\n") == 1
    res = cli(repo, "discard", first.id, "--force")
    assert res.returncode == 0, res.stderr
    assert not Path(first.worktree or "").exists()
    [removed] = [e for e in events(repo, "worktree_removed") if e["task"] == first.id]
    assert removed["snapshot"] and removed["forced"] is True
    # cancelled tasks: gc removes the workspace when nothing would be lost, and says so
    for t in (second, third):
        assert cli(repo, "cancel", t.id).returncode == 0
    res = cli(repo, "gc")
    assert res.returncode == 0, res.stderr
    if isolation == "git":  # the branches hold unmerged commits: kept, with the reason
        assert res.stdout.count("skipped") == 2 and "not reachable" in res.stdout
        assert Path(second.worktree or "").exists()
    else:  # the snapshots hold the work: removed, with what it freed
        assert res.stdout.count("removed") == 2 and "freed" in res.stdout, res.stdout
        assert not Path(second.worktree or "").exists()
        assert not Path(third.worktree or "").exists()
        assert len((tmp_path / "removed.log").read_text().splitlines()) == 3
    listing = cli(repo, "worktrees")
    assert listing.returncode == 0 and "Traceback" not in listing.stderr
