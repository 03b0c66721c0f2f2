"""Team benchmark (issue 4): parallel efficiency, idle CPU, memory per teammate.

    .venv/bin/python scripts/bench/team.py [--idle-seconds 30] [--sizes 1,2,4,8] [--repeat 3]

1. 16 tasks whose command sleeps 1 s, run with ``up --burst -n N`` for each N,
   ``--repeat`` times (sizes interleaved; this machine's speed drifts from
   minute to minute, so one run per size is mostly noise). Prints the median
   wall time of the whole command and of the work phase (first claim to last
   completion, from events.jsonl), and the parallel efficiency of the work
   phase, ``16 s / (N * work time)`` (start-up of the Python processes is shown
   apart: it is the same for any amount of work), with its range over the runs.
   Target ≥ 90 % at N=4. The last column is the textbook parallel efficiency,
   ``T(1) / (N * T(N))`` against the one-teammate run, which leaves out the
   per-task overhead that one teammate pays too.
2. An idle daemon with 4 teammates: CPU seconds of the lead and teammates
   over ``--idle-seconds`` (target ≤ 0.3 s per 30 s) and each teammate's
   memory (target ≤ 80 MB): resident, and its proportional share (teammates
   are forked from the spawner and share its pages).
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
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.board import open_board  # noqa: E402
from orchestrator.board.teamstatus import FileTeamStatus  # noqa: E402
from orchestrator.layout import Layout  # noqa: E402
from orchestrator.procutil import stat_fields  # noqa: E402
from orchestrator.team import status  # noqa: E402

TASKS = 16
TASK_SECONDS = 1.0


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=path, check=True,
                       env=dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x",
                                GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@x"))
    return path


def orch(repo: Path, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                          capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def burst(tmp: Path, n: int) -> tuple[float, float]:
    """(wall time of ``up --burst``, work time: first claim to last completion)."""
    repo = make_repo(tmp / f"burst{n}")
    with open_board(Layout.at(repo)) as board:
        for i in range(TASKS):
            board.add(f"sleep task {i}")
    t0 = time.monotonic()
    res = orch(repo, "up", "--burst", "-n", str(n), "--command",
               f"sleep {TASK_SECONDS}; echo done > out.txt")
    wall = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit(f"burst -n {n} failed: {res.stderr[-2000:]}")
    evs = [json.loads(x) for x in Layout.at(repo).events.read_text().splitlines()]
    claims = [_ts(e["ts"]) for e in evs if e["event"] == "task_claimed"]
    done = [_ts(e["ts"]) for e in evs if e["event"] == "task_completed"]
    assert len(done) == TASKS, f"{len(done)} of {TASKS} completed"
    return wall, max(done) - min(claims)


def cpu_seconds(pid: int) -> float:
    fields = stat_fields(pid) or []
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _mb(path: str, key: str) -> float:
    for line in Path(path).read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def rss_mb(pid: int) -> float:
    return _mb(f"/proc/{pid}/status", "VmRSS")


def pss_mb(pid: int) -> float:
    """Proportional set size: shared pages count for their share only (teammates are
    forked from the spawner and share its imported modules until they write them)."""
    return _mb(f"/proc/{pid}/smaps_rollup", "Pss")


def idle(tmp: Path, seconds: float) -> tuple[float, dict[str, tuple[float, float]], float]:
    repo = make_repo(tmp / "idle")
    layout = Layout.at(repo)
    res = orch(repo, "up", "--detach", "-n", "4", "--command", "true")
    if res.returncode != 0:
        raise SystemExit(f"up --detach failed: {res.stderr}")
    try:
        names = ("alice", "bob", "carol", "dave")
        deadline = time.monotonic() + 60
        mates = FileTeamStatus(layout)
        while not all(getattr(mates.get(m), "state", None) == "idle" for m in names):
            if time.monotonic() > deadline:
                raise SystemExit("teammates did not become idle")
            time.sleep(0.2)
        time.sleep(2)  # let start-up work settle
        lead = int(status.pid_file(layout).read_text())
        pids = [lead] + [int(getattr(mates.get(m), "pid", 0) or 0) for m in names]
        before = sum(cpu_seconds(p) for p in pids)
        time.sleep(seconds)
        used = sum(cpu_seconds(p) for p in pids) - before
        mem = {m: (rss_mb(p), pss_mb(p)) for m, p in zip(names, pids[1:], strict=True)}
        return used, mem, rss_mb(lead)
    finally:
        orch(repo, "down", "--now")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--idle-seconds", type=float, default=30.0)
    ap.add_argument("--sizes", default="1,2,4,8")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per size (interleaved); the median is reported")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        runs: dict[int, list[tuple[float, float]]] = {n: [] for n in sizes}
        for r in range(args.repeat):  # sizes interleaved, so a noisy minute hits them all
            for n in sizes:
                runs[n].append(burst(tmp / f"run{r}", n))
        print(f"{TASKS} tasks of {TASK_SECONDS:.0f} s each (command backend), median of "
              f"{args.repeat} run(s):")
        print(f"{'teammates':>10} {'wall s':>8} {'work s':>8} {'efficiency':>11} "
              f"{'(runs)':>18} {'vs 1 teammate':>14}")
        one = statistics.median(w for _, w in runs[1]) if 1 in runs else None
        for n in sizes:
            wall = statistics.median(x for x, _ in runs[n])
            work = statistics.median(w for _, w in runs[n])
            effs = sorted(TASKS * TASK_SECONDS / (n * w) for _, w in runs[n])
            spread = f"{effs[0]:.0%}..{effs[-1]:.0%}" if len(effs) > 1 else ""
            speedup = f"{one / (n * work):.0%}" if one else ""
            print(f"{n:>10} {wall:>8.2f} {work:>8.2f} {TASKS * TASK_SECONDS / (n * work):>10.0%} "
                  f"{spread:>18} {speedup:>14}")
        used, mem, lead_mb = idle(tmp, args.idle_seconds)
        print(f"idle daemon, 4 teammates: {used:.3f} CPU-s over {args.idle_seconds:.0f} s "
              f"(target <= 0.3 per 30 s)")
        print("memory per teammate, resident (proportional share of pages shared with the "
              "spawner): " + ", ".join(f"{m} {rss:.0f} MB ({pss:.0f} MB)"
                                       for m, (rss, pss) in mem.items())
              + f"; lead {lead_mb:.0f} MB (target <= 80 MB per teammate)")


if __name__ == "__main__":
    main()
