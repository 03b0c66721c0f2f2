"""Review end to end (issue 8) with real teammates: `orchestrator up --burst`, then the CLI.

Two tasks edit the same file: review shows the overlap; the first merges; the
second refuses naming the file; `retry -m` and a new run (whose agent sees the
feedback and merges main into its branch) make it mergeable.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.board import init_repo, open_board
from orchestrator.model import Status
from tests.helpers import git
from tests.test_review import in_process
from tests.test_team_support import cli as up_cli
from tests.test_team_support import tasks, team_cleanup, team_env

# A first run writes its subject into shared.txt; a run that got review feedback
# merges main and resolves the conflict by keeping both lines, as an agent would.
AGENT = """
if printf '%s' "$ORCH_PROMPT" | grep -q 'Feedback from review'; then
  git merge -q --no-edit main || {
    printf 'first\\nsecond\\n' > shared.txt && git add shared.txt && git commit -q --no-edit; }
else
  echo "$ORCH_TASK_SUBJECT" > shared.txt
fi
"""


def test_overlap_merge_refuse_retry_and_rerun_make_it_mergeable(
        repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cli = in_process(capsys)
    with open_board(init_repo(repo)) as board:
        first = board.add("first")
        second = board.add("second")
    env = team_env()
    with team_cleanup(repo):
        res = up_cli(repo, "up", "--burst", "-n", "2", "--command", AGENT, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [t.status for t in tasks(repo)] == [Status.REVIEW, Status.REVIEW]

    rows = {r["id"]: r for r in json.loads(cli(repo, "review", "--json").stdout)}
    assert rows[first.id]["overlaps"] == [
        {"task": second.id, "status": "review", "files": ["shared.txt"]}]
    assert rows[second.id]["overlaps"][0]["files"] == ["shared.txt"]

    res = cli(repo, "merge", first.id)
    assert res.returncode == 0, res.stderr
    assert (repo / "shared.txt").read_text() == "first\n"
    head = git(repo, "rev-parse", "HEAD")

    res = cli(repo, "merge", second.id)
    assert res.returncode == 1
    assert "would conflict in: shared.txt" in res.stderr
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "status", "--porcelain") == ""

    res = cli(repo, "retry", second.id, "-m", "main changed shared.txt: merge it, keep both")
    assert res.returncode == 0, res.stderr
    with team_cleanup(repo):
        res = up_cli(repo, "up", "--burst", "-n", "1", "--command", AGENT, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    again = {t.id: t for t in tasks(repo)}[second.id]
    assert again.status is Status.REVIEW and again.branch == rows[second.id]["branch"]

    diff = cli(repo, "diff", second.id).stdout  # only its own change, against main
    assert "+second" in diff and "-first" not in diff
    res = cli(repo, "merge", second.id, "--squash")
    assert res.returncode == 0, res.stderr
    assert (repo / "shared.txt").read_text() == "first\nsecond\n"
    assert [t.status for t in tasks(repo)] == [Status.MERGED, Status.MERGED]
    assert cli(repo, "review").stdout.strip() == "nothing to review"
