"""The execution plane: one git worktree per task, on its own branch.

`WorktreeManager` implements `orchestrator.protocols.Isolation`. It never writes
task state (it holds no lease): the teammate records the binding with a fenced
``board.update(task.id, token, **binding(ws))``.

- ``create`` reuses the task's worktree when it is there (a retried task resumes
  its work), re-creates it from the task's branch when only the folder is gone,
  and otherwise starts a new branch from the base: the configured ref, or the
  branch of a blocker kept for review, or a merge of several such branches.
- ``remove`` acts only on what the orchestrator made for the task, as its registry
  (`orchestrator.worktree.registry`) records it, never on a branch a task file names;
  it never deletes a branch checked out anywhere or a base branch; it is fail-closed
  (`orchestrator.worktree.safety`); ``force`` saves a snapshot under
  ``refs/orchestrator/snapshots/<task_id>`` first, and so does any deletion of a branch
  whose commits no other ref holds. Gitignored files (a local secrets file, say) are not
  deleted with the folder: they are moved to ``<git-common-dir>/orchestrator/kept/<task>/``
  (`orchestrator.worktree.setup.keep_ignored`).
- Creation and removal hold one lock per repository (concurrent ``git worktree
  add`` races on ``.git/worktrees``); setup commands run outside it.
"""

from __future__ import annotations

import contextlib
import glob
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.beneath import write_beneath
from orchestrator.config import WorktreeConfig
from orchestrator.controlplane import ActorEvents, ControlPlane
from orchestrator.errors import GitError, InvalidInput, NotFound, RunError, UnsafeRemoval
from orchestrator.events import UNSET, WorktreeCreated, WorktreeKept, WorktreeRemoved
from orchestrator.git import Git, WorktreeEntry, list_worktrees
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.procutil import busy_reason
from orchestrator.protocols import Workspace
from orchestrator.worktree import reconcile as housekeeping
from orchestrator.worktree import safety, shared
from orchestrator.worktree.lock import RepoLock
from orchestrator.worktree.names import branch_name, check_branch, check_component, check_prefix
from orchestrator.worktree.reconcile import GcReport, ReconcileReport, WorkspaceStatus
from orchestrator.worktree.registry import Record, Registry, in_namespace
from orchestrator.worktree.setup import PortBlocks, copy_included, keep_ignored, run_setup
from orchestrator.worktree.stacked import kept_blockers, merge_branches

if TYPE_CHECKING:
    from orchestrator.sandbox import Sandbox

SETUP_MARKER = "orchestrator-setup-done"
"""Written into the worktree's git dir once its setup commands succeeded."""


def task_env(task_id: str, path: Path, port: int | None, port_count: int) -> dict[str, str]:
    """``ORCH_TASK_ID``, ``ORCH_WORKTREE`` and the port block (when there is one)."""
    env = {"ORCH_TASK_ID": task_id, "ORCH_WORKTREE": str(path)}
    if port is not None:
        env.update(ORCH_PORT_BASE=str(port), ORCH_PORT_COUNT=str(port_count))
    return env


def binding(ws: Workspace) -> dict[str, Any]:
    """The task fields that bind a task to its workspace, for ``board.update``."""
    return {"worktree": str(ws.path), "branch": ws.branch, "base": ws.base,
            "base_commit": ws.base_commit}


class WorktreeManager:
    """Git worktrees under `Layout.worktree_root`, one per task (implements `Isolation`)."""

    def __init__(self, layout: Layout, config: WorktreeConfig, board: ControlPlane | None = None,
                 *, actor: str = "worktree", sandbox: Sandbox | None = None) -> None:
        self.sandbox = sandbox
        """Where setup commands run (the task's sandbox); None: on the host."""
        self.layout = layout
        self.config = config
        self.board = board
        self.prefix = check_prefix(config.branch_prefix)
        self.repo = Git(layout.root)
        from orchestrator.board import open_board

        self.plane = board if board is not None else open_board(layout, actor=actor,
                                                                create=False)
        self.events = ActorEvents(self.plane.events, actor)
        layout.locks.mkdir(parents=True, exist_ok=True)
        self.lock = RepoLock(layout.locks / "worktree.lock")
        self.ports = PortBlocks(layout.run / "ports.json", layout.locks / "ports.lock",
                                config.port_base, config.port_block)
        self._git_dirs: tuple[Path, Path] | None = None
        self._registry: Registry | None = None
        self.kept_ignored: Path | None = None
        """Where the last `remove` kept the worktree's gitignored files (None: it had none)."""
        self.start_ref: str | None = None
        """Where new branches start instead of the configured base: the base fetched from
        the shared remote (``refs/remotes/origin/main``), set by a teammate of a team across
        machines before each task (see `orchestrator.worktree.remote`)."""

    # --- names ------------------------------------------------------------------
    def path_for(self, task: Task) -> Path:
        return self.layout.worktree(check_component(task.id, "task id"))

    def branch_for(self, task: Task) -> str:
        """The branch the registry records for the task; else the task file's branch when
        it is in the task's namespace (a board made before the registry); else
        ``<prefix><id>-<slug>`` for a new one. `InvalidInput` for a branch outside it."""
        rec = self.registry().get(task.id)
        if rec is not None:
            return rec.branch
        if task.branch:
            branch = check_branch(task.branch)
            if not in_namespace(branch, self.prefix, task.id):
                raise InvalidInput(
                    f"{task.id}: its task file names branch {branch!r}, which the orchestrator "
                    f"did not create for it (not {self.prefix}{task.id}-…); not using it")
            return branch
        return branch_name(self.prefix, task.id, task.slug)

    def owned_branch(self, task: Task) -> str | None:
        """The branch the orchestrator made for the task, checked against the task file;
        `UnsafeRemoval` when they differ or the branch is not the orchestrator's (None:
        the task has no branch yet)."""
        return self._owned(task, self.path_for(task))

    def registry(self) -> Registry:
        if self._registry is None:
            self._registry = Registry(self.common_dir())
        return self._registry

    # --- Isolation --------------------------------------------------------------
    def create(self, task: Task) -> Workspace:
        path, branch = self.path_for(task), self.branch_for(task)
        with self.lock:
            base, base_commit, reused, note = self._checkout(task, path, branch)
            rec = self.registry().get(task.id)
            if rec is None or rec.branch != branch or Path(rec.path) != path:
                self.registry().put(Record(task.id, branch, str(path),
                                           self._prefix_of(task, branch), adopted=reused))
        port = self.ports.allocate(task.id)
        ws = Workspace(task.id, path, branch, base, base_commit,
                       env=task_env(task.id, path, port, self.config.port_block))
        self._write_task_ref(ws)
        linked = shared.link_shared(self.config, self.layout.root, path, self.cache(),
                                    env=ws.env, log=self.plane.logs.writer(task.id, "setup"),
                                    task_id=task.id)
        self.events.emit(WorktreeCreated(path=str(path), branch=branch, base=base,
                                         base_commit=base_commit, reused=reused, port_base=port,
                                         note=note or UNSET, shared=linked or UNSET), task.id)
        copy_included(self.repo, self.layout.root, path, self._skip_prefixes())
        self._setup(ws)
        return ws

    def prepare(self) -> None:
        self._dirs()  # one git call, cached for the life of the manager

    def keep(self, task: Task) -> None:
        self.events.emit(WorktreeKept(path=str(self.path_for(task)),
                                      branch=self.branch_for(task)), task.id)

    def remove(self, task: Task, *, force: bool = False,
               keep_commits: bool = False) -> str | None:
        path = self.path_for(task)
        with self.lock:
            busy = busy_reason(path) if path.exists() else None
            if busy:  # never pulled from under a running process, not even with --force
                raise UnsafeRemoval(f"{task.id}: not removing {path}: {busy}")
            branch = self._owned(task, path)
            bases = self._bases(task)
            co = safety.inspect(self.repo, path, branch, bases, *self._dirs()[::-1])
            if co.path is None and path.exists():
                raise UnsafeRemoval(f"{task.id}: {path} is not a worktree of this repository; "
                                    "not touching it (move it away by hand)")
            if co.path is None and co.branch_tip is None:
                if self._registered(path):
                    self.prune()
                self.ports.free(task.id)
                self.registry().forget(task.id)
                return None
            if co.branch_tip is not None and branch is not None:
                self._check_deletable(task, branch, bases)
            # one `git status` answers both "any changes?" and "which ignored files to keep?"
            dirty: list[str] | None = []
            ignored: list[str] | None = []
            if co.path is not None:
                try:
                    dirty, ignored = safety.scan(path)
                except GitError:
                    dirty = ignored = None  # risks() asks again and says it cannot tell
            reasons = safety.risks(self.repo, co, branch, bases, dirty=dirty,
                                   commits=not keep_commits)
            if reasons and not force:
                raise UnsafeRemoval(f"{task.id}: not removing {path}: {'; '.join(reasons)} "
                                    "(--force saves a snapshot first)")
            snap = None
            if reasons or not safety.held_elsewhere(self.repo, co.tips, branch):
                snap = safety.snapshot(self.repo, task.id, co, branch)
            self.kept_ignored = None
            if co.path is not None:
                if ignored is None:  # forced past "cannot tell": git must list them now
                    ignored = safety.scan(path)[1]
                self.kept_ignored = keep_ignored(self.layout.root, path, ignored,
                                                 self._ignored_skip(),
                                                 self.common_dir() / "orchestrator" / "kept"
                                                 / task.id)
                self.repo.run("worktree", "remove", "--force", "--force", str(path))
            else:
                self.prune()
            if co.branch_tip is not None:
                self.repo.run("update-ref", "-d", f"refs/heads/{branch}", co.branch_tip)
            self.registry().forget(task.id)
        self.ports.free(task.id)
        self.events.emit(WorktreeRemoved(
            path=str(path), branch=branch, snapshot=snap, forced=force and bool(reasons),
            kept_ignored=str(self.kept_ignored) if self.kept_ignored else UNSET), task.id)
        return snap

    def _ignored_skip(self) -> set[str]:
        """Gitignored paths a removal need not keep: ``.task_ref`` and the shared folders
        (links into the cache)."""
        return {safety.TASK_REF, *shared.folders(self.config)}

    # --- reading ------------------------------------------------------------------
    def status(self, task: Task) -> WorkspaceStatus:
        """What is on disk for the task: folder, branch, dirty or clean, commits ahead, disk use.
        A branch the task file names outside the task's namespace is not looked at."""
        path = self.path_for(task)
        branch: str | None
        try:
            branch = self.branch_for(task)
        except InvalidInput:
            branch = None
        co = safety.inspect(self.repo, path, branch, self._bases(task),
                             *self._dirs()[::-1])
        dirty: list[str] | None = None
        if co.path is not None:
            with contextlib.suppress(RunError):
                dirty = safety.dirty_paths(co.path)
        ahead = safety.ahead(self.repo, co.tips, co.base_commits) if co.base_commits else None
        return WorkspaceStatus(
            task.id, str(task.status), branch, str(path), co.path is not None,
            co.branch_tip is not None, None if dirty is None else bool(dirty),
            None if dirty is None else len(dirty), ahead,
            housekeeping.disk_use(path) if co.path is not None else 0)

    def exists(self, task: Task) -> bool:
        """Whether the task has anything on disk: its folder or its branch."""
        return self.path_for(task).exists() or self.repo.branch_exists(self.branch_for(task))

    def environment(self, task: Task) -> dict[str, str]:
        """The workspace variables of the task's processes (``ORCH_TASK_ID``, its port
        block when it has one), read without allocating anything."""
        block = self.ports.live().get(task.id)
        return task_env(task.id, self.path_for(task), block[0] if block else None,
                        block[1] if block else self.config.port_block)

    def cache(self) -> Path:
        """The shared-folder cache (`orchestrator.worktree.shared`)."""
        return shared.cache_root(self.common_dir())

    def removal_risks(self, task: Task) -> list[str]:
        path = self.path_for(task)
        try:
            branch = self._owned(task, path)
        except UnsafeRemoval as exc:
            return [str(exc)]
        bases = self._bases(task)
        co = safety.inspect(self.repo, path, branch, bases, *self._dirs()[::-1])
        if co.branch_tip is not None and branch is not None:
            try:
                self._check_deletable(task, branch, bases)
            except UnsafeRemoval as exc:
                return [str(exc)]
        return safety.risks(self.repo, co, branch, bases)

    # --- housekeeping -------------------------------------------------------------
    def gc(self, tasks: list[Task], dry_run: bool = False) -> GcReport:
        report = housekeeping.gc(self, tasks, dry_run)
        live = [self.path_for(t) for t in tasks if self.path_for(t).exists()]
        with self.lock:  # no creation is filling or linking the cache meanwhile
            report.add_cache(shared.gc_cache(self.cache(), self.config,
                                             [self.layout.root, *live], dry_run))
        return report

    def reconcile(self, tasks: list[Task]) -> ReconcileReport:
        return housekeeping.reconcile(self, tasks)

    def overview(self, tasks: list[Task]) -> list[WorkspaceStatus]:
        return housekeeping.overview(self, tasks)

    # --- ownership ----------------------------------------------------------------
    def _owned(self, task: Task, path: Path) -> str | None:
        """The branch removal may act on: the registry's record (or one adopted from a
        board made before the registry), which the task file must agree with. None when
        the task has no branch at all; `UnsafeRemoval` for anything not ours."""
        rec = self.registry().get(task.id) or self._adopt(task, path)
        if rec is None:
            return None
        if task.branch and task.branch != rec.branch:
            raise UnsafeRemoval(
                f"{task.id}: its task file names branch {task.branch!r}, but the orchestrator "
                f"created {rec.branch!r} for it; not touching either (correct the task file)")
        if Path(rec.path).resolve() != path.resolve() \
                or not in_namespace(rec.branch, rec.prefix, task.id):
            raise UnsafeRemoval(f"{task.id}: its registry record {self.registry().root} "
                                "does not match the task; not touching it")
        return rec.branch

    def _adopt(self, task: Task, path: Path) -> Record | None:
        """A record for a task of a board made before the registry: its branch must be in
        its namespace and, when its worktree is there, be what git has checked out in it."""
        candidate = task.branch or branch_name(self.prefix, task.id, task.slug)
        try:
            check_branch(candidate)
        except InvalidInput as exc:
            raise UnsafeRemoval(f"{task.id}: {exc}; not touching it") from exc
        if not in_namespace(candidate, self.prefix, task.id):
            raise UnsafeRemoval(
                f"{task.id}: its task file names branch {candidate!r}, which the orchestrator "
                f"did not create for it (no registry record, and not {self.prefix}{task.id}-…); "
                "not touching it")
        git_dir = safety.worktree_git_dir(path, self.common_dir())
        if git_dir is not None:
            try:
                head = (git_dir / "HEAD").read_text().strip()
            except OSError:
                head = ""
            if head != f"ref: refs/heads/{candidate}":
                raise UnsafeRemoval(f"{task.id}: its worktree {path} is not on {candidate} "
                                    "and no registry record says what was made; not touching it")
        elif not self.repo.branch_exists(candidate):
            return None
        rec = Record(task.id, candidate, str(path), self.prefix, adopted=True)
        self.registry().put(rec)
        return rec

    def _check_deletable(self, task: Task, branch: str, bases: list[str]) -> None:
        """`UnsafeRemoval` when ``branch`` is a base of the task, the configured base, or
        checked out in the main checkout or any worktree but the task's own."""
        where = safety.checked_out_at(self.repo, branch, self.path_for(task))
        if where is not None:
            raise UnsafeRemoval(f"{task.id}: {branch} is checked out in {where}; not deleting it")
        if branch in bases or branch == self._base_name():
            raise UnsafeRemoval(f"{task.id}: {branch} is a base branch; not deleting it")

    def _prefix_of(self, task: Task, branch: str) -> str:
        """The prefix ``branch`` was made with: the configured one, or the one recorded."""
        if in_namespace(branch, self.prefix, task.id):
            return self.prefix
        rec = self.registry().get(task.id)
        return rec.prefix if rec is not None else self.prefix

    # --- internals ----------------------------------------------------------------
    def _checkout(self, task: Task, path: Path, branch: str) -> tuple[str, str, bool, str | None]:
        """Make ``path`` a worktree on ``branch``; (base, base_commit, reused, note)."""
        self.ensure_excluded()
        revs = (f"refs/heads/{branch}", self.start_ref or self.config.base)
        tip, base_commit = self.repo.commits(*revs)
        entry = self._entry(path) if path.exists() or self._registered(path) else None
        if entry is not None and (entry.locked == "initializing" or entry.branch is None):
            # a creation killed inside `git worktree add`, or after the detached add of an
            # earlier version: cleared when it is one (nothing in it), then made again
            if housekeeping.clear_half_made(self, path):
                entry = None
        if entry is not None and entry.prunable:
            self.prune()
            entry = None
        if entry is not None:
            git_dir = safety.worktree_git_dir(path)
            if entry.branch == branch and git_dir and not (git_dir / "index").exists():
                self._populate(path)  # a sparse creation was killed before its checkout
            if entry.branch != branch or tip is None:
                what = f"branch {branch} is missing (deleted by hand?)" if tip is None else (
                    f"it is on {entry.branch or 'a detached HEAD'}, not {branch}")
                raise RunError(f"{task.id}: cannot reuse {path}: {what}; restore the branch, or "
                               "remove the worktree with --force", task=task.id)
            base, base_commit = self._recorded_base(task, tip)
            return base, base_commit, True, None
        if path.exists():
            if path.is_dir() and not any(path.iterdir()):
                path.rmdir()
            else:
                raise RunError(f"{task.id}: {path} exists but is not a worktree of this "
                               "repository; move it away", task=task.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        if tip is not None:
            self._add(path, [], [branch])
            base, base_commit = self._recorded_base(task, tip)
            return base, base_commit, True, None
        base, start = self._start_point(task, base_commit)
        self._new(path, branch, start)
        note = f"branch {task.branch} was missing; started afresh" if task.branch else None
        return base, start, False, note

    def _add(self, path: Path, options: list[str], rest: list[str]) -> None:
        """``git worktree add``; with `sparse_paths` the checkout waits until the sparse
        patterns are set, so the full tree never lands on disk."""
        sparse = ["--no-checkout"] if self.config.sparse_paths else []
        self.repo.run("worktree", "add", "--quiet", *sparse, *options, str(path), *rest)
        if sparse:
            self._populate(path)

    def _new(self, path: Path, branch: str, start: str) -> None:
        """A worktree on a new ``branch`` from ``start``, in one ``git worktree add -b``
        (git itself then runs branch, symbolic-ref and reset). A kill inside it leaves the
        worktree locked "initializing", which `_checkout` clears and makes again.
        ``--force`` skips git's search of every worktree for one on the branch (a branch
        made here is on none; 45 ms with 600 worktrees kept); a path registered to a
        worktree was dealt with before (`_checkout`), and ``-b`` still refuses a branch
        that exists."""
        self._add(path, ["--force", "--no-track", "-b", branch], [start])

    def _populate(self, path: Path) -> None:
        """Set the sparse patterns (when configured) and check the files out."""
        wt = Git(path)
        patterns = self.config.sparse_paths
        if patterns:
            cone = not any(p.startswith("/") or any(c in p for c in "*?[!") for p in patterns)
            wt.run("sparse-checkout", "set", "--cone" if cone else "--no-cone", "--stdin",
                   input="".join(f"{p}\n" for p in patterns))
        wt.run("checkout", "--quiet")

    def _start_point(self, task: Task, commit: str | None) -> tuple[str, str]:
        """(base name, commit) for a new branch: the blockers' result or the configured base
        (``commit``, what it resolved to)."""
        kept = kept_blockers(self.board, self.repo, task, self.branch_for)
        if len(kept) == 1:
            return kept[0]
        if kept:
            return self._base_name(), merge_branches(self.repo, task.id, kept)
        if commit is not None:
            return self._base_name(), commit
        root = self.layout.root
        if not self.repo.out("rev-list", "-n1", "--all"):
            raise InvalidInput(f"{root} has no commits yet; make a first commit before running "
                               "tasks")
        raise InvalidInput(f"base ref {self.config.base!r} does not exist in {root}")

    def restore(self, task: Task) -> None:
        """Re-create a live task's missing worktree from its branch (caller holds the lock)."""
        path, branch = self.path_for(task), self.branch_for(task)
        if not self.repo.branch_exists(branch):
            raise NotFound(f"{task.id}: branch {branch} is missing; the worktree cannot be "
                           "re-created")
        if path.exists():
            raise RunError(f"{task.id}: {path} exists but is not a worktree", task=task.id)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._add(path, [], [branch])
        self._write_task_ref(Workspace(task.id, path, branch, task.base, task.base_commit))

    def _recorded_base(self, task: Task, tip: str) -> tuple[str, str]:
        if task.base and task.base_commit:
            return task.base, task.base_commit
        base = task.base or self._base_name()
        commit = self.repo.commit_of(base)
        fork = self.repo.run("merge-base", commit, tip, check=False) if commit else None
        return base, fork.stdout.strip() if fork and fork.returncode == 0 else tip

    def _base_name(self) -> str:
        """The configured base as a name to check against later (``HEAD`` becomes its branch)."""
        if self.config.base != "HEAD":
            return self.config.base
        head = (self._dirs()[0] / "HEAD").read_text().strip()  # the main checkout's branch
        return head.removeprefix("ref: refs/heads/") if head.startswith("ref: refs/heads/") \
            else "HEAD"

    def _bases(self, task: Task) -> list[str]:
        """Refs whose history is not the task's own work: its base, the commit it started
        from, the configured base, and the branches of its blockers."""
        bases = [task.base, task.base_commit, self._base_name()]
        if self.board is not None:
            for blocker_id in task.blocked_by:
                try:
                    bases.append(self.branch_for(self.board.get(blocker_id)))
                except (NotFound, InvalidInput):
                    continue
        return [b for b in dict.fromkeys(bases) if b]

    def _setup(self, ws: Workspace) -> None:
        if not self.config.setup:
            return
        git_dir = safety.worktree_git_dir(ws.path)
        if git_dir is None:
            raise RunError(f"{ws.task_id}: {ws.path} is not a git worktree", task=ws.task_id)
        marker = git_dir / SETUP_MARKER
        if marker.exists():
            return
        run_setup(self.config.setup, ws.path, ws.env, self.config.setup_timeout,
                  self.plane.logs.writer(ws.task_id, "setup"), ws.task_id, self.sandbox)
        write_beneath(git_dir, SETUP_MARKER, "ok\n")  # the admin folder is the agent's too

    def _write_task_ref(self, ws: Workspace) -> None:
        ref = {"task": ws.task_id, "branch": ws.branch, "base": ws.base,
               "base_commit": ws.base_commit, "repo": str(self.layout.root)}
        write_beneath(ws.path, safety.TASK_REF, json.dumps(ref, indent=1) + "\n")

    def ensure_excluded(self) -> None:
        """``.task_ref`` is never committed, and the worktree root (when inside the repo)
        never shows in ``git status``. Git reads ``info/exclude`` from the common dir only
        (a worktree's own ``info/exclude`` is not honoured), so the entries go there."""
        exclude = self.common_dir() / "info" / "exclude"
        wanted = [f"/{safety.TASK_REF}"]
        with contextlib.suppress(ValueError):
            rel = self.layout.worktree_root.relative_to(self.layout.root).as_posix()
            wanted.append(f"/{rel}/")
        try:
            text = exclude.read_text()
        except FileNotFoundError:
            text = ""
        missing = [w for w in wanted if w not in text.splitlines()]
        if missing:
            exclude.parent.mkdir(parents=True, exist_ok=True)
            with exclude.open("a") as fh:
                sep = "" if not text or text.endswith("\n") else "\n"
                fh.write(sep + "".join(f"{w}\n" for w in missing))

    def _registered(self, path: Path) -> bool:
        """Whether git has metadata for a worktree at ``path`` (read from the admin dirs).

        git names a worktree's admin dir after the folder (a task id, which needs none of
        git's clean-up of names; a number is added when the name is taken), so only dirs
        starting with that name are read, not one per kept worktree."""
        admin_root = self.common_dir() / "worktrees"
        target = (path / ".git").resolve()
        for gitdir in admin_root.glob(f"{glob.escape(path.name)}*/gitdir"):
            with contextlib.suppress(OSError):
                if Path(gitdir.read_text().strip()).resolve() == target:
                    return True
        return False

    def _entry(self, path: Path) -> WorktreeEntry | None:
        target = path.resolve()
        return next((e for e in list_worktrees(self.repo) if e.path.resolve() == target), None)

    def manages(self, path: Path) -> bool:
        """Whether ``path`` is a worktree folder of ours (directly in the worktree root)."""
        return path.resolve().parent == self.layout.worktree_root.resolve()

    def prune(self) -> None:
        self.repo.run("worktree", "prune")

    def common_dir(self) -> Path:
        return self._dirs()[1]

    def _dirs(self) -> tuple[Path, Path]:
        """The main repository's git dir and common dir (one git call, then cached)."""
        if self._git_dirs is None:
            own, common = self.repo.out("rev-parse", "--absolute-git-dir",
                                        "--git-common-dir").splitlines()
            common_path = Path(common)
            self._git_dirs = (Path(own), common_path if common_path.is_absolute()
                              else (self.layout.root / common_path).resolve())
        return self._git_dirs

    def _skip_prefixes(self) -> list[str]:
        skip = [self.layout.tasks.name + "/"]
        try:
            skip.append(self.layout.worktree_root.relative_to(self.layout.root).as_posix() + "/")
        except ValueError:
            pass
        return skip
