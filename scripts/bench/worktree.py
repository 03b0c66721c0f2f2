"""Create+remove a task worktree through orchestrator vs raw git, on the same repository.

    .venv/bin/python scripts/bench/worktree.py [REPO] [--rounds N]

Without REPO a repository of 2,000 files is generated in a temp folder. Each round
times, back to back, raw ``git worktree add -b`` + ``git worktree remove`` + ``git
branch -D``, and ``WorktreeManager.create`` + ``remove`` (which also deletes the
branch, runs the fail-closed checks, writes events, ``.task_ref`` and the port block).
Medians are compared: the target is orchestrator <= 1.25 x raw + 30 ms.
Worktrees go to a temp folder; in a given REPO only branches ``bench/…``/``task/…``
are made and deleted again, plus orchestrator's own ``.tasks/`` state.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from orchestrator.board.model import Task
from orchestrator.config import WorktreeConfig
from orchestrator.layout import Layout
from orchestrator.worktree import WorktreeManager

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("repo", nargs="?", type=Path)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
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
