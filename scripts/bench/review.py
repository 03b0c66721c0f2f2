"""Review at scale (issue 30, item 4): prints each timing beside its goal (<= 1 s).

    .venv/bin/python scripts/bench/review.py [--tasks 300 2000]

For each size, a generated repository gets that many tasks in review (task files written
directly, as in ui.py; each a branch of one commit made with ``git fast-import``, adding
a file of its own; every 25th also changes a shared file, so reviews list overlaps, and
every 50th a file main changed since, so it would conflict). Then, with a fresh
``orchestrator ui`` process and fresh CLI processes:

- ``orchestrator review`` (the table, piped), as a fresh process;
- the Needs-you page (``GET /needs``: requests, merge conflicts, failed checks);
- one task's Review page (``GET /task/ID/review``: its row, its overlaps, its diff).

Review keeps what git answers per pair of commits (`orchestrator.review.cache`), so the
first look at a board computes each branch once ("first" lines, for information) and
every later one reads it (the figures the goal is about); a branch or a target that
moves is asked again.
"""

from __future__ import annotations

import argparse
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.board import init_repo
from orchestrator.fsutil import atomic_write
from orchestrator.model import Status, Task, format_task_id

ROOT = Path(__file__).resolve().parents[2]
GOAL = 1.0
FILES = 300
ENV = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b",
           GIT_COMMITTER_EMAIL="b@b", PYTHONPATH=str(ROOT))


def check(ok: bool) -> str:
    return "✓" if ok else "✗"


def git(cwd: Path, *args: str, input: bytes | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          env=ENV, input=input).stdout.decode().strip()


def make_board(root: Path, n: int) -> Path:
    """A repository with ``n`` tasks in review (see the module's text)."""
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for i in range(FILES):
        d = repo / f"pkg{i % 20:02d}"
        d.mkdir(exist_ok=True)
        (d / f"mod{i:04d}.py").write_text(f"# module {i}\n" + "x = 1\n" * 20)
    (repo / "shared.txt").write_text("shared\n")
    (repo / "conflict.txt").write_text("one\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    start = git(repo, "rev-parse", "HEAD")
    stream = []
    for i in range(1, n + 1):
        files = [(f"pkg{i % 20:02d}/task{i:05d}.py", f"value = {i}\n")]
        if i % 25 == 0:
            files.append(("shared.txt", f"shared, changed by {i}\n"))
        if i % 50 == 0:
            files.append(("conflict.txt", f"two by {i}\n"))
        msg = f"task {i}\n".encode()
        stream.append(f"commit refs/heads/task/{i:05d}-t\ncommitter b <b@b> 0 +0000\n"
                      f"data {len(msg)}\n".encode() + msg + f"from {start}\n".encode())
        for path, text in files:
            data = text.encode()
            stream.append(f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data)
        stream.append(b"\n")
    git(repo, "fast-import", "--quiet", input=b"".join(stream))
    (repo / "conflict.txt").write_text("three\n")
    git(repo, "commit", "-q", "-am", "main moves on")
    layout = init_repo(repo)
    for i in range(1, n + 1):
        t = Task(id=format_task_id(i), subject=f"task {i} of the benchmark",
                 status=Status.REVIEW, branch=f"task/{i:05d}-t", base="main",
                 base_commit=start)
        atomic_write(layout.task_file(t.id), t.model_dump_json(indent=2), durable=False)
    (layout.tasks / ".seq").write_text(str(n))
    return repo


def start_ui(repo: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "ui", "--port", "0"],
                            cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=ENV)
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            m = re.search(r"http://\S+", proc.stdout.readline())
            if m:
                return proc, m.group(0).split("?")[0].rstrip("/")
    raise SystemExit("the ui did not start")


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


def run(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        repo = make_board(Path(tmp), n)
        print(f"{n} tasks in review: made in {time.monotonic() - t0:.1f} s")
        first = timed_cli(repo)
        again = min(timed_cli(repo) for _ in range(2))
        print(f"  orchestrator review: {again:.2f} s  (goal <= {GOAL:g} s) "
              f"{check(again <= GOAL)}; first look {first:.2f} s")
        proc, url = start_ui(repo)
        try:
            tid = format_task_id(n // 2 + 25 - (n // 2) % 25)  # one with overlaps
            timed_get(f"{url}/needs", "Merge conflicts")  # the ui's own first look
            needs = min(timed_get(f"{url}/needs", "would conflict") for _ in range(2))
            page = min(timed_get(f"{url}/task/{tid}/review", "shared.txt") for _ in range(2))
            print(f"  Needs-you page: {needs:.2f} s  (goal <= {GOAL:g} s) {check(needs <= GOAL)}")
            print(f"  Review page of {tid}: {page:.2f} s  (goal <= {GOAL:g} s) "
                  f"{check(page <= GOAL)}")
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


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
