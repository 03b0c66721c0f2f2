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

**A push carries its lease.** A task's pushes (`snapshot`, `push_branch`) name the commit
the remote's ref must hold for the push to go through (``--force-with-lease=REF:EXPECT``):
the one the board recorded, fenced by the lease token, after the last push it accepted
(``Task.pushed``). A teammate that lost its lease knows only the commit of its own time,
so once the new owner has pushed, its push is refused (`PushRefused`). The new owner, when
its own push is refused (a fenced-out teammate slipped a push in before it), checks that
its lease still holds with a fenced write, and only then pushes over it
(`orchestrator.team.pushing`). A new owner adopts the commit the board recorded, never
whatever a ref's tip holds now.

Every git error is a `GitError` carrying git's own words.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import Conflict, GitError
from orchestrator.git import Git
from orchestrator.worktree.names import check_branch

if TYPE_CHECKING:
    from orchestrator.config import Config
    from orchestrator.controlplane import Board
    from orchestrator.model import Task

WIP_PREFIX = "refs/orchestrator/wip/"
IDENTITY = {"GIT_AUTHOR_NAME": "orchestrator", "GIT_AUTHOR_EMAIL": "orchestrator@localhost",
            "GIT_COMMITTER_NAME": "orchestrator", "GIT_COMMITTER_EMAIL": "orchestrator@localhost"}
"""Who makes a WIP snapshot's commit (a machine may have no git identity)."""
FORCE = object()
"""`Remote._push`: whatever the remote's ref holds."""
FAST_FORWARD = object()
"""`Remote._push`: only a fast-forward of the remote's ref."""


class PushRefused(GitError):
    """A leased push met another commit on the remote than the lease last pushed."""

    def __init__(self, message: str, *, ref: str) -> None:
        super().__init__(message)
        self.ref = ref


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
            self.adopt(branch, task.id, task.pushed)
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

    def adopt(self, branch: str, task_id: str,
              pushed: dict[str, str] | None = None) -> str | None:
        """When this clone has no ``branch``: make it from the newest state the board
        recorded for the task (``pushed``: its WIP snapshot, else its branch) or, with no
        record (a task started before records were kept), the remote's WIP snapshot or else
        its branch. A ref whose tip is not the recorded commit (a fenced-out teammate pushed
        over it) is not taken. The commit, or None."""
        check_branch(branch, "task branch")
        if self.repo.branch_exists(branch):
            return None
        pushed = pushed or {}
        for key, src, dst in (("wip", wip_ref(task_id), wip_ref(task_id)),
                              ("branch", f"refs/heads/{branch}", self.remote_ref(branch))):
            want = pushed.get(key)
            if pushed and want is None:
                continue
            got = self.repo.run("fetch", "--quiet", "--no-tags", self.name, f"+{src}:{dst}",
                                check=False)
            commit = self.repo.commit_of(dst) if got.returncode == 0 else None
            if want is not None and commit != want:
                # the recorded commit by its id: a fenced-out teammate moved the ref since
                # (a remote lets a commit no ref reaches be fetched by id, or it is here)
                self.repo.run("fetch", "--quiet", "--no-tags", self.name, want, check=False)
                commit = want if self.repo.ok("cat-file", "-e", f"{want}^{{commit}}") else None
            if commit:
                self.repo.run("branch", "--no-track", branch, commit)
                return commit
        return None

    def set_aside(self, worktree: Path, task_id: str, branch: str | None,
                  pushed: dict[str, str]) -> str | None:
        """Before a run here: when this clone's worktree of the task holds another state
        than the newest the board recorded (``pushed``), or a process still works in it (a
        fenced-out run's agent, frozen or slow to stop), save its state under
        ``refs/orchestrator/stale/<task>`` and remove the worktree and its branch, so the
        run starts from the recorded state (`adopt`) in a new folder that no write of the
        old run reaches (its processes keep the removed one as their working folder). The
        commit saved, or None."""
        from orchestrator.procutil import processes_in

        recorded = pushed.get("wip") or pushed.get("branch")
        if recorded is None or not (worktree / ".git").exists():
            return None
        wt = Git(worktree)
        tree, head = _state(wt)
        if head is None:
            return None
        if not processes_in(worktree) and self.repo.ok(
                "cat-file", "-e", f"{recorded}^{{commit}}") and \
                self.repo.out("rev-parse", f"{recorded}^{{tree}}") == tree:
            return None
        commit = head if tree == wt.out("rev-parse", "HEAD^{tree}") else wt.out(
            "commit-tree", tree, "-p", head, "-m", f"orchestrator: set aside, {task_id}",
            env=IDENTITY)
        self.repo.run("update-ref", f"refs/orchestrator/stale/{task_id}", commit)
        self.repo.run("worktree", "remove", "--force", "--force", str(worktree))
        if branch:
            check_branch(branch, "task branch")
            self.repo.run("branch", "-D", branch, check=False)
        self.repo.run("update-ref", "-d", wip_ref(task_id), check=False)
        return commit

    # --- while and after a task runs --------------------------------------------------
    def snapshot(self, worktree: Path, task_id: str, expect: str | None = None, *,
                 leased: bool = False) -> str | None:
        """Push the worktree's whole state as ``refs/orchestrator/wip/<task>``; the commit
        pushed, or None when nothing changed since the last snapshot. With ``leased`` the
        push goes through only while the remote's ref is ``expect`` (None: absent), else
        `PushRefused`."""
        wt = Git(worktree)
        tree, head = _state(wt)
        if head is None:
            return None
        last = wt.commit_of(wip_ref(task_id))
        if last is not None and (not leased or last == expect) and wt.out(
                "rev-parse", f"{last}^{{tree}}") == tree and wt.ok(
                "merge-base", "--is-ancestor", head, last):
            return None  # the remote has this state already
        if tree == wt.out("rev-parse", "HEAD^{tree}"):
            commit = head  # nothing uncommitted: the branch tip is the snapshot
        else:  # orchestrator's commit: made on a machine with no git identity too
            commit = wt.out("commit-tree", tree, "-p", head, "-m",
                            f"orchestrator: work in progress of {task_id}", env=IDENTITY)
        wt.run("update-ref", wip_ref(task_id), commit)
        self._push(commit, wip_ref(task_id), expect if leased else FORCE)
        return commit

    def push_branch(self, branch: str, expect: str | object | None = FAST_FORWARD) -> str:
        """Push a finished task's branch; returns its commit. With ``expect`` (a commit, or
        None: the remote has no such branch) the push is leased as in `snapshot`; without,
        a push that is no fast-forward is refused. A rejection raises `GitError` (a leased
        one that met another commit: `PushRefused`) with git's reason."""
        check_branch(branch, "task branch")
        commit = self.repo.out("rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}")
        self._push(commit, f"refs/heads/{branch}", expect)
        return commit

    def remote_commit(self, ref: str) -> str | None:
        """What the remote's ``ref`` holds now (None: no such ref)."""
        out = self.repo.run("ls-remote", self.name, ref)
        for line in out.stdout.splitlines():
            sha, _, name = line.partition("\t")
            if name == ref:
                return sha
        return None

    def _push(self, commit: str, ref: str, expect: str | object | None) -> None:
        lease = [] if expect is FAST_FORWARD else [
            "--force" if expect is FORCE else f"--force-with-lease={ref}:{expect or ''}"]
        out = self.repo.run("push", "--quiet", "--porcelain", *lease, self.name,
                            f"{commit}:{ref}", check=False)
        if out.returncode == 0:
            return
        reason = _reason(out)
        where = ref.removeprefix("refs/heads/")
        if "stale info" in reason or "fetch first" in reason:
            raise PushRefused(f"push of {where} to {self.name} was refused: the remote holds "
                              "another commit than this lease last pushed", ref=ref)
        raise GitError(f"push of {where} to {self.name} was rejected: {reason}")

    def drop_wip(self, task_id: str) -> bool:
        """Forget the snapshot of a task that is done with (in review with its branch
        pushed, merged or discarded); False when the remote still has it (it refused the
        deletion: down, or read-only for a while)."""
        self.repo.run("update-ref", "-d", wip_ref(task_id), check=False)
        out = self.repo.run("push", "--quiet", self.name, f":{wip_ref(task_id)}", check=False)
        return out.returncode == 0 or "remote ref does not exist" in out.stderr

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


def _state(wt: Git) -> tuple[str, str | None]:
    """The tree of a worktree's whole state (committed or not, untracked files included,
    ignored ones not, ``.task_ref`` left out) and its HEAD; the worktree and its index are
    not touched. ("", None) when it has no commit."""
    head = wt.commit_of("HEAD")
    if head is None:
        return "", None
    fd, index = tempfile.mkstemp(prefix="orch-wip-index-")
    os.close(fd)
    try:
        env = {"GIT_INDEX_FILE": index}
        wt.run("read-tree", "HEAD", env=env)
        wt.run("add", "-A", env=env)
        wt.run("rm", "--cached", "--quiet", "--ignore-unmatch", ".task_ref", env=env)
        return wt.out("write-tree", env=env), head
    finally:
        os.unlink(index)


def _checked_out(repo: Git, branch: str) -> bool:
    from orchestrator.git import list_worktrees

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
