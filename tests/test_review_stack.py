"""A merge brings exactly what was reviewed (issue 30, item 3): stacked tasks, the Review
page of a merged task, discarding reviewed work, and land pushing on a shared remote.

Kept branches are made as a teammate makes them (`tests.test_review.keep`: real board,
real worktrees, real git); the CLI runs in-process.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from orchestrator import waits
from orchestrator.board import open_board
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.ui import pages
from tests.helpers import git
from tests.test_review import Cli, get, in_process, keep


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return in_process(capsys)


def test_a_stacked_task_merges_only_with_its_blockers(repo: Path, cli: Cli) -> None:
    first = keep(repo, "first", {"one.txt": "1\n"})
    second = keep(repo, "second", {"two.txt": "2\n"}, blocked_by=[first.id])
    assert git(repo, "show", f"{second.branch}:one.txt") == "1"  # it holds first's work
    head = git(repo, "rev-parse", "HEAD")

    res = cli(repo, "merge", second.id)
    assert res.returncode == 1
    [line] = res.stderr.strip().splitlines()
    assert f"{second.id} is stacked on {first.id} (review), not merged" in line, line
    assert "--with-blockers" in line
    assert git(repo, "rev-parse", "HEAD") == head and get(repo, second.id).status is Status.REVIEW

    res = cli(repo, "diff", second.id)
    assert "two.txt" in res.stdout and "one.txt" not in res.stdout
    assert f"note: {second.id} is stacked on {first.id} (review)" in res.stderr
    rows = {r["id"]: r for r in json.loads(cli(repo, "review", "--json").stdout)}
    assert rows[second.id]["stacked_on"] == [{"task": first.id, "status": "review"}]
    assert rows[first.id]["stacked_on"] == []
    assert f"! {second.id} is stacked on {first.id} (review)" in cli(repo, "review").stdout

    res = cli(repo, "merge", second.id, "--with-blockers")
    assert res.returncode == 0, res.stderr
    assert f"merged its blockers first: {first.id}" in res.stdout
    assert get(repo, first.id).status is get(repo, second.id).status is Status.MERGED
    assert git(repo, "show", "HEAD:one.txt") == "1" and git(repo, "show", "HEAD:two.txt") == "2"
    log = git(repo, "log", "--format=%s", f"{head}..HEAD")
    assert log.index(second.branch or "?") < log.index(first.branch or "?")  # first went first


def test_a_stacked_task_on_a_discarded_blocker_is_refused(repo: Path, cli: Cli) -> None:
    first = keep(repo, "first", {"one.txt": "1\n"})
    second = keep(repo, "second", {"two.txt": "2\n"}, blocked_by=[first.id])
    assert cli(repo, "discard", first.id).returncode == 0
    res = cli(repo, "merge", second.id, "--with-blockers")
    assert res.returncode == 1 and f"{first.id}, which is discarded" in res.stderr


def test_a_merged_tasks_review_page_shows_what_was_merged(repo: Path, cli: Cli) -> None:
    task = keep(repo, "merge me", {"m.txt": "merged\n"})
    assert cli(repo, "merge", task.id).returncode == 0
    layout = Layout.at(repo)
    with open_board(layout) as board:
        ctx = pages.Context(layout, Config.load(repo), board, threading.RLock())
        view = pages.review_view(ctx, task.id)
    assert view["error"] is None, view["error"]
    assert [f.path for f in view["diff"].files] == ["m.txt"]
    assert view["merged"]["into"] == git(repo, "branch", "--show-current")


def test_discarding_reviewed_work_keeps_it_under_the_snapshot_ref(repo: Path, cli: Cli) -> None:
    task = keep(repo, "not wanted", {"n.txt": "no\n"})
    tip = git(repo, "rev-parse", task.branch or "?")
    res = cli(repo, "discard", task.id)
    assert res.returncode == 0, res.stderr
    ref = f"refs/orchestrator/snapshots/{task.id}"
    assert f"its work is kept under {ref}" in res.stdout
    assert git(repo, "show", f"{ref}:n.txt") == "no"
    assert git(repo, "merge-base", "--is-ancestor", tip, ref) == ""
    assert get(repo, task.id).status is Status.DISCARDED

    dirty = keep(repo, "half done", {"h.txt": "half\n"})
    (repo / ".worktrees" / dirty.id / "loose.txt").write_text("not committed\n")
    res = cli(repo, "discard", dirty.id)
    assert res.returncode == 1 and "loose.txt" in res.stderr and "--force" in res.stderr
    assert get(repo, dirty.id).status is Status.REVIEW
    assert cli(repo, "discard", dirty.id, "--force").returncode == 0


def test_resume_of_a_push_rejected_wait_is_refused_naming_land(repo: Path, cli: Cli) -> None:
    task = keep(repo, "pushed", {"p.txt": "p\n"})
    with open_board(Layout.at(repo)) as board:
        board.edit(task.id, actor="land", wait=waits.PushRejected(reason="pre-receive hook"))
    res = cli(repo, "show", task.id)
    assert f"orchestrator land {task.id} | orchestrator retry {task.id} -m MSG" in res.stdout
