"""A sandboxed agent's git writes reach only its own branch, its worktree's index and
new objects (issue 16, part 5): real git inside the real bubblewrap sandbox."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.tools.shell import BashTool
from orchestrator.errors import GitError
from orchestrator.model import Task
from orchestrator.sandbox import Sandbox, safe_env
from orchestrator.team.commit import commit_leftovers
from tests.helpers import git
from tests.test_sandbox import needs_bwrap

pytestmark = needs_bwrap


@pytest.fixture
def worktree(repo: Path) -> Path:
    wt = repo.parent / "wt"
    git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(wt))
    git(repo, "branch", "task/002-other")
    git(repo, "update-ref", "refs/orchestrator/snapshots/task_009", "HEAD")
    return wt


def bash(worktree: Path, command: str) -> ToolResult:
    ctx = ToolContext(cwd=worktree, env=safe_env(os.environ),
                      sandbox=Sandbox.detect("on"))
    return BashTool().run({"command": command, "timeout": 60}, ctx)


def refs(repo: Path) -> str:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)")


ATTACKS = {
    "main index": "git -C {repo} rm -r -q --cached . && git -C {repo} commit -qm wipe",
    "main HEAD": "git -C {repo} update-ref HEAD $(git rev-parse HEAD~0)^{{tree}}",
    "snapshot ref": "git update-ref -d refs/orchestrator/snapshots/task_009",
    "move main": "git branch -f main HEAD",
    "tag": "git tag v1",
    "other branch": "git update-ref refs/heads/other HEAD",
    "new branch": "git checkout -q -b feature",
    "switch HEAD": "git symbolic-ref HEAD refs/heads/main",
    "detach HEAD": "git checkout -q --detach",
    "config": "git config core.hooksPath /tmp",
    "hook": "echo 'touch /tmp/pwned' > {common}/hooks/post-commit",
    "packed refs": "echo junk >> {common}/packed-refs",
    "repoint .git": "echo 'gitdir: {common}' > .git",
    "admin gitdir": "echo {repo}/.git > {admin}/gitdir",
}


def test_git_writes_outside_the_task_branch_fail_inside_the_sandbox(
        repo: Path, worktree: Path) -> None:
    common, admin = repo / ".git", repo / ".git/worktrees/wt"
    before, main_index = refs(repo), (common / "index").read_bytes()
    script = "\n".join(
        f"( {cmd.format(repo=repo, common=common, admin=admin)} ) >/dev/null 2>&1 "
        f"&& echo 'WROTE {name}' || echo 'refused {name}'"
        for name, cmd in ATTACKS.items())
    out = bash(worktree, script).content
    assert out.count("refused") == len(ATTACKS), out
    assert refs(repo) == before
    assert (common / "index").read_bytes() == main_index
    assert git(repo, "status", "--porcelain") == ""
    assert (admin / "HEAD").read_text() == "ref: refs/heads/task/001-x\n"
    assert not (common / "hooks/post-commit").exists()
    assert git(worktree, "rev-parse", "--abbrev-ref", "HEAD") == "task/001-x"


def test_commits_on_the_own_branch_work_and_reach_the_real_ref(
        repo: Path, worktree: Path) -> None:
    before = refs(repo)
    out = bash(worktree, "echo one > a.txt && git add a.txt && git commit -qm one && "
                         "echo two >> a.txt && git commit -qam two && git log --format=%s && "
                         "git branch task/003-sneaky && git update-ref refs/heads/task/002-other "
                         "HEAD && echo done").content
    assert out == "two\none\ninitial\ndone\n", out
    assert git(repo, "log", "--format=%s", "task/001-x") == "two\none\ninitial"
    assert git(repo, "reflog", "-1", "--format=%gs", "task/001-x").startswith("commit")
    # what else was written under the branch's prefix stayed in the scratch copy
    after = dict(line.split() for line in refs(repo).splitlines())
    assert "refs/heads/task/003-sneaky" not in after
    assert after["refs/heads/task/002-other"] == dict(
        line.split() for line in before.splitlines())["refs/heads/task/002-other"]
    # a later command sees the branch where the last one left it, also after a move outside
    (worktree / "b.txt").write_text("b\n")
    sha = commit_leftovers(worktree, Task(id="task_001", subject="Leftovers"), "alice")
    out = bash(worktree, "git rev-parse HEAD && git commit -q --allow-empty -m three && "
                         "git rev-parse HEAD~1").content.split()
    assert out[0] == out[1] == sha
    assert git(repo, "log", "-1", "--format=%s", "task/001-x") == "three"


def test_the_teammate_never_commits_through_a_moved_head(repo: Path, worktree: Path) -> None:
    # an unsandboxed backend (or a person) points the worktree's HEAD at main
    git(worktree, "symbolic-ref", "HEAD", "refs/heads/main")
    (worktree / "c.txt").write_text("c\n")
    main = git(repo, "rev-parse", "main")
    with pytest.raises(GitError, match="not on the task's branch task/001-x"):
        commit_leftovers(worktree, Task(id="task_001", subject="x", branch="task/001-x"),
                         "alice")
    assert git(repo, "rev-parse", "main") == main
