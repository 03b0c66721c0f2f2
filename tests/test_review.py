"""Review (issue 8): the review table with overlaps, diff, merge/squash/rebase, discard, retry.

Kept branches are made by driving the real board and the real WorktreeManager
(claim, create the worktree, commit, complete), as a teammate would; the end-to-end
scenario through `orchestrator up --burst` is in test_review_team.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.board import init_repo, open_board
from orchestrator.board.eventlog import EventLog
from orchestrator.cli import main
from orchestrator.config import Config
from orchestrator.errors import Conflict, InvalidInput, InvalidTransition, NotFound
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from orchestrator.review import (
    diff_text,
    discard_task,
    merge,
    merge_task,
    retry_task,
    review_rows,
)
from orchestrator.worktree import WorktreeManager, binding
from tests.helpers import git


def keep(repo: Path, subject: str, files: dict[str, str], **fields: object) -> Task:
    """A task in review whose branch has one commit writing ``files``."""
    layout = init_repo(repo)
    config = Config.load(repo)
    with open_board(layout, config.board) as board:
        task = board.add(subject, **fields)  # type: ignore[arg-type]
        claimed = board.claim("alice", task_id=task.id)
        assert claimed is not None and claimed.lease is not None
        ws = WorktreeManager(layout, config.worktree, board).create(claimed)
        board.update(task.id, claimed.lease.token, **binding(ws))
        for name, text in files.items():
            (ws.path / name).parent.mkdir(parents=True, exist_ok=True)
            (ws.path / name).write_text(text)
        git(ws.path, "add", "-A")
        git(ws.path, "commit", "-q", "-m", subject)
        return board.complete(task.id, claimed.lease.token)


def get(repo: Path, task_id: str) -> Task:
    with open_board(Layout.at(repo)) as board:
        return board.get(task_id)


Cli = Callable[..., subprocess.CompletedProcess[str]]


def orch(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a real process (for what only a process shows: no traceback)."""
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                          capture_output=True, text=True, timeout=60, check=False)


def in_process(capsys: pytest.CaptureFixture[str]) -> Cli:
    """The CLI in-process through `orchestrator.cli.main` (its one-line error handling too)."""

    def run(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as exc:
            main([*args, "--repo", str(repo)])
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, int(exc.value.code or 0), out, err)

    return run


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return in_process(capsys)


def lc(repo: Path) -> tuple[Layout, Config]:
    return Layout.at(repo), Config.load(repo)


def untouched(repo: Path, head: str) -> None:
    """Nothing half-merged: same HEAD, clean tree, no merge or rebase in progress."""
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain", "--untracked-files=no") == ""
    gitdir = Path(git(repo, "rev-parse", "--absolute-git-dir"))
    assert not (gitdir / "MERGE_HEAD").exists()


def test_overlap_first_merges_second_refuses_naming_the_file(repo: Path, cli: Cli) -> None:
    a = keep(repo, "first edit", {"shared.txt": "one\n", "a.txt": "a\n"})
    b = keep(repo, "second edit", {"shared.txt": "two\n"})
    c = keep(repo, "unrelated", {"c.txt": "c\n"})

    res = cli(repo, "review", "--json")
    assert res.returncode == 0, res.stderr
    import json

    rows = {r["id"]: r for r in json.loads(res.stdout)}
    assert set(rows) == {a.id, b.id, c.id}
    assert rows[a.id]["overlaps"] == [{"task": b.id, "status": "review", "files": ["shared.txt"]}]
    assert rows[b.id]["overlaps"] == [{"task": a.id, "status": "review", "files": ["shared.txt"]}]
    assert rows[c.id]["overlaps"] == []
    assert rows[a.id]["commits"] == 1
    assert rows[a.id]["diffstat"]["added"] == 2
    assert {f["path"] for f in rows[a.id]["diffstat"]["files"]} == {"shared.txt", "a.txt"}
    assert rows[a.id]["merge"] == {"into": "main", "clean": True, "conflicts": []}
    text = cli(repo, "review").stdout
    assert f"! {a.id} and {b.id} (review) both change: shared.txt" in text
    assert text.count("both change") == 1  # each pair once, not A-B and then B-A

    res = cli(repo, "merge", a.id)
    assert res.returncode == 0, res.stderr
    assert (repo / "shared.txt").read_text() == "one\n"
    assert get(repo, a.id).status is Status.MERGED
    assert not (repo / ".worktrees" / a.id).exists()
    assert git(repo, "branch", "--list", a.branch or "") == ""
    parents = git(repo, "log", "-1", "--format=%P").split()
    assert len(parents) == 2  # a --no-ff merge commit
    assert a.id in git(repo, "log", "-1", "--format=%B")
    merged = [e for e in EventLog(Layout.at(repo).events).read(task=a.id) if e["event"] == "merged"]
    assert merged and merged[0]["strategy"] == "merge" and merged[0]["into"] == "main"

    # the review table now warns that the second one conflicts with main
    row = next(r for r in review_rows(*lc(repo)) if r["id"] == b.id)
    assert row["merge"] == {"into": "main", "clean": False, "conflicts": ["shared.txt"]}

    head = git(repo, "rev-parse", "HEAD")
    res = cli(repo, "merge", b.id)
    assert res.returncode == 1
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert "would conflict in: shared.txt" in res.stderr
    untouched(repo, head)
    assert get(repo, b.id).status is Status.REVIEW
    assert (repo / ".worktrees" / b.id / "shared.txt").read_text() == "two\n"


def test_squash_makes_one_commit_and_keeps_the_originals_in_a_snapshot(repo: Path) -> None:
    layout, config = lc(repo)
    t = keep(repo, "squash me", {"s.txt": "s\n"})
    wt = Path(t.worktree or "")
    (wt / "s2.txt").write_text("more\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "second commit")
    tip = git(wt, "rev-parse", "HEAD")
    base = git(repo, "rev-parse", "HEAD")
    res = merge_task(layout, config, t.id, "squash")
    assert res.removed and res.snapshot == f"refs/orchestrator/snapshots/{t.id}"
    assert git(repo, "log", "-1", "--format=%P") == base  # one parent: a squash
    assert git(repo, "rev-list", "--count", f"{base}..HEAD") == "1"
    assert git(repo, "log", "-1", "--format=%s") == "squash me"
    assert (repo / "s.txt").read_text() == "s\n" and (repo / "s2.txt").read_text() == "more\n"
    assert git(repo, "merge-base", "--is-ancestor", tip, res.snapshot) == ""  # kept
    assert get(repo, t.id).status is Status.MERGED
    assert not wt.exists()


def test_rebase_lands_linear_history_on_a_moved_target(repo: Path) -> None:
    layout, config = lc(repo)
    first = keep(repo, "first", {"one.txt": "1\n"})
    second = keep(repo, "second", {"two.txt": "2\n"})
    merge_task(layout, config, first.id)  # main moves on
    before = git(repo, "rev-parse", "HEAD")
    res = merge(layout=layout, config=config, task_id=second.id, strategy="rebase",
                actor="mcp")  # the name and keywords the MCP server uses
    assert res.removed and res.snapshot is None
    assert git(repo, "rev-parse", "HEAD") == res.commit
    assert git(repo, "log", "-1", "--format=%P") == before  # rebased: parent is the old tip
    assert git(repo, "log", "-1", "--format=%s") == "second"
    assert (repo / "two.txt").exists() and (repo / "one.txt").exists()
    assert get(repo, second.id).status is Status.MERGED


def test_rebase_that_stops_on_a_conflict_changes_nothing(repo: Path) -> None:
    layout, config = lc(repo)
    a = keep(repo, "a", {"f.txt": "a\n"})
    b = keep(repo, "b", {"g.txt": "g\n"})
    wt = Path(b.worktree or "")
    (wt / "f.txt").write_text("b\n")
    git(wt, "add", "f.txt")
    git(wt, "commit", "-qm", "b touches f")
    (wt / "f.txt").write_text("a\n")
    git(wt, "commit", "-qam", "b agrees with a")  # the sum merges cleanly, each step does not
    merge_task(layout, config, a.id)
    head, tip = git(repo, "rev-parse", "HEAD"), git(wt, "rev-parse", "HEAD")
    with pytest.raises(Conflict, match=r"rebasing .* stopped .*f\.txt"):
        merge_task(layout, config, b.id, "rebase")
    untouched(repo, head)
    assert git(wt, "rev-parse", "HEAD") == tip
    assert git(wt, "status", "--porcelain") == ""
    assert get(repo, b.id).status is Status.REVIEW
    merge_task(layout, config, b.id)  # a plain merge works
    assert (repo / "g.txt").exists()


def test_merge_into_a_branch_that_is_not_checked_out(repo: Path, cli: Cli) -> None:
    git(repo, "branch", "release")
    t = keep(repo, "for release", {"r.txt": "r\n"})
    head = git(repo, "rev-parse", "HEAD")
    res = cli(repo, "merge", t.id, "--into", "release")
    assert res.returncode == 0, res.stderr
    assert "into release" in res.stdout
    untouched(repo, head)
    assert not (repo / "r.txt").exists()
    assert git(repo, "show", "release:r.txt") == "r"
    assert get(repo, t.id).status is Status.MERGED
    assert not Path(t.worktree or "").exists()


def test_dirty_main_tree_refuses_and_keeps_the_change(repo: Path) -> None:
    t = keep(repo, "x", {"x.txt": "x\n"})
    (repo / "README.md").write_text("my unsaved edit\n")
    (repo / "notes.txt").write_text("untracked is fine\n")
    head = git(repo, "rev-parse", "HEAD")
    res = orch(repo, "merge", t.id)
    assert res.returncode == 1
    assert "main working tree" in res.stderr and "uncommitted changes (README.md)" in res.stderr
    assert "Traceback" not in res.stderr
    assert git(repo, "rev-parse", "HEAD") == head
    assert (repo / "README.md").read_text() == "my unsaved edit\n"
    assert get(repo, t.id).status is Status.REVIEW
    git(repo, "checkout", "--", "README.md")
    assert orch(repo, "merge", t.id).returncode == 0
    assert (repo / "notes.txt").exists() and (repo / "x.txt").exists()


def test_uncommitted_work_in_the_task_worktree_refuses_the_merge(repo: Path) -> None:
    layout, config = lc(repo)
    t = keep(repo, "x", {"x.txt": "x\n"})
    (Path(t.worktree or "") / "late.txt").write_text("not committed\n")
    with pytest.raises(Conflict, match=r"would not be merged: late\.txt"):
        merge_task(layout, config, t.id)
    assert get(repo, t.id).status is Status.REVIEW


def test_merge_bad_input(repo: Path, cli: Cli) -> None:
    layout, config = lc(repo)
    t = keep(repo, "x", {"x.txt": "x\n"})
    with open_board(layout) as board:
        pending = board.add("not yet")
    cases = [
        (("merge", "task_099"), "no task task_099"),
        (("merge", "nonsense"), "not a task id"),
        (("merge", pending.id), "is pending: only a task in review can be merged"),
        (("merge", t.id, "--squash", "--rebase"), "exclude each other"),
        (("merge", t.id, "--into", "nope"), "no branch nope"),
        (("merge", t.id, "--into", "../x"), "--into branch"),
        (("merge", t.id, "--into", t.branch or ""), "into itself"),
    ]
    for args, message in cases:
        res = cli(repo, *args)
        assert res.returncode == 1, (args, res.stdout, res.stderr)
        assert message in res.stderr and res.stderr.count("\n") == 1, (args, res.stderr)
    with pytest.raises(InvalidInput, match="unknown merge strategy"):
        merge_task(layout, config, t.id, "octopus")
    with pytest.raises(NotFound):
        merge_task(layout, config, "task_098")
    assert get(repo, t.id).status is Status.REVIEW


def test_merging_a_blocker_keeps_its_dependant_ready(repo: Path) -> None:
    layout, config = lc(repo)
    a = keep(repo, "blocker", {"a.txt": "a\n"})
    with open_board(layout) as board:
        dep = board.add("dependant", blocked_by=[a.id])
        assert [t.id for t in board.ready()] == [dep.id]
        merge_task(layout, config, a.id, board=board)
        assert [t.id for t in board.ready()] == [dep.id]
        assert board.get(a.id).status is Status.MERGED


def test_discard_with_uncommitted_work_refuses_then_force_keeps_a_snapshot(repo: Path,
                                                                         cli: Cli) -> None:
    layout, config = lc(repo)
    t = keep(repo, "throw away", {"t.txt": "t\n"})
    wt = Path(t.worktree or "")
    (wt / "wip.txt").write_text("work in progress\n")
    res = cli(repo, "discard", t.id)
    assert res.returncode == 1
    assert "uncommitted or untracked change(s): wip.txt" in res.stderr
    assert "--force" in res.stderr
    assert wt.exists() and get(repo, t.id).status is Status.REVIEW
    res = cli(repo, "discard", t.id, "--force", "--json")
    assert res.returncode == 0, res.stderr
    import json

    out = json.loads(res.stdout)
    snap = f"refs/orchestrator/snapshots/{t.id}"
    assert out["snapshot"] == snap and out["task"]["status"] == "discarded"
    assert git(repo, "show", f"{snap}:wip.txt") == "work in progress"
    assert git(repo, "show", f"{snap}:t.txt") == "t"
    assert not wt.exists() and git(repo, "branch", "--list", t.branch or "") == ""
    assert get(repo, t.id).status is Status.DISCARDED
    kinds = [e["event"] for e in EventLog(layout.events).read(task=t.id)]
    assert "worktree_removed" in kinds and "discarded" in kinds
    with pytest.raises(InvalidTransition):
        discard_task(layout, config, t.id)


def test_discard_keeps_committed_unmerged_work_under_the_snapshot_ref(repo: Path) -> None:
    """Reviewed work is on its branch: discarding it needs no --force, and loses nothing."""
    layout, config = lc(repo)
    t = keep(repo, "committed", {"c.txt": "c\n"})
    res = discard_task(layout, config, t.id)
    assert res.snapshot and git(repo, "show", f"{res.snapshot}:c.txt") == "c"


def test_retry_appends_feedback_and_keeps_worktree_and_branch(repo: Path, cli: Cli) -> None:
    layout, config = lc(repo)
    t = keep(repo, "again", {"r.txt": "r\n"}, max_attempts=2)
    res = cli(repo, "retry", t.id, "-m", "use the other API")
    assert res.returncode == 0, res.stderr
    again = get(repo, t.id)
    assert again.status is Status.PENDING
    assert again.feedback == ["use the other API"]
    assert again.branch == t.branch and again.worktree == t.worktree
    assert (Path(t.worktree or "") / "r.txt").exists()
    assert git(repo, "branch", "--list", t.branch or "") != ""
    with pytest.raises(Conflict, match="only a task in review or failed"):
        retry_task(layout, config, t.id, "again?")
    with open_board(layout) as board:  # a task that failed for good gets a fresh round
        claimed = board.claim("bob", task_id=t.id)
        assert claimed is not None and claimed.lease is not None
        board.fail(t.id, claimed.lease.token, "boom", retry=False)
        assert board.get(t.id).status is Status.FAILED
    task = retry_task(layout, config, t.id, "second note")
    assert task.feedback == ["use the other API", "second note"]
    assert task.attempts == 0 and task.error is None
    with pytest.raises(InvalidInput, match="empty"):
        retry_task(layout, config, t.id, "   ")
    from orchestrator.prompting import build_prompt

    assert "- second note" in build_prompt(task)  # what the next attempt sees


def test_diff_is_plain_when_piped_and_stat_summarises(repo: Path, cli: Cli) -> None:
    layout, config = lc(repo)
    t = keep(repo, "d", {"d.txt": "hello\n"})
    res = cli(repo, "diff", t.id)
    assert res.returncode == 0, res.stderr
    assert "+hello" in res.stdout and "\x1b[" not in res.stdout
    stat = cli(repo, "diff", t.id, "--stat").stdout
    assert "d.txt" in stat and "1 insertion" in stat
    assert "\x1b[" in diff_text(layout, config, t.id, color=True)
    with open_board(layout) as board:
        fresh = board.add("never ran")
    res = cli(repo, "diff", fresh.id)
    assert res.returncode == 1 and "has no branch yet" in res.stderr


def test_diff_on_a_terminal_goes_through_the_pager_in_colour(repo: Path, tmp_path: Path) -> None:
    from tests.helpers import run_on_terminal

    t = keep(repo, "d", {"d.txt": "hello\n"})
    paged = tmp_path / "paged.txt"
    shown = run_on_terminal(repo, ["diff", t.id], {"PAGER": f"tee '{paged}'"})
    text = paged.read_text()
    assert "hello" in shown and "\x1b[32m" in text
    assert "+hello" in re.sub(r"\x1b\[[0-9;]*m", "", text)
    missing = run_on_terminal(repo, ["diff", t.id], {"PAGER": "no-such-pager-here"})
    assert "hello" in missing  # no pager found: printed as it is


def test_review_and_discard_write_out_control_characters_an_agent_put_in_names(
        repo: Path) -> None:
    """A subject and a file name (an agent chooses both) with terminal escapes: the review
    table, its overlap line and discard print them written out, never raw."""
    evil_name = "f\x1b]52;c;eA==\x07.txt"
    a = keep(repo, "edit \x1b[2J cleared", {evil_name: "one\n"})
    keep(repo, "other", {evil_name: "two\n"})
    res = orch(repo, "review")
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout and "\x07" not in res.stdout, res.stdout
    assert "edit \\x1b[2J cleared" in res.stdout
    assert "f\\x1b]52;c;eA==\\x07.txt" in res.stdout  # the overlap line names the file
    res = orch(repo, "discard", a.id, "--force")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"discarded {a.id}: edit \\x1b[2J cleared\n"), res.stdout
