"""The container runner: the same sandbox as a full container per command (podman).

``[sandbox] runner = "podman"`` (or ``"docker"``) runs each sandboxed command as
``podman run --rm`` with the binds the bubblewrap runner would make (one source:
`Sandbox.wrap` builds the bubblewrap command line and `Container.argv` renders its
binds, tmpfs folders and variables as the engine's options), so the guarantees are the
same: the worktree writable, the repository read-only with its private object store
and verifying import, no capabilities (``--cap-drop all``, ``no-new-privileges``), an
unprivileged uid (65534, mapped onto the worktree's owner: files it writes are
yours), a read-only root, a fresh ``/tmp`` and home, its own pid, ipc and uts
namespaces (every process ends with the container, which is removed with
``rm -f`` when the command is over, also when the client was killed), no network
unless allowed (then the host's, as with bubblewrap).

The root: ``sandbox.image``, else the ``image`` of the main checkout's
``.devcontainer/devcontainer.json`` (never the worktree's: the agent writes that one),
with its ``containerEnv``; else an empty root with the host's system folders and
toolchains bound read-only, as bubblewrap does. An image is used as podman's mounted
copy of its root under a throwaway overlay (``--rootfs IMAGE-ROOT:O``; it must be
present: orchestrator pulls nothing). podman runs with ``--runtime runc``
(crun fails on some cgroup set-ups) and explicit ``nofile``/``nproc`` limits.

docker has no per-container uid mapping: it runs only for a person who is not root
(``--user`` their own uid), and needs an image. It is not covered by the tests here
(no docker on the test machines).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import ConfigError

RUNNERS = ("bwrap", "podman", "docker")
ENGINES = ("podman", "docker")
DEVCONTAINER = (".devcontainer/devcontainer.json", ".devcontainer.json")
MAX_DEVCONTAINER = 1 << 20
UID = 65534
ID_RANGE = 200_000
"""Container uids 0..65533 map to host uids from here (unused by people), 65534 to yours."""
REMOVE_TIMEOUT = 30.0
_COMMENTS = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', re.S)


@dataclass(frozen=True)
class Container:
    kind: str
    engine: str
    image: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    """``containerEnv`` of the devcontainer."""

    @classmethod
    def detect(cls, kind: str, root: Path | None, image: str | None = None) -> Container:
        """The runner ``kind`` for the repository at ``root``; `ConfigError` when its
        engine is missing or cannot run as asked."""
        if kind not in ENGINES:
            raise ConfigError(f"sandbox.runner must be one of {', '.join(RUNNERS)}, not {kind!r}")
        engine = shutil.which(kind)
        if engine is None:
            raise ConfigError(f"sandbox.runner = {kind}, but {kind} is not installed "
                              "(scripts/test-deps installs podman and runc)")
        env: dict[str, str] = {}
        if not image and root is not None:
            image, env = devcontainer(root)
        if kind == "docker" and (os.getuid() == 0 or not image):
            raise ConfigError("sandbox.runner = docker needs an image (sandbox.image or "
                              ".devcontainer/devcontainer.json) and a person who is not root "
                              "(docker cannot map an unprivileged uid onto the worktree's "
                              "owner); use podman")
        return cls(kind, engine, image or None, tuple(sorted(env.items())))

    def argv(self, bw: list[str], env: Mapping[str, str], name: str) -> list[str]:
        """The engine's command line for a bubblewrap command line ``bw`` (its binds,
        tmpfs folders, working folder, network and command), with ``env``."""
        out = [self.engine]
        if self.kind == "podman":
            out += ["--runtime", "runc"]
        out += ["run", "--rm", "--name", name, "--read-only", "--cap-drop", "all",
                "--security-opt", "no-new-privileges", "--ulimit", "nofile=1024:1024",
                "--ulimit", "nproc=1024:1024", "--pids-limit", "4096", "-i"]
        out += _ids(self.kind)
        network = "none"
        command: list[str] = []
        i = 0
        while i < len(bw):
            a = bw[i]
            if a in ("--bind", "--ro-bind"):
                out += ["--mount", _mount(bw[i + 1], bw[i + 2], a == "--ro-bind")]
                i += 3
            elif a == "--tmpfs":
                out += ["--tmpfs", f"{bw[i + 1]}:rw,exec"]
                i += 2
            elif a == "--setenv":
                out += ["-e", f"{bw[i + 1]}={bw[i + 2]}"]
                i += 3
            elif a == "--chdir":
                out += ["-w", bw[i + 1]]
                i += 2
            elif a == "--share-net":
                network = "host"
                i += 1
            elif a == "--":
                command = bw[i + 1:]
                break
            elif a in ("--symlink",):
                i += 3
            elif a in ("--uid", "--gid", "--cap-drop", "--proc", "--dev", "--remount-ro"):
                i += 2
            else:  # --unshare-*, --die-with-parent, --new-session: the container's own
                i += 1
        out += ["--network", network]
        for k, v in self.env:
            out += ["-e", f"{k}={v}"]
        for k, v in env.items():
            if self.image and k in ("PATH", "HOME"):
                continue  # the image's own
            out += ["-e", f"{k}={v}"]
        if self.image is None:
            root = ["--rootfs", _rootfs()]
        elif self.kind == "podman" and os.getuid() == 0:
            # an image's layers cannot be id-mapped on every storage set-up; its mounted
            # root under a throwaway overlay can
            root = ["--rootfs", f"{_image_root(self.engine, self.image)}:O"]
        else:
            root = [self.image]
        return [*out, *root, *command]

    def remove(self, name: str) -> None:
        """Remove the container if it is still there (its client was killed)."""
        subprocess.run([self.engine, *(["--runtime", "runc"] if self.kind == "podman" else []),
                        "rm", "-f", "-t", "0", name], capture_output=True,
                       timeout=REMOVE_TIMEOUT, check=False)


def devcontainer(root: Path) -> tuple[str | None, dict[str, str]]:
    """(``image``, ``containerEnv``) of the main checkout's devcontainer.json; a file
    that cannot be read is a `ConfigError` naming it."""
    for rel in DEVCONTAINER:
        path = root / rel
        if not path.is_file() or path.is_symlink():
            continue
        try:
            if path.stat().st_size > MAX_DEVCONTAINER:
                raise ValueError("too large")
            text = _COMMENTS.sub(lambda m: m.group(1) or "", path.read_text())
            data = json.loads(re.sub(r",(\s*[}\]])", r"\1", text))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{rel}: cannot be read ({exc})") from exc
        image = data.get("image") if isinstance(data, dict) else None
        env = data.get("containerEnv") if isinstance(data, dict) else None
        env = {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}
        return (image if isinstance(image, str) and image else None), env
    return None, {}


def _ids(kind: str) -> list[str]:
    if kind == "docker":
        return ["--user", f"{os.getuid()}:{os.getgid()}"]
    if os.getuid() != 0:
        return ["--userns", "keep-id"]
    return ["--uidmap", f"0:{ID_RANGE}:{UID}", "--uidmap", f"{UID}:0:1",
            "--gidmap", f"0:{ID_RANGE}:{UID}", "--gidmap", f"{UID}:0:1", "--user", f"{UID}:{UID}"]


def _mount(src: str, dst: str, ro: bool) -> str:
    for p in (src, dst):
        if "," in p or "=" in p:
            raise ConfigError(f"the container runner cannot bind {p!r} (a ',' or '=' in it)")
    return f"type=bind,src={src},dst={dst}" + (",ro" if ro else "")


@functools.lru_cache(maxsize=8)
def _image_root(engine: str, image: str) -> str:
    """The image's root, mounted read-only by podman (`ConfigError` when it is not here:
    images are never pulled by orchestrator)."""
    out = subprocess.run([engine, "image", "mount", image], capture_output=True, text=True,
                         timeout=REMOVE_TIMEOUT, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        reason = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(f"the sandbox image {image!r} cannot be used ({reason}); "
                          f"pull or build it first (podman pull {image})")
    return out.stdout.strip()


@functools.lru_cache(maxsize=1)
def _rootfs() -> str:
    """An empty root with the host's root links (``/bin -> usr/bin``); the system folders
    are bound into it."""
    root = Path(tempfile.mkdtemp(prefix="orch-rootfs-"))  # private to this process
    atexit.register(shutil.rmtree, root, True)
    for d in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/", d)
        if host.is_symlink():
            (root / d).symlink_to(os.readlink(host))
    for d in ("usr", "etc", "tmp", "proc", "dev", "sys"):
        (root / d).mkdir(exist_ok=True)
    return str(root)
