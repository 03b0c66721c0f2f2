"""Issue 29 item 4: host git never runs what the agent wrote.

The agent's side: hook scripts under a husky-style relative ``core.hooksPath`` (every
hook git knows), a ``config.worktree`` naming an fsmonitor program and filter, diff,
merge drivers (with ``extensions.worktreeConfig`` on, as a sparse checkout turns it),
a ``.gitattributes`` naming those drivers, an ``include.path``, and a nested repository
with its own fsmonitor, hooks and filter. Orchestrator's commit, dirty check, diff,
review, merge and land then run; every program the agent named would leave a marker
file, and none may appear.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.errors import GitError
from orchestrator.git import Git, git_env
from orchestrator.model import Task
from orchestrator.team.commit import commit_leftovers
from orchestrator.worktree.safety import dirty_paths
from tests.helpers import git
from tests.test_review import get, keep, orch

HOOKS = ("applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit",
         "pre-merge-commit", "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase",
         "post-checkout", "post-merge", "pre-push", "post-rewrite", "reference-transaction",
         "post-index-change", "pre-auto-gc", "push-to-checkout")


def marker_script(folder: Path, name: str, marks: Path, tail: str = "") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\ntouch '{marks}/{name.replace('/', '_')}'\n{tail}")
    path.chmod(0o755)
    return path


@pytest.fixture
def marks(tmp_path: Path) -> Path:
    folder = tmp_path / "marks"
    folder.mkdir()
    return folder


def ran(marks: Path) -> list[str]:
    return sorted(p.name for p in marks.iterdir())


def test_husky_style_hooks_in_the_task_branch_never_run(repo: Path, marks: Path) -> None:
    hooks = {f".husky/_/{h}": f"#!/bin/sh\ntouch '{marks}/{h}'\n" for h in HOOKS}
    task = keep(repo, "adds husky hooks", {**hooks, "a.txt": "a\n"})
    other = keep(repo, "lands after the merge", {"c.txt": "c\n"})
    wt = Path(task.worktree or "")
    for name in hooks:
        (wt / name).chmod(0o755)
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
    git(repo, "config", "core.hooksPath", ".husky/_")  # what husky writes: relative
    (wt / "b.txt").write_text("left by the agent\n")
    sha = commit_leftovers(wt, Task(id=task.id, subject="more", branch=task.branch), "alice")
    assert sha is not None
    assert dirty_paths(wt) == []
    res = orch(repo, "diff", task.id)
    assert res.returncode == 0 and "left by the agent" in res.stdout, res.stderr
    assert orch(repo, "review").returncode == 0
    res = orch(repo, "merge", task.id)
    assert res.returncode == 0, res.stderr
    assert (repo / ".husky/_/post-merge").exists()  # the hooks are on main now: still off
    res = orch(repo, "land", other.id, "--verify", "true")
    assert res.returncode == 0, res.stdout + res.stderr
    assert get(repo, other.id).status.value == "merged"
    assert ran(marks) == []


def agent_worktree_config(repo: Path, wt: Path, marks: Path) -> None:
    """What an agent writes into its worktree's admin folder and tree."""
    git(repo, "config", "extensions.worktreeConfig", "true")  # a sparse checkout's doing
    admin = Path(git(wt, "rev-parse", "--absolute-git-dir"))
    fsmonitor = marker_script(marks.parent / "agent", "fsmonitor", marks)
    clean = marker_script(marks.parent / "agent", "clean", marks, "cat\n")
    textconv = marker_script(marks.parent / "agent", "textconv", marks, 'cat "$1"\n')
    driver = marker_script(marks.parent / "agent", "merge-driver", marks, "exit 1\n")
    included = marks.parent / "agent" / "included"
    included.write_text(f"[core]\n\tfsmonitor = {fsmonitor}\n")
    (admin / "config.worktree").write_text(
        f"[core]\n\tsparseCheckout = false\n\tfsmonitor = {fsmonitor}\n"
        f"[filter \"ev\"]\n\tclean = {clean}\n\tsmudge = {clean}\n"
        f"[diff \"tc\"]\n\ttextconv = {textconv}\n\tcommand = {textconv}\n"
        f"[merge \"md\"]\n\tdriver = {driver}\n[include]\n\tpath = {included}\n")
    (wt / ".gitattributes").write_text("* filter=ev diff=tc merge=md\n")


def test_a_worktree_config_the_agent_wrote_is_refused_and_runs_nothing(
        repo: Path, marks: Path) -> None:
    task = keep(repo, "the agent's config", {"a.txt": "a\n"})
    wt = Path(task.worktree or "")
    agent_worktree_config(repo, wt, marks)
    (wt / "a.txt").write_text("changed\n")
    with pytest.raises(GitError, match=r"config\.worktree sets .*fsmonitor"):
        commit_leftovers(wt, Task(id=task.id, subject="x", branch=task.branch), "alice")
    with pytest.raises(GitError, match=r"config\.worktree"):
        dirty_paths(wt)  # fail closed: a removal cannot tell, so it refuses
    res = orch(repo, "discard", task.id)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert wt.exists()
    assert orch(repo, "diff", task.id).returncode == 0  # the main checkout's view
    admin = Path(git(wt, "rev-parse", "--absolute-git-dir"))
    (admin / "config.worktree").write_text(  # what git sparse-checkout writes: fine
        "[core]\n\tsparseCheckout = true\n\tsparseCheckoutCone = true\n[index]\n\tsparse = false\n")
    assert commit_leftovers(wt, Task(id=task.id, subject="x", branch=task.branch), "alice")
    assert ran(marks) == []


def test_a_nested_repository_the_agent_made_runs_nothing(repo: Path, marks: Path) -> None:
    task = keep(repo, "nested", {"a.txt": "a\n"})
    wt = Path(task.worktree or "")
    sub = wt / "sub"
    sub.mkdir()
    git(sub, "init", "-q")
    (sub / "x.txt").write_text("x\n")
    git(sub, "add", "-A")
    git(sub, "commit", "-qm", "x")
    fsmonitor = marker_script(marks.parent / "agent", "sub-fsmonitor", marks)
    clean = marker_script(marks.parent / "agent", "sub-clean", marks, "cat\n")
    for h in HOOKS:
        marker_script(sub / ".git" / "hooks", h, marks)
    git(sub, "config", "core.fsmonitor", str(fsmonitor))
    git(sub, "config", "filter.ev.clean", str(clean))
    (sub / ".gitattributes").write_text("* filter=ev\n")
    t = Task(id=task.id, subject="with sub", branch=task.branch)
    assert commit_leftovers(wt, t, "alice")
    (sub / "x.txt").write_text("changed in the nested repository\n")
    os.utime(sub / "x.txt", (1, 1))
    dirty_paths(wt)
    commit_leftovers(wt, t, "alice")
    assert orch(repo, "diff", task.id).returncode == 0
    assert ran(marks) == []


def test_the_persons_own_config_count_is_kept_and_ours_come_last(
        monkeypatch: pytest.MonkeyPatch, repo: Path) -> None:
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "user.name")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "Person")
    monkeypatch.setenv("GIT_CONFIG_KEY_1", "core.hooksPath")  # a stale extra: overwritten
    monkeypatch.setenv("GIT_CONFIG_VALUE_1", "/somewhere")
    env = git_env()
    assert env["GIT_CONFIG_KEY_0"] == "user.name" and env["GIT_CONFIG_KEY_1"] == "core.hooksPath"
    out = Git(repo).run("config", "--get-all", "core.hooksPath").stdout.split()
    assert out[-1] == os.devnull
    assert Git(repo).out("config", "user.name") == "Person"
