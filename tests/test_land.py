"""The merge queue (issue 20, part 3): `orchestrator land`.

End to end with real teammates (command backend, `up --burst`), then `land` as a real
process: three tasks that each pass their checks alone, two of which break the checks
together. Then the pieces: order, stacked tasks rebased onto a changed blocker, batching
with bisection, --no-retry, and `land` killed with SIGKILL in the middle of a verify.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.board import open_board
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from orchestrator.review.landing import land_order, land_tasks
from orchestrator.sandbox import task_sandbox
from tests.helpers import git, make_repo
from tests.test_review import Cli, get, in_process, keep, lc
from tests.test_team_support import cli as up_cli
from tests.test_team_support import events, tasks, team_cleanup, team_env

# The project's checks: a.txt and c.txt each fine, together they break the build.
CHECK = """#!/bin/sh
if [ -e a.txt ] && [ -e c.txt ]; then
  echo "FAIL: a.txt and c.txt cannot live together"; exit 1
fi
echo "all good"
"""
AGENT = 'echo "$ORCH_TASK_SUBJECT" > "$ORCH_TASK_SUBJECT.txt"'


def checked_repo(path: Path) -> Path:
    return make_repo(path, {"README.md": "# sample\n", "check.sh": CHECK,
                            "orchestrator.toml": '[team]\nverify = "sh check.sh"\n'})


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return in_process(capsys)


def land(repo: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", "land", *args], cwd=repo,
                          capture_output=True, text=True, timeout=timeout, check=False)


def first_parents(repo: Path) -> list[str]:
    return git(repo, "rev-list", "--first-parent", "main").split()


def checks_pass_at(repo: Path, commit: str, tmp: Path) -> bool:
    out = tmp / f"at-{commit[:12]}"
    git(repo, "worktree", "add", "-q", "--detach", str(out), commit)
    try:
        return subprocess.run(["sh", "check.sh"], cwd=out, capture_output=True,
                              check=False).returncode == 0
    finally:
        git(repo, "worktree", "remove", "--force", str(out))


@pytest.mark.timeout(300)  # two team runs: slow on a loaded machine
def test_land_all_reviewed_lands_what_fits_and_rejects_the_breaker(tmp_path: Path) -> None:
    repo = checked_repo(tmp_path / "repo")
    with open_board(Layout.at(repo).ensure()) as board:
        a, b, c = (board.add(s) for s in ("a", "b", "c"))
    with team_cleanup(repo):
        res = up_cli(repo, "up", "--burst", "-n", "2", "--command", AGENT, env=team_env())
    assert res.returncode == 0, res.stdout + res.stderr
    assert [t.status for t in tasks(repo)] == [Status.REVIEW] * 3  # each passes alone
    start = git(repo, "rev-parse", "main")

    res = land(repo, "--all-reviewed")
    assert res.returncode == 1, res.stdout + res.stderr  # something was rejected
    assert f"landed  {a.id}" in res.stdout and f"landed  {b.id}" in res.stdout
    assert f"rejected {c.id}: checks failed on the merge result" in res.stdout
    assert "2 landed, 1 rejected, 0 skipped" in res.stdout

    by_id = {t.id: t for t in tasks(repo)}
    assert by_id[a.id].status is Status.MERGED and by_id[b.id].status is Status.MERGED
    rejected = by_id[c.id]
    assert rejected.status is Status.PENDING  # back to its agent, with the output
    assert "FAIL: a.txt and c.txt cannot live together" in rejected.feedback[-1]
    assert rejected.feedback[-1].startswith("land: checks failed")
    assert (repo / "a.txt").exists() and (repo / "b.txt").exists()
    assert not (repo / "c.txt").exists()
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""

    # main moved one task at a time, and its checks pass at every step
    history = first_parents(repo)
    assert history[2] == start and len(history) == 3
    for commit in history:
        assert checks_pass_at(repo, commit, tmp_path)

    kinds = [(e["event"], e["task"]) for e in events(repo) if e["event"].startswith(
        ("land_", "task_merged"))]
    assert kinds[0] == ("land_started", None)
    assert ("land_verified", a.id) in kinds and ("task_merged", a.id) in kinds
    assert ("land_rejected", c.id) in kinds and ("task_merged", c.id) not in kinds
    assert kinds[-1] == ("land_finished", None)
    assert not (Layout.at(repo).run / "land").exists()  # the land tree is gone

    # nothing left in review: a second land has nothing to do and says so
    res = land(repo, "--all-reviewed", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["outcomes"] == []


def test_order_blockers_first_then_priority_then_id() -> None:
    def t(n: int, priority: int = 0, blocked_by: list[str] | None = None) -> Task:
        return Task(id=f"task_{n:03d}", subject=f"t{n}", priority=priority,
                    blocked_by=blocked_by or [])

    order = land_order([t(1), t(2, priority=5, blocked_by=["task_004"]), t(3, priority=1),
                        t(4), t(10, priority=1), t(5, blocked_by=["task_006"]),
                        t(6, blocked_by=["task_005"])])
    assert [x.id for x in order] == ["task_003", "task_010", "task_001", "task_004",
                                     "task_002", "task_005", "task_006"]


def test_bad_arguments_are_one_line_errors(repo: Path, cli: Cli) -> None:
    keep(repo, "x", {"x.txt": "x\n"})
    for args, msg in ((["--all-reviewed"], "no verify command"),
                      ([], "name the tasks to land"),
                      (["task_001", "--all-reviewed", "--verify", "true"], "not both"),
                      (["task_099", "--verify", "true"], "task_099"),
                      (["--all-reviewed", "--verify", "true", "--batch", "0"], "--batch"),
                      (["--all-reviewed", "--verify", "true", "--into", "../x"], "")):
        res = cli(repo, "land", *args)
        assert res.returncode == 1, (args, res.stdout)
        assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
        assert msg in res.stderr
    assert get(repo, "task_001").status is Status.REVIEW


def test_no_retry_keeps_a_conflicting_task_in_review_with_the_reason(repo: Path) -> None:
    a = keep(repo, "one", {"shared.txt": "one\n"})
    b = keep(repo, "two", {"shared.txt": "two\n"})
    report = land_tasks(*lc(repo), verify="true", retry=False)
    assert report.landed == [a.id] and report.rejected == [b.id]
    again = get(repo, b.id)
    assert again.status is Status.REVIEW and again.feedback == []
    assert again.error is not None and "would conflict in: shared.txt" in again.error
    rows = json.loads(subprocess.run(
        [sys.executable, "-m", "orchestrator", "review", "--json"], cwd=repo,
        capture_output=True, text=True, check=True).stdout)
    assert rows[0]["land"]["event"] == "land_rejected"
    assert "would conflict" in rows[0]["land"]["reason"]


def test_a_stacked_task_is_rebased_onto_its_changed_blocker(repo: Path) -> None:
    blocker = keep(repo, "base", {"lib.txt": "v1\n"})
    stacked = keep(repo, "on top", {"app.txt": "uses lib\n"}, blocked_by=[blocker.id])
    # the blocker changes after the stacked task started (a retried blocker, say)
    wt = Path(blocker.worktree or "")
    (wt / "lib.txt").write_text("v2\n")
    git(wt, "commit", "-qam", "lib v2")
    check = 'test "$(cat lib.txt)" = v2 && test -e app.txt || ! test -e app.txt'
    report = land_tasks(*lc(repo), verify=check)
    assert report.landed == [blocker.id, stacked.id], report
    assert (repo / "lib.txt").read_text() == "v2\n" and (repo / "app.txt").exists()
    restacked = [e for e in events(repo, "land_restacked") if e["task"] == stacked.id]
    assert restacked and restacked[0]["blockers"] == [blocker.id]
    # the stacked task's own commit sits right on top of the landed blocker
    assert git(repo, "log", "-1", "--format=%s", "main^2") == "on top"
    assert git(repo, "rev-parse", "main^2^") == git(repo, "rev-parse", "main^")
    assert git(repo, "log", "-1", "--format=%s", "main^^2") == "lib v2"


def test_a_stacked_task_whose_blocker_is_rejected_is_skipped(repo: Path) -> None:
    blocker = keep(repo, "broken", {"broken": "x\n"})
    stacked = keep(repo, "on top", {"app.txt": "x\n"}, blocked_by=[blocker.id])
    other = keep(repo, "fine", {"fine.txt": "x\n"})
    report = land_tasks(*lc(repo), verify="! test -e broken")
    assert report.landed == [other.id] and report.rejected == [blocker.id]
    skipped = [o for o in report.outcomes if o.result == "skipped"]
    assert [o.task for o in skipped] == [stacked.id]
    assert "blocker" in (skipped[0].reason or "")
    assert get(repo, stacked.id).status is Status.REVIEW


def test_batches_bisect_to_the_breaker(repo: Path) -> None:
    kept = [keep(repo, f"t{i}", {f"f{i}.txt": "x\n"}) for i in range(6)]
    breaker = kept[3]
    report = land_tasks(*lc(repo), verify="! test -e f3.txt", batch=4)
    assert report.rejected == [breaker.id]
    assert sorted(report.landed) == sorted(t.id for t in kept if t is not breaker)
    # 4 together fail -> halves: [0,1] pass; [2,3] fail -> [2] pass, [3] fail; [4,5] pass
    assert report.verifications == 6
    assert not (repo / "f3.txt").exists() and (repo / "f5.txt").exists()


def test_land_killed_during_verify_leaves_main_before_or_after_a_task(repo: Path) -> None:
    first = keep(repo, "first", {"first.txt": "x\n"})
    second = keep(repo, "second", {"second.txt": "x\n"})
    mark = Layout.at(repo).run / "land" / "verifying"  # in the land tree: the sandbox's
    verify = 'if [ -e second.txt ]; then echo $$ > verifying; sleep 60; fi'
    start = git(repo, "rev-parse", "main")
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "land", "--all-reviewed",
                             "--verify", verify], cwd=repo, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (mark.exists() and mark.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stdout
            time.sleep(0.05)
        proc.kill()
        proc.wait()
    finally:
        # without a sandbox the verify runs in a process group of its own, which a
        # SIGKILLed land leaves (a sandbox dies with its parent)
        if mark.exists() and mark.read_text().strip() and not task_sandbox(Config()).enabled:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(mark.read_text()), signal.SIGKILL)
        if proc.stdout is not None:
            proc.stdout.close()
    # the first landed whole, the second not at all
    history = first_parents(repo)
    assert history[1] == start and len(history) == 2
    assert get(repo, first.id).status is Status.MERGED
    assert get(repo, second.id).status is Status.REVIEW
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    assert not (repo / "second.txt").exists()
    # a new run cleans up the left-over land tree and lands the rest
    res = land(repo, "--all-reviewed", "--verify", "true")
    assert res.returncode == 0, res.stdout + res.stderr
    assert get(repo, second.id).status is Status.MERGED and (repo / "second.txt").exists()
    assert ".run/land" not in git(repo, "worktree", "list")


# A first run writes <subject>.txt; told by land that its file breaks the build, it moves
# its work to <subject>2.txt (which the checks accept).
FIXING_AGENT = """
if printf '%s' "$ORCH_PROMPT" | grep -q 'cannot live together'; then
  git rm -q "$ORCH_TASK_SUBJECT.txt" && echo fixed > "${ORCH_TASK_SUBJECT}2.txt"
else
  echo "$ORCH_TASK_SUBJECT" > "$ORCH_TASK_SUBJECT.txt"
fi
"""


@pytest.mark.timeout(300)  # two team runs: slow on a loaded machine
def test_up_land_lands_each_task_as_it_reaches_review(tmp_path: Path) -> None:
    repo = checked_repo(tmp_path / "repo")
    with open_board(Layout.at(repo).ensure()) as board:
        ids = [board.add(s).id for s in ("a", "b", "c")]
    with team_cleanup(repo):
        res = up_cli(repo, "up", "--burst", "--land", "-n", "2", "--command", FIXING_AGENT,
                     env=team_env(), timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [t.status for t in tasks(repo)] == [Status.MERGED] * 3
    rejected = [e["task"] for e in events(repo, "land_rejected")]
    merged = [e["task"] for e in events(repo, "task_merged")]
    # a.txt and c.txt never lived together on main: whichever landed second went back once
    assert len(rejected) == 1 and rejected[0] in (ids[0], ids[2]), rejected
    assert sorted(merged) == sorted(ids) and merged[-1] == rejected[0]
    assert (repo / "b.txt").exists() and not ((repo / "a.txt").exists()
                                             and (repo / "c.txt").exists())
    for commit in first_parents(repo):
        assert checks_pass_at(repo, commit, tmp_path)
