"""The user's repository is read-only to a sandboxed command; its commits enter through a
verifying import.

Inside the sandbox, for a command run in a task's linked worktree, the repository's
shared git folder (objects, refs, ``packed-refs``, ``config``, ``info/``, hooks) is
bound read-only, and so is the worktree's ``.git`` file. What a commit needs is
private to the run, in a scratch folder that is dropped afterwards:

- **objects**: a private object store is bound over ``objects/``; the repository's
  real objects are bound read-only elsewhere and listed as its alternate, so git
  reads every old object and writes new ones only aside (no object of the
  repository can be replaced or deleted, loose or packed);
- **the worktree's admin folder** (``.git/worktrees/<name>``: index, reflog, rebase
  state) is a private copy, with its ``HEAD``, ``gitdir`` and ``commondir`` read-only,
  so the worktree stays on its branch; nothing written there reaches the host;
- **the task's branch**: the folder holding it (``refs/heads/task/``) is replaced by
  a private folder holding only that branch at its current value.

When the command ends and the branch moved, the host imports the new objects the
way ``git receive-pack`` does with its quarantine: a pack of the objects reachable
from the new tip and not from the old one is made inside the sandbox (git there
reads the private store; the host never opens a file the agent wrote), read on the
host by ``git index-pack --strict --fix-thin`` into a quarantine folder (every
object hashed and checked by fsck; the ids come from the content, so nothing can be
forged under an existing id), checked for connectivity with ``git rev-list
--objects``, and only then moved into ``objects/pack``; then the branch moves with
``git update-ref <new> <old>`` (which checks that nobody moved it meanwhile).
Anything else the run wrote (other branches, the index, config in its admin copy)
is dropped.

A branch without a ``/`` (an empty ``worktree.branch_prefix``) cannot be given a
private folder without hiding ``main``: its ref stays read-only, the agent's own
commits fail and the teammate commits what it leaves, as ever.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.beneath import read_text_beneath
from orchestrator.errors import GitError
from orchestrator.git import Git, git_env, worktree_git_dir
from orchestrator.sandbox.scratch import scratch
from orchestrator.secrets import safe_env

SHA_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
READ_ONLY_IN_ADMIN = ("HEAD", "gitdir", "commondir", "locked")
BASE_OBJECTS = "/.orchestrator/objects"
"""Where the repository's real objects are bound (read-only) inside the sandbox."""
UPDATE_TIMEOUT = 30.0
IMPORT_TIMEOUT = 600.0
MAX_ADMIN_FILE = 256 * 1024 * 1024
Wrap = Callable[[list[str]], list[str]]
"""Turns an argv into the same sandbox's command line (for the pack step)."""


@dataclass
class GitConfinement:
    worktree: Path
    common: Path
    admin: Path
    branch: str | None
    scratch: Path | None = None
    start: str | None = None
    _args: list[str] | None = field(default=None, repr=False)

    @classmethod
    def open(cls, worktree: Path) -> GitConfinement | None:
        """The confinement for a linked worktree at ``worktree``; None when it is none
        (a main checkout or no git at all: the caller keeps its older rules)."""
        worktree = worktree.resolve()
        admin = worktree_git_dir(worktree)
        if admin is None:
            return None
        try:
            common = (admin / (admin / "commondir").read_text().strip()).resolve()
            head = (admin / "HEAD").read_text().strip()
        except (OSError, UnicodeDecodeError):
            return None
        branch = head.removeprefix("ref: refs/heads/") if head.startswith("ref: refs/heads/") \
            else None
        return cls(worktree, common, admin.resolve(), branch)

    def binds(self) -> list[str]:
        """bubblewrap arguments, to follow the worktree's own ``--bind`` (made once)."""
        if self._args is not None:
            return self._args
        self.scratch = scratch("git")
        args = ["--ro-bind", str(self.common), str(self.common)]
        args += _mask_sockets(self.common)  # git's fsmonitor daemon listens there
        args += self._admin_binds(self.scratch / "admin")
        args += _ro([self.worktree / ".git"])
        args += self._object_binds(self.scratch / "objects")
        args += self._branch_binds(self.scratch)
        self._args = args
        return args

    def _admin_binds(self, copy: Path) -> list[str]:
        copy.mkdir()
        (copy / "logs").mkdir()
        for entry in os.scandir(self.admin):
            try:  # regular files only, links not followed, bounded
                if entry.is_file(follow_symlinks=False) and \
                        entry.stat(follow_symlinks=False).st_size <= MAX_ADMIN_FILE:
                    shutil.copyfile(entry.path, copy / entry.name, follow_symlinks=False)
            except OSError:
                continue
        args = ["--bind", str(copy), str(self.admin)]
        for name in READ_ONLY_IN_ADMIN:
            if (copy / name).is_file():
                args += ["--ro-bind", str(copy / name), str(self.admin / name)]
        return args

    def _object_binds(self, private: Path) -> list[str]:
        objects = self.common / "objects"
        (private / "info").mkdir(parents=True)
        (private / "pack").mkdir()
        alternates = [BASE_OBJECTS, *_alternates(objects)]
        (private / "info/alternates").write_text("\n".join(alternates) + "\n")
        args = ["--ro-bind", str(objects), BASE_OBJECTS]
        for alt in alternates[1:]:
            args += ["--ro-bind", alt, alt]
        return [*args, "--bind", str(private), str(objects)]

    def _branch_binds(self, scratch: Path) -> list[str]:
        if self.branch is None or "/" not in self.branch:
            return []
        folder, leaf = self.branch.rsplit("/", 1)
        self.start = Git(self.worktree).commit_of(f"refs/heads/{self.branch}")
        if self.start is None:
            return []
        refs, logs = scratch / "refs", scratch / "reflogs"
        refs.mkdir()
        logs.mkdir()
        (refs / leaf).write_text(self.start + "\n")
        args = []
        for private, shared in ((refs, self.common / "refs/heads" / folder),
                                (logs, self.common / "logs/refs/heads" / folder)):
            shared.mkdir(parents=True, exist_ok=True)  # a mount point must exist
            args += ["--bind", str(private), str(shared)]
        return args

    def finish(self, wrap: Wrap | None = None) -> str | None:
        """After the command: import what it committed on the task's branch (``wrap``
        runs the pack step in the same sandbox) and move the real ref; drop the
        scratch. A note for the tool result when something could not be carried."""
        if self.scratch is None:
            return None
        try:
            if self.branch is None or self.start is None or wrap is None:
                return None
            leaf = self.branch.rsplit("/", 1)[1]
            try:
                # the agent's folder: a link, FIFO or huge file there is not a ref
                new = read_text_beneath(self.scratch / "refs", leaf, 4096).strip()
            except FileNotFoundError:
                return f"[the branch {self.branch} was deleted inside the sandbox; kept as it was]"
            except (OSError, UnicodeDecodeError):
                new = "(not a ref file)"
            if new == self.start:
                return None
            if not SHA_RE.fullmatch(new):
                return f"[the branch {self.branch} was set to {new[:80]!r} inside the " \
                       "sandbox; kept as it was]"
            problem = import_objects(self.common, self.worktree, wrap, new, self.start)
            if problem:
                return f"[the commits on {self.branch} were not imported: {problem}; " \
                       "the branch is kept as it was]"
            try:  # through the host's git runner: no hook of the agent's runs
                out = Git(self.worktree).run(
                    "update-ref", "-m", "commit (agent, sandboxed)", f"refs/heads/{self.branch}",
                    new, self.start, check=False, timeout=UPDATE_TIMEOUT)
            except GitError as exc:
                return f"[could not move the branch {self.branch} to {new[:12]}: {exc}]"
            if out.returncode != 0:
                return f"[could not move the branch {self.branch} to {new[:12]}: " \
                       f"{out.stderr.strip()}]"
            return None
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None
            self._args = None


def import_objects(common: Path, worktree: Path, wrap: Wrap, new: str, old: str) -> str | None:
    """Bring the objects reachable from ``new`` and not from ``old`` out of the sandbox
    into ``common`` through a verifying quarantine (see the module docstring); None
    when done, else what was wrong."""
    if _git(common, "cat-file", "-e", f"{new}^{{commit}}").returncode == 0:
        return None  # already here (the branch went back, or to a commit it had)
    objects = common / "objects"
    quarantine = objects / f"incoming-{uuid.uuid4().hex[:12]}"
    (quarantine / "pack").mkdir(parents=True)
    env = git_env({"GIT_OBJECT_DIRECTORY": str(quarantine),  # the host runner's pinned settings
                   "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(objects),
                   "GIT_QUARANTINE_PATH": str(quarantine)})
    try:
        pack = subprocess.Popen(
            wrap(["git", "pack-objects", "--revs", "--thin", "--stdout", "-q"]),
            cwd=worktree, env={k: v for k, v in safe_env(os.environ).items()
                               if not k.startswith("GIT_")},  # in the sandbox: no secret
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert pack.stdin is not None
        pack.stdin.write(f"{new}\n^{old}\n".encode())
        pack.stdin.close()
        try:
            index = subprocess.run(
                ["git", f"--git-dir={common}", "index-pack", "--stdin", "--strict",
                 "--fix-thin"], stdin=pack.stdout, env=env, capture_output=True,
                timeout=IMPORT_TIMEOUT, check=False)
        finally:
            pack.kill()
            pack.wait()
            if pack.stdout is not None:
                pack.stdout.close()
        if index.returncode != 0:
            return f"git index-pack --strict refused them ({_last(index.stderr)})"
        linked = subprocess.run(
            ["git", f"--git-dir={common}", "rev-list", "--objects", "--quiet", new,
             "--not", old], env=env, capture_output=True, timeout=IMPORT_TIMEOUT, check=False)
        if linked.returncode != 0:
            return f"objects are missing ({_last(linked.stderr)})"
        if _git(common, "cat-file", "-t", new, env=env).stdout.strip() != "commit":
            return f"{new[:12]} is no commit"
        files = sorted(os.listdir(quarantine / "pack"), key=lambda n: n.endswith(".idx"))
        for name in files:  # the pack before its index, as git's own quarantine moves them
            os.replace(quarantine / "pack" / name, objects / "pack" / name)
        return None
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(quarantine, ignore_errors=True)


def _git(common: Path, *args: str, env: dict[str, str] | None = None) \
        -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", f"--git-dir={common}", *args], capture_output=True, text=True,
                          env=env or git_env(), timeout=UPDATE_TIMEOUT, check=False)


def _last(stderr: bytes | str) -> str:
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else "no message"


def _alternates(objects: Path) -> list[str]:
    """The repository's own alternates (absolute, existing folders), bound read-only too."""
    try:
        lines = (objects / "info/alternates").read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    found = []
    for line in lines:
        if line.strip() and not line.startswith("#"):
            p = (objects / line.strip()).resolve()
            if p.is_dir():
                found.append(str(p))
    return found


def _mask_sockets(folder: Path) -> list[str]:
    """Bind ``/dev/null`` over each Unix socket directly in ``folder`` (e.g.
    ``fsmonitor--daemon.ipc``), so no daemon of the host is reachable through it."""
    args: list[str] = []
    try:
        with os.scandir(folder) as it:
            for entry in it:
                with contextlib.suppress(OSError):
                    if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                        args += ["--ro-bind", os.devnull, entry.path]
    except OSError:
        pass
    return args


def _ro(paths: Iterable[Path]) -> list[str]:
    args: list[str] = []
    for p in paths:
        if p.exists() or p.is_symlink():
            args += ["--ro-bind", str(p), str(p)]
    return args
