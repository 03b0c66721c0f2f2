"""Fencing reaches git: a push of a task's WIP snapshot or branch carries the lease it was
made under. Two clones of one bare remote ("machines") on one PostgreSQL board; real git,
real PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.board.pg.store import PgBoard
from orchestrator.errors import LeaseLost
from orchestrator.layout import Layout
from orchestrator.logging import get_logger
from orchestrator.model import Task
from orchestrator.team.claim import Claim
from orchestrator.team.pushing import Pushes, retry_pending
from orchestrator.team.status import format_status, team_status
from orchestrator.worktree.remote import Remote, wip_ref
from tests.helpers import git
from tests.test_pg_board import board_at
from tests.test_remote import make_clones as clones

BRANCH = "task/task_001-job"


def take(board: PgBoard, owner: str) -> tuple[Task, Claim]:
    task = board.claim(owner, lease_seconds=30)
    assert task is not None
    return task, Claim(board, task, owner=owner, lease_seconds=30)


def worktree(clone: Path, task: Task) -> Path:
    """The task's worktree in ``clone``, on its branch (adopted from the remote if the board
    recorded a push)."""
    Remote(clone).adopt(BRANCH, task.id, task.pushed)
    wt = clone / ".worktrees" / task.id
    new = [] if git(clone, "branch", "--list", BRANCH) else ["-b"]
    git(clone, "worktree", "add", "-q", *new, *([BRANCH] if new else []), str(wt),
        *([] if new else [BRANCH]))
    return wt


def start(clone: Path, board: PgBoard, owner: str, text: str
          ) -> tuple[Task, Claim, Path, Pushes, str | None]:
    """``owner`` claims the task on ``clone``, writes ``text`` to a.txt and pushes the
    snapshot: the task, the claim, its worktree, its pushes, the commit pushed."""
    task, claim = take(board, owner)
    wt = worktree(clone, task)
    pushes = Pushes(Remote(clone), claim, task, get_logger())
    (wt / "a.txt").write_text(text)
    return task, claim, wt, pushes, pushes.wip(wt)


def expire(board: PgBoard) -> None:
    assert board.requeue_expired(now=time.time() + 3600)


@pytest.fixture
def setup(tmp_path: Path, pg_board_url: str
          ) -> Iterator[tuple[Path, Path, Path, PgBoard, PgBoard]]:
    bare, a, b = clones(tmp_path)
    with board_at(tmp_path, pg_board_url, "ma", actor="alice") as board_a, \
            board_at(tmp_path, pg_board_url, "mb", actor="bob") as board_b:
        board_a.add("job")
        yield bare, a, b, board_a, board_b


def test_a_fenced_out_owners_pushes_are_refused_and_the_new_owner_starts_from_the_record(
        setup: tuple[Path, Path, Path, PgBoard, PgBoard]) -> None:
    bare, a, b, board_a, board_b = setup
    log = get_logger()
    _, _, wt_a, pushes_a, first = start(a, board_a, "alice", "alice's first step\n")
    assert first and board_b.get("task_001").pushed == {"wip": first}

    expire(board_b)  # alice froze past her lease; bob takes over on another machine
    task_b, claim_b = take(board_b, "bob")
    wt_b = worktree(b, task_b)
    assert (wt_b / "a.txt").read_text() == "alice's first step\n"  # the recorded snapshot
    pushes_b = Pushes(Remote(b), claim_b, task_b, log)
    (wt_b / "b.txt").write_text("bob's work\n")
    second = pushes_b.wip(wt_b)
    assert second and git(bare, "rev-parse", wip_ref("task_001")) == second

    # alice comes back: her agent wrote on, her pushes carry her old lease
    (wt_a / "late.txt").write_text("alice after her lease\n")
    with pytest.raises(LeaseLost):
        pushes_a.wip(wt_a)
    with pytest.raises(LeaseLost):
        pushes_a.finish(wt_a, BRANCH, "ma")
    assert git(bare, "rev-parse", wip_ref("task_001")) == second
    assert not git(bare, "branch", "--list", BRANCH)

    git(wt_b, "add", "-A")
    git(wt_b, "commit", "-qm", "bob")
    assert pushes_b.finish(wt_b, BRANCH, "mb") is None
    files = git(bare, "ls-tree", "-r", "--name-only", BRANCH).split()
    assert sorted(files) == ["a.txt", "app.py", "b.txt"]  # no late.txt
    assert not git(bare, "for-each-ref", wip_ref("task_001"))  # pushed: the WIP ref goes
    assert board_b.get("task_001").pushed == {"branch": git(b, "rev-parse", BRANCH)}


def test_a_push_slipped_in_by_a_fenced_out_owner_is_pushed_over_and_never_adopted(
        setup: tuple[Path, Path, Path, PgBoard, PgBoard]) -> None:
    bare, a, b, board_a, board_b = setup
    log = get_logger()
    _, _, wt_a, pushes_a, recorded = start(a, board_a, "alice", "recorded\n")

    expire(board_b)
    # alice's push gets through before bob pushed (she passed her renewal, then froze),
    # but the board refuses her record of it
    (wt_a / "a.txt").write_text("stale\n")
    with pytest.raises(LeaseLost):
        pushes_a.wip(wt_a)
    assert git(bare, "rev-parse", wip_ref("task_001")) != recorded

    task_b, claim_b = take(board_b, "bob")
    assert task_b.pushed == {"wip": recorded}
    wt_b = worktree(b, task_b)
    assert (wt_b / "a.txt").read_text() == "recorded\n"  # not the stale tip
    (wt_b / "b.txt").write_text("bob\n")
    pushes_b = Pushes(Remote(b), claim_b, task_b, log)
    mine = pushes_b.wip(wt_b)
    assert git(bare, "rev-parse", wip_ref("task_001")) == mine
    assert git(bare, "show", f"{mine}:a.txt") == "recorded"


def test_a_retry_on_the_machine_of_a_fenced_out_run_starts_from_the_recorded_state(
        setup: tuple[Path, Path, Path, PgBoard, PgBoard]) -> None:
    _bare, a, _b, board_a, _board_b = setup
    _, _, wt_a, _, _ = start(a, board_a, "alice", "recorded\n")
    expire(board_a)
    (wt_a / "a.txt").write_text("written after the lease was gone\n")  # the old agent
    task, _claim = take(board_a, "carol")  # the same machine takes the task again
    saved = Remote(a).set_aside(wt_a, task.id, BRANCH, task.pushed)
    assert saved and not wt_a.exists()
    assert git(a, "show", "refs/orchestrator/stale/task_001:a.txt") == \
        "written after the lease was gone"  # kept, out of the way
    wt = worktree(a, task)
    assert (wt / "a.txt").read_text() == "recorded\n"
    assert Remote(a).set_aside(wt, task.id, BRANCH, task.pushed) is None  # up to date: kept


def test_a_branch_the_remote_refused_is_pending_until_the_lead_pushes_it(
        setup: tuple[Path, Path, Path, PgBoard, PgBoard]) -> None:
    bare, a, _, board_a, _ = setup
    log = get_logger()
    hook = bare / "hooks" / "pre-receive"
    task, claim, wt, _, _ = start(a, board_a, "alice", "done\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "done")
    hook.write_text("#!/bin/sh\necho 'the remote is read-only' >&2\nexit 1\n")
    hook.chmod(0o755)
    pending = Pushes(Remote(a), claim, task, log).finish(wt, BRANCH, "ma")
    assert pending is not None and pending.machine == "ma"
    assert "pre-receive hook declined" in pending.reason
    done = claim.complete(push_pending=pending, branch=BRANCH)
    assert done.push_pending == pending
    remote = Remote(a)
    assert retry_pending(board_a, remote, "mb", log) == (0, 0)  # another machine's
    assert retry_pending(board_a, remote, "ma", log) == (0, 1)  # still refused
    shown = format_status(team_status(Layout.at(a), board_a))
    assert f"task_001 push pending: {BRANCH} is not on the remote yet" in shown
    hook.unlink()
    assert retry_pending(board_a, remote, "ma", log) == (1, 0)
    task = board_a.get("task_001")
    assert task.push_pending is None and task.pushed["branch"] == git(bare, "rev-parse", BRANCH)
    assert git(bare, "show", f"{BRANCH}:a.txt") == "done"
    assert not git(bare, "for-each-ref", wip_ref("task_001"))


def test_a_wip_ref_the_remote_would_not_delete_is_dropped_by_the_lead_later(
        setup: tuple[Path, Path, Path, PgBoard, PgBoard]) -> None:
    """The branch lands, then the remote turns read-only before the WIP ref is deleted:
    the task is pending until the lead's retry deletes it (it was left for good)."""
    bare, a, _, board_a, _ = setup
    log = get_logger()
    hook = bare / "hooks" / "pre-receive"
    task, claim, wt, _, _ = start(a, board_a, "alice", "done\n")
    remote = Remote(a)  # the work is left uncommitted: finish's last snapshot holds it
    # refuses only deletions (the zero id as the new value): the branch itself lands
    hook.write_text("#!/bin/sh\nwhile read old new ref; do\n"
                    "  case $new in *[!0]*) ;; *) echo read-only >&2; exit 1;; esac\n"
                    "done\n")
    hook.chmod(0o755)
    pending = Pushes(remote, claim, task, log).finish(wt, BRANCH, "ma")
    assert pending is not None and "WIP ref" in pending.reason
    assert git(bare, "rev-parse", BRANCH)  # the branch landed
    assert git(bare, "show", f"{wip_ref(task.id)}:a.txt") == "done"
    claim.complete(push_pending=pending, branch=BRANCH)
    assert retry_pending(board_a, remote, "ma", log) == (0, 1)  # still refused
    hook.unlink()
    assert retry_pending(board_a, remote, "ma", log) == (1, 0)
    assert board_a.get(task.id).push_pending is None
    assert not git(bare, "for-each-ref", wip_ref(task.id))


def test_a_snapshot_needs_no_git_identity(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _bare, a, _ = clones(tmp_path)
    wt = a / ".worktrees" / "task_001"
    git(a, "worktree", "add", "-q", "-b", BRANCH, str(wt))
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME",
                "GIT_COMMITTER_EMAIL", "EMAIL"):  # and HOME has no .gitconfig
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "none"))
    # a host name without a domain: git cannot make up an address from it
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'user.useConfigOnly'='true'")
    (wt / "x.txt").write_text("x\n")
    assert Remote(a).snapshot(wt, "task_001") is not None


FIRST_THEN_SECOND = (
    'if [ -f .first ]; then echo second > b.txt; sleep 2; '
    'else touch .first; echo a > a.txt; '
    'while true; do date +%s.%N >> late.txt; sleep 0.2; done; fi')


@pytest.mark.timeout(120)
def test_a_frozen_teammates_agent_writes_never_reach_the_new_owners_commit(
        tmp_path: Path, pg_board_url: str) -> None:
    """Alice and her agent are frozen past their lease; bob, on the same machine, takes the
    task over and finishes it; alice is let go while bob runs. Her agent's writes after
    that never reach bob's worktree, his commit, or the remote."""
    import os
    import signal

    from tests.test_pg_machines import machines, up

    bare, (a,) = machines(tmp_path, pg_board_url, 1)
    with (a / "orchestrator.toml").open("a") as f:
        f.write("lease_seconds = 2\n")
    with board_at(tmp_path, pg_board_url, "driver") as board:
        board.add("job")
        team = up(a, "--burst", "-n", "2", "--command", FIRST_THEN_SECOND)
        try:
            def first() -> dict[str, object] | None:
                for st in board.team.all():
                    wip = "refs/orchestrator/wip/task_001"
                    if st.task == "task_001" and st.backend_pgid and git(
                            bare, "for-each-ref", wip) and "late.txt" in git(
                            bare, "ls-tree", "--name-only", wip):
                        return {"pid": st.pid, "pgid": st.backend_pgid,
                                "name": st.name}
                return None

            deadline = time.monotonic() + 60
            while (alice := first()) is None:
                assert time.monotonic() < deadline and team.poll() is None
                time.sleep(0.2)
            os.killpg(int(str(alice["pgid"])), signal.SIGSTOP)
            os.kill(int(str(alice["pid"])), signal.SIGSTOP)
            deadline = time.monotonic() + 60
            while not ((t := board.get("task_001")).lease and t.lease.owner != alice["name"]):
                assert time.monotonic() < deadline, t
                time.sleep(0.1)
            resumed = time.time()
            os.killpg(int(str(alice["pgid"])), signal.SIGCONT)
            os.kill(int(str(alice["pid"])), signal.SIGCONT)
            out = team.communicate(timeout=90)[0]
        finally:
            if team.poll() is None:
                team.kill()
                team.communicate()
        task = board.get("task_001")
    assert team.returncode == 0 and task.status == "review", out
    assert task.branch and git(bare, "show", f"{task.branch}:b.txt") == "second"
    late = git(bare, "show", f"{task.branch}:late.txt").split()
    assert late and all(float(x) < resumed for x in late), (late, resumed)
    assert git(bare, "rev-parse", task.branch) == task.pushed["branch"]
