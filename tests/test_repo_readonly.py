"""The user's repository is read-only to a sandboxed agent; what it commits enters only
through a verifying import (issue 29, guarantee 3): real git in the real sandbox."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.tools.shell import BashTool
from orchestrator.sandbox import Sandbox, safe_env
from tests.helpers import git
from tests.test_sandbox import needs_bwrap

pytestmark = needs_bwrap


def bash(worktree: Path, command: str) -> ToolResult:
    ctx = ToolContext(cwd=worktree, env=safe_env(os.environ), sandbox=Sandbox.detect("on"))
    return BashTool().run({"command": command, "timeout": 60}, ctx)


def snapshot(common: Path) -> dict[str, bytes]:
    """Every file of the git folder but the task branch's own ref and reflog."""
    out = {}
    for p in sorted(common.rglob("*")):
        rel = str(p.relative_to(common))
        if p.is_file() and "task/001-x" not in rel and not rel.startswith("logs/refs/heads/task"):
            out[rel] = p.read_bytes()
    return out


def loose_blob(repo: Path, path: str) -> tuple[str, Path]:
    sha = git(repo, "rev-parse", f"main:{path}")
    obj = repo / ".git/objects" / sha[:2] / sha[2:]
    assert obj.is_file()
    return sha, obj


def test_the_agent_cannot_change_any_file_of_the_repository(repo: Path) -> None:
    wt = repo / ".worktrees/task_001"
    git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(wt))
    common, admin = repo / ".git", repo / ".git/worktrees/task_001"
    sha, obj = loose_blob(repo, "README.md")
    before = snapshot(common)
    script = f"""
    o={obj}; b=/.orchestrator/objects/{sha[:2]}/{sha[2:]}
    printf 'echo pwned\\n' > evil.txt; evil=$(git hash-object -w evil.txt)
    e=$(git rev-parse --git-path objects)/${{evil:0:2}}/${{evil:2}}
    # replace main's loose object under the same id, through every path it has
    chmod u+w $o; rm -f $o; cp $e $o
    chmod u+w $b; rm -f $b; cp $e $b; ln -sf $e $b
    mkdir -p {common}/objects/{sha[:2]}; cp $e {common}/objects/{sha[:2]}/{sha[2:]}
    echo $(git rev-parse HEAD) > {common}/refs/heads/main
    git update-ref refs/heads/main $(git commit-tree -m x HEAD^{{tree}})
    echo "$(git rev-parse HEAD) refs/heads/evil" >> {common}/packed-refs
    printf '[core]\\n\\thooksPath = /tmp\\n' >> {common}/config
    printf '[core]\\n\\tfsmonitor = touch /tmp/x\\n' > {common}/config.worktree
    printf '[core]\\n\\tfsmonitor = touch /tmp/x\\n' > {admin}/config.worktree
    printf '#!/bin/sh\\ntouch /tmp/x\\n' > {common}/hooks/post-checkout
    printf '* filter=evil\\n' > {common}/info/attributes
    echo /tmp > {common}/objects/info/alternates
    rm -rf {common}/objects/pack {common}/refs/tags
    echo junk > {admin}/index; echo 'ref: refs/heads/main' > {admin}/HEAD
    echo /tmp > {admin}/gitdir; echo /tmp > {admin}/commondir; echo x > {admin}/ORIG_HEAD
    echo 'gitdir: /tmp' > .git
    git gc -q --prune=now; git repack -adq
    echo finished
    """
    out = bash(wt, script).content
    assert out.rstrip().endswith("finished"), out
    after = snapshot(common)
    assert after == before, sorted(k for k in {*before, *after}
                                   if before.get(k) != after.get(k))
    assert (wt / ".git").read_text() == f"gitdir: {admin}\n"
    git(repo, "fsck", "--strict", "--no-dangling")
    # the next task checks out the real code
    nxt = repo / ".worktrees/task_002"
    git(repo, "worktree", "add", "-q", "-b", "task/002-y", str(nxt), "main")
    assert (nxt / "README.md").read_text() == "# sample\n"
    assert git(nxt, "cat-file", "-p", sha) == "# sample"


def test_commits_enter_only_through_a_verifying_import(repo: Path) -> None:
    wt = repo / ".worktrees/task_001"
    git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(wt))
    start = git(repo, "rev-parse", "task/001-x")
    # a tree with a .git entry (fsck: hasDotgit), committed on the task's own branch
    out = bash(wt, "b=$(echo evil | git hash-object -w --stdin) && "
                   "t=$(printf '100644 blob %s\\t.git\\n' $b | git mktree) && "
                   "c=$(git commit-tree -p HEAD -m evil $t) && git update-ref HEAD $c && "
                   "git rev-parse HEAD").content
    assert "not imported" in out and "index-pack" in out, out
    assert git(repo, "rev-parse", "task/001-x") == start
    # a commit whose tree is missing (written only under a forged id)
    out = bash(wt, "t=$(git rev-parse HEAD^{tree}) && "
                   "c=$(printf 'tree %s\\nauthor a <a> 1 +0000\\ncommitter a <a> 1 +0000\\n\\nx\\n'"
                   " 1111111111111111111111111111111111111111 | "
                   "git hash-object -t commit -w --stdin --literally) && "
                   "git update-ref HEAD $c && echo moved").content
    assert "not imported" in out, out
    assert git(repo, "rev-parse", "task/001-x") == start
    # an honest commit comes through, packed, and its objects are the repository's own
    out = bash(wt, "echo hi > new.txt && git add new.txt && git commit -qm honest && "
                   "git rev-parse HEAD").content
    tip = out.split()[0]
    assert git(repo, "rev-parse", "task/001-x") == tip
    assert git(repo, "show", f"{tip}:new.txt") == "hi"
    assert not list((repo / ".git/objects").glob("incoming-*"))
    git(repo, "fsck", "--strict", "--no-dangling")


def test_a_command_wrapped_without_a_confinement_cannot_write_the_repository(
        repo: Path) -> None:
    wt = repo / ".worktrees/task_001"
    git(repo, "worktree", "add", "-q", "-b", "task/001-x", str(wt))
    before = snapshot(repo / ".git")
    argv = Sandbox.detect("on").wrap(
        ["sh", "-c", "git commit -q --allow-empty -m x; touch $(git rev-parse --git-dir)/x "
                     "$(git rev-parse --git-common-dir)/objects/x; echo done"], wt)
    out = subprocess.run(argv, cwd=wt, capture_output=True, text=True, timeout=60, check=False)
    assert "done" in out.stdout and "Read-only file system" in out.stderr, out.stderr
    assert snapshot(repo / ".git") == before


def test_scratch_left_by_a_killed_process_is_removed_by_the_next() -> None:
    from orchestrator.sandbox import scratch as scratch_mod

    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = scratch_mod.scratch("git")  # this process's: kept while it lives
    left = mine.parent / f"orch-git-{dead.pid}-left"
    left.mkdir()
    (left / "objects").mkdir()
    other_kind = mine.parent / f"orch-gitx-{dead.pid}-kept"
    other_kind.mkdir()
    try:
        scratch_mod._sweep.cache_clear()
        fresh = scratch_mod.scratch("git")
        assert not left.exists() and mine.exists() and fresh.exists() and other_kind.exists()
    finally:
        for p in (mine, fresh, left, other_kind):
            __import__("shutil").rmtree(p, ignore_errors=True)
