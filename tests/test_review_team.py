"""Review end to end (issue 8) with real teammates: `orchestrator up --burst`, then the CLI.

Two tasks edit the same file: review shows the overlap; the first merges; the
second refuses naming the file; `retry -m` and a new run (whose agent sees the
feedback and merges main into its branch) make it mergeable. Teammates fill the review
cache as their tasks reach review, so the first ``review`` after a run asks git little.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from orchestrator.board import init_repo, open_board
from orchestrator.branches.cache import FILE
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.review import review_rows
from tests.helpers import git
from tests.test_review import in_process
from tests.test_review_stack import _same, git_calls
from tests.test_team_support import cli as up_cli
from tests.test_team_support import start, tasks, team_cleanup, team_env, wait_until, working_on

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


WRITE_OWN_FILE = 'echo "$ORCH_TASK_ID" > "$ORCH_TASK_ID.txt"; echo "$ORCH_TASK_ID" > shared.txt'


def cache_file(repo: Path) -> Path:
    return Path(git(repo, "rev-parse", "--absolute-git-dir")) / "orchestrator" / FILE


def cached(repo: Path) -> dict[str, set[tuple[str, ...]]]:
    """Every pair the review cache holds answers for, by table."""
    db = sqlite3.connect(cache_file(repo))
    try:
        return {table: {tuple(row) for row in db.execute(f"SELECT {cols} FROM {table}")}
                for table, cols in (("forks", "tip, base, fork"), ("facts", "fork, tip"),
                                    ("merges", "target, tip, data"))}
    finally:
        db.close()


def burst(repo: Path, n: int) -> None:
    with open_board(init_repo(repo)) as board:
        for i in range(n):
            board.add(f"write {i}")
    with team_cleanup(repo):
        res = up_cli(repo, "up", "--burst", "-n", "2", "--command", WRITE_OWN_FILE)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [t.status for t in tasks(repo)] == [Status.REVIEW] * n


def test_the_team_fills_the_review_cache_as_its_tasks_reach_review(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a real run the cache holds each reviewed branch's fork, facts and merge
    answer, so the first `review` asks git a few times, not five times per branch, and
    shows what it shows with a cold cache."""
    burst(repo, 4)
    main = git(repo, "rev-parse", "main")
    tips = {git(repo, "rev-parse", f"refs/heads/{t.branch}") for t in tasks(repo)}
    kept = cached(repo)
    assert {(tip, main, main) for tip in tips} <= kept["forks"]
    assert {(main, tip) for tip in tips} <= kept["facts"]
    assert {(main, tip, "[]") for tip in tips} <= kept["merges"]

    layout, config = Layout.at(repo), Config.load(repo)
    calls = git_calls(tmp_path, monkeypatch)
    first = review_rows(layout, config)
    assert len(calls.read_text().split()) <= 4, calls.read_text()
    assert all(len(r["overlaps"]) == 3 for r in first)  # each changes shared.txt
    for path in cache_file(repo).parent.glob(f"{FILE}*"):
        path.unlink()
    assert [_same(r) for r in review_rows(layout, config)] == [_same(r) for r in first]


def test_the_fill_runs_at_the_lowest_cpu_priority(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The git processes of the fill run at nice 19, beside the teammate's own at 0 (its
    worktree, its commit): the fill takes only what the team's work leaves of the CPU."""
    shim, calls = tmp_path / "nice-bin", tmp_path / "nice-calls"
    shim.mkdir()
    real = shutil.which("git")
    (shim / "git").write_text(  # field 19 of /proc/PID/stat: the process's nice value
        f'#!/bin/sh\necho "$1 $(cut -d" " -f19 /proc/$$/stat)" >> {calls}\n'
        f'exec {real} "$@"\n')
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    burst(repo, 2)
    seen: dict[str, set[str]] = {}
    for line in calls.read_text().splitlines():
        command, nice = line.split()
        seen.setdefault(command, set()).add(nice)
    assert seen["merge-tree"] == {"19"}, seen  # asked only by the fill
    assert seen["worktree"] == seen["add"] == {"0"}, seen


@pytest.mark.parametrize("broken", ["no database", "a folder"])
def test_a_broken_review_cache_fails_no_task(repo: Path, broken: str) -> None:
    """A cache file that is no database is made afresh and filled; one that cannot be
    used at all is logged, and the tasks reach review all the same."""
    path = cache_file(repo)
    path.parent.mkdir(parents=True)
    if broken == "no database":
        path.write_bytes(b"overwritten by something else\n" * 500)
    else:
        path.mkdir()
    burst(repo, 2)
    log = (Layout.at(repo).run / "daemon.log").read_text()
    if broken == "no database":
        assert len(cached(repo)["facts"]) == 2 and "review cache not filled" not in log
    else:
        assert log.count("review cache not filled") == 2, log
        assert all(r["merge"]["clean"] for r in review_rows(Layout.at(repo), Config.load(repo)))


def test_a_task_is_kept_for_review_while_the_next_ones_agent_runs(repo: Path) -> None:
    """The fill waits for room: it runs once the next task's agent process has started
    (not during that task's claim and worktree, nor only when the team stops)."""
    with open_board(init_repo(repo)) as board:
        first, second = board.add("one"), board.add("two")
    with team_cleanup(repo):
        proc = start(repo, "-n", "1", "--command", f"sleep 4; {WRITE_OWN_FILE}")
        wait_until(lambda: working_on(repo, second.id), 30, "the second task's agent")
        tip = git(repo, "rev-parse", f"refs/heads/{tasks(repo)[0].branch}")
        wait_until(lambda: cache_file(repo).exists() and any(
            t == tip for t, _, _ in cached(repo)["forks"]), 3, "the first task's answers")
        assert next(t for t in tasks(repo) if t.id == second.id).status == Status.IN_PROGRESS
        proc.terminate()
        proc.communicate(timeout=60)
    assert first.id == tasks(repo)[0].id
