"""Benchmark of the file board; prints the figures of issue 2's Proof.

    .venv/bin/python scripts/bench/board.py [--quick]

- aggregate claims/s for 8 processes on 2,000 tasks (durable writes: fsync file + folder);
- drop-to-claim latency p50/p99: a file dropped into the inbox -> an intake process
  (what the lead runs) makes the task -> an idle waiter (`wait_for_ready`) claims it;
- `list` (intake + list + problems, what `orchestrator list` does) in a fresh
  process at 100, 1,000 and 10,000 tasks (and the very first list, before any
  board process has saved the snapshot);
- claim time at 10,000 tasks relative to 100.

Task files for the set-ups are written directly (not through `add`) to keep the
bench short; every measured operation goes through the board.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.board import open_board
from orchestrator.board.model import Task, format_task_id
from orchestrator.config import BoardConfig
from orchestrator.fsutil import atomic_write
from orchestrator.layout import Layout

ROOT = Path(__file__).resolve().parents[2]

CLAIMER = """
import json, sys, time
from orchestrator.board import open_board
from orchestrator.layout import Layout
with open_board(Layout.at(sys.argv[1]), actor=sys.argv[2]) as board:
    board.list()
    print("ready", flush=True)
    sys.stdin.readline()
    n = 0
    while board.claim(sys.argv[2], lease_seconds=600) is not None:
        n += 1
    print(json.dumps({"n": n, "end": time.time()}), flush=True)
"""

INTAKE_LOOP = """
import sys
from orchestrator.board import open_board
from orchestrator.config import BoardConfig
from orchestrator.layout import Layout
with open_board(Layout.at(sys.argv[1]), BoardConfig(rescan_seconds=5.0), actor="lead") as b:
    b.intake()
    print("ready", flush=True)
    while True:
        b.wait_for_change(5.0)
        b.intake()
"""

WAITER = """
import sys, time
from orchestrator.board import open_board
from orchestrator.config import BoardConfig
from orchestrator.layout import Layout
with open_board(Layout.at(sys.argv[1]), BoardConfig(rescan_seconds=5.0), actor="w") as b:
    b.list()
    print("ready", flush=True)
    while True:
        if b.wait_for_ready(30.0):
            t = b.claim("w", lease_seconds=600)
            if t is not None:
                print(f"{t.subject} {time.time()}", flush=True)
"""

LISTER = """
import json, sys, time
from orchestrator.board import open_board
from orchestrator.layout import Layout
t0 = time.perf_counter()
with open_board(Layout.at(sys.argv[1])) as b:
    b.intake()
    n = len(b.list())
    b.problems()
print(json.dumps({"n": n, "seconds": time.perf_counter() - t0}))
"""


def python(code: str, *args: str, **kw: object) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", code, *args], text=True, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, **kw)  # type: ignore[call-overload]


def seed(root: Path, n: int) -> Layout:
    layout = Layout.at(root).ensure()
    for i in range(1, n + 1):
        t = Task(id=format_task_id(i), subject=f"task {i}", priority=i % 7)
        atomic_write(layout.task_file(t.id), t.model_dump_json(indent=2), durable=False)
    return layout


def claims_per_second(tmp: Path, tasks: int, procs: int) -> float:
    layout = seed(tmp / "claims", tasks)
    ps = [python(CLAIMER, str(layout.root), f"w{i}") for i in range(procs)]
    for p in ps:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
    start = time.time()
    for p in ps:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [json.loads(p.communicate(timeout=600)[0]) for p in ps]
    total = sum(r["n"] for r in results)
    assert total == tasks, f"claimed {total} of {tasks}"
    return tasks / (max(r["end"] for r in results) - start)


def drop_to_claim(tmp: Path, drops: int) -> list[float]:
    layout = seed(tmp / "latency", 0)
    lead = python(INTAKE_LOOP, str(layout.root))
    waiter = python(WAITER, str(layout.root))
    try:
        for p in (lead, waiter):
            assert p.stdout is not None and p.stdout.readline() == "ready\n"
        time.sleep(0.5)  # both idle, watchers running
        out = []
        for i in range(drops):
            staging = layout.inbox / f".drop-{i}.json"
            staging.write_text(json.dumps({"title": f"drop-{i}"}))
            t0 = time.time()
            os.rename(staging, layout.inbox / f"drop-{i}.json")  # atomic drop
            assert waiter.stdout is not None
            subject, at = waiter.stdout.readline().split()
            assert subject == f"drop-{i}", subject
            out.append(float(at) - t0)
            time.sleep(0.2)  # let both go idle again
        return out
    finally:
        for p in (lead, waiter):
            p.kill()
            p.communicate()


def list_seconds(tmp: Path, n: int) -> tuple[float, float]:
    """(first list ever: every file read; a later fresh process: from the snapshot)."""
    layout = seed(tmp / f"list{n}", n)
    out = []
    for _ in range(2):
        p = python(LISTER, str(layout.root))
        result = json.loads(p.communicate(timeout=600)[0])
        assert result["n"] == n
        out.append(float(result["seconds"]))
    return out[0], out[1]


def claim_ms(tmp: Path, n: int, claims: int) -> float:
    layout = seed(tmp / f"claim{n}", n)
    with open_board(layout, BoardConfig()) as board:
        board.list()
        t0 = time.perf_counter()
        for _ in range(claims):
            assert board.claim("w", lease_seconds=600) is not None
        return (time.perf_counter() - t0) / claims * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs, for a smoke test")
    args = ap.parse_args()
    tasks, drops, big = (200, 10, 1000) if args.quick else (2000, 50, 10_000)
    with tempfile.TemporaryDirectory(prefix="orch-bench-") as d:
        tmp = Path(d)
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} (shared)")
        rate = claims_per_second(tmp, tasks, 8)
        print(f"claims/s, 8 processes, {tasks} tasks: {rate:.0f}  (target >= 300)")
        lat = sorted(drop_to_claim(tmp, drops))
        p50 = statistics.median(lat) * 1000
        p99 = lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))] * 1000
        print(f"drop-to-claim, idle waiter, {drops} drops: p50 {p50:.0f} ms, p99 {p99:.0f} ms"
              "  (targets 50 / 200 ms)")
        for n in sorted({100, 1000, big}):
            first, later = list_seconds(tmp, n)
            print(f"list (fresh process: intake + list + problems) at {n} tasks: {later:.3f} s"
                  f" (the very first, before any snapshot: {first:.3f} s)"
                  + ("  (target <= 1 s)" if n == big else ""))
        small, large = claim_ms(tmp, 100, 50), claim_ms(tmp, big, 50)
        print(f"claim at 100 tasks: {small:.2f} ms, at {big}: {large:.2f} ms, "
              f"ratio {large / small:.2f}  (target <= 2)")
        print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
