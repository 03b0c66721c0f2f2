"""Soak test (issue 10): thousands of tasks through one team; resources must stay flat.

    .venv/bin/python scripts/soak.py --tasks 2000 --teammates 4 [--repo DIR] [--json]

Starts ``orchestrator up -n N --backend command`` as a daemon, adds the tasks
in ten batches and, each time the team is idle again, samples the lead and each
teammate from ``/proc``: open files, threads, live child processes and resident
memory. Prints a row per batch and a summary of start (after the first batch,
once the team is warm), middle and end. Exits 1 when
a figure grows: more open files or threads than at the start, a leftover child
process, or memory up by more than ``--rss-slack`` MB (default 20).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.layout import Layout
from scripts.harness import (
    WRITE_OWN_FILE,
    add_tasks,
    alive,
    make_repo,
    proc_stats,
    processes_in,
    start_lead,
    status_counts,
    team_env,
    teammates,
    wait_until,
)

FIGURES = ("fds", "threads", "children", "rss_mb")
BATCHES = 10
"""Tasks are added in this many batches; each is sampled once the team is idle again,
so every sample is taken in the same state (nothing running) and they compare exactly."""


def sample(lead: int, layout: Layout) -> dict[str, dict[str, float]]:
    """Resources of the lead and each teammate right now (idle or between tasks)."""
    out = {"lead": proc_stats(lead)}
    for name, st in teammates(layout).items():
        if alive(st.get("pid")):
            out[name] = proc_stats(int(st["pid"]))
    return out


def run(repo: Path, n_tasks: int, n_mates: int, lease: float, rss_slack: float,
        quiet: bool = False) -> dict[str, Any]:
    layout = Layout.at(repo)

    def say(msg: str) -> None:
        if not quiet:
            print(msg, flush=True)

    env = team_env(board_lease_seconds=lease, board_max_attempts=5)
    log = repo.parent / "soak-daemon.log"
    t0 = time.monotonic()
    lead = start_lead(repo, ["-n", str(n_mates), "--backend", "command",
                             "--command", WRITE_OWN_FILE], env, log)
    samples: list[tuple[int, dict[str, dict[str, float]]]] = []
    pids_seen: dict[str, set[int]] = {}
    ids: list[str] = []
    try:
        wait_until(lambda: len([s for s in teammates(layout).values()
                                if alive(s.get("pid"))]) == n_mates, 60, "the team to start")
        say(f"{'done':>6} {'s':>6}  " + "  ".join(
            f"{who:>22}" for who in ["lead", *sorted(teammates(layout))]))
        say(f"{'':>6} {'':>6}  " + "  ".join(f"{'fds thr kids MB':>22}"
                                              for _ in range(n_mates + 1)))
        for batch in range(BATCHES):
            ids += add_tasks(repo, n_tasks * (batch + 1) // BATCHES - len(ids))

            def settled(want: int = len(ids)) -> bool:
                if lead.poll() is not None:
                    raise SystemExit(f"the lead exited early ({lead.returncode}); see {log}")
                c = status_counts(repo)
                return (c.get("review", 0) + c.get("failed", 0) >= want
                        and all(s.get("state") == "idle" for s in teammates(layout).values()))

            wait_until(settled, max(600, n_tasks * 2.0), f"{len(ids)} tasks done", poll=0.5)
            snap = sample(lead.pid, layout)
            samples.append((len(ids), snap))
            for name, st in teammates(layout).items():
                pids_seen.setdefault(name, set()).add(int(st["pid"]))
            say(f"{len(ids):>6} {time.monotonic() - t0:>6.0f}  " + "  ".join(
                f"{s['fds']:>5.0f} {s['threads']:>3.0f} {s['children']:>4.0f} {s['rss_mb']:>6.1f}"
                for _, s in sorted(snap.items(), key=lambda kv: kv[0] != "lead")))
    finally:
        lead.send_signal(signal.SIGTERM)
        try:
            lead.wait(120)
        except Exception:
            lead.kill()
            lead.wait()
    seconds = time.monotonic() - t0
    counts = status_counts(repo)
    leftover = processes_in(repo)
    start, middle, end = samples[0][1], samples[len(samples) // 2][1], samples[-1][1]
    growth: dict[str, dict[str, float]] = {}
    problems = []
    for who in start:
        if who not in end:
            problems.append(f"{who} is gone at the end")
            continue
        g = {f: round(end[who][f] - start[who][f], 1) for f in FIGURES}
        growth[who] = g
        if g["fds"] > 0 or g["threads"] > 0:
            problems.append(f"{who}: open files {g['fds']:+.0f}, threads {g['threads']:+.0f}")
        if end[who]["children"] > (n_mates if who == "lead" else 0):
            problems.append(f"{who}: {end[who]['children']:.0f} child processes at the end")
        if g["rss_mb"] > rss_slack:
            problems.append(f"{who}: resident memory {g['rss_mb']:+.1f} MB")
    restarts = {name: len(p) - 1 for name, p in pids_seen.items() if len(p) > 1}
    if restarts:
        problems.append(f"teammates restarted during the soak: {restarts}")
    if counts.get("review", 0) != len(ids):
        problems.append(f"not every task reached review: {counts}")
    if leftover:
        problems.append(f"processes left after down: {leftover}")
    return {"tasks": n_tasks, "teammates": n_mates, "seconds": round(seconds, 1),
            "tasks_per_second": round(n_tasks / seconds, 2), "counts": counts,
            "start": start, "middle": middle, "end": end, "growth": growth,
            "leftover_processes": leftover, "problems": problems, "ok": not problems}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--teammates", type=int, default=4)
    ap.add_argument("--lease", type=float, default=30.0, help="lease seconds")
    ap.add_argument("--rss-slack", type=float, default=20.0,
                    help="MB of resident memory growth still counted as flat")
    ap.add_argument("--repo", type=Path, help="scratch folder (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON only")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        repo = make_repo((args.repo or Path(tmp)) / "repo")
        res = run(repo, args.tasks, args.teammates, args.lease, args.rss_slack,
                  quiet=args.json)
    if args.json:
        print(json.dumps(res, indent=1))
        return 0 if res["ok"] else 1
    print(f"\n{res['tasks']} tasks, {res['teammates']} teammates: {res['seconds']:.0f} s "
          f"({res['tasks_per_second']:.1f} tasks/s); board {res['counts']}")
    print(f"{'':>8} {'':>6} " + " ".join(f"{f:>8}" for f in FIGURES))
    for who in res["start"]:
        for label in ("start", "middle", "end"):
            s = res[label].get(who)
            if s:
                print(f"{who:>8} {label:>6} " + " ".join(f"{s[f]:>8}" for f in FIGURES))
    print("flat: yes" if res["ok"] else "NOT flat:\n  " + "\n  ".join(res["problems"]))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
