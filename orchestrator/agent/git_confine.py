"""What git may write from inside the sandbox, for a command run in a task's worktree.

The repository's shared git folder is read-only in the sandbox (it lies under the
read-only ``/``), except what a commit on the task's own branch needs:

- the worktree's own admin folder ``.git/worktrees/<name>`` (its index, reflog,
  rebase state) — but not its ``HEAD``, ``gitdir`` and ``commondir`` files, nor the
  worktree's ``.git`` file: the worktree stays on its branch and cannot be pointed
  at another repository, so the teammate's own commit after the run lands there too;
- ``objects/`` for new objects — but not ``objects/pack`` and ``objects/info``
  (packed history and alternates stay read-only);
- the task's branch ref, through a scratch copy: the folder holding it
  (``refs/heads/task/``) is replaced, for the command, by a private folder holding
  only that branch at its current value (and its reflog folder by an empty one).
  When the command ends, a new value of the branch is written to the real ref
  with ``git update-ref <new> <old>`` (which checks that nobody moved it
  meanwhile); anything else written there — other branches created under the
  same prefix — is dropped.

So the main checkout's index and ``HEAD``, other branches, tags,
``refs/orchestrator/*``, ``packed-refs``, ``config``, ``hooks`` and ``info`` are
all read-only: ``git -C <main> commit``, ``git branch -f main``, ``git tag``,
``git update-ref -d refs/orchestrator/snapshots/x`` fail with "Read-only file
system". A branch without a ``/`` (an empty ``worktree.branch_prefix``) cannot be
given a private folder without hiding ``main``: its ref stays read-only, the
agent's own commits fail and the teammate commits what it leaves, as ever.

Cost per command: a few small file reads and writes (in ``/dev/shm`` where it can)
and a few more bind mounts, plus one ``git update-ref`` process when the command
moved the branch; no git process otherwise (the older rule ran ``git rev-parse``
for every command).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.beneath import read_text_beneath
from orchestrator.errors import GitError
from orchestrator.git import Git

SHA_RE = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
READ_ONLY_IN_ADMIN = ("HEAD", "gitdir", "commondir", "locked")
READ_ONLY_IN_OBJECTS = ("pack", "info")
UPDATE_TIMEOUT = 30.0


@dataclass
class GitConfinement:
    worktree: Path
    common: Path
    admin: Path
    branch: str | None
    scratch: Path | None = None
    start: str | None = None

    @classmethod
    def open(cls, worktree: Path) -> GitConfinement | None:
        """The confinement for a linked worktree at ``worktree``; None when it is none
        (a main checkout or no git at all: the caller keeps its older rules)."""
        from orchestrator.worktree.safety import worktree_git_dir

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
        """bubblewrap arguments, to follow the worktree's own ``--bind``."""
        args = ["--ro-bind", str(self.common), str(self.common)]  # also when under /tmp
        args += ["--bind", str(self.admin), str(self.admin)]
        args += _ro(self.admin / n for n in READ_ONLY_IN_ADMIN)
        args += _ro([self.worktree / ".git"])
        objects = self.common / "objects"
        args += ["--bind", str(objects), str(objects)]
        args += _ro(objects / n for n in READ_ONLY_IN_OBJECTS)
        return args + self._branch_binds()

    def _branch_binds(self) -> list[str]:
        if self.branch is None or "/" not in self.branch:
            return []
        folder, leaf = self.branch.rsplit("/", 1)
        self.start = _resolve(self.common, f"refs/heads/{self.branch}")
        if self.start is None:
            return []
        self.scratch = Path(tempfile.mkdtemp(prefix="orch-git-", dir=_scratch_root()))
        refs, logs = self.scratch / "refs", self.scratch / "logs"
        refs.mkdir()
        logs.mkdir()
        (refs / leaf).write_text(self.start + "\n")
        args = []
        for private, shared in ((refs, self.common / "refs/heads" / folder),
                                (logs, self.common / "logs/refs/heads" / folder)):
            shared.mkdir(parents=True, exist_ok=True)  # a mount point must exist
            args += ["--bind", str(private), str(shared)]
        return args

    def finish(self) -> str | None:
        """After the command: carry a moved branch over to the real ref, drop the
        scratch. A note for the tool result when something could not be carried."""
        if self.scratch is None or self.branch is None:
            return None
        try:
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
            try:  # through the host's git runner: no hook of the agent's runs
                out = Git(self.worktree).run(
                    "update-ref", "-m", "commit (agent, sandboxed)", f"refs/heads/{self.branch}",
                    new, self.start or "", check=False, timeout=UPDATE_TIMEOUT)
            except GitError as exc:
                return f"[could not move the branch {self.branch} to {new[:12]}: {exc}]"
            if out.returncode != 0:
                return f"[could not move the branch {self.branch} to {new[:12]}: " \
                       f"{out.stderr.strip()}]"
            return None
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def _scratch_root() -> str | None:
    """``/dev/shm`` where it is usable (a memory file system: creating and removing the
    scratch folders costs nothing there, while on a busy disk each rmdir can take ms)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


def _ro(paths: Iterable[Path]) -> list[str]:
    args: list[str] = []
    for p in paths:
        if p.exists() or p.is_symlink():
            args += ["--ro-bind", str(p), str(p)]
    return args


def _resolve(common: Path, ref: str) -> str | None:
    """A ref's value from its loose file or ``packed-refs`` (no git process)."""
    try:
        value = (common / ref).read_text().strip()
        if SHA_RE.fullmatch(value):
            return value
    except (OSError, UnicodeDecodeError):
        pass
    try:
        for line in (common / "packed-refs").read_text().splitlines():
            sha, _, name = line.partition(" ")
            if name == ref and SHA_RE.fullmatch(sha):
                return sha
    except (OSError, UnicodeDecodeError):
        pass
    return None
