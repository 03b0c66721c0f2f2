"""The bash sandbox (bubblewrap) and the environment tools are given.

Under the sandbox a command sees the whole file system read-only, except:

- the worktree, writable;
- a private ``/tmp`` (a fresh tmpfs per command; ``TMPDIR`` points there; a home
  folder under ``/tmp`` is bound back read-only so git still finds its config);
- in a task's worktree, the few paths of the repository's git folder that a
  commit on the task's own branch needs (its worktree admin folder, new objects,
  a private copy of its branch ref carried back after the command; see
  `orchestrator.agent.git_confine`) — the main checkout's index and HEAD, other
  branches, tags, ``refs/orchestrator/*``, ``config`` and ``hooks`` stay
  read-only. Elsewhere (a main checkout) its git folder is writable except
  ``config``, ``hooks`` and ``info``, which would run code outside the sandbox
  at the user's next git command, and ``orchestrator/registry`` (what removal
  trusts, `orchestrator.worktree.registry`).

Also: no network (``--unshare-net``) unless allowed, its own pid, ipc and uts
namespaces (every process of a command dies with it), ``--die-with-parent``
and ``--new-session`` (no terminal injection).

``Sandbox.detect("auto")`` turns it on where bubblewrap works (probed once per
process) and off with a one-line notice where it does not; ``"on"`` makes that
a `ConfigError`; ``"off"`` never uses it.
"""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from orchestrator.agent.git_confine import GitConfinement
from orchestrator.errors import ConfigError
from orchestrator.secrets import safe_env as safe_env  # re-exported for the tool runners

log = logging.getLogger(__name__)

SANDBOX_MODES = ("auto", "on", "off")
PROBE_TIMEOUT = 10.0
_READ_ONLY_IN_GIT_DIR = ("config", "hooks", "info", "orchestrator/registry")


@dataclass(frozen=True)
class Sandbox:
    enabled: bool
    network: bool = False
    notice: str | None = None
    """Why the sandbox is off in ``auto`` mode (shown once)."""
    bwrap: str = "bwrap"

    @classmethod
    def detect(cls, mode: str = "auto", network: bool = False) -> Sandbox:
        if mode not in SANDBOX_MODES:
            raise ConfigError(f"agent.sandbox must be one of {', '.join(SANDBOX_MODES)}, "
                              f"not {mode!r}")
        if mode == "off":
            return cls(enabled=False, network=network)
        bwrap, problem = _probe()
        if problem is None:
            return cls(enabled=True, network=network, bwrap=bwrap)
        if mode == "on":
            raise ConfigError(f"agent.sandbox = on, but {problem}; install bubblewrap "
                              "(scripts/install does) or set agent.sandbox = auto")
        notice = f"sandbox off: {problem}"
        log.warning(notice)
        return cls(enabled=False, network=network, notice=notice)

    def confine_git(self, cwd: Path) -> GitConfinement | None:
        """What git may write for a command in ``cwd`` (see `git_confine`); pass it to
        `wrap` and call its ``finish`` when the command is over. None when off or
        when ``cwd`` is no linked worktree."""
        return GitConfinement.open(cwd) if self.enabled else None

    def wrap(self, argv: list[str], cwd: Path, git: GitConfinement | None = None) -> list[str]:
        """``argv`` as run inside the sandbox with ``cwd`` writable (unchanged when off);
        with ``git``, the repository's git folder is read-only but for what it opens."""
        if not self.enabled:
            return argv
        cwd = cwd.resolve()
        args = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--tmpfs", "/tmp", "--setenv", "TMPDIR", "/tmp",
                "--unshare-all", "--die-with-parent", "--new-session"]
        if self.network:
            args.append("--share-net")
        home = Path.home().resolve()
        if home.is_relative_to("/tmp"):  # the private /tmp would hide it (git needs its config)
            args += ["--ro-bind", str(home), str(home)]
        args += ["--bind", str(cwd), str(cwd)]
        if git is not None:
            return [*args, *git.binds(), "--chdir", str(cwd), "--", *argv]
        git_dir = git_common_dir(cwd)
        if git_dir is not None:
            if not git_dir.is_relative_to(cwd):
                args += ["--bind", str(git_dir), str(git_dir)]
            for name in _READ_ONLY_IN_GIT_DIR:
                if (git_dir / name).exists():
                    args += ["--ro-bind", str(git_dir / name), str(git_dir / name)]
        return [*args, "--chdir", str(cwd), "--", *argv]


def git_common_dir(cwd: Path) -> Path | None:
    """The repository's shared git folder for a work tree at ``cwd`` (None outside git)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
                             cwd=cwd, capture_output=True, text=True, timeout=PROBE_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0 or not out.stdout.strip():
        return None
    return Path(out.stdout.strip()).resolve()


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[str, str | None]:
    """(the bwrap path, why it cannot be used or None); probed once per process."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bwrap", "bubblewrap (bwrap) is not installed"
    cmd = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
           "--unshare-all", "--die-with-parent", "--new-session", "true"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return bwrap, f"bubblewrap does not run here ({exc})"
    if out.returncode != 0:
        reason = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        return bwrap, f"bubblewrap does not work here ({reason})"
    return bwrap, None
