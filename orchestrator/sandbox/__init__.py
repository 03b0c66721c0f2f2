"""The sandbox: where everything that executes files from a task's worktree runs.

One runner for the agent's bash, the checks (``team.verify``, ``land --verify``),
worktree setup commands and the ``command`` and ``claude-code`` backends. With
bubblewrap (the default runner) a command sees:

- a fresh, read-only root holding only the system folders (``/usr``, ``/bin``,
  ``/lib*``, ``/sbin``, ``/etc`` with its shadow files masked), the toolchains on
  ``PATH`` (a ``bin`` folder's prefix: a virtualenv, ``~/.cargo``, ``~/.pyenv``) and
  orchestrator's own Python,
  and folders named in ``sandbox.read_only`` — never ``/run``, ``/var``, ``/tmp``,
  ``/home`` or the home folder as a whole, and no folder that holds a Unix socket
  (each extra folder is scanned, 4 levels deep, once per process and refused if it
  holds one): so no
  socket outside the sandbox (the PostgreSQL board's, a daemon's, a test cluster's)
  can be reached by path; abstract sockets belong to the network namespace, which is
  the sandbox's own unless the network is allowed;
- the worktree, writable; a fresh ``/tmp`` and a fresh home folder (tmpfs) with the
  person's git config bound back read-only;
- in a task's worktree, the repository's git folder read-only, with a private
  object store, index and branch ref for the run (`orchestrator.sandbox.git_confine`):
  new objects enter the repository only through a verifying import afterwards.

Also: no capabilities (``--cap-drop ALL``), an unprivileged uid inside a user
namespace (65534 when orchestrator runs as root, else the caller's own), its own
pid, ipc, uts, cgroup and network namespaces (``--unshare-all``; the network is
shared only when allowed), its own ``/proc``, ``--die-with-parent`` and
``--new-session``. Every process a command starts lives in its pid namespace and
ends with it: a ``setsid``/``nohup``/double-forked child dies when the command's
first process exits or is killed.

``Sandbox.detect("auto")`` turns it on where bubblewrap works (probed once per
process) and off with a one-line notice where it does not; ``"on"`` makes that
a `ConfigError`; ``"off"`` never uses it. `Sandbox.session` is the one entry point
for running a command: it opens the git confinement, gives the wrapped argv, and
imports what the run committed when it ends.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shlex
import shutil
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import ConfigError
from orchestrator.sandbox.container import Container
from orchestrator.sandbox.git_confine import GitConfinement
from orchestrator.sandbox.netns import OwnNetwork
from orchestrator.secrets import safe_env as safe_env  # re-exported for the tool runners

if TYPE_CHECKING:
    from orchestrator.config import Config

log = logging.getLogger(__name__)

SANDBOX_MODES = ("auto", "on", "off")
PROBE_TIMEOUT = 10.0
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""Bound read-only (a symlink such as ``/bin -> usr/bin`` is recreated as a link)."""
MASKED = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers")
"""Readable by root only: masked, since the sandbox's outer uid is root's when it runs as root."""
NEVER_BOUND = ("/", "/run", "/var", "/var/run", "/tmp", "/var/tmp", "/dev", "/proc", "/sys",
               "/home", "/root", "/mnt", "/media", "/srv")
"""Where sockets and other people's files live: never a toolchain prefix."""
PREFIX_NAMES = ("bin", "sbin", "shims")
SOCKET_SCAN_DEPTH = 4
"""How deep a toolchain folder is searched for sockets: daemons put theirs near the top
(``~/.gnupg/S.gpg-agent``, ``~/.docker/run/docker.sock``, ``.s.PGSQL.5432``), while a
whole ``~/.pyenv`` is 130,000 entries (half a second)."""
SOCKET_SCAN_LIMIT = 20_000
"""Entries scanned in one extra folder before it is refused as too big to vouch for."""
UNPRIVILEGED_UID = 65534
HOME_GIT_FILES = (".gitconfig", ".config/git")
_READ_ONLY_IN_GIT_DIR = ("config", "hooks", "info", "orchestrator/registry")


@dataclass(frozen=True)
class Sandbox:
    enabled: bool
    network: bool = False
    notice: str | None = None
    """Why the sandbox is off in ``auto`` mode (shown once)."""
    bwrap: str = "bwrap"
    read_only: tuple[str, ...] = ()
    """More folders bound read-only (``sandbox.read_only``): toolchains not on ``PATH``."""
    writable: tuple[str, ...] = field(default=())
    """More folders bound writable (a backend's state folder, a usage file's folder)."""
    files: tuple[str, ...] = field(default=())
    """Files (or folders holding no socket) bound read-only as they are (a backend's
    settings linked from the person's home folder)."""
    container: Container | None = None
    """The container runner (`orchestrator.sandbox.container`); None: bubblewrap."""
    launcher: tuple[str, ...] = ()
    """Runs first inside, with ``--`` and the command after it (the credential proxy's
    forwarder in a sandbox without the host's network)."""
    slirp: str | None = None
    """slirp4netns, when the network is allowed in a namespace of the sandbox's own
    (``sandbox.own_network``; `orchestrator.sandbox.netns`)."""

    @property
    def host_network(self) -> bool:
        """Whether the sandbox shares the host's network (and so its loopback)."""
        return self.enabled and self.network and self.slirp is None

    @classmethod
    def detect(cls, mode: str = "auto", network: bool = False,
               read_only: Sequence[str] = (), *, runner: str = "bwrap",
               root: Path | None = None, image: str | None = None) -> Sandbox:
        if mode not in SANDBOX_MODES:
            raise ConfigError(f"agent.sandbox must be one of {', '.join(SANDBOX_MODES)}, "
                              f"not {mode!r}")
        if mode == "off":
            return cls(enabled=False, network=network)
        if runner != "bwrap":  # chosen by name: missing is an error, never a silent host run
            return cls(enabled=True, network=network, read_only=tuple(read_only),
                       container=Container.detect(runner, root, image))
        bwrap, problem = _probe()
        if problem is None:
            return cls(enabled=True, network=network, bwrap=bwrap, read_only=tuple(read_only))
        if mode == "on":
            raise ConfigError(f"agent.sandbox = on, but {problem}; install bubblewrap "
                              "(scripts/install does) or set agent.sandbox = auto")
        notice = f"sandbox off: {problem}"
        log.warning(notice)
        return cls(enabled=False, network=network, notice=notice)

    def with_(self, *, network: bool | None = None, writable: Sequence[str] = (),
              read_only: Sequence[str] = (), files: Sequence[str] = (),
              launcher: Sequence[str] | None = None) -> Sandbox:
        """This sandbox with the network allowed or not, more folders and files, and
        another launcher."""
        return Sandbox(self.enabled, self.network if network is None else network,
                       self.notice, self.bwrap, (*self.read_only, *read_only),
                       (*self.writable, *writable), (*self.files, *files), self.container,
                       self.launcher if launcher is None else tuple(launcher), self.slirp)

    def confine_git(self, cwd: Path) -> GitConfinement | None:
        """What git may write for a command in ``cwd`` (see `git_confine`); pass it to
        `wrap` and call its ``finish`` when the command is over. None when off or
        when ``cwd`` is no linked worktree."""
        return GitConfinement.open(cwd) if self.enabled else None

    @contextlib.contextmanager
    def session(self, argv: list[str], cwd: Path,
                env: dict[str, str] | None = None) -> Iterator[Session]:
        """Run one command in the sandbox: ``argv`` wrapped (unchanged when off) and the
        git confinement opened; when the block ends, what the command committed on the
        task's branch is imported (verified) and the branch moved. ``note`` then says
        what could not be carried over."""
        git = self.confine_git(cwd)
        name = f"orch-{uuid.uuid4().hex[:16]}"
        net = OwnNetwork.open(self.slirp) if (
            self.enabled and self.network and self.slirp and self.container is None) else None
        s = Session(self.wrap(argv, cwd, git, env, name=name, net=net), git, net)
        try:
            yield s
        finally:
            if net is not None:
                net.close()
            if self.container is not None and self.enabled:
                self.container.remove(name)  # its client may have been killed: not it
            if git is not None:
                offline = self.with_(network=False, launcher=())
                s.note = git.finish(lambda a: offline.wrap(a, cwd, git, name=f"{name}-pack"))

    def wrap(self, argv: list[str], cwd: Path, git: GitConfinement | None = None,
             env: dict[str, str] | None = None, *, name: str = "orch-command",
             net: OwnNetwork | None = None) -> list[str]:
        """``argv`` as run inside the sandbox with ``cwd`` writable (unchanged when off);
        with ``git``, the repository's git folder is read-only but for what it opens.
        ``env`` is the command's environment (its ``PATH`` says which toolchains to bind;
        by default this process's); ``name`` names a container runner's container."""
        if not self.enabled:
            return argv
        cwd = cwd.resolve()
        environ = env if env is not None else dict(os.environ)
        path = environ.get("PATH", os.defpath)
        system = self.container is None or self.container.image is None
        shared = self.network and (self.slirp is None or self.container is not None)
        args = [self.bwrap, *_base_args(shared, path, self.read_only, str(Path.home()),
                                        system)]
        if net is not None:
            args += net.bwrap_args()
        bound = (*SYSTEM_DIRS, *_toolchains(path, self.read_only, str(Path.home())))
        for extra in {os.path.realpath(f) for f in self.files}:
            if not any(Path(extra).is_relative_to(b) for b in bound) and (
                    not os.path.isdir(extra) or not _holds_socket(extra)):
                args += ["--ro-bind", extra, extra]
        for extra in self.writable:
            args += ["--bind", extra, extra]
        args += ["--bind", str(cwd), str(cwd)]
        if git is not None:
            args += git.binds()
        else:
            args += _git_dir_binds(cwd)
        inner = [*self.launcher, "--", *argv] if self.launcher else argv
        args = [*args, "--remount-ro", "/", "--chdir", str(cwd), "--", *inner]
        if self.container is not None:
            return self.container.argv(args[1:], environ, name)
        return args


def task_sandbox(config: Config, *, network: bool | None = None,
                 root: Path | None = None) -> Sandbox:
    box = _task_sandbox(config, network=network, root=root)
    if box.enabled and box.network and config.sandbox.own_network and box.container is None:
        slirp = shutil.which("slirp4netns")
        if slirp is None:
            raise ConfigError("sandbox.own_network = true, but slirp4netns is not installed")
        return replace(box, slirp=slirp)
    return box


def _task_sandbox(config: Config, *, network: bool | None = None,
                  root: Path | None = None) -> Sandbox:
    """The sandbox of a task's commands as configured: `agent.sandbox` (auto, on, off),
    the network (``network``; default `agent.network`), `sandbox.read_only` and the
    runner (`sandbox.runner`, `sandbox.image`, or the devcontainer of the main checkout
    at ``root``)."""
    return Sandbox.detect(config.agent.sandbox,
                          config.agent.network if network is None else network,
                          config.sandbox.read_only, runner=config.sandbox.runner,
                          root=root, image=config.sandbox.image)


def backend_sandbox(config: Config, command: str, writable: Sequence[Path] = (),
                    root: Path | None = None) -> Sandbox | None:
    """The sandbox of a CLI backend's run (`command`, `claude-code`, the presets): the
    task's, with the network of `sandbox.network`, the folder of ``command``'s program
    (when it is a path) and ``writable`` folders of its own; None when
    `sandbox.backends` is off (the run is on the host)."""
    if not config.sandbox.backends:
        return None
    box = task_sandbox(config, network=config.sandbox.network, root=root)
    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    program = []
    if words and os.path.isabs(words[0]):  # its folder, and where its links lead
        program = [os.path.realpath(os.path.dirname(words[0])),
                   os.path.dirname(os.path.realpath(words[0]))]
    return box.with_(writable=[str(p) for p in writable], read_only=program)


@dataclass
class Session:
    argv: list[str]
    git: GitConfinement | None
    net: OwnNetwork | None = None
    note: str | None = None
    """After the block: what could not be carried back from the sandbox (for the log)."""

    def popen(self, **kwargs: Any) -> subprocess.Popen[Any]:
        """Start the command (``subprocess.Popen`` arguments); with a network of its own,
        it is attached before the command runs."""
        if self.net is None:
            return subprocess.Popen(self.argv, **kwargs)
        proc = subprocess.Popen(self.argv, pass_fds=self.net.pass_fds, **kwargs)
        self.net.attach()
        return proc


@functools.lru_cache(maxsize=16)
def _base_args(network: bool, path: str, read_only: tuple[str, ...], home: str,
               system: bool = True) -> tuple[str, ...]:
    """The part of the command line that depends on this machine, not on the command."""
    uid = os.getuid()
    inside = UNPRIVILEGED_UID if uid == 0 else uid
    gid = UNPRIVILEGED_UID if uid == 0 else os.getgid()
    args = ["--unshare-all", "--unshare-user", "--uid", str(inside), "--gid", str(gid),
            "--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    if network:
        args.append("--share-net")
    for d in SYSTEM_DIRS if system else ():  # a container image brings its own
        p = Path(d)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), d]
        elif p.is_dir():
            args += ["--ro-bind", d, d]
    for f in MASKED if system else ():
        if os.path.isfile(f):
            args += ["--ro-bind", "/dev/null", f]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--setenv", "TMPDIR", "/tmp",
             "--tmpfs", home]
    for name in HOME_GIT_FILES:  # the person's git identity, for the agent's own commits
        p = Path(home, name)
        if p.exists() and not p.is_symlink():
            args += ["--ro-bind", str(p), str(p)]
    for d in _toolchains(path, read_only, home) if system else ():
        args += ["--ro-bind", d, d]
    return tuple(args)


@functools.lru_cache(maxsize=16)
def _toolchains(path: str, read_only: tuple[str, ...], home: str) -> tuple[str, ...]:
    """The folders bound for ``PATH`` and ``sandbox.read_only``: for a ``bin`` folder
    its prefix (a virtualenv, ``~/.cargo``), never a place in `NEVER_BOUND`, the home
    folder itself or one already under a system folder; each scanned for sockets."""
    never = {*NEVER_BOUND, str(Path(home).resolve())}
    chosen: list[str] = []
    # this Python's own prefixes too: scripts and tools written for it name it in their #!
    candidates = [*path.split(os.pathsep), sys.prefix, sys.base_prefix, *read_only]
    for raw in candidates:
        if not raw or not os.path.isabs(os.path.expanduser(raw)):
            continue
        try:
            d = Path(os.path.expanduser(raw)).resolve(strict=True)
        except OSError:
            continue
        if not d.is_dir():
            continue
        if d.name in PREFIX_NAMES and str(d.parent) not in never and raw not in read_only:
            d = d.parent
        s = str(d)
        if s in never or any(d.is_relative_to(x) for x in (*SYSTEM_DIRS, *chosen)):
            continue
        if _holds_socket(s):
            log.warning("sandbox: %s holds a Unix socket; not bound", s)
            continue
        chosen = [c for c in chosen if not Path(c).is_relative_to(d)] + [s]
    return tuple(chosen)


@functools.lru_cache(maxsize=64)
def _holds_socket(folder: str) -> bool:
    """Whether ``folder`` holds a Unix socket within `SOCKET_SCAN_DEPTH` levels (or is too
    big to tell), links not followed."""
    seen = 0
    stack = [(folder, 0)]
    while stack:
        here, depth = stack.pop()
        try:
            with os.scandir(here) as it:
                for entry in it:
                    seen += 1
                    if seen > SOCKET_SCAN_LIMIT:
                        return True
                    try:
                        mode = entry.stat(follow_symlinks=False).st_mode
                    except OSError:
                        continue
                    if stat.S_ISSOCK(mode):
                        return True
                    if stat.S_ISDIR(mode) and depth + 1 < SOCKET_SCAN_DEPTH:
                        stack.append((entry.path, depth + 1))
        except OSError:
            continue
    return False


def _git_dir_binds(cwd: Path) -> list[str]:
    """Without a confinement: a linked worktree's repository is read-only, all of it (no
    private store: git writes fail, nothing is imported; `Sandbox.session` opens one).
    Outside a linked worktree (a workspace of its own) its git folder is writable but
    for what would run code at the person's next git command."""
    linked = GitConfinement.open(cwd)
    if linked is not None:
        return ["--ro-bind", str(linked.common), str(linked.common),
                "--ro-bind", str(linked.worktree / ".git"), str(linked.worktree / ".git")]
    git_dir = git_common_dir(cwd)
    if git_dir is None:
        return []
    args = [] if git_dir.is_relative_to(cwd) else ["--bind", str(git_dir), str(git_dir)]
    for name in _READ_ONLY_IN_GIT_DIR:
        if (git_dir / name).exists():
            args += ["--ro-bind", str(git_dir / name), str(git_dir / name)]
    return args


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
    cmd = [bwrap, *_base_args(False, "", (), str(Path.home())), "true"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                             stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return bwrap, f"bubblewrap does not run here ({exc})"
    if out.returncode != 0:
        reason = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        return bwrap, f"bubblewrap does not work here ({reason})"
    return bwrap, None
