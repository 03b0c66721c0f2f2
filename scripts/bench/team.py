"""Team benchmark (issue 34): a team that starts at once, idles at zero, on either board.

    .venv/bin/python scripts/bench/team.py [--idle-seconds 30] [--repeat 1] [--boards file,pg]

Fresh processes (their modules compiled to bytecode once, as an install does) and the
real daemon, on the file board and on PostgreSQL (a throwaway
cluster from tests/pg.py, durable commits, as a real server has):

1. ``up --burst -n 4`` on 40 tasks whose command sleeps 2 s: efficiency of the whole
   command, ``80 s / (4 * wall)`` (goal ≥ 95 %), start to first claim (goal ≤ 0.5 s),
   last completion to exit (goal ≤ 0.2 s), from events.jsonl / the events table;
2. ``up --burst -n 4`` on an empty board: wall time (goal ≤ 1.5 s);
3. an idle ``up -n 4`` (detached): CPU seconds of the lead, spawner and teammates over
   ``--idle-seconds`` (goal ≤ 0.1 per 30 s) and each teammate's proportional set size
   (goal ≤ 20 MB: teammates are forked from the spawner and share its pages);
4. ``orchestrator add`` in a fresh process (median of 5);
5. the floor of (1) (the median of ``--repeat`` runs, as for (1)): the same 40 tasks
   with nothing of orchestrator's but the processes each task needs (``git worktree add
   -b``, the command in the same sandbox the teammates use, ``git add -A``, ``git
   commit``), four workers in parallel, no board and no start-up: the efficiency that
   only fewer or cheaper processes per task can raise, printed beside (1)'s.

Each figure is printed beside its goal with ✓/✗, with the machine's load average.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.synchronize import Lock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from orchestrator.board import open_board  # noqa: E402
from orchestrator.config import Config  # noqa: E402
from orchestrator.controlplane import ControlPlane  # noqa: E402
from orchestrator.layout import Layout  # noqa: E402
from orchestrator.procutil import stat_fields  # noqa: E402
from orchestrator.sandbox import task_sandbox  # noqa: E402
from orchestrator.team import status  # noqa: E402

TASKS = 40
TASK_SECONDS = 2.0
TEAM = 4
NAMES = ("alice", "bob", "carol", "dave")


def mark(ok: bool) -> str:
    return "✓" if ok else "✗"


def make_repo(path: Path, url: str | None) -> Path:
    path.mkdir(parents=True)
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", *args], cwd=path, check=True,
                       env=dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x",
                                GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@x"))
    if url is not None:
        (path / "orchestrator.toml").write_text(f'[board]\nurl = "{url}"\n')
    return path


@contextlib.contextmanager
def board_of(repo: Path) -> Iterator[ControlPlane]:
    layout = Layout.at(repo)
    with open_board(layout, Config.load(repo).board, actor="bench") as board:
        yield board


def orch(repo: Path, *args: str, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                          capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def burst(repo: Path, tasks: int) -> tuple[float, float, float]:
    """(wall time of ``up --burst -n 4``, start to first claim, last completion to exit)."""
    with board_of(repo) as board:
        for i in range(tasks):
            board.add(f"sleep task {i}")
    t0 = time.time()
    res = orch(repo, "up", "--burst", "-n", str(TEAM), "--command",
               f"sleep {TASK_SECONDS:g}; echo done > out.txt")
    end = time.time()
    if res.returncode != 0:
        raise SystemExit(f"burst failed: {res.stderr[-2000:]}")
    if not tasks:
        return end - t0, 0.0, 0.0
    with board_of(repo) as board:
        evs = [e.to_dict() for e in board.events.read()]
    claims = [_ts(e["ts"]) for e in evs if e["event"] == "task_claimed"]
    done = [_ts(e["ts"]) for e in evs if e["event"] == "task_completed"]
    assert len(done) == tasks, f"{len(done)} of {tasks} completed"
    return end - t0, min(claims) - t0, end - max(done)


GIT_ENV = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@x",
               GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@x")


def _floor_worker(repo: Path, worker: int, lock: Lock) -> None:
    box = task_sandbox(Config.load(repo), root=repo)
    for i in range(TASKS // TEAM):
        path = repo / ".worktrees" / f"w{worker}-{i}"
        with lock:  # as orchestrator does: concurrent `git worktree add`s can fail
            subprocess.run(["git", "worktree", "add", "-q", "--force", "--no-track", "-b",
                            f"task/w{worker}-{i}", str(path), "main"], cwd=repo, check=True)
        command = ["sh", "-c", f"sleep {TASK_SECONDS:g}; echo done > out.txt"]
        with box.session(command, path) as session:
            subprocess.run(session.argv, cwd=path, check=True)
        subprocess.run(["git", "add", "-A"], cwd=path, check=True, env=GIT_ENV)
        subprocess.run(["git", "commit", "-q", "-m", "done"], cwd=path, check=True,
                       env=GIT_ENV)


def floor(repo: Path) -> float:
    """Wall time of (1)'s tasks run by the processes alone (see the module's docstring)."""
    ctx = multiprocessing.get_context("fork")
    lock = ctx.Lock()
    workers = [ctx.Process(target=_floor_worker, args=(repo, w, lock)) for w in range(TEAM)]
    t0 = time.time()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.time() - t0
    if any(w.exitcode for w in workers):
        raise SystemExit("floor: a worker failed")
    return wall


def cpu_seconds(pid: int) -> float:
    fields = stat_fields(pid) or []
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") if fields else 0.0


def _mb(path: str, key: str) -> float:
    with contextlib.suppress(OSError):
        for line in Path(path).read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) / 1024
    return 0.0


def children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(x) for x in
                Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def idle(repo: Path, seconds: float) -> tuple[float, list[float]]:
    """CPU seconds of the whole team over ``seconds``, and each teammate's PSS in MB."""
    res = orch(repo, "up", "--detach", "-n", str(TEAM), "--command", "true")
    if res.returncode != 0:
        raise SystemExit(f"up --detach failed: {res.stderr}")
    try:
        deadline = time.monotonic() + 60
        with board_of(repo) as board:
            team = board.team
            while not all(getattr(team.get(m), "state", None) == "idle" for m in NAMES):
                if time.monotonic() > deadline:
                    raise SystemExit("teammates did not become idle")
                time.sleep(0.2)
            mates = [int(getattr(team.get(m), "pid", 0) or 0) for m in NAMES]
        time.sleep(2)  # let start-up work settle
        lead = int(status.pid_file(Layout.at(repo)).read_text())
        pids = [lead, *children(lead), *mates]  # the lead's children: the spawner
        pids = list(dict.fromkeys(pids))
        before = sum(cpu_seconds(p) for p in pids)
        time.sleep(seconds)
        used = sum(cpu_seconds(p) for p in pids) - before
        return used, [_mb(f"/proc/{p}/smaps_rollup", "Pss") for p in mates]
    finally:
        orch(repo, "down", "--now")


def add_seconds(repo: Path) -> float:
    runs = []
    for i in range(5):
        t0 = time.perf_counter()
        res = orch(repo, "add", f"added {i}")
        runs.append(time.perf_counter() - t0)
        assert res.returncode == 0, res.stderr
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--idle-seconds", type=float, default=30.0)
    ap.add_argument("--repeat", type=int, default=1,
                    help="40-task bursts per board, and floor runs (median)")
    ap.add_argument("--boards", default="file,pg")
    ap.add_argument("--only", default="burst,empty,idle,add,floor",
                    help="which parts to run (comma-separated)")
    args = ap.parse_args()
    boards = args.boards.split(",")
    parts = args.only.split(",")
    # as an install runs: every module compiled once and its bytecode kept (otherwise each
    # fresh process compiles ~90 modules from source, ~0.1 s of every start)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    compileall.compile_dir(ROOT / "orchestrator", quiet=1)
    print(f"machine: {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at start")
    cluster = None
    if "pg" in boards:
        from orchestrator.board.pg import schema
        from tests.pg import start_cluster

        cluster = start_cluster(durable=True)
    n = 0

    def repo_for(tmp: Path, board: str) -> Path:
        nonlocal n
        n += 1
        url = None
        if board == "pg":
            assert cluster is not None
            url = cluster.url(cluster.new_database("bench"))
            schema.migrate(url)
        return make_repo(tmp / f"r{n}", url)

    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            best = None
            if "floor" in parts:
                walls = [floor(make_repo(tmp / f"floor{i}", None)) for i in range(args.repeat)]
                wall = statistics.median(walls)
                best = TASKS * TASK_SECONDS / (TEAM * wall)
                print(f"floor, the processes of (1)'s tasks alone, no orchestrator: wall "
                      f"{wall:.2f} s, efficiency {best:.1%} (runs: "
                      f"{', '.join(f'{TASKS * TASK_SECONDS / (TEAM * w):.1%}' for w in walls)})")
            for board in boards:
                print(f"--- {board} board ---")
                if "burst" in parts:
                    burst_figures((repo_for(tmp, board) for _ in range(args.repeat)), best)
                if "empty" in parts:
                    empties = [burst(repo_for(tmp, board), 0)[0] for _ in range(3)]
                    empty = statistics.median(empties)
                    print(f"empty burst (median of 3): {empty:.2f} s {mark(empty <= 1.5)} "
                          f"(goal ≤ 1.5 s)")
                if "idle" in parts:
                    idle_figures(repo_for(tmp, board), args.idle_seconds)
                if "add" in parts:
                    print(f"orchestrator add, fresh process (median of 5): "
                          f"{add_seconds(repo_for(tmp, board)):.2f} s")
    finally:
        if cluster is not None:
            cluster.stop("immediate")
            shutil.rmtree(cluster.folder, ignore_errors=True)
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


def burst_figures(repos: Iterator[Path], best: float | None) -> None:
    """(1)'s figures; with the floor's efficiency ``best``, the share of it reached too."""
    runs = [burst(repo, TASKS) for repo in repos]
    wall = statistics.median(r[0] for r in runs)
    first = statistics.median(r[1] for r in runs)
    last = statistics.median(r[2] for r in runs)
    eff = TASKS * TASK_SECONDS / (TEAM * wall)
    share = f", {eff / best:.1%} of the floor's" if best else ""
    print(f"up --burst -n {TEAM}, {TASKS} tasks of {TASK_SECONDS:g} s: wall "
          f"{wall:.2f} s, efficiency {eff:.1%} {mark(eff >= 0.95)} (goal ≥ 95 %){share}")
    print(f"  start to first claim {first:.2f} s {mark(first <= 0.5)} (goal ≤ 0.5 s); "
          f"last completion to exit {last:.2f} s {mark(last <= 0.2)} (goal ≤ 0.2 s)")


def idle_figures(repo: Path, seconds: float) -> None:
    used, pss = idle(repo, seconds)
    per30 = used * 30 / seconds
    print(f"idle up -n {TEAM}: {used:.3f} CPU-s over {seconds:g} s "
          f"{mark(per30 <= 0.1)} (goal ≤ 0.1 per 30 s)")
    print(f"  PSS per teammate: {', '.join(f'{x:.1f}' for x in pss)} MB "
          f"{mark(max(pss) <= 20)} (goal ≤ 20 MB)")


if __name__ == "__main__":
    main()
