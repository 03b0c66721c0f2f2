"""The shared git remote of a team across machines (a PostgreSQL board, ``[board] url``).

Each machine has its own clone; the remote (``origin`` by default, ``[board] remote``)
is where their work meets:

- `Remote.prepare` before a task's worktree is made: the base branch is fetched (new
  branches start from ``<remote>/<base>``, not from a stale local branch), and so are
  the branches of the task's blockers and, when this machine has no branch for the task
  yet, the task's own branch or its work-in-progress snapshot, so a task that another
  machine started resumes where that machine left it.
- `Remote.snapshot` after an agent step that changed files: the worktree's state
  (committed or not, untracked files included, ignored ones not) becomes a commit on top
  of the branch, pushed as ``refs/orchestrator/wip/<task>``; the worktree and its index
  are not touched.
- `Remote.push_branch` on completion; `Remote.fetch_branches` before review, diff and
  merge; `Remote.push_base` after a merge, refusing with git's reason when the remote
  moved or rejects the push.

Every git error is a `GitError` carrying git's own words.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import Conflict, GitError
from orchestrator.worktree.git import Git
from orchestrator.worktree.names import check_branch

if TYPE_CHECKING:
    from orchestrator.config import Config
    from orchestrator.controlplane import Board
    from orchestrator.model import Task

WIP_PREFIX = "refs/orchestrator/wip/"


def wip_ref(task_id: str) -> str:
    return f"{WIP_PREFIX}{task_id}"


class Remote:
    """One clone's view of the shared remote."""

    def __init__(self, root: Path, name: str = "origin") -> None:
        self.repo = Git(root)
        self.name = name

    @classmethod
    def for_config(cls, root: Path, config: Config) -> Remote | None:
        """The remote of a team across machines (a PostgreSQL board and a clone with the
        configured remote); None for a single-machine set-up."""
        if not config.board.url:
            return None
        remote = cls(root, config.board.remote)
        return remote if remote.exists() else None

    def exists(self) -> bool:
        return self.repo.ok("remote", "get-url", self.name)

    def base_branch(self, base: str) -> str | None:
        """The branch a configured base names (``HEAD``: the main checkout's branch)."""
        if base != "HEAD":
            return base.removeprefix("refs/heads/")
        out = self.repo.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        return out.stdout.strip() if out.returncode == 0 else None

    def prepare(self, task: Task, branch: str | None, board: Board,
                base: str) -> str | None:
        """Before a task's worktree is made on this machine: fetch the base, the blockers'
        branches and (when this clone lacks it) the task's branch or WIP snapshot. Returns
        the remote-tracking ref new branches should start from (None: the local base)."""
        blockers = []
        for b in task.blocked_by:
            try:
                blocker = board.get(b)
            except Exception:  # a missing blocker is the board's problem, shown there
                continue
            if blocker.branch:
                blockers.append(blocker.branch)
        self.fetch_branches(blockers)
        if branch:
            self.adopt(branch, task.id)
        name = self.base_branch(base)
        return self.fetch_base(name) if name else None

    def _fetch(self, *refspecs: str) -> None:
        self.repo.run("fetch", "--quiet", "--no-tags", self.name, *refspecs)

    def remote_ref(self, branch: str) -> str:
        return f"refs/remotes/{self.name}/{branch}"

    # --- before a task's worktree is made ---------------------------------------------
    def fetch_base(self, base: str) -> str | None:
        """Fetch ``base`` from the remote; the remote-tracking ref, or None when the remote
        has no such branch (the local one is used then)."""
        check_branch(base, "base branch")
        out = self.repo.run("fetch", "--quiet", "--no-tags", self.name,
                            f"+refs/heads/{base}:{self.remote_ref(base)}", check=False)
        return self.remote_ref(base) if out.returncode == 0 else None

    def adopt(self, branch: str, task_id: str) -> str | None:
        """When this clone has no ``branch``: make it from the remote's WIP snapshot of the
        task (the newest state) or else the remote's branch. The commit, or None."""
        check_branch(branch, "task branch")
        if self.repo.branch_exists(branch):
            return None
        for src, dst in ((wip_ref(task_id), wip_ref(task_id)),
                         (f"refs/heads/{branch}", self.remote_ref(branch))):
            got = self.repo.run("fetch", "--quiet", "--no-tags", self.name, f"+{src}:{dst}",
                                check=False)
            if got.returncode == 0:
                commit = self.repo.commit_of(dst)
                if commit:
                    self.repo.run("branch", "--no-track", branch, commit)
                    return commit
        return None

    # --- while and after a task runs --------------------------------------------------
    def snapshot(self, worktree: Path, task_id: str) -> str | None:
        """Push the worktree's whole state as ``refs/orchestrator/wip/<task>``; the commit
        pushed, or None when nothing changed since the last snapshot."""
        wt = Git(worktree)
        head = wt.commit_of("HEAD")
        if head is None:
            return None
        fd, index = tempfile.mkstemp(prefix="orch-wip-index-")
        os.close(fd)
        try:
            env = {"GIT_INDEX_FILE": index}
            wt.run("read-tree", "HEAD", env=env)
            wt.run("add", "-A", env=env)
            wt.run("rm", "--cached", "--quiet", "--ignore-unmatch", ".task_ref", env=env)
            tree = wt.out("write-tree", env=env)
        finally:
            os.unlink(index)
        last = wt.commit_of(wip_ref(task_id))
        if last is not None and wt.out("rev-parse", f"{last}^{{tree}}") == tree \
                and wt.ok("merge-base", "--is-ancestor", head, last):
            return None
        if tree == wt.out("rev-parse", "HEAD^{tree}"):
            commit = head  # nothing uncommitted: the branch tip is the snapshot
        else:
            commit = wt.out("commit-tree", tree, "-p", head, "-m",
                            f"orchestrator: work in progress of {task_id}")
        wt.run("update-ref", wip_ref(task_id), commit)
        wt.run("push", "--quiet", "--force", self.name, f"{commit}:{wip_ref(task_id)}")
        return commit

    def finish(self, worktree: Path, branch: str, task_id: str) -> str | None:
        """On completion: the final snapshot, then the branch pushed. Returns the reason a
        push was rejected (the task still goes to review: its work is on the local branch
        and in the snapshot ref), or None."""
        try:
            self.snapshot(worktree, task_id)
            self.push_branch(branch)
        except GitError as exc:
            return str(exc)
        return None

    def push_branch(self, branch: str) -> None:
        """Push a finished task's branch; a rejection raises `GitError` with git's reason."""
        check_branch(branch, "task branch")
        out = self.repo.run("push", "--quiet", "--porcelain", self.name,
                            f"refs/heads/{branch}:refs/heads/{branch}", check=False)
        if out.returncode != 0:
            raise GitError(f"push of {branch} to {self.name} was rejected: {_reason(out)}")

    def drop_wip(self, task_id: str) -> None:
        """Forget the snapshot of a task that is done with (merged or discarded)."""
        self.repo.run("update-ref", "-d", wip_ref(task_id), check=False)
        self.repo.run("push", "--quiet", self.name, f":{wip_ref(task_id)}", check=False)

    # --- review, diff, merge -------------------------------------------------------------
    def fetch_branches(self, branches: list[str]) -> list[str]:
        """Bring finished task branches from the remote: a branch this clone lacks is
        created, one it has and that is behind is fast-forwarded (unless a worktree here
        has it checked out). Returns the branches updated."""
        if not branches:
            return []
        for b in branches:
            check_branch(b, "task branch")
        listed = self.repo.run("ls-remote", "--heads", self.name,
                               *[f"refs/heads/{b}" for b in branches]).stdout.splitlines()
        there = {ln.split("\t", 1)[1].removeprefix("refs/heads/") for ln in listed if "\t" in ln}
        branches = [b for b in branches if b in there]
        if not branches:
            return []
        self._fetch(*[f"+refs/heads/{b}:{self.remote_ref(b)}" for b in branches])
        updated = []
        for b in branches:
            theirs = self.repo.commit_of(self.remote_ref(b))
            if theirs is None:
                continue
            ours = self.repo.commit_of(f"refs/heads/{b}")
            if ours == theirs:
                continue
            if ours is None:
                self.repo.run("branch", "--no-track", b, theirs)
                updated.append(b)
            elif self.repo.ok("merge-base", "--is-ancestor", ours, theirs) and not _checked_out(
                    self.repo, b):
                self.repo.run("update-ref", f"refs/heads/{b}", theirs, ours)
                updated.append(b)
        return updated

    def behind(self, branch: str) -> bool:
        """Whether this clone's ``branch`` is an older state of the remote's (fetched by
        `fetch_branches`) that could not be moved forward: a worktree here has it checked
        out, left by an earlier attempt at a task that another machine has since finished."""
        ours = self.repo.commit_of(f"refs/heads/{branch}")
        theirs = self.repo.commit_of(self.remote_ref(branch))
        return bool(ours and theirs and ours != theirs
                    and self.repo.ok("merge-base", "--is-ancestor", ours, theirs))

    def check_base_current(self, base: str) -> None:
        """Refuse a merge into ``base`` when the remote's ``base`` has commits this clone
        lacks (merging would make a push that the remote rejects)."""
        remote = self.fetch_base(base)
        if remote is None:
            return
        theirs = self.repo.commit_of(remote)
        ours = self.repo.commit_of(f"refs/heads/{base}")
        if theirs and ours and not self.repo.ok("merge-base", "--is-ancestor", theirs, ours):
            raise Conflict(f"{self.name}/{base} has commits that {base} here lacks (the remote "
                           f"moved): update {base} first (git pull), then merge again; "
                           "nothing was merged")

    def push_base(self, base: str) -> None:
        check_branch(base, "base branch")
        out = self.repo.run("push", "--quiet", "--porcelain", self.name,
                            f"refs/heads/{base}:refs/heads/{base}", check=False)
        if out.returncode != 0:
            raise Conflict(f"push of {base} to {self.name} was rejected: {_reason(out)}")


def _checked_out(repo: Git, branch: str) -> bool:
    from orchestrator.worktree.git import list_worktrees

    return any(e.branch == branch for e in list_worktrees(repo))


def _reason(out: object) -> str:
    stdout = str(getattr(out, "stdout", "") or "")
    stderr = str(getattr(out, "stderr", "") or "")
    for line in stdout.splitlines():  # --porcelain: "!\t<src>:<dst>\t[rejected] (why)"
        if line.startswith("!"):
            return line.split("\t")[-1].strip()
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return next((ln for ln in lines if "rejected" in ln or "denied" in ln or "error" in ln),
                lines[-1] if lines else "unknown reason")
