"""Shared heavy folders: ``node_modules``, ``.venv``… linked into worktrees from a cache.

Each configured folder is keyed by the content of its lockfiles (``key_files``, next to
the folder): the cache entry ``<git-common-dir>/orchestrator/cache/<folder>/<key>`` is
filled once — copied from the main checkout's folder when its lockfiles have the same
content, else built by the folder's ``command`` (``npm ci``) in the first worktree that
needs it — and then linked into every worktree whose lockfiles match.

Linking is a tree of hard links by default (``cp -al``): every worktree gets folders of
its own, so a package added or removed in one worktree (package managers write new
files and rename them) changes neither the cache nor the others, and tools that resolve
real paths (node's module resolution, venv scripts) stay inside the worktree. It costs
one directory inode per folder and no file data; executable bits and symlinks are kept,
since the links share the inode and ``cp -a`` copies symlinks as symlinks. ``symlink``
mode links the whole folder instead: instant, but all worktrees then write into the one
cache folder. Across file systems hard links are impossible and the entry is copied.

A folder is left alone (and the reason reported) when it is already in the worktree (a
resumed task keeps its own), when git does not ignore it, when none of its key files
exist (no way to tell which entry fits), or when there is no entry and nothing to
build one from.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import msgspec

from orchestrator.beneath import read_beneath
from orchestrator.config import SharedFolder, WorktreeConfig
from orchestrator.errors import RunError
from orchestrator.events import SharedFolderLink
from orchestrator.git import Git
from orchestrator.protocols import TaskLogger
from orchestrator.worktree.lock import RepoLock
from orchestrator.worktree.setup import run_setup

DEFAULT_KEY_FILES: dict[str, list[str]] = {
    "node_modules": ["package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml",
                     "bun.lockb"],
    ".venv": ["uv.lock", "poetry.lock", "pdm.lock", "Pipfile.lock", "requirements*.txt"],
    "venv": ["uv.lock", "poetry.lock", "pdm.lock", "Pipfile.lock", "requirements*.txt"],
    "vendor": ["composer.lock", "Gemfile.lock", "go.sum"],
    ".bundle": ["Gemfile.lock"],
}
KEY_LENGTH = 16


def folders(config: WorktreeConfig) -> dict[str, SharedFolder]:
    """The shared folders in force: listed in ``shared_folders`` or given a table, minus
    the ones a table opts out (``enabled = false``)."""
    names = list(dict.fromkeys([*config.shared_folders, *config.shared]))
    chosen = {n: config.shared.get(n) or SharedFolder() for n in names}
    return {n: f for n, f in chosen.items() if f.enabled}


MAX_KEY_FILE = 64 << 20
"""A key file (a lock file) larger than this is not read."""


def cache_root(common_dir: Path) -> Path:
    return common_dir / "orchestrator" / "cache"


def key_of(base: Path, name: str, spec: SharedFolder) -> str | None:
    """The cache key of folder ``name`` under ``base``: a hash of its key files' names and
    content (None when none of them exists). A worktree is the agent's: a key file is read
    beneath ``base`` without following a link and up to `MAX_KEY_FILE` bytes (one that is
    a link, a FIFO or larger does not count)."""
    parent = (base / name).parent
    patterns = spec.key_files or DEFAULT_KEY_FILES.get(Path(name).name, [])
    found = []
    for f in sorted({p for pat in patterns for p in parent.glob(pat)}):
        try:
            found.append((f, read_beneath(base, f.relative_to(base).as_posix(), MAX_KEY_FILE)))
        except (OSError, ValueError):
            continue
    if not found:
        return None
    h = hashlib.sha256()
    for f, data in found:
        h.update(f.relative_to(parent).as_posix().encode() + b"\0")
        h.update(data + b"\0")
    return h.hexdigest()[:KEY_LENGTH]


def entry_dir(cache: Path, name: str, key: str) -> Path:
    return cache / name.replace("/", "%") / key


def link_shared(config: WorktreeConfig, main: Path, worktree: Path, cache: Path, *,
                env: Mapping[str, str], log: TaskLogger, task_id: str,
                git_checkout: bool = True) -> list[SharedFolderLink]:
    """Link every shared folder into ``worktree``; what each became."""
    rows = []
    for name, spec in folders(config).items():
        try:
            rows.append(SharedFolderLink(folder=name, **_link_one(
                name, spec, config, main, worktree, cache, env, log, task_id, git_checkout)))
        except OSError as exc:
            raise RunError(f"{task_id}: cannot link shared folder {name}: {exc}",
                           task=task_id) from exc
    return rows


def _link_one(name: str, spec: SharedFolder, config: WorktreeConfig, main: Path, worktree: Path,
              cache: Path, env: Mapping[str, str], log: TaskLogger, task_id: str,
              git_checkout: bool) -> dict[str, str]:
    dst = worktree / name
    if dst.exists() or dst.is_symlink():
        return {"how": "skipped", "reason": "already in the worktree"}
    if git_checkout and not Git(worktree).ok("check-ignore", "-q", "--no-index", f"{name}/"):
        return {"how": "skipped", "reason": f"git does not ignore {name}: add it to .gitignore"}
    key = key_of(worktree, name, spec)
    if key is None:
        wanted = spec.key_files or DEFAULT_KEY_FILES.get(Path(name).name, [])
        return {"how": "skipped", "reason": f"no key file ({', '.join(wanted) or 'none set'}) "
                "next to it: cannot tell which cache entry fits"}
    entry = entry_dir(cache, name, key)
    source = "cache"
    if not entry.is_dir():
        entry.parent.mkdir(parents=True, exist_ok=True)
        with RepoLock(entry.parent / ".lock"):
            if not entry.is_dir():
                source = _fill(entry, name, spec, config, main, worktree, key, env, log, task_id)
    if source == "none":
        return {"how": "skipped", "key": key, "reason": "no cache entry for these key files, "
                f"and neither the main checkout's {name} nor a command to build it"}
    how = link(entry, dst, spec.link)
    with contextlib.suppress(OSError):
        os.utime(entry)  # last use, for gc
    return {"how": how, "key": key, "source": source}


def _fill(entry: Path, name: str, spec: SharedFolder, config: WorktreeConfig, main: Path,
          worktree: Path, key: str, env: Mapping[str, str], log: TaskLogger,
          task_id: str) -> str:
    """Make the cache entry (caller holds its lock): from the main checkout, or by running
    the folder's command in the worktree. ``main``, ``command`` or ``none``."""
    tmp = entry.with_name(f".{key}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    src = main / name
    if src.is_dir() and not src.is_symlink() and key_of(main, name, spec) == key:
        _copy(src, tmp)
        os.rename(tmp, entry)
        return "main"
    if not spec.command:
        return "none"
    built = worktree / name
    run_setup([spec.command], built.parent, env, config.setup_timeout, log, task_id)
    if not built.is_dir() or built.is_symlink():
        raise RunError(f"{task_id}: the command for shared folder {name} ({spec.command}) "
                       f"did not create {name}", task=task_id)
    try:
        os.rename(built, tmp)
    except OSError:  # another file system
        _copy(built, tmp)
        shutil.rmtree(built)
    os.rename(tmp, entry)
    return "command"


def link(entry: Path, dst: Path, mode: str) -> str:
    """Put the cache ``entry`` at ``dst``: ``hardlink``, ``symlink``, or ``copy`` (when the
    two are on different file systems)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if mode == "symlink":
        os.symlink(entry, dst, target_is_directory=True)
        return "symlink"
    if os.stat(entry).st_dev != os.stat(dst.parent).st_dev:
        _copy(entry, dst)
        return "copy"
    if sys.platform.startswith("linux") and shutil.which("cp"):
        out = subprocess.run(["cp", "-al", str(entry), str(dst)], capture_output=True,
                             text=True, check=False)
        if out.returncode != 0:
            shutil.rmtree(dst, ignore_errors=True)
            raise OSError(f"cp -al failed: {out.stderr.strip()}")
    else:
        shutil.copytree(entry, dst, symlinks=True, copy_function=os.link)
    return "hardlink"


def _copy(src: Path, dst: Path) -> None:
    """A full copy keeping modes, times and symlinks (``cp -a``)."""
    if sys.platform.startswith("linux") and shutil.which("cp"):
        out = subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dst)],
                             capture_output=True, text=True, check=False)
        if out.returncode != 0:
            shutil.rmtree(dst, ignore_errors=True)
            raise OSError(f"cp -a failed: {out.stderr.strip()}")
        return
    shutil.copytree(src, dst, symlinks=True)


class CacheRow(msgspec.Struct):
    """A cache entry `gc_cache` removed (or would), with the bytes it held."""

    entry: str
    freed_bytes: int


def gc_cache(cache: Path, config: WorktreeConfig, checkouts: list[Path],
             dry_run: bool = False) -> list[CacheRow]:
    """Remove cache entries that no checkout in ``checkouts`` (the main one and every live
    worktree) has the key files of; one row per entry with the bytes it held."""
    cached = sorted(f for f in cache.iterdir() if f.is_dir()) if cache.is_dir() else []
    specs = folders(config)
    wanted: set[Path] = set()
    for base in (b for b in checkouts if b.is_dir()):
        for name, spec in specs.items():
            key = key_of(base, name, spec)
            if key:
                wanted.add(entry_dir(cache, name, key).resolve())
        for folder in cached:  # symlink mode: never pull the folder from under a worktree
            link_path = base / folder.name.replace("%", "/")
            if link_path.is_symlink():
                wanted.add(link_path.resolve())
    removed = []
    for folder in cached:
        for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
            if not entry.is_dir() or entry.resolve() in wanted or entry.name.startswith("."):
                continue
            size = tree_bytes(entry)
            if not dry_run:
                shutil.rmtree(entry)
            removed.append(CacheRow(str(entry), size))
    return removed


def tree_bytes(path: Path, *, own: bool = False) -> int:
    """Bytes on disk of the tree at ``path`` (symlinks not followed). ``own``: only what
    this tree alone holds: files hard-linked elsewhere (the shared cache) do not count."""
    total = 0
    for dirpath, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if own and st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                continue
            total += st.st_blocks * 512
    return total
