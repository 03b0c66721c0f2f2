"""The worktree manager with the real file board: binding, stacked tasks, reconcile, gc."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from orchestrator.board import FileBoard, init_repo, open_board
from orchestrator.config import WorktreeConfig
from orchestrator.errors import NotFound, RunError
from orchestrator.events import Orphan, WorktreesReconciled
from orchestrator.model import Status, Task
from orchestrator.worktree import WorktreeManager, binding
from tests.helpers import git


@pytest.fixture
def board(repo: Path) -> Iterator[FileBoard]:
    with open_board(init_repo(repo)) as b:
        yield b


@pytest.fixture
def wm(board: FileBoard) -> WorktreeManager:
    return WorktreeManager(board.layout, WorktreeConfig(), board)


def run_task(board: FileBoard, wm: WorktreeManager, task_id: str,
             files: dict[str, str] | None = None, *, finish: bool = True) -> Task:
    """What a teammate does: claim, create, bind with a fenced write, commit, complete."""
    task = board.claim("alice", task_id=task_id)
    assert task is not None and task.lease is not None
    token = task.lease.token
    ws = wm.create(task)
    board.update(task.id, token, **binding(ws))
    for name, text in (files or {}).items():
        (ws.path / name).write_text(text)
    if files:
        git(ws.path, "add", "-A")
        git(ws.path, "commit", "-qm", f"work on {task.id}")
    if not finish:
        return board.get(task.id)
    done = board.complete(task.id, token)
    wm.keep(done)
    return done


def test_teammate_binding_is_recorded_with_a_fenced_write(board: FileBoard,
                                                          wm: WorktreeManager) -> None:
    t = board.add("Write the parser")
    done = run_task(board, wm, t.id, {"parser.py": "x = 1\n"})
    assert done.status == Status.REVIEW
    assert done.worktree == str(wm.layout.worktree(t.id))
    assert done.branch == f"task/{t.id}-write-the-parser" and done.base == "main"
    assert done.base_commit == git(wm.layout.root, "rev-parse", "main")
    assert (Path(done.worktree) / "parser.py").exists()


def test_one_blocker_in_review_gives_its_branch(board: FileBoard, wm: WorktreeManager) -> None:
    a = run_task(board, wm, board.add("Models").id, {"models.py": "class M: ...\n"})
    b = board.add("Views on models", blocked_by=[a.id])
    child = run_task(board, wm, b.id, finish=False)
    assert child.base == a.branch and child.base_commit == git(wm.layout.root, "rev-parse",
                                                               a.branch)
    assert (Path(child.worktree) / "models.py").exists()
    # stacked work with no commits of its own is safe to remove: the blocker's branch has it
    assert wm.removal_risks(child) == []


def test_several_blockers_in_review_give_a_merge(board: FileBoard, wm: WorktreeManager) -> None:
    a = run_task(board, wm, board.add("API").id, {"api.py": "api\n"})
    c = run_task(board, wm, board.add("DB").id, {"db.py": "db\n"})
    main_before = git(wm.layout.root, "rev-parse", "main")
    d = board.add("Glue", blocked_by=[a.id, c.id])
    glue = run_task(board, wm, d.id, finish=False)
    ws = Path(glue.worktree)
    assert (ws / "api.py").exists() and (ws / "db.py").exists()
    parents = git(wm.layout.root, "log", "-1", "--format=%P", glue.base_commit).split()
    assert parents == [git(wm.layout.root, "rev-parse", b) for b in (a.branch, c.branch)]
    assert git(wm.layout.root, "rev-parse", "main") == main_before  # no working tree touched
    assert git(wm.layout.root, "status", "--porcelain") == ""
    assert wm.removal_risks(glue) == []


def test_conflicting_blockers_fail_the_task_naming_the_files(board: FileBoard,
                                                             wm: WorktreeManager) -> None:
    a = run_task(board, wm, board.add("One").id, {"README.md": "one\n", "same.txt": "1\n"})
    c = run_task(board, wm, board.add("Two").id, {"README.md": "two\n", "ok.txt": "2\n"})
    d = board.add("Both", blocked_by=[a.id, c.id])
    claimed = board.claim("bob", task_id=d.id)
    assert claimed is not None
    with pytest.raises(RunError, match=r"conflict in: README\.md$") as info:
        wm.create(claimed)
    assert info.value.task == d.id
    assert not wm.layout.worktree(d.id).exists()
    assert not git(wm.layout.root, "branch", "--list", f"task/{d.id}-*")


def test_merged_blocker_means_plain_base(board: FileBoard, wm: WorktreeManager) -> None:
    a = run_task(board, wm, board.add("Done already").id, {"a.txt": "a\n"})
    git(wm.layout.root, "merge", "-q", "--no-ff", "-m", "merge", a.branch)
    board.set_status(a.id, Status.MERGED, actor="lead")
    b = run_task(board, wm, board.add("Next", blocked_by=[a.id]).id, finish=False)
    assert b.base == "main" and b.base_commit == git(wm.layout.root, "rev-parse", "main")


def test_unknown_blocker_is_a_clear_error(board: FileBoard, wm: WorktreeManager) -> None:
    t = board.add("Orphaned dependant")
    with pytest.raises(NotFound, match="no task task_099"):
        wm.create(msgspec.structs.replace(t, blocked_by=["task_099"]))


# --- reconcile ---------------------------------------------------------------------

def test_reconcile_restores_prunes_and_reports(board: FileBoard, wm: WorktreeManager) -> None:
    live = run_task(board, wm, board.add("Live work").id, {"w.txt": "work\n"})
    shutil.rmtree(live.worktree)  # deleted by hand
    lost = run_task(board, wm, board.add("Lost branch").id, finish=False)
    shutil.rmtree(lost.worktree)
    git(wm.layout.root, "update-ref", "-d", f"refs/heads/{lost.branch}")
    stranger = wm.layout.worktree_root / "task_777"
    git(wm.layout.root, "worktree", "add", "-q", "-b", "mine", str(stranger))
    (wm.layout.worktree_root / "scratch").mkdir()

    report = wm.reconcile(board.list())

    assert sorted(report.pruned) == [live.worktree, lost.worktree]
    assert report.recreated == [live.id]
    assert (Path(live.worktree) / "w.txt").read_text() == "work\n"
    assert git(Path(live.worktree), "branch", "--show-current") == live.branch
    assert list(report.problems) == [lost.id] and "missing" in report.problems[lost.id]
    assert [(o.path, o.reason) for o in report.orphans] == [
        (str(stranger), "no task with this id"),
        (str(wm.layout.worktree_root / "scratch"), "not a registered worktree"),
    ]
    assert stranger.exists() and git(wm.layout.root, "branch", "--list", "mine")
    logged = [e.decode() for e in board.events.read() if e.event == "worktrees_reconciled"]
    assert len(logged) == 1 and isinstance(logged[0], WorktreesReconciled)
    assert logged[0].orphans == report.orphans and logged[0].problems == report.problems
    assert report.orphans[0] == Orphan(path=str(stranger), branch="mine",
                                       reason="no task with this id")
    assert wm.reconcile(board.list()).recreated == []  # idempotent


# --- gc ------------------------------------------------------------------------------

def test_gc_removes_what_is_safe_and_says_what_it_skipped(board: FileBoard,
                                                          wm: WorktreeManager) -> None:
    root = wm.layout.root
    merged = run_task(board, wm, board.add("Merged one").id, {"m.txt": "m\n"})
    git(root, "merge", "-q", "--no-ff", "-m", "merge", merged.branch)
    board.set_status(merged.id, Status.MERGED, actor="lead")
    discarded = run_task(board, wm, board.add("Thrown away").id, {"d.txt": "d\n"})
    board.set_status(discarded.id, Status.DISCARDED, actor="lead")
    cancelled = board.add("Never started")
    board.cancel(cancelled.id)
    review = run_task(board, wm, board.add("Awaiting review").id, {"r.txt": "r\n"})

    dry = wm.gc(board.list(), dry_run=True)
    assert [r.task for r in dry.removed] == [merged.id]
    assert [r.task for r in dry.skipped] == [discarded.id]
    assert "1 commit(s)" in dry.skipped[0].reason
    assert Path(merged.worktree).exists()  # dry run touches nothing

    report = wm.gc(board.list())
    assert [r.task for r in report.removed] == [merged.id]
    assert not Path(merged.worktree).exists() and not git(root, "branch", "--list", merged.branch)
    assert Path(discarded.worktree).exists() and Path(review.worktree).exists()
    assert wm.gc(board.list()).removed == []
