"""Review at scale (issue 30, item 4): prints each timing beside its goal (<= 1 s).

    .venv/bin/python scripts/bench/review.py [--tasks 300 2000]

For each size, a generated repository gets that many tasks in review (task files written
directly, as in ui.py; each a branch of one commit made with ``git fast-import``, adding
a file of its own; every 25th also changes a shared file, so reviews list overlaps, and
every 50th a file main changed since, so it would conflict). Then, with a fresh
``orchestrator ui`` process and fresh CLI processes:

- ``orchestrator review`` (the table, piped), as a fresh process;
- (for information) the first ``review`` after a team's run: the cache emptied, then
  filled for each task as its teammate does when the task reaches review
  (`orchestrator.branches.facts.remember`, whose time per task is printed too);
- the Needs-you page (``GET /needs``: requests, merge conflicts, failed checks);
- one task's Review page (``GET /task/ID/review``: its row, its overlaps, its diff);
- (for information) ``orchestrator review`` right after main moved on with a file no
  branch touches, as a merge elsewhere does: answers are carried over, not asked again.

Review keeps what git answers per pair of commits (`orchestrator.branches.cache`), so the
first look at a board of task files written directly computes each branch once ("first
look", for information) and every later one reads it (the figures the goal is about); a
branch or a target that moves is asked again.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from orchestrator.record import to_json

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ui import check, start_ui  # the web board's benchmark, beside this one

from orchestrator.board import init_repo
from orchestrator.fsutil import atomic_write
from orchestrator.model import Status, Task, format_task_id

ROOT = Path(__file__).resolve().parents[2]
GOAL = 1.0
FILES = 300
ENV = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b",
           GIT_COMMITTER_EMAIL="b@b", PYTHONPATH=str(ROOT))
ENV.pop("PYTHONDONTWRITEBYTECODE", None)  # as an install runs: modules compiled once, kept


def git(cwd: Path, *args: str, input: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          env=ENV, input=input).stdout.decode().strip()


def _commit(ref: str, msg: str, files: list[tuple[str, str]], parent: str | None = None
            ) -> bytes:
    """One commit of ``files`` on ``ref`` as a ``git fast-import`` command."""
    text = msg.encode() + b"\n"
    out = [f"commit {ref}\ncommitter b <b@b> 0 +0000\ndata {len(text)}\n".encode(), text]
    if parent:
        out.append(f"from {parent}\n".encode())
    for path, content in files:
        data = content.encode()
        out.append(f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data)
    return b"".join(out) + b"\n"


def make_board(root: Path, n: int) -> Path:
    """A repository with ``n`` tasks in review (see the module's text)."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    files = [(f"pkg{i % 20:02d}/mod{i:04d}.py", f"# module {i}\n" + "x = 1\n" * 20)
             for i in range(FILES)] + [("shared.txt", "shared\n"), ("conflict.txt", "one\n")]
    git(repo, "fast-import", "--quiet", input=_commit("refs/heads/main", "init", files))
    git(repo, "reset", "-q", "--hard", "main")
    start = git(repo, "rev-parse", "HEAD")
    stream = []
    for i in range(1, n + 1):
        files = [(f"pkg{i % 20:02d}/task{i:05d}.py", f"value = {i}\n")]
        if i % 25 == 0:
            files.append(("shared.txt", f"shared, changed by {i}\n"))
        if i % 50 == 0:
            files.append(("conflict.txt", f"two by {i}\n"))
        stream.append(_commit(f"refs/heads/task/{i:05d}-t", f"task {i}", files, start))
    git(repo, "fast-import", "--quiet", input=b"".join(stream))
    (repo / "conflict.txt").write_text("three\n")
    git(repo, "commit", "-q", "-am", "main moves on")
    layout = init_repo(repo)
    for i in range(1, n + 1):
        t = Task(id=format_task_id(i), subject=f"task {i} of the benchmark",
                 status=Status.REVIEW, branch=f"task/{i:05d}-t", base="main",
                 base_commit=start)
        atomic_write(layout.task_file(t.id), to_json(t, indent=2), durable=False)
    (layout.tasks / ".seq").write_text(str(n))
    return repo


def timed_cli(repo: Path) -> float:
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "orchestrator", "review"], cwd=repo,
                         capture_output=True, text=True, env=ENV, check=False)
    took = time.monotonic() - t0
    if out.returncode != 0 or "would conflict" not in out.stdout:
        raise SystemExit(f"review failed: {out.stderr or out.stdout[-500:]}")
    return took


def timed_get(url: str, must: str) -> float:
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=600) as res:
        body = res.read().decode()
    took = time.monotonic() - t0
    if must not in body:
        raise SystemExit(f"{url}: the page lacks {must!r}")
    return took


def fill_as_teammates(repo: Path) -> list[float]:
    """Empty the review cache, then fill it for each task as its teammate does when the
    task reaches review; the seconds each took, sorted."""
    from orchestrator.board import open_board
    from orchestrator.branches.cache import FILE
    from orchestrator.branches.facts import remember
    from orchestrator.layout import Layout

    for path in (repo / ".git" / "orchestrator").glob(f"{FILE}*"):
        path.unlink()
    with open_board(Layout.at(repo)) as board:
        tasks = board.list()
    took = []
    for task in tasks:
        t0 = time.monotonic()
        remember(repo, task)
        took.append(time.monotonic() - t0)
    return sorted(took)


def run(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        repo = make_board(Path(tmp), n)
        print(f"{n} tasks in review: made in {time.monotonic() - t0:.1f} s")
        first = timed_cli(repo)
        fills = fill_as_teammates(repo)
        after_team = timed_cli(repo)
        again = min(timed_cli(repo) for _ in range(2))
        (repo / "NEWS.txt").write_text("main moved on\n")  # as a merge elsewhere does
        git(repo, "add", "NEWS.txt")
        git(repo, "commit", "-q", "-m", "main moves on")
        moved = timed_cli(repo)
        print(f"  orchestrator review: {again:.2f} s  (goal <= {GOAL:g} s) "
              f"{check(again <= GOAL)}; first look {first:.2f} s; after main moved "
              f"{moved:.2f} s")
        print(f"  first review after a team's run: {after_team:.2f} s; the teammates' fill: "
              f"median {statistics.median(fills) * 1000:.0f} ms a task, 90th percentile "
              f"{fills[len(fills) * 9 // 10] * 1000:.0f} ms")
        proc, url = start_ui(repo)
        url = url.split("?")[0].rstrip("/")
        try:
            tid = format_task_id(n // 2 + 25 - (n // 2) % 25)  # one with overlaps
            timed_get(f"{url}/needs", "Merge conflicts")  # the ui's own first look
            needs = min(timed_get(f"{url}/needs", "would conflict") for _ in range(2))
            page = min(timed_get(f"{url}/task/{tid}/review", "shared.txt") for _ in range(2))
            print(f"  Needs-you page: {needs:.2f} s  (goal <= {GOAL:g} s) {check(needs <= GOAL)}")
            print(f"  Review page of {tid}: {page:.2f} s  (goal <= {GOAL:g} s) "
                  f"{check(page <= GOAL)}")
        finally:
            proc.terminate()  # a warm stop, as SIGINT
            proc.communicate(timeout=30)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", type=int, nargs="+", default=[300, 2000])
    a = p.parse_args()
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (shared)")
    for n in a.tasks:
        run(n)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
