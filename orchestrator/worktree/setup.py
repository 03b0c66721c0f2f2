"""What a new worktree gets besides its checkout.

- the gitignored files listed in ``.worktreeinclude`` (gitignore syntax), copied
  from the main working tree (``.env`` and the like that git does not carry);
- the configured setup commands, run in the worktree with a timeout, their
  output in the task's log;
- a block of ports of its own (`PortBlocks`), exported as ``ORCH_PORT_BASE``.
"""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.beneath import copy_beneath
from orchestrator.errors import InvalidInput, RunError
from orchestrator.fsutil import atomic_write
from orchestrator.git import Git
from orchestrator.procutil import user_environ
from orchestrator.protocols import TaskLogger
from orchestrator.secrets import safe_env
from orchestrator.transcript import Setup
from orchestrator.worktree.lock import RepoLock

if TYPE_CHECKING:
    from orchestrator.sandbox import Sandbox

INCLUDE_FILE = ".worktreeinclude"
MAX_PORT = 65535


def included_files(git: Git, root: Path, skip: Sequence[str] = ()) -> list[str]:
    """Repository-relative paths of the untracked, gitignored files ``.worktreeinclude`` lists.

    An entry that climbs out of the repository (``../x``, ``~/x``) is an `InvalidInput`.
    ``skip`` holds folder prefixes never copied (the control and execution planes).
    """
    spec = root / INCLUDE_FILE
    if not spec.is_file():
        return []
    for n, line in enumerate(spec.read_text(errors="replace").splitlines(), 1):
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        pattern = entry.lstrip("!")
        if pattern.startswith("~") or ".." in pattern.strip("/").split("/"):
            raise InvalidInput(f"{INCLUDE_FILE} line {n}: {entry!r} points outside the repository")
    listed = git.run("ls-files", "-z", "--others", "--ignored", f"--exclude-from={spec}")
    candidates = [p for p in listed.stdout.split("\0")
                  if p and not any(p.startswith(s) for s in skip)]
    if not candidates:
        return []
    ignored = git.run("check-ignore", "-z", "--stdin", check=False,
                      input="\0".join(candidates) + "\0")
    if ignored.returncode not in (0, 1):
        raise RunError(f"git check-ignore failed: {ignored.stderr.strip()}")
    return [p for p in ignored.stdout.split("\0") if p]


def copy_included(git: Git, root: Path, worktree: Path, skip: Sequence[str] = ()) -> list[str]:
    """Copy the included files into ``worktree``; a file already there is left alone
    (a resumed task keeps its own edits). Symlinks are copied as links. The worktree is
    the agent's: a link on the way to a file's place is not followed, and that file is
    not copied (`orchestrator.beneath.copy_beneath`)."""
    copied = []
    for rel in included_files(git, root, skip):
        try:
            if copy_beneath(root / rel, worktree, rel):
                copied.append(rel)
        except OSError:
            continue  # a link (or a file) where a folder should be: the agent's, not ours
    return copied


def keep_ignored(main: Path, worktree: Path, ignored: Sequence[str], skip: set[str],
                 into: Path) -> Path | None:
    """Move the worktree's gitignored files, ``ignored`` (as `safety.scan` lists them: an
    ignored folder is one entry) into a new folder under ``into``, so removing the worktree
    deletes none of them; a file identical to the main checkout's (what ``.worktreeinclude``
    copied in) and the ``skip`` paths are left to go. The folder they went to, or None
    when there were none. A rename each; across file systems, a copy."""
    keep = []
    for rel in (p.rstrip("/") for p in ignored if p):
        src, twin = worktree / rel, main / rel
        if rel in skip or (src.is_file() and not src.is_symlink() and twin.is_file()
                           and filecmp.cmp(src, twin, shallow=False)):
            continue
        keep.append(rel)
    if not keep:
        return None
    dest = into / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    n = 0
    while dest.exists():
        n += 1
        dest = dest.with_name(f"{dest.name.split('.')[0]}.{n}")
    for rel in keep:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(worktree / rel, dest / rel)
    return dest


def run_setup(commands: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float,
              log: TaskLogger, task_id: str, sandbox: Sandbox | None = None) -> None:
    """Run each shell command in ``cwd``; the first failure or timeout raises `RunError`.

    Every command runs in its own process group, which is killed when the command
    ends: setup prepares the worktree, it does not leave services running. With an
    enabled ``sandbox`` (the task's: setup runs what the worktree holds, e.g. a
    ``package.json``'s scripts) each runs inside it, with no secret in its environment.
    """
    from orchestrator.sandbox import Sandbox  # the sandbox's git rules import worktree/

    full = {**user_environ(cwd), **env}
    if sandbox is not None and sandbox.enabled:
        full = safe_env(full)
    box = sandbox if sandbox is not None else Sandbox(enabled=False)
    for cmd in commands:
        with tempfile.TemporaryFile(mode="w+", errors="replace") as out, \
                box.session(["/bin/sh", "-c", cmd], cwd, full) as run:
            proc = run.popen(cwd=cwd, env=full, stdin=subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True, text=True)
            try:
                code: int | None = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                _kill_group(proc.pid)
                proc.wait()
            out.seek(0)
            output = out.read()
        log.write(Setup(command=cmd, exit=code, timed_out=code is None, output=output))
        if code is None:
            raise RunError(f"setup command timed out after {timeout:g}s: {cmd}", task=task_id)
        if code != 0:
            last = output.strip().splitlines()[-1:] or [""]
            raise RunError(f"setup command failed (exit {code}): {cmd}: {last[0][:200]}",
                           task=task_id)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class PortBlocks:
    """Port blocks of live worktrees, in a small JSON file guarded by a lock.

    ``{"task_001": [20000, 10], …}``; two live worktrees never overlap.
    """

    def __init__(self, path: Path, lock: Path, base: int, size: int) -> None:
        self.path = path
        self.lock = RepoLock(lock)
        self.base = base
        self.size = size

    def allocate(self, task_id: str) -> int:
        with self.lock:
            blocks = self._read()
            if task_id in blocks and blocks[task_id][1] >= self.size:
                return blocks[task_id][0]
            taken = sorted((b, b + n) for t, (b, n) in blocks.items() if t != task_id)
            start = self.base
            for lo, hi in taken:
                if start + self.size <= lo:
                    break
                start = max(start, hi)
            if start + self.size - 1 > MAX_PORT:
                raise RunError(f"no free block of {self.size} ports from {self.base}", task=task_id)
            blocks[task_id] = (start, self.size)
            self._write(blocks)
            return start

    def free(self, task_id: str) -> None:
        with self.lock:
            blocks = self._read()
            if blocks.pop(task_id, None) is not None:
                self._write(blocks)

    def live(self) -> dict[str, tuple[int, int]]:
        with self.lock:
            return self._read()

    def _read(self) -> dict[str, tuple[int, int]]:
        try:
            raw = json.loads(self.path.read_text())
            return {str(k): (int(v[0]), int(v[1])) for k, v in raw.items()}
        except FileNotFoundError:
            return {}
        except (ValueError, TypeError, IndexError, AttributeError):
            return {}  # a damaged allocation file is rebuilt as worktrees are created

    def _write(self, blocks: dict[str, tuple[int, int]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(blocks, indent=1, sort_keys=True), durable=False)
