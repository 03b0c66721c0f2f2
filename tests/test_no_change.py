"""A run that changes nothing is a failure that says so, unless the task expects none; and
`merge` of a branch with nothing new says that instead of printing an old commit."""

from __future__ import annotations

from pathlib import Path

from orchestrator.model import Status
from tests.helpers import git
from tests.test_team_support import cli, tasks, team_env

AGENT = 'case "$ORCH_TASK_ID" in task_002) echo hi > hi.txt ;; *) echo "looked around" ;; esac'


def test_a_run_that_changes_nothing_fails_unless_none_is_expected(repo: Path) -> None:
    assert cli(repo, "add", "Should write something").returncode == 0
    assert cli(repo, "add", "Writes hi.txt").returncode == 0
    assert cli(repo, "add", "Only look", "--no-changes-expected").returncode == 0
    (repo / ".tasks" / "inbox" / "check.json").write_text(
        '{"title": "Check only (dropped)", "expect_changes": false}')
    env = team_env(board_max_attempts=1, team_retry_backoff=0)
    out = cli(repo, "up", "--burst", "-n", "2", "--command", AGENT, env=env)
    assert out.returncode == 1, out.stderr
    board = {t.id: t for t in tasks(repo)}
    assert board["task_001"].status is Status.FAILED
    assert "the agent changed nothing" in (board["task_001"].error or "")
    assert "changed nothing" in out.stderr  # on the console too
    assert board["task_002"].status is Status.REVIEW
    assert board["task_003"].status is Status.REVIEW and not board["task_003"].expect_changes
    assert board["task_004"].status is Status.REVIEW and not board["task_004"].expect_changes

    head = git(repo, "rev-parse", "HEAD")
    merged = cli(repo, "merge", "2")
    assert merged.returncode == 0 and merged.stdout.startswith("merged task_002")
    new_head = git(repo, "rev-parse", "HEAD")
    assert new_head != head and new_head[:12] in merged.stdout
    nothing = cli(repo, "merge", "3")
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stdout.startswith("task_003 had nothing to merge")
    assert "merged task_003" not in nothing.stdout
    assert git(repo, "rev-parse", "HEAD") == new_head
