"""What a user waits for on a big board: fresh `orchestrator` processes, wall time.

    .venv/bin/python scripts/bench/board.py [--quick] [--only PART ...]

Every CLI figure is the median of 3 runs of a fresh ``orchestrator`` process (the
installed console script of this checkout's ``.venv``), timed from spawn to exit:

- ``--version``, ``--help`` and a usage error (an unknown command);
- ``list`` at 100 / 1,000 / 10,000 / 50,000 tasks: the table drawn on a pseudo-terminal
  (120 x 40; ``PAGER=cat``, so the whole table is drawn, not only its first screen),
  the plain output piped, and ``--json`` piped;
- ``add``, ``show``, ``cancel`` and ``status`` at 100 and at 50,000 tasks (flat?), and
  at 50,000 again with an ``orchestrator.toml`` (its checked settings read from the
  board's index, not checked again);
- the first command (``list``, piped) on a 10,000-task board with no index yet
  (``.tasks/.index/`` deleted: every file is read);
- ``events --task ID``, ``events --since SEQ`` and ``events`` on a terminal, on a
  1,000,000-line ``events.jsonl``;
- intake of 2,000 files dropped into the inbox (one ``list --json`` picks them up), with
  the same command on a fresh board without drops, and the file system's cost of
  creating a file and of deleting one, beside it; then the first ``status`` and ``list``
  after intake of 50,000 drops against the same commands run again (issue 34 item 5:
  the first costs no more than a steady one);
- a task worktree's create+remove: git processes run (counted through a ``git`` shim
  on PATH), against raw ``git worktree add -b`` + ``remove`` + ``branch -D``; and the
  create time with 10 and with 600 worktrees kept (``WorktreeManager.create``);
- from the library (unchanged from issue 2): aggregate claims/s of 8 processes on
  2,000 tasks, and drop-to-claim latency p50/p99.

Big boards are written directly in the board's file format (task files, ``.seq``),
not through 50,000 ``add`` calls; every measured operation goes through the CLI or
the board. ``--quick`` uses smaller sizes (a smoke test; figures not comparable).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import pty
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import msgspec

from orchestrator.record import to_json

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from worktree import generate as generate_repo  # scripts/bench/worktree.py

from orchestrator.board import open_board
from orchestrator.config import BoardConfig
from orchestrator.layout import Layout
from orchestrator.model import Task, format_task_id

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CLI = str(BIN / "orchestrator") if (BIN / "orchestrator").exists() else None
RUNS = 3
FAILED = False

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


# --- reporting ------------------------------------------------------------------------
def verdict(what: str, value: float, goal: float, unit: str = "s", *,
            higher: bool = False, note: str = "") -> None:
    global FAILED
    ok = value >= goal if higher else value <= goal
    FAILED |= not ok
    fmt = (lambda v: f"{v:.3f} s") if unit == "s" else (lambda v: f"{v:g} {unit}".rstrip())
    sign = ">=" if higher else "<="
    print(f"  {'✓' if ok else '✗'} {what:<52} {fmt(value):>12}   goal {sign} {fmt(goal)}"
          + (f"  ({note})" if note else ""), flush=True)


def info(what: str, text: str) -> None:
    print(f"    {what:<52} {text:>12}", flush=True)


# --- running the CLI --------------------------------------------------------------------
def env_for(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "ANTHROPIC"))
           and k != "PYTHONDONTWRITEBYTECODE"}  # as a user runs it: bytecode is cached
    env.update(PAGER="cat", COLUMNS="120", LINES="40", **(extra or {}))
    return env


def run_piped(args: Sequence[str], cwd: Path, env: dict[str, str] | None = None,
              ok: Sequence[int] = (0,)) -> tuple[float, str]:
    assert CLI, "no orchestrator console script next to this python (scripts/install)"
    t0 = time.perf_counter()
    # A session of its own, as a command typed in a terminal: with the kernel's autogroup
    # scheduling it then gets a group's share of the CPU, as run_tty's does (otherwise it
    # shares one with whatever else this bench's session runs).
    p = subprocess.run([CLI, *args], cwd=cwd, env=env or env_for(), capture_output=True,
                       text=True, check=False, stdin=subprocess.DEVNULL, start_new_session=True)
    took = time.perf_counter() - t0
    if p.returncode not in ok:
        raise RuntimeError(f"orchestrator {' '.join(args)} exited {p.returncode}: "
                           f"{p.stderr.strip()[-400:]}")
    return took, p.stdout


def run_tty(args: Sequence[str], cwd: Path, rows: int = 40, cols: int = 120,
            env: dict[str, str] | None = None) -> tuple[float, str]:
    """Run with stdout and stderr on a pseudo-terminal; the time until it exits."""
    assert CLI
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 1 << 16)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    t0 = time.perf_counter()
    p = subprocess.Popen([CLI, *args], cwd=cwd, env=env or env_for({"TERM": "xterm-256color"}),
                         stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    code = p.wait()
    took = time.perf_counter() - t0
    reader.join(10)
    os.close(master)
    if code != 0:
        raise RuntimeError(f"orchestrator {' '.join(args)} exited {code} on a terminal: "
                           f"{b''.join(chunks)[-400:]!r}")
    return took, b"".join(chunks).decode(errors="replace")


def median(fn: Callable[[int], float], runs: int = RUNS) -> float:
    return statistics.median(fn(i) for i in range(runs))


# --- making boards ------------------------------------------------------------------------
def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def new_repo(path: Path) -> Path:
    """An empty repository with one commit (boards only need a repository to live in)."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "-c", "user.name=bench", "-c", "user.email=bench@example.com",
        "commit", "-q", "--allow-empty", "-m", "empty")
    return path


def seed(root: Path, n: int, *, repo: bool = False) -> Layout:
    """``n`` pending tasks written as the board writes them (one JSON file each)."""
    if repo:
        new_repo(root)
    layout = Layout.at(root).ensure()
    template = Task(id="task_000", subject="x", priority=1)
    for i in range(1, n + 1):
        t = msgspec.structs.replace(template, id=format_task_id(i), priority=i % 7,
                                    subject=f"task {i}: something to do in module {i % 97}")
        (layout.tasks / f"{t.id}.json").write_text(to_json(t, indent=2) + "\n")
    (layout.tasks / ".seq").write_text(f"{n}\n")
    return layout


def warm(layout: Layout) -> None:
    """What any earlier board process leaves behind: the index."""
    with open_board(layout, BoardConfig()) as b:
        b.list()


# --- the CLI figures ------------------------------------------------------------------------
def _timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - t0


def startup(cwd: Path) -> None:
    print("start-up", flush=True)
    baseline = median(lambda _: _timed([sys.executable, "-c", "pass"]))
    info("baseline: python -c pass", f"{baseline:.3f} s")
    verdict("orchestrator --version", median(lambda _: run_piped(["--version"], cwd)[0]), 0.3)
    verdict("orchestrator --help", median(lambda _: run_piped(["--help"], cwd)[0]), 0.3)
    verdict("usage error (orchestrator nosuchcommand)",
            median(lambda _: run_piped(["nosuchcommand"], cwd, ok=(2,))[0]), 0.3)
    info("orchestrator add --help (typer's help: no goal)",
         f"{median(lambda _: run_piped(['add', '--help'], cwd)[0]):.3f} s")


def lists(tmp: Path, sizes: Sequence[int]) -> dict[int, Layout]:
    print("list", flush=True)
    boards: dict[int, Layout] = {}
    for n in sizes:
        layout = seed(tmp / f"list{n}", n, repo=True)
        warm(layout)
        boards[n] = layout
        list_board(n, layout.root, 1.0 if n <= 10_000 else 3.0)
    return boards


def list_board(n: int, cwd: Path, goal: float) -> None:
    verdict(f"list, table on a terminal, {n:,} tasks",
            median(lambda _: run_tty(["list"], cwd)[0]), goal)
    verdict(f"list, piped, {n:,} tasks", median(lambda _: run_piped(["list"], cwd)[0]), goal)
    verdict(f"list --json, {n:,} tasks",
            median(lambda _: run_piped(["list", "--json"], cwd)[0]), goal)


def single_task(boards: dict[int, Layout]) -> None:
    print("one task", flush=True)
    for n, layout in boards.items():
        one_board(n, layout.root)
    n, layout = max(boards.items())  # a project with settings: read as last checked
    (layout.root / "orchestrator.toml").write_text("[board]\nmax_attempts = 4\n")
    one_board(n, layout.root, ", orchestrator.toml", first=RUNS + 1)


def one_board(n: int, cwd: Path, label: str = "", first: int = 1) -> None:
    counter = iter(range(first, n + 1))
    verdict(f"add, {n:,} tasks{label}",
            median(lambda i: run_piped(["add", f"bench add {i}"], cwd)[0]), 0.5)
    verdict(f"show, {n:,} tasks{label}",
            median(lambda i: run_piped(["show", str(n // 2 + i)], cwd)[0]), 0.5)
    verdict(f"cancel, {n:,} tasks{label}",
            median(lambda _: run_piped(["cancel", str(next(counter))], cwd)[0]), 0.5)
    verdict(f"status, {n:,} tasks{label}",
            median(lambda _: run_piped(["status"], cwd)[0]), 0.5)


def cold(tmp: Path, n: int) -> None:
    print("no index yet", flush=True)
    layout = seed(tmp / f"cold{n}", n, repo=True)

    def once(_: int) -> float:
        for suffix in ("", "-wal", "-shm"):
            (layout.tasks / f".index/board.sqlite{suffix}").unlink(missing_ok=True)
        return run_piped(["list"], layout.root)[0]

    verdict(f"first command (list), no index, {n:,} tasks", median(once), 1.0)


def events(tmp: Path, lines: int) -> None:
    print("events", flush=True)
    root = new_repo(tmp / "events")
    layout = Layout.at(root).ensure()
    wanted = "task_000777"
    with layout.events.open("w") as fh:
        for i in range(lines):
            task = wanted if i % 50_000 == 7 else format_task_id(i % 5000 + 1)
            fh.write(json.dumps({"ts": "2026-12-01T12:00:00.000000+00:00", "seq": i + 1,
                                 "event": "task_status", "task": task, "actor": "lead",
                                 "from": "pending", "to": "in_progress"}) + "\n")
    info("events.jsonl", f"{lines:,} lines, {layout.events.stat().st_size >> 20} MiB")
    info("first command (the log not yet in the page cache)",
         f"{run_piped(['events', '--since', str(lines)], root)[0]:.3f} s")
    try:
        verdict(f"events --task ID, {lines:,} lines",
                median(lambda _: run_piped(["events", "--task", wanted], root)[0]), 0.5)
    except RuntimeError as exc:
        verdict(f"events --task ID, {lines:,} lines", float("inf"), 0.5, note=_why(exc))
    try:
        verdict(f"events --since SEQ (last 100), {lines:,} lines",
                median(lambda _: run_piped(["events", "--since", str(lines - 100)], root)[0]),
                0.5)
    except RuntimeError as exc:
        verdict(f"events --since SEQ, {lines:,} lines", float("inf"), 0.5,
                note=_why(exc))
    verdict(f"events on a terminal (the tail), {lines:,} lines",
            median(lambda _: run_tty(["events"], root)[0]), 0.5)


def _why(exc: Exception) -> str:
    """The gist of a failed command's message (usage errors come boxed)."""
    words = [w for w in str(exc).split() if w.isascii() and any(c.isalnum() for c in w)]
    return " ".join(words)[-90:]


def intake(tmp: Path, drops: int) -> None:
    print("intake", flush=True)

    def once_in(where: Path, i: int) -> float:
        layout = seed(where / f"intake{i}", 0, repo=True)
        for k in range(drops):
            (layout.inbox / f"drop-{k}.json").write_text(
                json.dumps({"title": f"dropped {k}", "priority": k % 5}))
        took, out = run_piped(["list", "--json"], layout.root)
        assert len(json.loads(out)) == drops, "intake did not take every drop"
        return took

    verdict(f"intake of {drops:,} drops (one list --json)", median(lambda i: once_in(tmp, i)), 5.0)

    def empty(i: int) -> float:  # what the command costs on such a board without drops
        return run_piped(["list", "--json"], seed(tmp / f"intake-empty{i}", 0, repo=True).root)[0]

    info("of which: the same command, a fresh board, no drops", f"{median(empty):.3f} s")
    create, delete = file_costs(tmp / "fs-probe")
    info("this file system: create a file / delete a flushed one",
         f"{create:.2f} / {delete:.2f} ms")
    with on_tmpfs() as shm:
        if shm is not None:
            info("the same intake on tmpfs (what is not the disk)",
                 f"{median(lambda i: once_in(shm, i)):.3f} s")


def after_bulk(tmp: Path, drops: int) -> None:
    """The first ``status`` and ``list`` after intake of a bulk of drops, against the same
    commands run again (steady): what the first needs is built during intake."""
    print(f"after intake of {drops:,} drops", flush=True)
    layout = seed(tmp / "bulk", 0, repo=True)
    for k in range(drops):
        (layout.inbox / f"drop-{k}.json").write_text(json.dumps({"title": f"dropped {k}"}))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from orchestrator.board import "
                    "open_board; from orchestrator.layout import Layout; b = open_board("
                    "Layout.at(sys.argv[1])); b.intake(); b.close()", str(layout.root)],
                   check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    info(f"intake of {drops:,} drops (the library)", f"{time.perf_counter() - t0:.3f} s")
    for cmd in (["status"], ["list"]):
        first = run_piped(cmd, layout.root)[0]
        steady = median(lambda _, cmd=cmd: run_piped(cmd, layout.root)[0])
        verdict(f"first {cmd[0]} / steady ({first:.2f} / {steady:.2f} s)", first / steady,
                1.25, "x")


@contextlib.contextmanager
def on_tmpfs() -> Iterator[Path | None]:
    """A folder in /dev/shm, to run the same work where files cost ~nothing (None where
    there is no tmpfs to write to)."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="orch-bench-", dir=shm) as d:
        yield Path(d)


def file_costs(folder: Path, n: int = 200) -> tuple[float, float]:
    """Milliseconds to create an empty file, and to delete a file whose data is on disk,
    in ``folder``: what intake does once a drop (each task file is a new file; each drop
    is deleted after the batch's flush). On ext4 without a journal (this machine's) a
    create passes over every inode freed nearby in the last minutes (the kernel's
    ``recently_deleted`` check), and with ``discard`` a delete trims the freed block
    at once: both vary tenfold with what else, this bench included, deleted lately."""
    folder.mkdir()
    t0 = time.perf_counter()
    for i in range(n):
        os.close(os.open(folder / f"c{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    create = (time.perf_counter() - t0) / n * 1000
    for i in range(n):
        fd = os.open(folder / f"d{i}", os.O_CREAT | os.O_WRONLY, 0o600)
        os.write(fd, b"{}")
        os.fsync(fd)
        os.close(fd)
    t0 = time.perf_counter()
    for i in range(n):
        os.unlink(folder / f"d{i}")
    return create, (time.perf_counter() - t0) / n * 1000


# --- worktrees ----------------------------------------------------------------------------
def git_shim(tmp: Path) -> tuple[dict[str, str], Path]:
    """A ``git`` first on PATH that logs each call, then runs the real one."""
    real = shutil.which("git")
    assert real
    shim = tmp / "shim"
    shim.mkdir()
    log = tmp / "git-calls.log"
    (shim / "git").write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real} "$@"\n')
    (shim / "git").chmod(0o755)
    return dict(os.environ, PATH=f"{shim}:{os.environ['PATH']}"), log


WT_CYCLE = """
import sys, time
from orchestrator.model import Task
from orchestrator.config import WorktreeConfig
from orchestrator.layout import Layout
from orchestrator.worktree import WorktreeManager
m = WorktreeManager(Layout.at(sys.argv[1], sys.argv[2]).ensure(), WorktreeConfig(), None,
                    actor="bench")
m.prepare()
task = Task(id=sys.argv[3], subject="bench")
log = sys.argv[4]
open(log, "a").write("--- create\\n")
t0 = time.perf_counter()
m.create(task)
took = time.perf_counter() - t0
if sys.argv[5] == "remove":
    open(log, "a").write("--- remove\\n")
    m.remove(task)
print(took)
"""


WT_RUNS = 5
"""Rounds of worktree creates (see `worktrees`): the disk's noise needs more than 3."""


def worktrees(tmp: Path, kept: Sequence[int]) -> None:
    """Git processes per create+remove, and create time with few and many worktrees kept.
    The timed creates are not removed until the end: a remove deletes a checkout of 2,000
    files, and on ext4 without a journal (this machine's) each new file then costs up to
    tenfold while freed inodes are recent (for a minute once written out, six while not),
    so the next create would time the disk's mood, not the kept count. (A journalling ext4
    has no such cost.) Each kept count has a repository of its own, and their creates
    alternate, one first then the other (`WT_RUNS` rounds)."""
    print("worktrees", flush=True)
    env, log = git_shim(tmp)

    def calls() -> list[str]:
        lines = log.read_text().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        return lines

    def repos_in(base: Path) -> dict[int, tuple[Path, Path]]:
        repos = {}
        for k in kept:
            (base / f"wtsrc{k}").mkdir()
            repo = generate_repo(base / f"wtsrc{k}")  # 2,000 files, as bench/worktree.py
            (base / f"wt{k}").mkdir()
            repos[k] = repo, base / f"wt{k}"
        return repos

    def cycle(repo: Path, wt_root: Path, task_id: str, then: str = "remove"
              ) -> tuple[float, list[str]]:
        out = subprocess.run([sys.executable, "-c", WT_CYCLE, str(repo), str(wt_root),
                              task_id, str(log), then], cwd=ROOT, env=env, check=True,
                             capture_output=True, text=True).stdout
        lines = calls()
        create = lines.index("--- create")
        return float(out), [c for c in lines[create:] if not c.startswith("---")]

    def creates(repos: dict[int, tuple[Path, Path]]) -> dict[int, list[float]]:
        for k, (repo, wt_root) in repos.items():
            for made in range(1, k + 1):  # kept worktrees, as earlier tasks leave them
                git(repo, "worktree", "add", "-q", "--no-checkout", "-b", f"task/keep{made}",
                    str(wt_root / f"keep{made}"), "HEAD")
        samples: dict[int, list[float]] = {k: [] for k in kept}
        for i in range(WT_RUNS):  # alternating, one first then the other: the same disk
            for k in (kept if i % 2 == 0 else kept[::-1]):
                samples[k].append(cycle(*repos[k], f"task_99{k:04d}{i}", "keep")[0])
        return samples

    repos = repos_in(tmp)
    repo, wt_root = repos[min(kept)]
    samples = creates(repos)  # first: the removes below delete checkouts (see above)
    # raw git: add -b + remove + branch -D
    calls()
    for args in (["worktree", "add", "-q", "-b", "bench/raw", str(wt_root / "raw"), "HEAD"],
                 ["worktree", "remove", str(wt_root / "raw")], ["branch", "-q", "-D", "bench/raw"]):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)
    raw = len(calls())
    _, orch = cycle(repo, wt_root, "task_990001")
    # no goal (issue 31): nobody waits for a git process; the create times below are what
    # a person waits for
    info("git processes, worktree create+remove",
         f"{len(orch)} (raw git: {raw}; ran: " + "; ".join(
             c.split()[0] if c.split()[0] != "-C" else c.split()[2] for c in orch) + ")")
    times = {k: statistics.median(v) for k, v in samples.items()}
    for k in kept:
        info(f"worktree create, {k} worktrees kept",
             f"{times[k]:.3f} s  ({' / '.join(f'{x:.2f}' for x in samples[k])})")
    lo, hi = min(kept), max(kept)
    verdict(f"create at {hi} kept / at {lo} kept", times[hi] / times[lo], 1.5, "x")
    with on_tmpfs() as shm:
        if shm is not None:
            on = {k: statistics.median(v) for k, v in creates(repos_in(shm)).items()}
            info("the same on tmpfs (what is not the disk)",
                 f"{on[lo]:.3f} / {on[hi]:.3f} s = {on[hi] / on[lo]:.2f} x")


# --- the library figures of issue 2 -------------------------------------------------------------
def python(code: str, *args: str, **kw: object) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-c", code, *args], text=True, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, **kw)  # type: ignore[call-overload]


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


def library(tmp: Path, tasks: int, drops: int) -> None:
    print("board library (issue 2)", flush=True)
    verdict(f"claims/s, 8 processes, {tasks:,} tasks", claims_per_second(tmp, tasks, 8), 500,
            "/s", higher=True)
    lat = sorted(drop_to_claim(tmp, drops))
    verdict(f"drop-to-claim p50, {drops} drops", statistics.median(lat), 0.05)
    verdict(f"drop-to-claim p99, {drops} drops",
            lat[min(len(lat) - 1, round(0.99 * (len(lat) - 1)))], 0.1)


PARTS = ("startup", "list", "one", "cold", "events", "intake", "bulk", "worktrees",
         "library")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller runs, for a smoke test")
    ap.add_argument("--only", nargs="+", choices=PARTS, default=PARTS, help="parts to run")
    args = ap.parse_args()
    q = args.quick
    sizes = (100, 1000) if q else (100, 1000, 10_000, 50_000)
    # An installed package has its bytecode compiled; a checkout being edited may not.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "orchestrator")],
                   check=True)
    with tempfile.TemporaryDirectory(prefix="orch-bench-") as d:
        tmp = Path(d)
        print(f"machine: {os.cpu_count()} cores, load average "
              f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} (shared); "
              f"median of {RUNS} fresh processes", flush=True)
        if "startup" in args.only:
            startup(ROOT)
        boards: dict[int, Layout] = {}
        if "list" in args.only:
            boards = lists(tmp, sizes)
        if "one" in args.only:
            small, big = sizes[0], sizes[-1]
            one = {n: boards.get(n) or _fresh(tmp, n) for n in (small, big)}
            single_task(one)
        if "cold" in args.only:
            cold(tmp, 1000 if q else 10_000)
        if "events" in args.only:
            events(tmp, 20_000 if q else 1_000_000)
        if "intake" in args.only:
            intake(tmp, 200 if q else 2000)
        if "bulk" in args.only:
            after_bulk(tmp, 2000 if q else 50_000)
        if "worktrees" in args.only:
            worktrees(tmp, (10, 30) if q else (10, 600))
        if "library" in args.only:
            library(tmp, 200 if q else 2000, 10 if q else 50)
        print(f"load average at the end {os.getloadavg()[0]:.1f}; "
              f"{'some goals missed' if FAILED else 'every goal met'}")


def _fresh(tmp: Path, n: int) -> Layout:
    layout = seed(tmp / f"one{n}", n, repo=True)
    warm(layout)
    return layout


if __name__ == "__main__":
    main()
