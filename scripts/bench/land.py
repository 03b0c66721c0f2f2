"""The merge queue: ``orchestrator land`` against the same work done by hand.

    .venv/bin/python scripts/bench/land.py [--tasks 30] [--verify-seconds 1] [--batch 10]

A generated repository gets ``--tasks`` tasks in review, each a branch with one commit
adding a file of its own (made through the real board and worktrees, not timed). Then:

- by hand: for each branch, ``git merge-tree --write-tree`` + ``git commit-tree`` of the
  merge, ``git checkout --detach`` of it in one verify worktree, the verify command
  (``sleep S``), and ``git merge --ff-only`` in the main working tree — the least a
  careful person (or script) runs; main is reset afterwards;
- by hand with land's clean-up: the same, plus ``git worktree remove`` of the task's
  worktree and ``git branch -D`` of its branch after each merge (on a copy of the tasks);
- ``orchestrator land --all-reviewed --verify 'sleep S'`` as a fresh CLI process on the
  same tasks (it also reads and writes the board, events, removes each worktree and
  branch, and restacks/orders);
- with ``--batch B``: ``land --batch B`` on a fresh copy of the tasks, once with all
  passing, once with one task that breaks the checks (bisection finds it).

Goal (issue 34): land <= 1.1 x by hand with the same clean-up. The batch lines show what
verifying several tasks together buys (fewer verify runs) and what a failure costs (the
bisection's runs).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.board import init_repo, open_board
from orchestrator.config import Config
from orchestrator.worktree import WorktreeManager, binding

FILES = 300
GOAL_RATIO = 1.1
ENV = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
       "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True, env=ENV).stdout.strip()


def reviewed_repo(root: Path, n: int, breaker: int | None = None
                  ) -> tuple[Path, list[tuple[str, Path]]]:
    """A repository with ``n`` tasks in review; task ``breaker`` adds a file named BREAK."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for i in range(FILES):
        d = repo / f"pkg{i % 20:02d}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i:04d}.py").write_text(f"# module {i}\n" + "x = 1\n" * 20)
    (repo / "orchestrator.toml").write_text("[board]\nfsync = false\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "generated")
    layout = init_repo(repo)
    config = Config.load(repo)
    branches = []
    with open_board(layout, config.board) as board:
        manager = WorktreeManager(layout, config.worktree, board)
        for i in range(n):
            task = board.add(f"change {i}")
            claimed = board.claim("bench", task_id=task.id)
            assert claimed is not None and claimed.lease is not None
            ws = manager.create(claimed)
            board.update(task.id, claimed.lease.token, **binding(ws))
            name = "BREAK" if i == breaker else f"new{i:03d}.txt"
            (ws.path / name).write_text(f"{i}\n")
            git(ws.path, "add", "-A")
            git(ws.path, "commit", "-qm", f"change {i}")
            board.complete(task.id, claimed.lease.token)
            branches.append((ws.branch, ws.path))
    return repo, branches


def by_hand(repo: Path, branches: list[tuple[str, Path]], verify: str, tmp: Path, *,
            clean: bool = False) -> float:
    start = git(repo, "rev-parse", "main")
    tree_dir = tmp / "verify"
    git(repo, "worktree", "add", "-q", "--detach", str(tree_dir), "main")
    t0 = time.perf_counter()
    for branch, worktree in branches:
        tip = git(repo, "rev-parse", "main")
        tree = git(repo, "merge-tree", "--write-tree", "main", branch).splitlines()[0]
        commit = git(repo, "commit-tree", tree, "-p", tip, "-p", branch, "-m", f"Merge {branch}")
        git(tree_dir, "checkout", "-q", "--force", "--detach", commit)
        subprocess.run(verify, shell=True, cwd=tree_dir, check=True)
        git(repo, "merge", "--ff-only", "-q", commit)
        if clean:
            git(repo, "worktree", "remove", "--force", str(worktree))
            git(repo, "branch", "-q", "-D", branch)
    seconds = time.perf_counter() - t0
    git(repo, "worktree", "remove", "--force", str(tree_dir))
    git(repo, "reset", "-q", "--hard", start)
    return seconds


def land(repo: Path, verify: str, *extra: str) -> tuple[float, str]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "orchestrator", "land", "--all-reviewed",
                          "--verify", verify, *extra], cwd=repo, capture_output=True,
                         text=True, env=ENV, check=False)
    seconds = time.perf_counter() - t0
    if res.returncode not in (0, 1):
        raise SystemExit(f"land failed: {res.stderr or res.stdout}")
    return seconds, res.stdout.strip().splitlines()[-1]


def mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=30)
    p.add_argument("--verify-seconds", type=float, default=1.0)
    p.add_argument("--batch", type=int, default=0, help="also time land --batch B")
    args = p.parse_args()
    verify = f"sleep {args.verify_seconds:g}"
    print(f"{args.tasks} reviewed tasks, verify `{verify}`, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory(prefix="bench-land-") as tmp:
        root = Path(tmp)
        repo, branches = reviewed_repo(root / "one", args.tasks)
        hand = by_hand(repo, branches, verify, root)
        queue, summary = land(repo, verify)
        repo, branches = reviewed_repo(root / "clean", args.tasks)
        clean = by_hand(repo, branches, verify, root, clean=True)
        print(f"by hand (merge-tree + verify + ff) x{args.tasks}: {hand:7.1f} s "
              f"({hand / args.tasks:.3f} s/task)")
        print(f"by hand, also removing worktree and branch: {clean:7.1f} s "
              f"({clean / args.tasks:.3f} s/task)")
        print(f"orchestrator land:                       {queue:7.1f} s "
              f"({queue / args.tasks:.3f} s/task)  [{summary}]")
        print(f"ratio land / by hand: {queue / hand:.3f}; land / by hand with clean-up: "
              f"{queue / clean:.3f} (goal <= {GOAL_RATIO}) {mark(queue / clean <= GOAL_RATIO)}")
        overhead = (queue - hand) / args.tasks
        print(f"land's own cost per task beyond the verify: {overhead * 1000:.0f} ms")
        if not args.batch:
            print(f"load average at the end: {os.getloadavg()[0]:.1f}")
            return

        repo, _ = reviewed_repo(root / "two", args.tasks)
        batched, summary = land(repo, verify, "--batch", str(args.batch))
        print(f"land --batch {args.batch}, all pass:            {batched:7.1f} s  "
              f"{batched / hand:.2f} x by hand  [{summary}]")
        repo, _ = reviewed_repo(root / "three", args.tasks, breaker=args.tasks // 3)
        broken, summary = land(repo, f"{verify}; ! test -e BREAK", "--batch", str(args.batch))
        print(f"land --batch {args.batch}, one task breaks:     {broken:7.1f} s  "
              f"{broken / hand:.2f} x by hand  [{summary}]")


if __name__ == "__main__":
    main()
