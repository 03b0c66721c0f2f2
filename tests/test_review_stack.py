"""A merge brings exactly what was reviewed (issue 30, item 3): stacked tasks, the Review
page of a merged task, discarding reviewed work, and land pushing on a shared remote.

Kept branches are made as a teammate makes them (`tests.test_review.keep`: real board,
real worktrees, real git); the CLI runs in-process.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from orchestrator import waits
from orchestrator.board import open_board
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.review import review_rows
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


def test_review_asks_git_once_per_pair_of_commits(repo: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The review table of many branches runs git a few times once it has seen them
    (issue 30, item 4); what it answers is the same; a moved target is asked again."""
    tasks = [keep(repo, f"task {i}", {f"f{i}.txt": f"{i}\n", "shared.txt": f"{i}\n"})
             for i in range(12)]
    layout, config = Layout.at(repo), Config.load(repo)
    first = review_rows(layout, config)
    calls = git_calls(tmp_path, monkeypatch)
    again = review_rows(layout, config)
    assert [_same(r) for r in again] == [_same(r) for r in first]
    assert len(calls.read_text().split()) <= 4, calls.read_text()  # not 5 per branch
    assert {o["task"] for o in again[0]["overlaps"]} == {t.id for t in tasks[1:]}

    # main moves on with a file no branch touches: no branch is asked again
    (repo / "elsewhere.txt").write_text("unrelated\n")
    git(repo, "add", "elsewhere.txt")
    git(repo, "commit", "-q", "-m", "unrelated")
    calls.write_text("")
    aside = review_rows(layout, config)
    assert all(r["merge"]["clean"] for r in aside)
    assert [r["overlaps"] for r in aside] == [r["overlaps"] for r in first]
    assert len(calls.read_text().split()) <= 10, calls.read_text()

    (repo / "shared.txt").write_text("main moved\n")
    git(repo, "add", "shared.txt")
    git(repo, "commit", "-q", "-m", "main moves on")
    calls.write_text("")
    moved = review_rows(layout, config)
    assert all(r["merge"]["conflicts"] == ["shared.txt"] for r in moved)
    assert calls.read_text().split().count("merge-tree") == len(tasks)


def git_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """From now on every git this test's process runs is the real one behind a shim that
    writes its subcommand to the file returned, one a line."""
    shim = tmp_path / "bin"
    shim.mkdir()
    calls = tmp_path / "calls"
    real = shutil.which("git")
    (shim / "git").write_text(f'#!/bin/sh\necho "$1" >> {calls}\nexec {real} "$@"\n')
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    return calls


def _same(row: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in row.items() if k != "age_seconds"}


def test_a_review_cache_that_is_no_database_is_made_afresh(repo: Path) -> None:
    keep(repo, "one", {"x.txt": "x\n"})
    layout, config = Layout.at(repo), Config.load(repo)
    first = review_rows(layout, config)
    path = Path(git(repo, "rev-parse", "--absolute-git-dir")) / "orchestrator" / "review.sqlite"
    path.write_bytes(b"not a database at all" * 100)
    for wal in path.parent.glob("review.sqlite-*"):
        wal.unlink()
    assert [_same(r) for r in review_rows(layout, config)] == [_same(r) for r in first]
    assert path.read_bytes().startswith(b"SQLite format 3")
