"""The worktree manager on real git repositories: create, bind, setup, keep/remove."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import msgspec
import pytest

from orchestrator.board.eventlog import EventLog
from orchestrator.board.tasklogs import TaskLog
from orchestrator.config import WorktreeConfig
from orchestrator.errors import InvalidInput, RunError, UnsafeRemoval
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.worktree import WorktreeManager, binding
from orchestrator.worktree.names import branch_name, check_branch, check_component, check_prefix
from tests.helpers import git, make_repo


def manager(repo: Path, **cfg: object) -> WorktreeManager:
    return WorktreeManager(Layout.at(repo).ensure(), WorktreeConfig(**cfg))  # type: ignore[arg-type]


def task(n: int = 1, subject: str = "Fix the login bug", **fields: object) -> Task:
    return Task(id=f"task_{n:03d}", subject=subject, **fields)  # type: ignore[arg-type]


def events(repo: Path) -> list[dict]:
    return list(EventLog(Layout.at(repo).events).read())


# --- create and bind ---------------------------------------------------------------

def test_create_binds_both_ways_and_task_ref_is_never_committed(repo: Path) -> None:
    m = manager(repo)
    t = task()
    ws = m.create(t)
    assert ws.path == repo / ".worktrees" / "task_001"
    assert ws.branch == "task/task_001-fix-the-login-bug"
    assert git(ws.path, "branch", "--show-current") == ws.branch
    assert ws.base == "main" and ws.base_commit == git(repo, "rev-parse", "HEAD")
    assert binding(ws) == {"worktree": str(ws.path), "branch": ws.branch, "base": "main",
                           "base_commit": ws.base_commit}
    assert json.loads((ws.path / ".task_ref").read_text())["task"] == "task_001"
    assert ws.env["ORCH_TASK_ID"] == "task_001" and ws.env["ORCH_WORKTREE"] == str(ws.path)
    assert int(ws.env["ORCH_PORT_BASE"]) >= 1024 and ws.env["ORCH_PORT_COUNT"] == "10"
    # git honours the exclude: status is clean and `add -A` does not pick the file up
    assert git(ws.path, "status", "--porcelain") == ""
    git(ws.path, "add", "-A")
    assert ".task_ref" not in git(ws.path, "ls-files")
    assert ".worktrees" not in git(repo, "status", "--porcelain")
    (created,) = [e for e in events(repo) if e["event"] == "worktree_created"]
    assert created["task"] == "task_001" and created["branch"] == ws.branch


def test_prefix_and_base_are_configurable(repo: Path) -> None:
    git(repo, "checkout", "-q", "-b", "develop")
    (repo / "dev.txt").write_text("dev\n")
    git(repo, "add", "dev.txt")
    git(repo, "commit", "-qm", "dev")
    git(repo, "checkout", "-q", "main")
    m = manager(repo, branch_prefix="agents/", base="develop")
    ws = m.create(task(2, "Add dev docs"))
    assert ws.branch == "agents/task_002-add-dev-docs"
    assert ws.base == "develop" and (ws.path / "dev.txt").exists()
    assert git(repo, "rev-parse", "develop") == ws.base_commit


def test_retried_task_resumes_in_its_worktree(repo: Path) -> None:
    m = manager(repo)
    t = task()
    ws = m.create(t)
    (ws.path / "wip.txt").write_text("half done\n")
    t2 = msgspec.structs.replace(t, **binding(ws))
    again = m.create(t2)
    assert again.path == ws.path and (again.path / "wip.txt").read_text() == "half done\n"
    assert again.env["ORCH_PORT_BASE"] == ws.env["ORCH_PORT_BASE"]
    assert [e["reused"] for e in events(repo) if e["event"] == "worktree_created"] == [False, True]


def test_worktree_folder_deleted_by_hand_is_recreated_from_the_branch(repo: Path) -> None:
    m = manager(repo)
    t = task()
    ws = m.create(t)
    (ws.path / "work.txt").write_text("committed work\n")
    git(ws.path, "add", "work.txt")
    git(ws.path, "commit", "-qm", "work")
    shutil.rmtree(ws.path)
    again = m.create(msgspec.structs.replace(t, **binding(ws)))
    assert (again.path / "work.txt").read_text() == "committed work\n"
    assert again.base_commit == ws.base_commit


def test_half_made_worktree_of_a_killed_add_is_redone_not_reused(repo: Path) -> None:
    m = manager(repo)
    t = task()
    ws = m.create(t)
    git(ws.path, "commit", "-q", "--allow-empty", "-m", "work on the branch")
    admin = Path(git(ws.path, "rev-parse", "--absolute-git-dir"))
    (admin / "locked").write_text("initializing\n")  # as `git worktree add` leaves it when killed
    (ws.path / "README.md").unlink()  # the checkout never finished
    again = m.create(msgspec.structs.replace(t, **binding(ws)))
    assert (again.path / "README.md").read_text() == "# sample\n"
    assert git(again.path, "status", "--porcelain") == ""
    assert git(again.path, "log", "-1", "--format=%s") == "work on the branch"


def test_branch_deleted_by_hand(repo: Path) -> None:
    m = manager(repo)
    t = task()
    ws = m.create(t)
    bound = msgspec.structs.replace(t, **binding(ws))
    git(repo, "update-ref", "-d", f"refs/heads/{ws.branch}")
    with pytest.raises(RunError, match="branch task/task_001-fix-the-login-bug is missing"):
        m.create(bound)
    with pytest.raises(UnsafeRemoval, match="cannot tell"):
        m.remove(bound)
    snap = m.remove(bound, force=True)
    assert snap is not None and not ws.path.exists()
    # folder and branch both gone: the task starts afresh, and says so
    again = m.create(bound)
    assert again.branch == ws.branch and again.path.exists()
    assert "started afresh" in [e for e in events(repo) if e["event"] == "worktree_created"][-1][
        "note"]


# --- bad input ---------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["", "..", ".", "a/b", "/etc", "a b", "x" * 101, "-rf",
                                 "name.lock", "é"])
def test_bad_name_components_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInput):
        check_component(bad, "task id")


@pytest.mark.parametrize("bad", ["/abs/branch", "a/../b", "a//b", "x" * 201, "a/.hidden"])
def test_bad_branch_names_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInput):
        check_branch(bad)


def test_good_names_pass() -> None:
    assert check_prefix("task/") == "task/" and check_prefix("") == ""
    assert branch_name("team/task/", "task_001", "fix-it") == "team/task/task_001-fix-it"


@pytest.mark.parametrize("prefix", ["../evil/", "/abs/", "a b/"])
def test_bad_branch_prefix_is_refused(repo: Path, prefix: str) -> None:
    with pytest.raises(InvalidInput, match="branch prefix"):
        manager(repo, branch_prefix=prefix)


def test_bad_names_from_a_hand_edited_task_touch_nothing(repo: Path) -> None:
    m = manager(repo)
    with pytest.raises(InvalidInput, match="task id"):
        hand_edited = task()
        hand_edited.id = "../escape"  # assignment checks nothing, as a hand-edited file
        m.create(hand_edited)
    with pytest.raises(InvalidInput, match="branch name"):
        m.create(task(branch="../../escape"))
    with pytest.raises(InvalidInput, match="absolute"):
        m.create(task(branch="/tmp/escape"))
    assert not (repo / ".worktrees" / "task_001").exists()
    assert git(repo, "worktree", "list").count("\n") == 0  # only the main worktree


def test_base_ref_that_does_not_exist(repo: Path) -> None:
    m = manager(repo, base="no-such-branch")
    with pytest.raises(InvalidInput, match="base ref 'no-such-branch' does not exist"):
        m.create(task())
    assert not (repo / ".worktrees" / "task_001").exists()


def test_repo_with_no_commits(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q", "-b", "main")
    with pytest.raises(InvalidInput, match="no commits yet"):
        manager(empty).create(task())


# --- setup -------------------------------------------------------------------------

def test_worktreeinclude_copies_only_ignored_files(repo: Path) -> None:
    (repo / ".gitignore").write_text(".env\nsecrets/\n.worktrees/\n.tasks/\n")
    (repo / ".worktreeinclude").write_text("# local config\n.env\nsecrets/\nnotes.txt\n")
    git(repo, "add", ".gitignore", ".worktreeinclude")
    git(repo, "commit", "-qm", "ignore")
    (repo / ".env").write_text("TOKEN=local\n")
    (repo / "secrets").mkdir()
    (repo / "secrets" / "key.pem").write_text("pem\n")
    (repo / "notes.txt").write_text("untracked but not ignored\n")
    ws = manager(repo).create(task())
    assert (ws.path / ".env").read_text() == "TOKEN=local\n"
    assert (ws.path / "secrets" / "key.pem").read_text() == "pem\n"
    assert not (ws.path / "notes.txt").exists()
    assert git(ws.path, "status", "--porcelain") == ""


def test_worktreeinclude_entry_outside_the_repo_is_refused(repo: Path) -> None:
    (repo.parent / "outside.env").write_text("secret\n")
    (repo / ".worktreeinclude").write_text("../outside.env\n")
    with pytest.raises(InvalidInput, match=r"line 1: '../outside.env' points outside"):
        manager(repo).create(task())


def test_setup_commands_run_in_the_worktree_and_their_output_is_logged(repo: Path) -> None:
    m = manager(repo, setup=['echo "port $ORCH_PORT_BASE in $(pwd)"', "touch setup-ran"])
    ws = m.create(task())
    assert (ws.path / "setup-ran").exists()
    logged = [r for r in TaskLog(m.layout, "task_001").read() if r["kind"] == "setup"]
    assert logged[0]["output"] == f"port {ws.env['ORCH_PORT_BASE']} in {ws.path}\n"
    (ws.path / "setup-ran").unlink()
    m.create(msgspec.structs.replace(task(), **binding(ws)))  # a resumed task is not set up twice
    assert not (ws.path / "setup-ran").exists()


def test_setup_command_that_fails_fails_that_task_only(repo: Path) -> None:
    m = manager(repo, setup=["echo broken dependency >&2; exit 3"])
    with pytest.raises(RunError, match=r"exit 3.*broken dependency") as info:
        m.create(task())
    assert info.value.task == "task_001"
    (log,) = TaskLog(m.layout, "task_001").read()
    assert log["exit"] == 3 and "broken dependency" in log["output"]
    ok = manager(repo, setup=["true"]).create(task(2, "Other"))
    assert ok.path.exists()


def test_setup_command_that_hangs_is_killed_at_the_timeout(repo: Path) -> None:
    m = manager(repo, setup=["echo started; sleep 60 & sleep 60"], setup_timeout=0.5)
    with pytest.raises(RunError, match=r"timed out after 0\.5s"):
        m.create(task())
    (log,) = TaskLog(m.layout, "task_001").read()
    assert log["timed_out"] and log["output"] == "started\n"
    # the autouse leak check proves both sleeps (same process group) are gone


def test_port_blocks_never_overlap_and_are_freed_on_remove(repo: Path) -> None:
    m = manager(repo, port_base=30000, port_block=5)
    spaces = [m.create(task(n, f"t{n}")) for n in (1, 2, 3)]
    bases = [int(ws.env["ORCH_PORT_BASE"]) for ws in spaces]
    assert bases == [30000, 30005, 30010]
    m.remove(task(2, "t2"))
    assert int(m.create(task(4, "t4")).env["ORCH_PORT_BASE"]) == 30005


# --- keep / remove, fail-closed -----------------------------------------------------

def test_keep_leaves_folder_and_branch(repo: Path) -> None:
    m = manager(repo)
    ws = m.create(task())
    m.keep(task())
    assert ws.path.exists() and git(repo, "branch", "--list", ws.branch)
    assert [e["event"] for e in events(repo)] == ["worktree_created", "worktree_kept"]


def test_clean_worktree_is_removed_with_its_branch(repo: Path) -> None:
    m = manager(repo)
    ws = m.create(task())
    assert m.remove(task()) is None
    assert not ws.path.exists() and not git(repo, "branch", "--list", ws.branch)
    removed = events(repo)[-1]
    assert removed["event"] == "worktree_removed" and removed["snapshot"] is None
    assert m.remove(task()) is None  # idempotent: nothing left to remove


def test_regression_new_branch_with_a_commit_and_no_upstream(repo: Path) -> None:
    """The classic bug: no upstream is read as "nothing to lose" and the commit is deleted."""
    m = manager(repo)
    t = task()
    ws = m.create(t)
    (ws.path / "feature.py").write_text("print('work')\n")
    git(ws.path, "add", "feature.py")
    git(ws.path, "commit", "-qm", "the only copy of this work")
    commit = git(ws.path, "rev-parse", "HEAD")
    assert git(ws.path, "status", "--porcelain") == ""  # clean, and no upstream
    with pytest.raises(UnsafeRemoval, match=r"1 commit.* not reachable from main"):
        m.remove(t)
    assert ws.path.exists() and git(repo, "rev-parse", ws.branch) == commit
    ref = m.remove(t, force=True)
    assert ref == "refs/orchestrator/snapshots/task_001"
    assert git(repo, "merge-base", "--is-ancestor", commit, ref) == ""  # exit 0: reachable
    assert git(repo, "show", f"{ref}:feature.py") == "print('work')"
    assert not ws.path.exists() and not git(repo, "branch", "--list", ws.branch)
    assert events(repo)[-1]["snapshot"] == ref


def test_uncommitted_and_untracked_changes_refuse_and_force_keeps_them(repo: Path) -> None:
    m = manager(repo)
    ws = m.create(task())
    (ws.path / "README.md").write_text("edited\n")
    (ws.path / "new.txt").write_text("untracked\n")
    (ws.path / "build.log").write_text("ignored\n")
    (ws.path / ".gitignore").write_text("build.log\n")
    with pytest.raises(UnsafeRemoval, match=r"3 uncommitted or untracked change\(s\)"):
        m.remove(task())
    ref = m.remove(task(), force=True)
    assert ref is not None
    assert git(repo, "show", f"{ref}:README.md") == "edited"
    assert git(repo, "show", f"{ref}:new.txt") == "untracked"
    files = git(repo, "ls-tree", "-r", "--name-only", ref).split()
    assert "build.log" not in files and ".task_ref" not in files
    assert git(repo, "rev-parse", f"{ref}^") == git(repo, "rev-parse", "main")


def test_a_second_forced_removal_keeps_the_first_snapshot(repo: Path) -> None:
    m = manager(repo)
    for text in ("first\n", "second\n"):
        ws = m.create(task())
        (ws.path / "draft.txt").write_text(text)
        m.remove(task(), force=True)
    ref = "refs/orchestrator/snapshots/task_001"
    assert git(repo, "show", f"{ref}:draft.txt") == "second"
    assert git(repo, "show", f"{ref}^2:draft.txt") == "first"


def test_remove_refuses_when_it_cannot_tell(repo: Path) -> None:
    m = manager(repo)
    t = task(base="gone-branch", base_commit="0" * 40)
    ws = m.create(t)
    git(repo, "branch", "-m", "main", "trunk")  # the configured base (HEAD -> main) moves away
    git(ws.path, "commit", "-q", "--allow-empty", "-m", "work")
    with pytest.raises(UnsafeRemoval, match="not reachable"):
        m.remove(t)
    cfg = WorktreeConfig(base="no-such-base")
    lost = WorktreeManager(m.layout, cfg)
    with pytest.raises(UnsafeRemoval, match=r"cannot tell: the base .* does not exist"):
        lost.remove(t)
    assert ws.path.exists()


def test_remove_after_the_folder_was_deleted_by_hand(repo: Path) -> None:
    m = manager(repo)
    ws = m.create(task())
    git(ws.path, "commit", "-q", "--allow-empty", "-m", "work")
    shutil.rmtree(ws.path)
    with pytest.raises(UnsafeRemoval, match="1 commit"):
        m.remove(task())
    ref = m.remove(task(), force=True)
    assert ref and git(repo, "log", "-1", "--format=%s", f"{ref}^") == "work"
    assert "prunable" not in git(repo, "worktree", "list", "--porcelain")


def test_remove_refuses_a_folder_that_is_not_a_worktree(repo: Path) -> None:
    m = manager(repo)
    stray = repo / ".worktrees" / "task_001"
    stray.mkdir(parents=True)
    (stray / "precious.txt").write_text("mine\n")
    with pytest.raises(UnsafeRemoval, match="not a worktree"):
        m.remove(task(), force=True)
    with pytest.raises(RunError, match="exists but is not a worktree"):
        m.create(task())
    assert (stray / "precious.txt").read_text() == "mine\n"


def test_status_reports_dirty_ahead_and_disk_use(repo: Path) -> None:
    m = manager(repo)
    t = task()
    ws = m.create(t)
    assert msgspec.to_builtins(m.status(t)) | {"disk_bytes": 0} == {
        "task": "task_001", "status": "pending", "branch": ws.branch, "path": str(ws.path),
        "exists": True, "branch_exists": True, "dirty": False, "changes": 0, "ahead": 0,
        "disk_bytes": 0}
    (ws.path / "a.txt").write_text("x" * 5000)
    git(ws.path, "add", "a.txt")
    git(ws.path, "commit", "-qm", "a")
    (ws.path / "b.txt").write_text("b")
    s = m.status(t)
    assert s.dirty and s.changes == 1 and s.ahead == 1 and s.disk_bytes > 5000
    m.remove(t, force=True)
    gone = m.status(t)
    assert not gone.exists and not gone.branch_exists and gone.dirty is None


def test_separate_repositories_do_not_share_state(tmp_path: Path) -> None:
    a, b = make_repo(tmp_path / "a"), make_repo(tmp_path / "b")
    wa, wb = manager(a).create(task()), manager(b).create(task())
    assert wa.path.parent.parent == a and wb.path.parent.parent == b


def test_removal_without_changes_runs_six_git_processes_and_a_dirty_one_still_refuses(
        repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator import git as gitmod

    calls: list[tuple[str, ...]] = []
    real = gitmod.Git.run

    def counted(self: gitmod.Git, *args: str, **kw: object) -> object:
        calls.append(args)
        return real(self, *args, **kw)  # type: ignore[arg-type]

    (repo / ".gitignore").write_text("*.log\nnode_modules/\n")
    git(repo, "add", ".gitignore")
    git(repo, "commit", "-qm", "ignore")
    monkeypatch.setattr(gitmod.Git, "run", counted)
    m = WorktreeManager(Layout.at(repo, tmp_path / "wt").ensure(), WorktreeConfig(), None)
    m.prepare()
    calls.clear()
    task = Task(id="task_001", subject="clean")
    ws = m.create(task)
    (ws.path / "node_modules" / "pkg").mkdir(parents=True)
    (ws.path / "node_modules" / "pkg" / "index.js").write_text("x\n")
    (ws.path / "logs").mkdir()
    (ws.path / "logs" / "run.log").write_text("ran\n")  # ignored, in a folder git has not
    m.remove(task)
    # create: cat-file (the branch and its base), worktree add -b; remove: cat-file,
    # worktree list (is the branch checked out elsewhere?), status (changes, and the
    # ignored files to keep), rev-list (its tip is held by the base: no snapshot),
    # worktree remove, update-ref
    assert [c[0] for c in calls] == ["cat-file", "worktree", "cat-file", "worktree", "status",
                                     "rev-list", "worktree", "update-ref"]
    assert not ws.path.exists() and not git(repo, "branch", "--list", ws.branch).strip()
    assert m.kept_ignored is not None
    assert (m.kept_ignored / "node_modules" / "pkg" / "index.js").read_text() == "x\n"
    assert (m.kept_ignored / "logs" / "run.log").read_text() == "ran\n"
    assert not (m.kept_ignored / ".task_ref").exists()
    dirty = Task(id="task_002", subject="dirty")
    ws = m.create(dirty)
    (ws.path / "new.txt").write_text("work\n")
    with pytest.raises(UnsafeRemoval, match=r"new\.txt"):
        m.remove(dirty)
    assert (ws.path / "new.txt").read_text() == "work\n"


def test_a_branch_whose_commits_no_other_ref_holds_leaves_a_snapshot(repo: Path) -> None:
    """A commit on the task's branch that is then made reachable from the base (a merge)
    needs no snapshot; one that only the branch holds does, although nothing is at risk
    for `risks` once the base's name moved onto it and back."""
    m = manager(repo)
    t = task(1)
    ws = m.create(t)
    (ws.path / "a.txt").write_text("a\n")
    git(ws.path, "add", "a.txt")
    git(ws.path, "commit", "-qm", "a")
    tip = git(ws.path, "rev-parse", "HEAD").strip()
    # the recorded base commit is the tip (a hand-edited task file): nothing looks ahead
    hidden = msgspec.structs.replace(t, base=tip, base_commit=tip)
    assert m.remove(hidden) == "refs/orchestrator/snapshots/task_001"
    assert git(repo, "rev-parse", "refs/orchestrator/snapshots/task_001^1").strip() == tip


def test_the_repository_lock_excludes_threads_and_processes_and_lets_its_holder_reenter(
        tmp_path: Path) -> None:
    import threading

    from orchestrator.flock import FileLocked, flocked
    from orchestrator.worktree.lock import RepoLock

    path = tmp_path / "worktree.lock"
    lock = RepoLock(path)
    order: list[str] = []
    with lock:
        with lock:  # the holding thread takes it again
            order.append("nested")
        with pytest.raises(FileLocked):  # another holder of the file (a process) waits
            with flocked(path, 0):
                pass
        other = threading.Thread(target=lambda: (lock.__enter__(), order.append("thread"),
                                                 lock.__exit__(None, None, None)))
        other.start()
        other.join(0.2)
        assert other.is_alive() and order == ["nested"]  # the other thread waits
        order.append("released")
    other.join(10)
    assert order == ["nested", "released", "thread"]
    with flocked(path, 0):  # free again
        pass
