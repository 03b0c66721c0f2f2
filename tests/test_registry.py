"""Issue 16.1: a task file cannot make discard, gc or merge delete what the orchestrator
did not create. Branches and worktrees are acted on only as the registry under the git
common dir records them; task files are edited here by hand, as an agent or a person
could, and everything they name that is not the task's own must survive."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.board import open_board
from orchestrator.config import Config
from orchestrator.errors import Conflict, UnsafeRemoval
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from orchestrator.review import discard_task, merge_task
from orchestrator.worktree import WorktreeManager, open_isolation
from orchestrator.worktree.registry import registry_root
from tests.helpers import git
from tests.test_review import keep


def edit(repo: Path, task_id: str, **fields: object) -> None:
    """Rewrite the task file by hand, as anyone who can write ``.tasks/`` can."""
    path = Layout.at(repo).task_file(task_id)
    data = json.loads(path.read_text())
    data.update(fields)
    path.write_text(json.dumps(data))


def get(repo: Path, task_id: str) -> Task:
    with open_board(Layout.at(repo)) as board:
        return board.get(task_id)


def tip(repo: Path, ref: str) -> str:
    return git(repo, "rev-parse", "--verify", "-q", ref)


def registry(repo: Path) -> Path:
    return registry_root(Path(git(repo, "rev-parse", "--absolute-git-dir")))


def test_issue_example_discard_refuses_and_main_survives(repo: Path) -> None:
    """The red-team case, through the CLI as a process: one line, no traceback."""
    layout = Layout.at(repo)
    with open_board(layout.ensure()) as board:
        board.add("innocent looking")
    edit(repo, "task_001", status="review", branch="main", base="main", worktree=None)
    main_before = tip(repo, "main")
    for args in (["discard", "task_001"], ["discard", "task_001", "--force"]):
        out = subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 1, out
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
        assert "'main'" in out.stderr and "did not create" in out.stderr
    assert tip(repo, "main") == main_before
    assert git(repo, "reflog", "show", "main")  # the reflog is there too
    assert get(repo, "task_001").status is Status.REVIEW


FOREIGN = ["main", "feature/login", "v1.0", "HEAD", "..", "other",
           "task/task_001-not-what-was-made", "refs/heads/main", "-D", "x" * 300]


def test_discard_and_merge_of_a_task_naming_a_foreign_branch_refuse(repo: Path) -> None:
    layout, config = Layout.at(repo), Config.load(repo)
    a = keep(repo, "mine", {"a.txt": "a\n"})
    b = keep(repo, "another task", {"b.txt": "b\n"})
    git(repo, "branch", "feature/login")
    git(repo, "tag", "v1.0")
    assert a.branch and b.branch and a.worktree
    before = {ref: tip(repo, ref) for ref in ("main", "feature/login", "v1.0", a.branch,
                                               b.branch)}
    for named in FOREIGN:
        edit(repo, a.id, branch=b.branch if named == "other" else named)
        with pytest.raises(UnsafeRemoval, match="not touching"):
            discard_task(layout, config, a.id, force=True)
        with pytest.raises(Conflict, match="nothing was merged"):
            merge_task(layout, config, a.id)
        assert {ref: tip(repo, ref) for ref in before} == before, named
        assert Path(a.worktree).is_dir() and Path(b.worktree or "").is_dir()
    # put right by hand, the same discard goes through (fail-closed, with a snapshot)
    edit(repo, a.id, branch=a.branch)
    res = discard_task(layout, config, a.id, force=True)
    assert res.snapshot and git(repo, "show", f"{res.snapshot}:a.txt") == "a"
    assert not git(repo, "branch", "--list", a.branch)
    assert tip(repo, b.branch) == before[b.branch]


def test_worktree_field_pointing_outside_is_never_removed(repo: Path, tmp_path: Path) -> None:
    layout, config = Layout.at(repo), Config.load(repo)
    a = keep(repo, "mine", {"a.txt": "a\n"})
    precious = tmp_path / "precious"
    git(repo, "worktree", "add", "-q", "-b", "person/work", str(precious))
    (precious / "notes.txt").write_text("mine, uncommitted\n")
    edit(repo, a.id, worktree=str(precious))
    discard_task(layout, config, a.id, force=True)
    assert (precious / "notes.txt").read_text() == "mine, uncommitted\n"
    assert git(repo, "branch", "--list", "person/work")
    assert not Path(a.worktree or "").exists()


@pytest.mark.parametrize("where", ["main checkout", "other worktree"])
def test_a_task_branch_checked_out_elsewhere_is_not_deleted(repo: Path, tmp_path: Path,
                                                            where: str) -> None:
    """A person took the task's branch over (its worktree removed by hand first)."""
    layout, config = Layout.at(repo), Config.load(repo)
    a = keep(repo, "mine", {"a.txt": "a\n"})
    assert a.branch
    git(repo, "worktree", "remove", "--force", a.worktree or "")
    if where == "main checkout":
        git(repo, "checkout", "-q", a.branch)
    else:
        git(repo, "worktree", "add", "-q", str(tmp_path / "elsewhere"), a.branch)
    with pytest.raises(UnsafeRemoval, match="is checked out in"):
        discard_task(layout, config, a.id, force=True)
    assert git(repo, "branch", "--list", a.branch)


def test_gc_of_merged_and_discarded_tasks_with_edited_fields(repo: Path) -> None:
    layout, config = Layout.at(repo), Config.load(repo)
    merged = keep(repo, "merged one", {"m.txt": "m\n"})
    merge_task(layout, config, merged.id)
    live = keep(repo, "still in review", {"l.txt": "l\n"})
    git(repo, "branch", "person")
    # a merged task now names the live task's branch; another names a person's branch
    edit(repo, merged.id, branch=live.branch, worktree=live.worktree)
    with open_board(layout) as board:
        extra = board.add("discarded by hand")
    edit(repo, extra.id, status="discarded", branch="person", base="person")
    before = {r: tip(repo, r) for r in ("main", "person", live.branch or "")}
    with open_board(layout) as board:
        report = open_isolation(layout, config.worktree, board).gc(board.list())
    assert report.removed == []
    reasons = {row.task: row.reason for row in report.skipped}
    assert "did not create" in reasons[merged.id] and "'person'" in reasons[extra.id]
    assert {r: tip(repo, r) for r in before} == before
    assert Path(live.worktree or "").is_dir()


def test_fields_that_hide_commits_still_leave_a_snapshot(repo: Path) -> None:
    """base and base_commit edited to the branch's own tip make it look merged: gc removes
    it (nothing looks lost), and the commits are kept under the snapshot ref anyway."""
    layout, config = Layout.at(repo), Config.load(repo)
    a = keep(repo, "unmerged work", {"w.txt": "w\n"})
    work = tip(repo, a.branch or "")
    edit(repo, a.id, status="discarded", base=a.branch, base_commit=work)
    with open_board(layout) as board:
        report = open_isolation(layout, config.worktree, board).gc(board.list())
    assert "is a base branch" in report.skipped[0].reason
    edit(repo, a.id, base="main", base_commit=work)
    with open_board(layout) as board:
        report = open_isolation(layout, config.worktree, board).gc(board.list())
    assert [r.task for r in report.removed] == [a.id]
    assert not git(repo, "branch", "--list", a.branch or "")
    snap = f"refs/orchestrator/snapshots/{a.id}"
    assert git(repo, "merge-base", "--is-ancestor", work, snap) == ""


def test_a_clean_merge_needs_no_snapshot_and_forgets_the_record(repo: Path) -> None:
    layout, config = Layout.at(repo), Config.load(repo)
    a = keep(repo, "to merge", {"m.txt": "m\n"})
    assert (registry(repo) / f"{a.id}.json").is_file()
    res = merge_task(layout, config, a.id)
    assert res.removed and res.snapshot is None
    assert not (registry(repo) / f"{a.id}.json").exists()
    assert git(repo, "for-each-ref", "refs/orchestrator/") == ""


def test_a_board_made_before_the_registry_is_adopted_only_in_the_task_namespace(
        repo: Path) -> None:
    layout, config = Layout.at(repo), Config.load(repo)
    a = keep(repo, "old board", {"a.txt": "a\n"})
    b = keep(repo, "old board too", {"b.txt": "b\n"})
    for rec in registry(repo).iterdir():
        rec.unlink()  # as on a board made before the registry
    edit(repo, b.id, branch="main")
    with pytest.raises(UnsafeRemoval, match="no registry record"):
        discard_task(layout, config, b.id, force=True)
    res = discard_task(layout, config, a.id, force=True)  # adopted: its own namespace
    assert res.snapshot and not git(repo, "branch", "--list", a.branch or "")
    # a worktree on another branch than the task file says is not adopted
    edit(repo, b.id, branch=(b.branch or "") + "-x")
    git(repo, "branch", (b.branch or "") + "-x")
    with pytest.raises(UnsafeRemoval, match="is not on"):
        discard_task(layout, config, b.id, force=True)
    assert git(repo, "branch", "--list", (b.branch or "") + "-x")
    assert tip(repo, "main")


def test_a_pending_task_naming_a_foreign_branch_never_works_on_it(repo: Path) -> None:
    layout, config = Layout.at(repo).ensure(), Config.load(repo)
    git(repo, "branch", "person")
    with open_board(layout) as board:
        board.add("hijack")
    edit(repo, "task_001", branch="person")
    m = WorktreeManager(layout, config.worktree)
    with pytest.raises(Exception, match="did not create"):
        m.create(get(repo, "task_001"))
    assert not (layout.worktree_root / "task_001").exists()


def test_the_registry_is_read_only_inside_the_sandbox(repo: Path) -> None:
    from orchestrator.sandbox import Sandbox

    sandbox = Sandbox.detect("auto")
    if not sandbox.enabled:
        pytest.skip(sandbox.notice or "no sandbox here")
    a = keep(repo, "mine", {"a.txt": "a\n"})
    record = registry(repo) / f"{a.id}.json"
    cwd = Path(a.worktree or "")
    script = f"echo '{{}}' > {record}; rm -f {record}; git commit -q --allow-empty -m ok"
    with sandbox.session(["sh", "-c", script], cwd) as run:
        out = subprocess.run(run.argv, cwd=cwd, capture_output=True, text=True, timeout=60,
                             check=False)
    assert json.loads(record.read_text())["branch"] == a.branch
    assert git(cwd, "log", "-1", "--format=%s") == "ok", out.stderr  # commits still work


def test_a_cancelled_task_with_commits_can_be_cleaned_up(repo: Path) -> None:
    layout, config = Layout.at(repo), Config.load(repo)
    a = keep(repo, "cancelled later", {"c.txt": "c\n"})
    with open_board(layout) as board:
        board.cancel(a.id)
        report = open_isolation(layout, config.worktree, board).gc(board.list())
    [skipped] = report.skipped
    assert "1 commit" in skipped.reason and f"discard {a.id} removes" in skipped.reason
    res = discard_task(layout, config, a.id)  # its commits go to the snapshot: no --force
    assert res.task.status is Status.CANCELLED  # what happened to it stays; its leftovers go
    assert git(repo, "show", f"{res.snapshot}:c.txt") == "c"
    assert not Path(a.worktree or "").exists() and not git(repo, "branch", "--list",
                                                            a.branch or "")


def test_gitignored_files_are_kept_not_deleted_with_the_worktree(repo: Path) -> None:
    layout, config = Layout.at(repo), Config.load(repo)
    (repo / ".gitignore").write_text("*.env\nbuild/\n")
    (repo / "shared.env").write_text("same as in the main checkout\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore")
    a = keep(repo, "merged with a secret", {"a.txt": "a\n"})
    b = keep(repo, "discarded with a build", {"b.txt": "b\n"})
    wa, wb = Path(a.worktree or ""), Path(b.worktree or "")
    (wa / "local.env").write_text("API_TOKEN=only-here\n")
    (wa / "shared.env").write_text("same as in the main checkout\n")  # as .worktreeinclude
    (wb / "build").mkdir()
    (wb / "build" / "out.bin").write_bytes(b"\x00built")
    res = merge_task(layout, config, a.id)
    assert res.removed and res.note and "gitignored files are kept in" in res.note
    kept = Path(res.note.rsplit(" ", 1)[1])
    assert (kept / "local.env").read_text() == "API_TOKEN=only-here\n"
    assert not (kept / "shared.env").exists() and not (kept / ".task_ref").exists()
    assert kept.is_relative_to(Path(git(repo, "rev-parse", "--absolute-git-dir")))
    out = discard_task(layout, config, b.id, force=True)
    assert out.kept_ignored and (Path(out.kept_ignored) / "build" / "out.bin").read_bytes() \
        == b"\x00built"
    assert not wa.exists() and not wb.exists()
