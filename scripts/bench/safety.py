"""What issue 16's safety costs, and how fast ``orchestrator mcp`` answers.

    .venv/bin/python scripts/bench/safety.py [--rounds N]

- ``orchestrator mcp``: a fresh process, from start to the answer to ``initialize``
  (what an MCP client waits for; goal ≤ 0.4 s), median of N;
- the registry per task: a worktree create + remove with it (the real
  `WorktreeManager`), next to what the registry adds to that: its file write and read
  and the removal checks (checked-out-anywhere, reachable-elsewhere), measured alone;
- intake of a hostile inbox (FIFO, socket, folder, 50 MB file, deep JSON, long name …):
  a fresh ``orchestrator list`` that rejects them all, next to one on a clean inbox.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.board import init_repo
from orchestrator.config import WorktreeConfig
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.worktree import WorktreeManager, safety
from orchestrator.worktree.registry import Record

INIT = (json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "bench", "version": "1"}}}) + "\n").encode()


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("# bench\n")
    git(path, "add", "-A")
    git(path, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init")
    return path


def mark(value: float, goal: float) -> str:
    return "✓" if value <= goal else "✗"


def mcp_initialize(repo: Path, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "mcp"], cwd=repo,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(INIT)
        proc.stdin.flush()
        answer = proc.stdout.readline()
        times.append(time.monotonic() - start)
        assert b'"id":1' in answer, answer
        proc.kill()
        proc.wait()
    return statistics.median(times)


def bare_python(rounds: int) -> float:
    """A fresh interpreter doing nothing: the floor under any CLI figure on this machine."""
    times = []
    for _ in range(rounds):
        start = time.monotonic()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.monotonic() - start)
    return statistics.median(times)


def registry_cost(repo: Path, rounds: int) -> tuple[float, float]:
    """(median create+remove of a worktree, median of what the registry adds to it)."""
    layout = Layout.at(repo).ensure()
    m = WorktreeManager(layout, WorktreeConfig())
    whole, extra = [], []
    for i in range(rounds):
        task = Task(id=f"task_{i + 1:03d}", subject=f"bench {i}")
        start = time.monotonic()
        ws = m.create(task)
        m.remove(task)
        whole.append(time.monotonic() - start)
        rec = Record(task.id, ws.branch, str(ws.path), m.prefix)
        tip = git(repo, "rev-parse", "main")
        start = time.monotonic()
        m.registry().put(rec)
        m.registry().get(task.id)
        safety.checked_out_at(m.common_dir(), ws.branch, ws.path)
        safety.held_elsewhere(m.repo, [tip], ws.branch)
        m.registry().forget(task.id)
        extra.append(time.monotonic() - start)
    return statistics.median(whole), statistics.median(extra)


def hostile_list(repo: Path) -> tuple[float, float]:
    layout = init_repo(make_repo(repo))

    def run() -> float:
        start = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "orchestrator", "list"], cwd=repo,
                             capture_output=True, text=True, timeout=300, check=False)
        assert out.returncode == 0, out.stderr
        return time.monotonic() - start

    clean = run()
    inbox = layout.inbox
    os.mkfifo(inbox / "fifo.json")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(inbox / "sock.json"))
    sock.close()
    (inbox / "dir.json").mkdir()
    (inbox / "zero.json").symlink_to("/dev/zero")
    with open(inbox / "huge.json", "wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    (inbox / "deep.json").write_bytes(b'{"title": "x", "a": ' + b"[" * 100_000
                                      + b"]" * 100_000 + b"}")
    (inbox / ("n" * 240 + ".json")).write_text('{"title": "long"}')
    old = time.time() - 60
    for p in inbox.iterdir():
        if p.is_file() and not p.is_symlink():
            os.utime(p, (old, old))
    return clean, run()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orch-bench-safety-") as tmp:
        repo = make_repo(Path(tmp) / "repo")
        init_repo(repo)
        t = mcp_initialize(repo, args.rounds)
        print(f"orchestrator mcp, fresh process to initialize answer: {t:.3f} s "
              f"(goal ≤ 0.400 s) {mark(t, 0.4)}; a bare python -c pass: "
              f"{bare_python(args.rounds):.3f} s")
        whole, extra = registry_cost(repo, args.rounds)
        print(f"worktree create + remove: {whole * 1000:.1f} ms; of which the registry and "
              f"removal checks: {extra * 1000:.1f} ms ({extra / whole:.1%}, goal ≤ 10%) "
              f"{mark(extra / whole, 0.10)}")
        clean, hostile = hostile_list(Path(tmp) / "hostile")
        print(f"orchestrator list: clean inbox {clean:.3f} s, hostile inbox (rejects 7) "
              f"{hostile:.3f} s (goal ≤ clean + 1 s) {mark(hostile, clean + 1.0)}")


if __name__ == "__main__":
    main()
