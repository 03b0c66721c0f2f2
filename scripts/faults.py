"""Disk and resource faults (issue 10): a full disk, too few file descriptors, a read-only
control plane — each injected into a running team, then removed.

    sudo .venv/bin/python scripts/faults.py [--only full,emfile,readonly] [--json]

Each scenario puts the control plane (``.tasks/``, through a symlink) and the
worktree root on a small tmpfs of their own, starts ``orchestrator up -n 2``
with the command backend, lets a few tasks finish, injects the fault for a few
lease periods while more tasks arrive, checks the state *during* the fault,
removes the fault and waits for every task to reach review. Needs root (mount).

- ``full``: a filler file takes every free byte of the tmpfs (ENOSPC);
- ``emfile``: ``prlimit`` lowers RLIMIT_NOFILE of the lead and every teammate
  to just above what each has open (EMFILE on the next pipe or file), then
  restores it;
- ``readonly``: ``chattr -R +i`` makes ``.tasks/`` immutable (EPERM on every
  write; chmod would not stop root, and ``mount -o remount,ro`` is refused while
  the team holds its lock files open), then ``chattr -R -i``.

During the fault: the lead and the teammates stay up (no crash loop), the
CLI's ``add`` fails with one line, no task file is half written or unreadable,
no temp file is left behind, no task is claimed. Afterwards: every task in
review exactly once (one ``task_completed`` event, one commit), nothing lost.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.board import init_repo, open_board
from orchestrator.board.eventlog import EventLog
from orchestrator.board.index import read_task_file
from orchestrator.layout import TASKS_DIR, Layout
from orchestrator.model import Status
from scripts.harness import (
    WRITE_OWN_FILE,
    alive,
    make_repo,
    orch,
    processes_in,
    start_lead,
    team_env,
    teammates,
    wait_until,
)

LEASE = 2.0
FAULT_SECONDS = 3 * LEASE
SIZE = "8m"


@contextlib.contextmanager
def tmpfs(path: Path, size: str = SIZE) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def fill(path: Path) -> Path:
    """Take every free byte of the file system holding ``path``; returns the filler."""
    filler = path / "filler"
    with filler.open("wb") as fh:
        with contextlib.suppress(OSError):
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        with contextlib.suppress(OSError):
            fh.close()
    with contextlib.suppress(OSError):
        with filler.open("ab") as fh:  # the last few bytes
            while True:
                fh.write(b"\0")
                fh.flush()
    return filler


def set_nofile(pids: list[int], soft: int | None) -> dict[int, int]:
    """Set the soft RLIMIT_NOFILE of each pid (None: back to the hard limit); returns the
    limits set."""
    out = {}
    for pid in pids:
        if not alive(pid):
            continue
        hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)[1]
        if soft is None:
            want = hard
        else:
            want = len(os.listdir(f"/proc/{pid}/fd")) + soft
        with contextlib.suppress(ProcessLookupError):
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (want, hard))
            out[pid] = want
    return out


def check_files(layout: Layout) -> dict[str, Any]:
    """Every task file readable whole; no temp file left behind."""
    broken, temps = {}, []
    tmp_dir = layout.tasks / ".tmp"  # where the board's atomic writes stage their files
    staged = list(tmp_dir.iterdir()) if tmp_dir.is_dir() else []
    for f in [*layout.tasks.iterdir(), *staged]:
        if f.is_file() and f.name.endswith(".tmp"):
            temps.append(str(f.relative_to(layout.tasks)))
        elif f.name.startswith("task_") and f.suffix == ".json":
            try:
                read_task_file(f)
            except (ValueError, OSError) as exc:
                broken[f.name] = str(exc)
    return {"broken_task_files": broken, "temp_files": temps}


class Scenario:
    def __init__(self, name: str, base: Path, say: Callable[[str], None]) -> None:
        self.name = name
        self.say = say
        self.fs = base / f"{name}-fs"
        self.repo = make_repo(base / f"{name}-repo")
        self.log = base / f"{name}-daemon.out"
        self.lead: subprocess.Popen[bytes] | None = None

    def run(self, inject: Callable[[Scenario], Any], remove: Callable[[Scenario, Any], None],
            ) -> dict[str, Any]:
        with tmpfs(self.fs):
            (self.fs / "tasks").mkdir()
            (self.repo / TASKS_DIR).symlink_to(self.fs / "tasks")
            wt_root = self.fs / "worktrees"
            self.layout = Layout.at(self.repo, wt_root)
            init_repo(self.repo, wt_root)
            env = team_env(board_lease_seconds=LEASE, board_rescan_seconds=0.5,
                           worktree_root=wt_root, team_log_format="json")
            self.env = env
            try:
                return self._run(inject, remove)
            finally:
                if self.lead is not None and self.lead.poll() is None:
                    self.lead.kill()
                    self.lead.wait()

    def add(self, n: int) -> list[str]:
        with open_board(self.layout) as b:
            return [b.add(f"{self.name} task {i}").id for i in range(n)]

    def _run(self, inject: Callable[[Scenario], Any],
             remove: Callable[[Scenario, Any], None]) -> dict[str, Any]:
        ids = self.add(4)
        self.lead = start_lead(self.repo, ["-n", "2", "--backend", "command", "--command",
                                           f"{WRITE_OWN_FILE}; sleep 0.3"], self.env, self.log)
        done = lambda: [t for t in self.tasks() if t.status is Status.REVIEW]  # noqa: E731
        wait_until(lambda: len(done()) == 4, 120, "the first tasks")
        mates = {n: int(s["pid"]) for n, s in teammates(self.layout).items()}
        ids += self.add(2)  # waiting when the fault hits
        events_before = sum(1 for _ in EventLog(self.layout.events).read())
        handle = inject(self)
        # counted once the fault is in: an idle teammate may claim the tasks just added
        # before it is (its claim's event then precedes the fault); none may claim during it
        claims_before = self.claims()
        t0 = time.monotonic()
        self.say(f"{self.name}: fault injected")
        cli_add = orch(self.repo, "add", "added during the fault", env=self.env)
        time.sleep(FAULT_SECONDS)  # the team meets the fault for a few lease periods
        during = {
            "lead_alive": self.lead.poll() is None,
            "teammates_alive": {n: alive(p) for n, p in mates.items()},
            "cli_add_exit": cli_add.returncode,
            "cli_add_error": (cli_add.stderr.strip().splitlines() or [""])[-1],
            "cli_add_error_lines": len(cli_add.stderr.strip().splitlines()),
            "cli_traceback": "Traceback" in cli_add.stderr,
            "claims": self.claims() - claims_before,
            "pending": sorted(t.id for t in self.tasks() if t.status is Status.PENDING),
            **check_files(self.layout),
        }
        remove(self, handle)
        self.say(f"{self.name}: fault removed after {time.monotonic() - t0:.1f}s")
        t1 = time.monotonic()
        if cli_add.returncode == 0:
            ids.append(self._id_of(cli_add.stdout))
        wait_until(lambda: len(done()) >= len(ids), 60, "every task after the fault")
        recovered_s = round(time.monotonic() - t1, 2)
        res = orch(self.repo, "down", env=self.env, timeout=120)
        self.lead.wait(60)
        tasks = {t.id: t for t in self.tasks()}
        evs = list(EventLog(self.layout.events).read())
        completions = Counter(e["task"] for e in evs if e["event"] == "task_completed")
        errors = _error_lines(self.log, self.layout)
        return {
            "during": during,
            "recovered_s": recovered_s,
            "lost": [i for i in ids if i not in tasks],
            "not_in_review": {i: str(t.status) for i, t in tasks.items()
                              if t.status is not Status.REVIEW},
            "completed_twice": {t: c for t, c in completions.items() if c > 1},
            "commits_not_one": {i: n for i, t in tasks.items()
                                if (n := _commits(self.repo, t.branch)) != 1},
            "events_during_fault": len(evs) - events_before,
            "error_lines": errors[:8],
            "error_count": len(errors),
            "tracebacks": sum("Traceback" in e for e in errors),
            "down": res.stdout.strip(),
            "leftover_processes": processes_in(self.repo),
            **{f"after_{k}": v for k, v in check_files(self.layout).items()},
        }

    def claims(self) -> int:
        return sum(e["event"] == "task_claimed" for e in EventLog(self.layout.events).read())

    def tasks(self) -> list[Any]:
        with open_board(self.layout) as b:
            return b.list()

    def _id_of(self, out: str) -> str:
        import re

        m = re.search(r"task_\d+", out)
        assert m, out
        return m.group(0)


def _commits(repo: Path, branch: str | None) -> int:
    if not branch:
        return 0
    out = subprocess.run(["git", "rev-list", f"main..{branch}"], cwd=repo, text=True,
                         capture_output=True, check=False).stdout
    return len(out.split())


def _error_lines(out: Path, layout: Layout) -> list[str]:
    """Errors the team reported: warning/error records of the daemon log, and anything on
    the daemon's stderr."""
    lines = []
    with contextlib.suppress(FileNotFoundError):
        for raw in (layout.run / "daemon.log").read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                rec = json.loads(raw)
                if rec.get("level") in ("error", "warning", "critical"):
                    lines.append(f"{rec.get('teammate') or rec.get('actor') or ''}: "
                                 f"{rec.get('event')} {rec.get('error') or ''}".strip()
                                 + (" Traceback" if rec.get("exception") else ""))
    lines += [ln for ln in out.read_text(errors="replace").splitlines()
              if ln.startswith(("error", "Traceback")) or "[error" in ln or "[warning" in ln]
    return lines


# --- the three faults ------------------------------------------------------------------
def full_disk(s: Scenario) -> Path:
    return fill(s.fs)


def free_disk(s: Scenario, filler: Path) -> None:
    filler.unlink()


def few_files(s: Scenario) -> list[int]:
    assert s.lead is not None
    pids = [s.lead.pid] + [int(st["pid"]) for st in teammates(s.layout).values()]
    set_nofile(pids, 2)
    return pids


def enough_files(s: Scenario, pids: list[int]) -> None:
    set_nofile(pids, None)


def read_only(s: Scenario) -> None:
    # `mount -o remount,ro` is refused (EBUSY) while the team holds lock files open for
    # writing, and chmod does not stop root: make every file and folder immutable instead.
    subprocess.run(["chattr", "-R", "+i", str(s.fs / "tasks")], check=True, capture_output=True)


def read_write(s: Scenario, _: None) -> None:
    subprocess.run(["chattr", "-R", "-i", str(s.fs / "tasks")], check=True, capture_output=True)


SCENARIOS = {"full": (full_disk, free_disk), "emfile": (few_files, enough_files),
             "readonly": (read_only, read_write)}


def run(name: str, base: Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    inject, remove = SCENARIOS[name]
    return Scenario(name, base, say).run(inject, remove)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default=",".join(SCENARIOS))
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dir", type=Path, help="scratch folder (default: a temp dir)")
    args = ap.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("faults.py needs root (it mounts tmpfs file systems)")
    results = {}
    with tempfile.TemporaryDirectory(prefix="faults-") as tmp:
        for name in args.only.split(","):
            say = (lambda _: None) if args.json else print
            results[name] = run(name, args.dir or Path(tmp), say=say)
            if not args.json:
                print(json.dumps(results[name], indent=1, default=str))
    if args.json:
        print(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
