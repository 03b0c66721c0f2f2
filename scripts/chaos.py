"""Chaos test (issue 10): a team works through a board while a driver kills it.

    .venv/bin/python scripts/chaos.py --tasks 200 --teammates 4 [--mate-kills 10]
        [--lead-kills 2] [--stops 1] [--restarts 1] [--lease 3] [--seed N] [--json]
        [--board postgresql://…|auto] [--db-restarts N] [--machine-kills N]
    .venv/bin/python scripts/chaos.py --machines 3 --teammates 2 --tasks 200 [--outage 30]

``--machines N`` runs N clones of one bare remote on one PostgreSQL board (a throwaway
cluster) and injects the faults of a team across machines: see `scripts.chaos_machines`.

``--board`` runs the team on a PostgreSQL board (``auto``: a throwaway cluster started
from the Debian binaries, which also allows ``--db-restarts``: the database is stopped
and started again under the running team, every connection cut), and
``--machine-kills`` (default 1 with ``--board``): every process of the machine — the lead,
its teammates and their backends — frozen and then ``kill -9``ed at once, as a power cut
would; the machine then comes back (``up``), its tasks' leases run out on the database's
clock and they are taken again, its worktrees reconciled.

Every task runs the command backend, which writes ``work_<id>.txt`` holding the
task id (then sleeps ``--task-seconds``, so kills land mid-task). While the team
works, the driver — at evenly spread points of progress, in a seeded random
order — ``kill -9``s a random teammate (preferably a working one), ``kill -9``s
the lead (its teammates must stop on their own; then ``up`` again), freezes a
working teammate and its backend with SIGSTOP until its lease has been reaped
(then SIGCONT: its late writes must be fenced off), and restarts the daemon
(``down``, ``up``). At the end it runs ``down`` and checks, the way queue
checkers count sets (lost / duplicated / unexpected):

- lost: a task added but not on the board; not in review: any other end state;
  unexpected: a task on the board nobody added;
- completed twice: more than one ``task_completed`` event, or a branch with
  other than exactly one commit over ``main``;
- wrong work: a branch whose diff is not exactly ``work_<id>.txt`` holding the id;
- ``events.jsonl``: every line parses, and each task's last status event
  matches its status on the board;
- worktrees: ``git worktree list`` against the board (orphans and missing ones);
- processes: nothing alive after ``down`` that ran in the repository (leads,
  teammates, backends), and every pid seen during the run is gone.

Prints the figures; exits 0 only when every count is zero.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.board import open_board
from orchestrator.board.eventlog import EventLog
from orchestrator.config import BoardConfig
from orchestrator.controlplane import Event
from orchestrator.events import event_status
from orchestrator.layout import Layout
from orchestrator.model import Status
from scripts.harness import (
    WRITE_OWN_FILE,
    add_tasks,
    alive,
    kill_quietly,
    killpg_quietly,
    make_repo,
    orch,
    processes_in,
    start_lead,
    team_env,
    teammates,
    wait_until,
)

FINAL = {Status.REVIEW, Status.FAILED, Status.CANCELLED, Status.MERGED, Status.DISCARDED}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                          check=False).stdout


class Driver:
    """Runs the team and injects the faults; remembers every process it saw."""

    def __init__(self, repo: Path, n_tasks: int, n_mates: int, env: dict[str, str],
                 command: str, rng: random.Random, say: Any,
                 board: BoardConfig | None = None, cluster: Any = None) -> None:
        self.repo = repo
        self.board_config = board or BoardConfig()
        self.cluster = cluster
        """A throwaway PostgreSQL cluster this run may restart (``--board auto``)."""
        self.n_tasks = n_tasks
        self.max_attempts = 10
        """Each task's max_attempts (they are made here, not by the team)."""
        self.ids: list[str] = []
        self.backlog = 3 * n_mates
        """Tasks are fed as the team works, keeping this many unfinished, so the team never
        runs out of work before the last fault has landed."""
        self.layout = Layout.at(repo)
        self.n_mates = n_mates
        self.env = env
        self.command = command
        self.rng = rng
        self.say = say
        self.log = repo.parent / "chaos-daemon.log"
        self.lead: subprocess.Popen[bytes] | None = None
        self.pids: set[int] = set()
        self.pgids: set[int] = set()
        self.stall_seconds = 120.0
        self._last = (-1, time.monotonic())
        self.figures: dict[str, Any] = {"mate_kills": 0, "lead_kills": 0, "stops": [],
                                        "restarts": 0, "mates_exit_after_lead_s": [],
                                        "db_restarts": 0, "machine_kills": 0}

    # --- the team -----------------------------------------------------------------
    def up(self) -> None:
        self.lead = start_lead(self.repo, ["-n", str(self.n_mates), "--backend", "command",
                                           "--command", self.command], self.env, self.log)
        self.pids.add(self.lead.pid)
        wait_until(lambda: len(self.live_mates()) == self.n_mates, 60, "the team to start")

    def live_mates(self) -> dict[str, dict[str, Any]]:
        """Teammates of the current lead that are alive (their state files say so)."""
        out = {}
        for name, st in teammates(self.layout, self.board_config).items():
            if alive(st.get("pid")) and st.get("state") != "stopped":
                self.pids.add(int(st["pid"]))
                if st.get("backend_pgid"):
                    self.pgids.add(int(st["backend_pgid"]))
                out[name] = st
        return out

    def check_lead(self) -> None:
        if self.lead is not None and self.lead.poll() is not None:
            raise SystemExit(f"the lead exited on its own ({self.lead.returncode}); "
                             f"see {self.log}")

    def board(self) -> list[Any]:
        with open_board(self.layout, self.board_config) as b:
            return b.list()

    def progress(self) -> int:
        """How many tasks are finished; tops the board up to `backlog` unfinished ones."""
        self.check_lead()
        self.live_mates()
        done = sum(t.status in FINAL for t in self.board())
        if done != self._last[0]:
            self._last = (done, time.monotonic())
        elif time.monotonic() - self._last[1] > self.stall_seconds:
            raise TimeoutError(f"no progress for {self.stall_seconds:.0f}s at {done}/"
                               f"{self.n_tasks} done: "
                               f"{teammates(self.layout, self.board_config)}")
        more = min(self.n_tasks - len(self.ids), self.backlog - (len(self.ids) - done))
        if more > 0:
            self.ids += add_tasks(self.repo, more, first=len(self.ids),
                                  config=self.board_config, max_attempts=self.max_attempts)
        return done

    # --- faults ---------------------------------------------------------------------
    def kill_mate(self) -> None:
        mates = self.live_mates()
        working = [s for s in mates.values() if s.get("state") == "working"]
        victim = self.rng.choice(working or list(mates.values()))
        kill_quietly(int(victim["pid"]))
        self.figures["mate_kills"] += 1
        self.say(f"  kill -9 teammate {victim['name']} (pid {victim['pid']}, "
                 f"{victim.get('state')} {victim.get('task') or ''})")
        # the lead restarts it after its back-off; the next fault waits for that, so a
        # daemon restart right after the kill cannot make the restart moot
        wait_until(lambda: (self.live_mates().get(victim["name"]) or {}).get("pid")
                   not in (None, victim["pid"]), 60, f"{victim['name']} to be restarted")

    def kill_lead(self) -> None:
        assert self.lead is not None
        mates = [int(s["pid"]) for s in self.live_mates().values()]
        kill_quietly(self.lead.pid)
        self.lead.wait()
        t0 = time.monotonic()
        wait_until(lambda: not any(alive(p) for p in mates), 60,
                   "the teammates to stop after the lead died")
        took = round(time.monotonic() - t0, 2)
        self.figures["lead_kills"] += 1
        self.figures["mates_exit_after_lead_s"].append(took)
        self.say(f"  kill -9 lead (pid {self.lead.pid}); its teammates stopped in {took}s; up")
        self.up()

    def kill_machine(self) -> None:
        """Every process of this machine at once: frozen first (none of them sees another
        die and reacts), then kill -9; then the machine comes back (``up``)."""
        assert self.lead is not None
        mates = self.live_mates()
        doomed = {self.lead.pid, *(int(s["pid"]) for s in mates.values()),
                  *(pid for pid, _ in processes_in(self.repo))}
        groups = {int(s["backend_pgid"]) for s in mates.values() if s.get("backend_pgid")}
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for g in groups:
                killpg_quietly(g, sig)
            for pid in doomed:
                kill_quietly(pid, sig)
        self.lead.wait()
        wait_until(lambda: not any(alive(p) for p in doomed), 60, "the machine to be dead")
        working = sorted(str(s.get("task")) for s in mates.values() if s.get("task"))
        self.figures["machine_kills"] += 1
        self.say(f"  kill -9 the whole machine: {len(doomed)} processes, {len(groups)} "
                 f"backend groups (tasks {', '.join(working) or 'none'}); up")
        self.up()

    def restart_db(self) -> None:
        """Stop the database under the running team (every connection cut), start it again."""
        assert self.cluster is not None
        self.cluster.stop("fast")
        time.sleep(1.0)
        self.cluster.start()
        self.figures["db_restarts"] += 1
        self.say("  PostgreSQL stopped and started again")

    def restart(self) -> None:
        res = orch(self.repo, "down", env=self.env, timeout=120)
        assert self.lead is not None
        self.lead.wait(60)
        self.figures["restarts"] += 1
        self.say(f"  restart: {res.stdout.strip()}; up")
        self.up()

    def freeze(self, lease: float) -> None:
        """SIGSTOP a working teammate and its backend until its lease is reaped."""
        working = wait_until(lambda: [s for s in self.live_mates().values()
                                      if s.get("state") == "working" and s.get("backend_pgid")],
                             60, "a working teammate")
        victim = self.rng.choice(working)
        pid, pgid, name = int(victim["pid"]), int(victim["backend_pgid"]), victim["name"]
        kill_quietly(pid, signal.SIGSTOP)
        killpg_quietly(pgid, signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            held = {t.id: t.fence for t in self.board()
                    if t.status is Status.IN_PROGRESS and t.owner == name}

            def reaped() -> bool:
                self.check_lead()
                now = {t.id: t for t in self.board()}
                return all(now[i].status is not Status.IN_PROGRESS or now[i].fence != f
                           for i, f in held.items())

            if held:
                wait_until(reaped, lease * 4 + 30, f"the lease of frozen {name} to be reaped",
                           poll=0.1)
            else:  # it finished just before the freeze: stay frozen past a lease anyway
                time.sleep(lease + 0.5)
        finally:
            killpg_quietly(pgid, signal.SIGCONT)
            kill_quietly(pid, signal.SIGCONT)
        took = round(time.monotonic() - t0, 2)

        def gave_up() -> bool:  # its late writes were refused: it says so, once per task
            found = {(e["task"], e.get("token")) for e in EventLog(self.layout.events).read()
                     if e["event"] == "task_abandoned" and e["actor"] == name}
            return set(held.items()) <= found

        # Frozen in the middle of a board write (holding the task's lock), it is killed by
        # the lead instead: then it can write nothing late either.
        killed = False
        try:
            wait_until(lambda: gave_up() or not alive(pid), 30,
                       f"frozen {name} to abandon {sorted(held)}")
            killed = not alive(pid) and not gave_up()
            fenced = True
        except TimeoutError:
            fenced = False
        self.figures["stops"].append({"teammate": name, "held": sorted(held),
                                      "frozen_s": took, "fenced": fenced, "killed": killed})
        self.say(f"  SIGSTOP teammate {name} holding {sorted(held) or 'nothing'} for {took}s "
                 f"(lease {lease}s); SIGCONT; late writes fenced: {fenced}"
                 + (" (killed by the lead: frozen holding the task's lock)" if killed else ""))

    def down(self) -> None:
        res = orch(self.repo, "down", env=self.env, timeout=180)
        if self.lead is not None:
            self.lead.wait(60)
        self.say(f"down: {res.stdout.strip()}")


def run(repo: Path, *, n_tasks: int, n_mates: int, mate_kills: int, lead_kills: int,
        stops: int, restarts: int, lease: float, task_seconds: float, max_attempts: int,
        seed: int, quiet: bool = False, board_url: str | None = None, cluster: Any = None,
        db_restarts: int = 0, machine_kills: int = 0) -> dict[str, Any]:
    def say(msg: str) -> None:
        if not quiet:
            print(msg, flush=True)

    rng = random.Random(seed)
    extra = {"board_url": board_url} if board_url else {}
    env = team_env(board_lease_seconds=lease, board_max_attempts=max_attempts, **extra)
    command = f"{WRITE_OWN_FILE}; sleep {task_seconds}"
    board = BoardConfig(url=board_url) if board_url else None
    drv = Driver(repo, n_tasks, n_mates, env, command, rng, say, board, cluster)
    drv.max_attempts = max_attempts
    drv.progress()  # the first tasks
    plan = ["mate"] * mate_kills + ["lead"] * lead_kills + ["stop"] * stops \
        + ["restart"] * restarts + ["db"] * db_restarts + ["machine"] * machine_kills
    rng.shuffle(plan)
    # spread the faults over 5 %..60 % of the work, so each lands on a busy team
    marks = [int(n_tasks * (0.05 + 0.55 * i / (len(plan) - 1))) if len(plan) > 1
             else n_tasks // 3 for i in range(len(plan))]
    say(f"chaos: {n_tasks} tasks, {n_mates} teammates, lease {lease}s, seed {seed}; "
        f"faults: {Counter(plan)}")
    t0 = time.monotonic()
    deadline = 300 + n_tasks * 5.0
    skipped: list[str] = []
    stalled: list[str] = []
    try:
        drv.up()
        for fault, mark in zip(plan, marks, strict=True):
            [done] = wait_until(lambda mark=mark: (d := drv.progress()) >= mark and [d],
                                deadline, f"{mark} tasks done", poll=0.1)
            if done >= n_tasks:
                skipped.append(fault)
                continue
            say(f"[{time.monotonic() - t0:6.1f}s, {done}/{n_tasks} done]")
            if fault == "mate":
                drv.kill_mate()
            elif fault == "lead":
                drv.kill_lead()
            elif fault == "stop":
                drv.freeze(lease)
            elif fault == "db":
                drv.restart_db()
            elif fault == "machine":
                drv.kill_machine()
            else:
                drv.restart()
        wait_until(lambda: drv.progress() >= n_tasks, deadline, "every task to finish",
                   poll=0.2)
        drv.down()
    except TimeoutError as exc:  # stalled: still audit what is there, and say so
        stalled.append(str(exc))
        say(f"STALLED: {exc}")
        with contextlib.suppress(Exception):
            drv.down()
    finally:
        if drv.lead is not None and drv.lead.poll() is None:
            kill_quietly(drv.lead.pid)
            drv.lead.wait()
    seconds = round(time.monotonic() - t0, 1)
    left = _leftovers(repo, drv)
    result = audit(repo, drv.ids, drv.board_config)
    result.update(tasks=n_tasks, teammates=n_mates, seconds=seconds, seed=seed, lease=lease,
                  faults=drv.figures, faults_skipped=skipped, leftover_processes=left,
                  stalled=stalled)
    result["unfenced_stops"] = [s for s in drv.figures["stops"] if not s["fenced"]]
    result["ok"] = not any(result[k] for k in COUNTS) and not skipped
    return result


COUNTS = ("lost", "not_in_review", "unexpected", "completed_twice", "commits_not_one",
          "wrong_work", "bad_event_lines", "false_abandons", "events_inconsistent",
          "orphan_worktrees", "missing_worktrees", "leftover_processes", "unfenced_stops",
          "stalled")


def _leftovers(repo: Path, drv: Driver) -> list[Any]:
    """Processes still alive after ``down`` (a short grace for the kernel to reap them)."""
    def stragglers() -> list[Any]:
        found = [(p, "seen during the run") for p in drv.pids if alive(p)]
        found += [(g, "backend group") for g in drv.pgids if alive(g)]
        return found + [p for p in processes_in(repo) if p[0] not in drv.pids]

    try:
        wait_until(lambda: not stragglers(), 10, "the team's processes to be gone")
    except TimeoutError:
        pass
    return stragglers()


def audit(repo: Path, ids: list[str], config: BoardConfig | None = None) -> dict[str, Any]:
    """Count what went wrong, set by set (see the module docstring)."""
    layout = Layout.at(repo)
    with open_board(layout, config) as b:
        board = {t.id: t for t in b.list()}
    lines = layout.events.read_bytes().split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    events, bad_lines = [], []
    for i, raw in enumerate(lines, 1):
        try:
            rec = json.loads(raw)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
            events.append(rec)
        except ValueError as exc:
            bad_lines.append(f"line {i}: {exc}")
    last: dict[str, str] = {}
    for e in events:
        st = event_status(Event.from_dict(e))
        if st is not None and e.get("task"):
            last[e["task"]] = st
    completions = Counter(e["task"] for e in events if e["event"] == "task_completed")
    handed_back = {(e["task"], e.get("token")) for e in events
                   if e["event"] in ("task_completed", "task_failed", "task_released")}
    lost = [i for i in ids if i not in board]
    not_review = {i: str(board[i].status) for i in ids if i in board
                  and board[i].status is not Status.REVIEW}
    wrong, commits_not_one = {}, {}
    for tid in ids:
        t = board.get(tid)
        if t is None or not t.branch:
            continue
        n = len(git(repo, "rev-list", f"main..{t.branch}").split())
        if n != 1:
            commits_not_one[tid] = n
        files = git(repo, "diff", "--name-only", f"main...{t.branch}").split()
        body = git(repo, "show", f"{t.branch}:work_{tid}.txt").strip()
        if files != [f"work_{tid}.txt"] or body != tid:
            wrong[tid] = {"files": files, "content": body[:80]}
    listed = set()
    for line in git(repo, "worktree", "list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            p = Path(line.split(" ", 1)[1]).resolve()
            if p != repo.resolve():
                listed.add(str(p))
    on_board = {str(Path(t.worktree).resolve()) for t in board.values() if t.worktree}
    live = {str(Path(t.worktree).resolve()) for t in board.values()
            if t.worktree and t.status in (Status.REVIEW, Status.IN_PROGRESS, Status.PENDING)}
    stats = Counter(e["event"] for e in events)
    return {
        "lost": lost,
        "not_in_review": not_review,
        "unexpected": sorted(set(board) - set(ids)),
        "completed_twice": {t: c for t, c in completions.items() if c > 1},
        "commits_not_one": commits_not_one,
        "wrong_work": wrong,
        "event_lines": len(lines),
        "bad_event_lines": bad_lines,
        "false_abandons": [f"{e['task']} token {e.get('token')}" for e in events
                           if e["event"] == "task_abandoned"
                           and (e["task"], e.get("token")) in handed_back],
        "events_inconsistent": {t.id: {"board": str(t.status), "events": last.get(t.id)}
                                for t in board.values() if last.get(t.id) != str(t.status)},
        "orphan_worktrees": sorted(listed - on_board),
        "missing_worktrees": sorted(p for p in live - listed),
        "worktrees": len(listed),
        "attempts": sum(t.attempts for t in board.values()),
        "max_attempts_used": max((t.attempts for t in board.values()), default=0),
        "recovery": {k: stats.get(k, 0) for k in (
            "task_requeued", "lease_expired", "task_abandoned", "task_released",
            "task_claimed", "task_completed", "teammate_started", "teammate_stopped")},
    }


def report(res: dict[str, Any]) -> str:
    f, r = res["faults"], res["recovery"]
    stops = "; ".join(f"{s['teammate']} holding {', '.join(s['held']) or 'nothing'} frozen "
                      f"{s['frozen_s']}s, late writes fenced: {s['fenced']}"
                      for s in f["stops"]) or "none"
    out = [
        f"chaos: {res['tasks']} tasks, {res['teammates']} teammates, lease {res['lease']}s, "
        f"seed {res['seed']}: {res['seconds']:.0f} s",
        f"faults injected: {f['mate_kills']} teammate kill -9, {f['lead_kills']} lead kill -9 "
        f"(teammates stopped on their own in {f['mates_exit_after_lead_s']} s), "
        f"{len(f['stops'])} SIGSTOP past the lease ({stops}), {f['restarts']} daemon restart"
        + (f", {f['db_restarts']} PostgreSQL restart" if f.get("db_restarts") else "")
        + (f", {f['machine_kills']} whole-machine kill -9" if f.get("machine_kills") else "")
        + (f"; NOT injected (work ran out): {res['faults_skipped']}" if res["faults_skipped"]
           else ""),
        f"recovery: {r['task_requeued']} requeued at once on a teammate's death, "
        f"{r['lease_expired']} lease expired, {r['task_abandoned']} abandoned by a fenced "
        f"teammate, {r['task_released']} released on stop; {r['task_claimed']} claims for "
        f"{res['tasks']} tasks; {r['teammate_started']} teammate starts; attempts counted "
        f"{res['attempts']} (max {res['max_attempts_used']} on one task)",
        f"lost {len(res['lost'])}, not in review {len(res['not_in_review'])}, unexpected "
        f"{len(res['unexpected'])}, completed twice {len(res['completed_twice'])} "
        f"({r['task_completed']} task_completed events), branches with other than one commit "
        f"{len(res['commits_not_one'])}, branches with other work {len(res['wrong_work'])}",
        f"events.jsonl: {res['event_lines']} lines, {len(res['bad_event_lines'])} unparseable, "
        f"{len(res['events_inconsistent'])} tasks whose last status event differs from the "
        f"board, {len(res['false_abandons'])} 'abandoned' after handing the task back",
        f"worktrees: {res['worktrees']} in git worktree list, {len(res['orphan_worktrees'])} "
        f"orphan, {len(res['missing_worktrees'])} missing",
        f"processes left after down: {len(res['leftover_processes'])}",
        "RESULT: " + ("PASS" if res["ok"] else "FAIL"),
    ]
    if not res["ok"]:
        out += [f"  {k}: {res[k]}" for k in COUNTS if res[k]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--teammates", type=int, default=4)
    ap.add_argument("--mate-kills", type=int, default=10)
    ap.add_argument("--lead-kills", type=int, default=2)
    ap.add_argument("--stops", type=int, default=1)
    ap.add_argument("--restarts", type=int, default=1)
    ap.add_argument("--lease", type=float, default=3.0, help="lease seconds")
    ap.add_argument("--task-seconds", type=float, default=0.3,
                    help="how long each task's command sleeps after writing its file")
    ap.add_argument("--max-attempts", type=int, default=10,
                    help="board.max_attempts (each kill of a task's teammate counts one)")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--repo", type=Path, help="scratch folder (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON only")
    ap.add_argument("--board", help="a PostgreSQL board URL, or `auto` for a throwaway "
                                    "cluster (default: the file board)")
    ap.add_argument("--db-restarts", type=int, default=None,
                    help="PostgreSQL restarts under the team (--board auto; default 1 there)")
    ap.add_argument("--machine-kills", type=int, default=None,
                    help="kill -9 of every process of the machine at once (default 1 with "
                         "--board, 0 without)")
    ap.add_argument("--machines", type=int, default=None,
                    help="N clones of one remote on one PostgreSQL board (a throwaway "
                         "cluster), with the faults of a team across machines")
    ap.add_argument("--outage", type=float, default=30.0,
                    help="--machines: how long PostgreSQL is down (the remote refuses pushes "
                         "and the disk is full for a third of it)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    if args.machines:
        from scripts import chaos_machines

        res = chaos_machines.run(
            n_machines=args.machines, mates=args.teammates, n_tasks=args.tasks,
            lease=args.lease, task_seconds=args.task_seconds, max_attempts=args.max_attempts,
            outage=args.outage, seed=seed, say=(lambda _: None) if args.json else print)
        print(json.dumps(res, indent=1, default=str) if args.json
              else chaos_machines.report(res))
        return 0 if res["ok"] else 1
    cluster = None
    url = args.board
    if url == "auto":
        from orchestrator.board.pg import schema
        from tests.pg import start_cluster

        cluster = start_cluster(durable=True)
        url = cluster.url(cluster.new_database("chaos"))
        schema.migrate(url)
    elif url is not None:
        from orchestrator.board.pg import schema

        schema.migrate(url)
    db_restarts = args.db_restarts if args.db_restarts is not None else int(cluster is not None)
    if db_restarts and cluster is None:
        ap.error("--db-restarts needs --board auto (a cluster this script may restart)")
    try:
        with tempfile.TemporaryDirectory(prefix="chaos-") as tmp:
            repo = make_repo((args.repo or Path(tmp)) / "repo")
            res = run(repo, n_tasks=args.tasks, n_mates=args.teammates,
                      mate_kills=args.mate_kills, lead_kills=args.lead_kills, stops=args.stops,
                      restarts=args.restarts, lease=args.lease, task_seconds=args.task_seconds,
                      max_attempts=args.max_attempts, seed=seed, quiet=args.json,
                      board_url=url, cluster=cluster, db_restarts=db_restarts,
                      machine_kills=(args.machine_kills if args.machine_kills is not None
                                     else int(url is not None)))
    finally:
        if cluster is not None:
            import shutil

            cluster.stop("immediate")
            shutil.rmtree(cluster.folder, ignore_errors=True)
    print(json.dumps(res, indent=1, default=str) if args.json else report(res))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
