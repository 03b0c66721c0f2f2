"""Create+remove a task worktree through orchestrator vs raw git, on the same repository;
and the tenth worktree of a project with a heavy dependency folder, with and without the
shared-folder cache.

    .venv/bin/python scripts/bench/worktree.py [REPO] [--rounds N] [--case create|deps|all]
        [--deps-mb 200]

Without REPO a repository of 2,000 files is generated in a temp folder. Each round
times, back to back, raw ``git worktree add -b`` + ``git worktree remove`` + ``git
branch -D``, and ``WorktreeManager.create`` + ``remove`` (which also deletes the
branch, runs the fail-closed checks, writes events, ``.task_ref`` and the port block).
Medians are compared: the target is orchestrator <= 1.25 x raw + 30 ms.
Worktrees go to a temp folder; in a given REPO only branches ``bench/…``/``task/…``
are made and deleted again, plus orchestrator's own ``.tasks/`` state.

The ``deps`` case generates a repository whose gitignored ``node_modules`` holds
``--deps-mb`` MB in files of mixed sizes (some executable, some symlinks), keyed by a
committed ``package-lock.json``. It makes ten worktrees twice: with ``shared_folders``
(hard-linked from the cache, and once more with ``link = "symlink"``), and without,
copying the folder in with ``cp -a`` — the cheapest install there is (``npm ci`` would be
far slower). For the tenth worktree it prints the time until it is ready and the disk it
adds (its own blocks; ``du`` with the cache listed first agrees). Target: it adds <= 5 %
of the folder's size and is ready >= 10x faster than the copy.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from orchestrator.config import SharedFolder, WorktreeConfig
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.worktree import WorktreeManager, shared
from orchestrator.worktree.shared import tree_bytes

FILES = 2000


def git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def generate(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(FILES):
        d = repo / f"pkg{i % 40:02d}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i:04d}.py").write_text(f"# module {i}\n" + "x = 1\n" * 20)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=bench", "-c", "user.email=bench@example.com",
        "commit", "-qm", "generated")
    return repo


def raw_cycle(repo: Path, path: Path, branch: str) -> None:
    git(repo, "worktree", "add", "-q", "-b", branch, str(path), "HEAD")
    git(repo, "worktree", "remove", str(path))
    git(repo, "branch", "-q", "-D", branch)


def deps_repo(root: Path, megabytes: int) -> tuple[Path, int, int]:
    """A small repository with a heavy gitignored node_modules; (repo, bytes, files)."""
    repo = generate_small(root)
    rng = random.Random(12)
    chunk = rng.randbytes(4 << 20)
    nm = repo / "node_modules"
    total, files, target = 0, 0, megabytes << 20
    while total < target:
        pkg = nm / f"pkg-{files // 25:04d}"
        sub = pkg / ("lib" if files % 3 else "dist")
        sub.mkdir(parents=True, exist_ok=True)
        # mostly small files, a few large ones, as in a real node_modules
        size = min(int(rng.paretovariate(1.1) * 4096), 4 << 20, target - total) or 1
        f = sub / f"file{files:06d}.js"
        off = rng.randrange(0, len(chunk) - size + 1)
        f.write_bytes(chunk[off:off + size])
        if files % 50 == 0:
            f.chmod(0o755)
        if files % 40 == 0:
            bin_dir = nm / ".bin"
            bin_dir.mkdir(exist_ok=True)
            (bin_dir / f"tool{files}").symlink_to(f"../{pkg.name}/{sub.name}/{f.name}")
        total += size
        files += 1
    return repo, total, files


def generate_small(root: Path) -> Path:
    repo = root / "deps-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for i in range(200):
        (repo / f"src{i:03d}.js").write_text(f"module.exports = {i};\n")
    (repo / ".gitignore").write_text("node_modules/\n")
    (repo / "package-lock.json").write_text('{"lockfileVersion": 3}\n')
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=bench", "-c", "user.email=bench@example.com",
        "commit", "-qm", "generated")
    return repo


FOLDER_SECONDS: list[float] = []


def _timed_link_shared(*args: Any, **kwargs: Any) -> Any:
    t0 = time.perf_counter()
    try:
        return _link_shared(*args, **kwargs)
    finally:
        FOLDER_SECONDS.append(time.perf_counter() - t0)


_link_shared = shared.link_shared
shared.link_shared = _timed_link_shared  # the bench times the folder step on its own too


def tenth(repo: Path, wt_root: Path, config: WorktreeConfig,
          copy: bool) -> tuple[float, float, int]:
    """Make ten worktrees; for the tenth: (seconds until ready, seconds of the dependency
    folder step alone, bytes it adds on disk)."""
    layout = Layout.at(repo, wt_root).ensure()
    manager = WorktreeManager(layout, config, None, actor="bench")
    seconds, folder_s, added = 0.0, 0.0, 0
    for i in range(10):
        if i == 9:
            os.sync()  # the earlier copies' write-back must not land on the tenth's clock
        t0 = time.perf_counter()
        ws = manager.create(Task(id=f"task_{i:03d}", subject="bench"))
        folder_s = FOLDER_SECONDS[-1]
        if copy:
            t1 = time.perf_counter()
            subprocess.run(["cp", "-a", str(repo / "node_modules"), str(ws.path)], check=True)
            folder_s = time.perf_counter() - t1
        seconds = time.perf_counter() - t0
        added = tree_bytes(ws.path, own=True)
        assert (ws.path / "node_modules" / ".bin").is_dir()
    cache = manager.cache()
    if not copy and cache.exists():
        du = subprocess.run(["du", "-s", "-B1", str(cache), str(ws.path)], capture_output=True,
                            text=True, check=True).stdout.splitlines()
        print(f"  (du with the cache listed first: tenth worktree {int(du[-1].split()[0]):,} B)")
    for i in range(10):
        manager.remove(Task(id=f"task_{i:03d}", subject="bench"), force=True)
    shutil.rmtree(cache, ignore_errors=True)
    return seconds, folder_s, added


def deps_case(megabytes: int) -> None:
    with tempfile.TemporaryDirectory(prefix="orch-bench-deps-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        repo, size, files = deps_repo(root, megabytes)
        print(f"deps case: node_modules of {size / 2**20:.0f} MB in {files:,} files "
              f"(generated in {time.perf_counter() - t0:.1f} s); the tenth worktree:")
        folder = tree_bytes(repo / "node_modules")
        rows = []
        for label, config, copy in (
                ("fresh copy (cp -a), no cache", WorktreeConfig(), True),
                ("shared cache, hard links     ", WorktreeConfig(shared_folders=["node_modules"]),
                 False),
                ("shared cache, symlink        ", WorktreeConfig(
                    shared={"node_modules": SharedFolder(link="symlink")}), False)):
            rows.append((label, *tenth(repo, root / f"wt-{len(rows)}", config, copy)))
        base, base_folder = rows[0][1], rows[0][2]
        print(f"  {'':30}  {'ready':>9}  {'speed-up':>8}  {'folder step':>11}  {'speed-up':>8}"
              f"  {'adds on disk':>12}  {'% of folder':>11}")
        for label, secs, folder_s, added in rows:
            print(f"  {label:30}  {secs * 1000:6.0f} ms  {base / secs:7.1f}x  "
                  f"{folder_s * 1000:8.0f} ms  {base_folder / folder_s:7.1f}x  "
                  f"{added / 2**20:9.1f} MB  {100 * added / folder:10.2f} %")
        for label, secs, _folder_s, added in rows[1:]:
            ok = added <= 0.05 * folder and base / secs >= 10
            print(f"  target (<= 5 % on disk, ready >= 10x faster) with {label.strip()}: "
                  f"{'met' if ok else 'MISSED'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", nargs="?", type=Path)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--case", choices=("create", "deps", "all"), default="all")
    ap.add_argument("--deps-mb", type=int, default=200)
    args = ap.parse_args()
    if args.case in ("deps", "all"):
        deps_case(args.deps_mb)
    if args.case == "deps":
        return
    with tempfile.TemporaryDirectory(prefix="orch-bench-") as tmp:
        tmpdir = Path(tmp)
        repo = args.repo.resolve() if args.repo else generate(tmpdir)
        wt_root = tmpdir / "worktrees"
        manager = WorktreeManager(Layout.at(repo, wt_root).ensure(), WorktreeConfig(), None,
                                  actor="bench")
        raw: list[float] = []
        orch: list[float] = []
        for i in range(args.rounds + 1):  # round 0 warms the caches and is not counted
            task = Task(id=f"task_{900000 + i}", subject="bench")
            # alternate which goes first, so a burst of load on a shared machine hits both
            first, second = (raw, orch) if i % 2 else (orch, raw)
            for series in (first, second):
                t0 = time.perf_counter()
                if series is raw:
                    raw_cycle(repo, wt_root / f"raw{i}", f"bench/raw{i}")
                else:
                    manager.create(task)
                    manager.remove(task)
                if i:
                    series.append(time.perf_counter() - t0)
        r, o = statistics.median(raw) * 1000, statistics.median(orch) * 1000
        r_min, o_min = min(raw) * 1000, min(orch) * 1000
        files = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True,
                               text=True).stdout.count("\n")
        target = 1.25 * r + 30
        print(f"repo: {repo if args.repo else 'generated'} ({files} files), "
              f"{args.rounds} rounds, medians")
        print(f"raw git worktree add+remove+branch -D: {r:7.1f} ms (fastest {r_min:.1f})")
        print(f"orchestrator create+remove:            {o:7.1f} ms (fastest {o_min:.1f})")
        verdict = "met" if o <= target else "MISSED"
        print(f"ratio: {o / r:.2f}x   overhead: {o - r:+.1f} ms   "
              f"target <= 1.25x raw + 30 ms = {target:.1f} ms: {verdict}")


if __name__ == "__main__":
    main()
