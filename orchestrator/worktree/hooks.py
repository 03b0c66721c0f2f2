"""Hook isolation: workspaces made and removed by the user's commands, like Claude Code's
WorktreeCreate / WorktreeRemove hooks (`HookIsolation` implements `Isolation`).

- ``worktree.create_command`` runs in the repository root with the task as JSON on
  stdin and ``ORCH_TASK_ID``, ``ORCH_WORKTREE`` (a suggested path under the worktree
  root), ``ORCH_REPO`` in its environment; the last line it prints is the workspace
  path (relative paths are taken from the repository root). It may make anything: a
  plain copy, a git clone, a git worktree, a mount.
- ``worktree.remove_command`` gets the path as its last argument, and JSON
  (``{"task_id", "path", "force", "task"}``) on stdin; a non-zero exit refuses the
  removal. Without one, a workspace inside the worktree root is deleted.

Which task owns which workspace is kept in ``.tasks/.run/workspaces.json`` (and the
workspace holds ``.task_ref``, as a worktree does), so a retried task resumes its own
workspace and the create command runs once per task.

Nothing is lost on removal. A workspace that is a git checkout is checked like a
worktree: uncommitted changes, or a HEAD no ref of the main repository contains, refuse
it. Any other folder cannot be committed, so "commit what the agent left" becomes a
snapshot: `keep` (the task goes to review) saves the folder as
``.tasks/snapshots/<task>/<time>-<digest>.tar.gz`` and records its content digest, and a
removal is refused while the content differs from the last snapshot. ``force`` saves a
snapshot first, whatever the checks say.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.beneath import read_beneath, write_beneath
from orchestrator.config import WorktreeConfig
from orchestrator.controlplane import ActorEvents, ControlPlane
from orchestrator.errors import GitError, NotFound, RunError, UnsafeRemoval
from orchestrator.events import UNSET, Orphan, WorktreeCreated, WorktreeKept, WorktreeRemoved
from orchestrator.fsutil import atomic_write
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.procutil import busy_reason
from orchestrator.protocols import Workspace
from orchestrator.record import to_dict, to_json
from orchestrator.transcript import IsolationHook
from orchestrator.worktree import reconcile as housekeeping
from orchestrator.worktree import shared
from orchestrator.worktree.lock import RepoLock
from orchestrator.worktree.manager import task_env
from orchestrator.worktree.names import check_component
from orchestrator.worktree.reconcile import GcReport, ReconcileReport, WorkspaceStatus, disk_use
from orchestrator.worktree.safety import MAX_NAMED, MAX_TASK_REF, TASK_REF, dirty_paths
from orchestrator.worktree.setup import PortBlocks, run_setup

if TYPE_CHECKING:
    from orchestrator.sandbox import Sandbox

REGISTRY = "workspaces.json"


class HookIsolation:
    """Workspaces from ``create_command`` / ``remove_command`` (implements `Isolation`)."""

    def __init__(self, layout: Layout, config: WorktreeConfig, board: ControlPlane | None = None,
                 *, actor: str = "worktree", sandbox: Sandbox | None = None) -> None:
        self.sandbox = sandbox
        """Where setup commands run (the task's sandbox); None: on the host."""
        if not config.create_command:
            raise NotFound("hook isolation needs worktree.create_command")
        self.layout = layout
        self.config = config
        self.board = board
        from orchestrator.board import open_board

        self.plane = board if board is not None else open_board(layout, actor=actor,
                                                                create=False)
        self.events = ActorEvents(self.plane.events, actor)
        layout.locks.mkdir(parents=True, exist_ok=True)
        self.lock = RepoLock(layout.locks / "workspaces.lock")
        self.registry = layout.run / REGISTRY
        self.snapshots = layout.snapshots
        self.ports = PortBlocks(layout.run / "ports.json", layout.locks / "ports.lock",
                                config.port_base, config.port_block)
        self.main = Git(layout.root)

    # --- names ------------------------------------------------------------------
    def path_for(self, task: Task) -> Path:
        """The task's workspace: as registered, else the path the create command is
        offered. The task file's ``worktree`` is never trusted: it is data anyone can edit."""
        rec = self._read().get(task.id)
        if rec:
            return Path(rec["path"])
        return self.layout.worktree(check_component(task.id, "task id"))

    def branch_for(self, task: Task) -> str | None:
        return task.branch

    def owned_branch(self, task: Task) -> str | None:
        """The branch the task's registered workspace has checked out, which the task file
        must name; `UnsafeRemoval` otherwise (None: no workspace, or not a git checkout)."""
        rec = self._read().get(task.id)
        branch = _git_head(Path(rec["path"]))[0] if rec else None
        if task.branch and task.branch != branch:
            raise UnsafeRemoval(f"{task.id}: its task file names branch {task.branch!r}, but "
                                f"its workspace is on {branch or 'no branch'}; not touching it")
        return branch

    # --- Isolation --------------------------------------------------------------
    def prepare(self) -> None:
        """Nothing to look up ahead: the hooks are run per task."""

    def create(self, task: Task) -> Workspace:
        check_component(task.id, "task id")
        with self.lock:
            reg = self._read()
            rec = reg.get(task.id)
            reused = bool(rec and self._owned(Path(rec["path"]), task.id))
            if rec and reused:
                path = Path(rec["path"])
            else:
                path = self._run_create(task)
                taken = [t for t, r in reg.items() if t != task.id and Path(r["path"]) == path]
                if taken or not self._owned(path, task.id):
                    raise RunError(f"{task.id}: create command printed {path}, the workspace "
                                   f"of {taken[0] if taken else 'another task'}", task=task.id)
                rec = {"path": str(path), "saved": None, "setup": False}
                reg[task.id] = rec
                self._write(reg)
        port = self.ports.allocate(task.id)
        branch, head = _git_head(path)
        ws = Workspace(task.id, path, branch, task.base if reused else None,
                       task.base_commit if reused and task.base_commit else head,
                       env=task_env(task.id, path, port, self.config.port_block))
        self._write_task_ref(ws)
        linked = shared.link_shared(
            self.config, self.layout.root, path, shared.cache_root(self._common_dir()),
            env=ws.env, log=self.plane.logs.writer(task.id, "setup"), task_id=task.id,
            git_checkout=branch is not None)
        self.events.emit(WorktreeCreated(path=str(path), branch=branch, isolation="hooks",
                                         reused=reused, port_base=port,
                                         shared=linked or UNSET), task.id)
        if self.config.setup and not rec.get("setup"):
            run_setup(self.config.setup, path, ws.env, self.config.setup_timeout,
                      self.plane.logs.writer(task.id, "setup"), task.id, self.sandbox)
            self._update(task.id, setup=True)
        return ws

    def keep(self, task: Task) -> None:
        """The task goes to review: a plain folder is snapshotted (its "commit")."""
        path = self.path_for(task)
        snap, digest = None, None
        if path.is_dir() and not _is_git(path):
            snap, digest = self._snapshot(task.id, path)
        self.events.emit(WorktreeKept(path=str(path), branch=task.branch,
                                      snapshot=snap or UNSET, digest=digest or UNSET), task.id)

    def remove(self, task: Task, *, force: bool = False,
               keep_commits: bool = False) -> str | None:
        with self.lock:
            path = self.path_for(task)
            if not path.exists():
                self._forget(task.id)
                return None
            if not self._owned(path, task.id):
                raise UnsafeRemoval(f"{task.id}: {path} is not this task's workspace (its "
                                    f"{TASK_REF} names another); not touching it")
            busy = busy_reason(path)
            if busy:  # never pulled from under a running process, not even with --force
                raise UnsafeRemoval(f"{task.id}: not removing {path}: {busy}")
            reasons = self._risks(task.id, path)
            if reasons and not force:
                raise UnsafeRemoval(f"{task.id}: not removing {path}: {'; '.join(reasons)} "
                                    "(--force saves a snapshot first)")
            snap = self._snapshot(task.id, path)[0] if reasons else None
            self._run_remove(task, path, force)
            self._forget(task.id)
        self.events.emit(WorktreeRemoved(path=str(path), branch=task.branch, isolation="hooks",
                                         snapshot=snap, forced=force and bool(reasons)),
                         task.id)
        return snap

    # --- reading ------------------------------------------------------------------
    def exists(self, task: Task) -> bool:
        return self.path_for(task).exists()

    def removal_risks(self, task: Task) -> list[str]:
        path = self.path_for(task)
        if not path.exists():
            return []
        if not self._owned(path, task.id):
            return [f"{path} is not this task's workspace"]
        return self._risks(task.id, path)

    def status(self, task: Task) -> WorkspaceStatus:
        """Like a worktree's; ``dirty`` means removing it now would need ``--force``."""
        path = self.path_for(task)
        exists = path.is_dir()
        dirty: bool | None = None
        changes: int | None = None
        if exists:
            with contextlib.suppress(RunError, OSError):
                dirty = bool(self._risks(task.id, path))
                changes = len(dirty_paths(path)) if _is_git(path) else None
        branch, _ = _git_head(path) if exists else (None, None)
        return WorkspaceStatus(task.id, str(task.status), branch or task.branch, str(path),
                               exists, False, dirty, changes, None,
                               disk_use(path) if exists else 0)

    def environment(self, task: Task) -> dict[str, str]:
        block = self.ports.live().get(task.id)
        return task_env(task.id, self.path_for(task), block[0] if block else None,
                        block[1] if block else self.config.port_block)

    # --- housekeeping -------------------------------------------------------------
    def overview(self, tasks: list[Task]) -> list[WorkspaceStatus]:
        known = {t.id for t in tasks}
        rows = [self.status(t) for t in tasks if t.id in self._read() or t.worktree]
        rows = [r for r in rows if r.exists]
        for orphan in self._orphans(known):
            rows.append(WorkspaceStatus(None, "orphan", None, orphan.path, True, False, None,
                                        None, None, disk_use(Path(orphan.path)),
                                        orphan.reason))
        return rows

    def gc(self, tasks: list[Task], dry_run: bool = False) -> GcReport:
        return housekeeping.gc(self, tasks, dry_run)

    def reconcile(self, tasks: list[Task]) -> ReconcileReport:
        """Forget registered workspaces whose folder is gone (a live task gets a new one
        from the create command when it next runs, its last snapshot kept); report
        orphans without touching them."""
        report = ReconcileReport([], [], [], [], {})
        by_id = {t.id: t for t in tasks}
        with self.lock:
            reg = self._read()
            for task_id, rec in sorted(reg.items()):
                if Path(rec["path"]).exists():
                    continue
                report.pruned.append(rec["path"])
                del reg[task_id]
                task = by_id.get(task_id)
                if task is not None and not task.status.final:
                    report.problems[task_id] = (
                        f"workspace {rec['path']} is gone; the next run makes a new one"
                        + (f" (last snapshot in {self.snapshots / task_id})"
                           if (self.snapshots / task_id).is_dir() else ""))
            self._write(reg)
            report.orphans = self._orphans(set(by_id))
        for task_id in self.ports.live():
            if task_id not in reg:
                self.ports.free(task_id)
        if (event := report.event(isolation="hooks")) is not None:
            self.events.emit(event, None)
        return report

    # --- the commands -------------------------------------------------------------
    def _run_create(self, task: Task) -> Path:
        cmd = self.config.create_command or ""
        suggested = self.layout.worktree(task.id)
        suggested.parent.mkdir(parents=True, exist_ok=True)
        env = {"ORCH_TASK_ID": task.id, "ORCH_WORKTREE": str(suggested),
               "ORCH_REPO": str(self.layout.root)}
        code, out, err = self._hook(cmd, task, env, to_json(task))
        if code != 0:
            raise RunError(f"{task.id}: create command failed ({_exit(code, self.config)}): "
                           f"{cmd}: {_last(err) or _last(out)}", task=task.id)
        line = _last(out)
        if not line:
            raise RunError(f"{task.id}: create command printed no workspace path: {cmd}",
                           task=task.id)
        path = Path(line).expanduser()
        path = (path if path.is_absolute() else self.layout.root / path).resolve()
        root = self.layout.root
        if not path.is_dir():
            raise RunError(f"{task.id}: create command printed {line!r}, which is not a "
                           "folder", task=task.id)
        if path == root or root.is_relative_to(path) or path.is_relative_to(self.layout.tasks) \
                or path.is_relative_to(root / ".git"):
            raise RunError(f"{task.id}: create command printed {path}: a workspace may not be "
                           f"the repository, hold it, or sit in {self.layout.tasks.name} or .git",
                           task=task.id)
        return path

    def _run_remove(self, task: Task, path: Path, force: bool) -> None:
        cmd = self.config.remove_command
        if not cmd:
            if path.parent.resolve() != self.layout.worktree_root.resolve():
                raise UnsafeRemoval(f"{task.id}: {path} is outside the worktree root and no "
                                    "worktree.remove_command is set; not deleting it")
            shutil.rmtree(path)
            return
        payload = json.dumps({"task_id": task.id, "path": str(path), "force": force,
                              "task": to_dict(task)})
        code, out, err = self._hook(f"{cmd} {shlex.quote(str(path))}", task,
                                    {"ORCH_TASK_ID": task.id, "ORCH_WORKTREE": str(path),
                                     "ORCH_REPO": str(self.layout.root)}, payload)
        why = _last(err) or _last(out)
        if code != 0:
            error = UnsafeRemoval if code is not None and not force else RunError
            raise error(f"{task.id}: remove command refused ({_exit(code, self.config)}): "
                        f"{cmd}: {why}")
        if path.exists():
            raise RunError(f"{task.id}: remove command succeeded but {path} is still there: "
                           f"{cmd}", task=task.id)

    def _hook(self, cmd: str, task: Task, env: dict[str, str],
              stdin: str) -> tuple[int | None, str, str]:
        """Run a hook in its own process group (killed when it ends or times out); the exit
        code (None: timed out), stdout and stderr, all in the task's log."""
        proc = subprocess.Popen(cmd, shell=True, cwd=self.layout.root, text=True,
                                env={**os.environ, **env}, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            out, err = proc.communicate(stdin, timeout=self.config.hook_timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            code = None
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        self.plane.logs.writer(task.id, "hooks").write(
            IsolationHook(command=cmd, exit=code, stdout=out[-4000:], stderr=err[-4000:]))
        return code, out, err

    # --- safety -------------------------------------------------------------------
    def _risks(self, task_id: str, path: Path) -> list[str]:
        if _is_git(path):
            return self._git_risks(path)
        saved = self._read().get(task_id, {}).get("saved")
        if saved is None:
            return ["its content was never saved (no snapshot yet)"]
        if _digest(path, self._skipped()) != saved:
            return ["its content changed since the last snapshot"]
        return []

    def _git_risks(self, path: Path) -> list[str]:
        reasons = []
        try:
            dirty = dirty_paths(path)
        except GitError as exc:
            return [f"cannot tell: {exc}"]
        if dirty:
            named = ", ".join(dirty[:MAX_NAMED]) + ("…" if len(dirty) > MAX_NAMED else "")
            reasons.append(f"{len(dirty)} uncommitted or untracked change(s): {named}")
        head = Git(path).run("rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
        sha = head.stdout.strip()
        if head.returncode == 0 and not self.main.run(
                "for-each-ref", "--count=1", "--contains", sha, check=False).stdout.strip():
            reasons.append(f"its HEAD {sha[:12]} is in no branch or ref of {self.layout.root}")
        return reasons

    def _snapshot(self, task_id: str, path: Path) -> tuple[str, str]:
        """Save the workspace (shared folders and ``.git`` aside: they are not the task's
        work, or are kept by git) as a tarball; its path and the content digest."""
        skipped = self._skipped()
        digest = _digest(path, skipped)
        folder = self.snapshots / task_id
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{digest[:12]}.tar.gz"
        tmp = target.with_name(f".{target.name}.tmp")
        with tarfile.open(tmp, "w:gz") as tar:
            tar.add(path, arcname=task_id,
                    filter=lambda info: None if _rel(info.name) in skipped else info)
        os.replace(tmp, target)
        self._update(task_id, saved=digest, snapshot=str(target))
        return str(target), digest

    def _skipped(self) -> set[str]:
        return {TASK_REF, *shared.folders(self.config)}

    # --- registry -----------------------------------------------------------------
    def _owned(self, path: Path, task_id: str) -> bool:
        """The folder exists and its ``.task_ref`` names the task (or it has none yet)."""
        if not path.is_dir():
            return False
        try:
            ref = json.loads(read_beneath(path, TASK_REF, MAX_TASK_REF))
        except FileNotFoundError:
            return True
        except (OSError, ValueError):
            return False
        return isinstance(ref, dict) and ref.get("task") == task_id

    def _orphans(self, known: set[str]) -> list[Orphan]:
        reg = self._read()
        orphans = [Orphan(path=r["path"], branch="", reason="no task with this id")
                   for t, r in sorted(reg.items()) if t not in known and Path(r["path"]).exists()]
        registered = {Path(r["path"]).resolve() for r in reg.values()}
        root = self.layout.worktree_root
        for d in sorted(root.iterdir()) if root.is_dir() else []:
            if d.is_dir() and d.resolve() not in registered:
                orphans.append(Orphan(path=str(d), branch="", reason="no task's workspace"))
        return orphans

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.registry.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise RunError(f"cannot read {self.registry}: {exc}; fix or delete it") from exc
        return {str(k): v for k, v in data.items() if isinstance(v, dict) and "path" in v}

    def _write(self, reg: dict[str, dict[str, Any]]) -> None:
        self.registry.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.registry, json.dumps(reg, indent=1, sort_keys=True))

    def _update(self, task_id: str, **fields: Any) -> None:
        with self.lock:
            reg = self._read()
            if task_id in reg:
                reg[task_id].update(fields)
                self._write(reg)

    def _forget(self, task_id: str) -> None:
        reg = self._read()
        if reg.pop(task_id, None) is not None:
            self._write(reg)
        self.ports.free(task_id)

    def _write_task_ref(self, ws: Workspace) -> None:
        ref = {"task": ws.task_id, "branch": ws.branch, "repo": str(self.layout.root),
               "isolation": "hooks"}
        write_beneath(ws.path, TASK_REF, json.dumps(ref, indent=1) + "\n")
        if ws.branch is not None:  # a git checkout: never commit the ref
            exclude = Path(Git(ws.path).out("rev-parse", "--git-path", "info/exclude"))
            exclude = exclude if exclude.is_absolute() else ws.path / exclude
            if exclude.is_relative_to(ws.path):  # the workspace's own git folder: the agent's
                self._exclude_beneath(ws.path, exclude.relative_to(ws.path).as_posix())
                return
            text = exclude.read_text() if exclude.exists() else ""
            if f"/{TASK_REF}" not in text.splitlines():
                exclude.parent.mkdir(parents=True, exist_ok=True)
                with exclude.open("a") as fh:
                    fh.write(("" if not text or text.endswith("\n") else "\n") + f"/{TASK_REF}\n")

    @staticmethod
    def _exclude_beneath(root: Path, rel: str) -> None:
        """Add ``/.task_ref`` to the exclude file ``root/rel`` without following a link
        the agent put there or on the way (then the line is not added: .task_ref may show
        as untracked, and the commit leaves it out anyway)."""
        try:
            text = read_beneath(root, rel, MAX_TASK_REF).decode("utf-8", "replace")
        except FileNotFoundError:
            text = ""
        except OSError:
            return
        if f"/{TASK_REF}" not in text.splitlines():
            with contextlib.suppress(OSError):
                write_beneath(root, rel, text + ("" if not text or text.endswith("\n")
                                                 else "\n") + f"/{TASK_REF}\n", make=True)

    def _common_dir(self) -> Path:
        common = Path(self.main.out("rev-parse", "--git-common-dir"))
        return common if common.is_absolute() else (self.layout.root / common).resolve()


def _is_git(path: Path) -> bool:
    return (path / ".git").exists()


def _git_head(path: Path) -> tuple[str | None, str | None]:
    """(branch, HEAD commit) when ``path`` is a git checkout, else (None, None)."""
    if not _is_git(path):
        return None, None
    out = Git(path).run("rev-parse", "HEAD", "--abbrev-ref", "HEAD", check=False)
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 2:
        return None, None
    return (None if lines[1] == "HEAD" else lines[1]), lines[0]


def _digest(path: Path, skipped: set[str]) -> str:
    """A hash of the folder's names, modes, link targets and content (``skipped`` top-level
    names aside)."""
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(path):
        rel_dir = Path(dirpath).relative_to(path)
        dirs[:] = sorted(d for d in dirs if (rel_dir / d).as_posix() not in skipped)
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(dirpath, d))]):
            rel = (rel_dir / name).as_posix()
            if rel in skipped:
                continue
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            h.update(f"{rel}\0{st.st_mode:o}\0".encode())
            if os.path.islink(full):
                h.update(os.readlink(full).encode())
            else:
                with open(full, "rb") as fh:
                    while chunk := fh.read(1 << 20):
                        h.update(chunk)
            h.update(b"\0")
    return h.hexdigest()


def _rel(arcname: str) -> str:
    """A tar member's path below the workspace (its first component is the task id)."""
    return arcname.partition("/")[2]


def _last(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _exit(code: int | None, config: WorktreeConfig) -> str:
    return f"timed out after {config.hook_timeout:g}s" if code is None else f"exit {code}"
