"""Chaos across machines (issue 33): ``scripts/chaos.py --machines N``.

N clones of one bare remote ("machines", each with its own ``.worktrees/`` and its own
``orchestrator up -n TEAMMATES``) share one PostgreSQL board (a throwaway cluster). Every
task runs the command backend, which writes ``work_<id>.txt`` holding the task id, then
sleeps. While they work, the driver injects one of each fault, at evenly spread points of
progress:

- ``kill``: every process of a machine frozen, then ``kill -9``ed; it comes back (``up``);
- ``stop``: every process of a machine SIGSTOPped until its leases were reaped, then
  SIGCONT (its late writes, to the board and to git, must be refused);
- ``db-restart``: PostgreSQL stopped and started again (every connection cut);
- ``db-outage``: PostgreSQL down for ``--outage`` seconds (30 by default);
- ``remote-ro``: the bare remote refuses every push for ``--outage`` / 3 seconds;
- ``disk-full``: the file system of the last machine's clone (a small tmpfs; root only)
  filled up for a while;
- ``clock``: a machine restarted with its clock ``+5`` minutes off (``time.time`` of every
  Python process of it shifted through ``sitecustomize``).

For each fault: the tasks it hit (in progress on the machine, or anywhere for the board
and the remote), how many of them were lost (not in review at the end), done twice (more
than one ``task_completed``), stale writes accepted (the remote's branch not the commit
the board recorded, or not exactly the task's work), and the time from the fault's end
until every task it hit was in review. At the end every task must be in review exactly
once, with its branch on the remote holding exactly its work, and no WIP ref left.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from orchestrator.board import open_board
from orchestrator.config import BoardConfig
from orchestrator.layout import Layout
from orchestrator.model import Status, Task
from scripts.harness import (
    WRITE_OWN_FILE,
    kill_quietly,
    make_repo,
    orch,
    processes_in,
    start_lead,
    team_env,
    wait_until,
)

FAULTS = ("kill", "stop", "db-restart", "db-outage", "remote-ro", "disk-full", "clock")
SKEW = 300.0
SITECUSTOMIZE = f"""import time as _t
_real = _t.time
_t.time = lambda: _real() + {SKEW}
_ns = _t.time_ns
_t.time_ns = lambda: _ns() + {int(SKEW * 1e9)}
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=False).stdout.strip()


class Machine:
    def __init__(self, name: str, clone: Path, env: dict[str, str], argv: list[str]) -> None:
        self.name = name
        self.clone = clone
        self.env = {**env, "ORCH_BOARD_MACHINE": name}
        self.argv = argv
        self.log = clone.parent / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def up(self, env: dict[str, str] | None = None) -> None:
        self.proc = start_lead(self.clone, self.argv, {**self.env, **(env or {})}, self.log)

    def pids(self) -> set[int]:
        found = {pid for pid, _ in processes_in(self.clone)}
        if self.proc is not None and self.proc.poll() is None:
            found.add(self.proc.pid)
        return found

    def signal(self, sig: int) -> set[int]:
        pids = self.pids()
        for pid in pids:
            kill_quietly(pid, sig)
        return pids

    def down(self) -> None:
        if self.proc is None:
            return
        orch(self.clone, "down", env=self.env, timeout=120)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(60)
        if self.proc.poll() is None:
            self.signal(signal.SIGKILL)
            self.proc.wait()


class Run:
    def __init__(self, root: Path, n_machines: int, mates: int, lease: float,
                 task_seconds: float, max_attempts: int, outage: float, cluster: Any,
                 url: str, say: Any) -> None:
        self.root = root
        self.cluster = cluster
        self.url = url
        self.say = say
        self.lease = lease
        self.outage = outage
        self.max_attempts = max_attempts
        seed = make_repo(root / "seed")
        self.bare = root / "remote.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(self.bare)], check=True)
        self.small: Path | None = None
        env = team_env(board_lease_seconds=lease, board_max_attempts=max_attempts,
                       board_url=url)
        argv = ["-n", str(mates), "--backend", "command", "--command",
                f"{WRITE_OWN_FILE}; sleep {task_seconds}"]
        self.machines = []
        for i in range(n_machines):
            where = root
            if i == n_machines - 1 and os.geteuid() == 0:  # its disk can be filled
                where = self.small = root / "small"
                where.mkdir()
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(where)],
                               check=True)
            clone = where / f"m{i}"
            subprocess.run(["git", "clone", "-q", str(self.bare), str(clone)], check=True)
            res = orch(clone, "init", "--board", url, env=env)
            if res.returncode != 0:
                raise SystemExit(f"init failed: {res.stderr}")
            self.machines.append(Machine(f"m{i}", clone, env, argv))
        self.config = BoardConfig(url=url, machine="driver")
        self.layout = Layout.at(self.machines[0].clone)

    def tasks(self) -> dict[str, Task]:
        with open_board(self.layout, self.config) as b:
            return {t.id: t for t in b.list()}

    def done(self) -> int:
        return sum(t.status is Status.REVIEW for t in self.tasks().values())

    # --- faults ----------------------------------------------------------------
    def inject(self, fault: str, rng: random.Random) -> tuple[list[str], str]:
        """Inject ``fault``; the tasks it hit, and what was done."""
        tasks = self.tasks().values()
        running = [t for t in tasks if t.status is Status.IN_PROGRESS]
        if fault in ("kill", "stop", "clock", "disk-full"):
            busiest = max(self.machines, key=lambda m: (len(self._held(m)), rng.random()))
            m = self.machines[-1] if fault == "disk-full" else busiest
            hit = self._held(m)
            if fault == "kill":
                for sig in (signal.SIGSTOP, signal.SIGKILL):
                    m.signal(sig)
                assert m.proc is not None
                m.proc.wait()
                m.up()
                return hit, f"kill -9 every process of {m.name}, up again"
            if fault == "stop":
                frozen = m.signal(signal.SIGSTOP)
                fences = {t.id: t.fence for t in running if t.id in hit}
                with contextlib.suppress(TimeoutError):
                    wait_until(lambda: all(
                        (t := self.tasks()[i]).status is not Status.IN_PROGRESS or t.fence != f
                        for i, f in fences.items()),
                               self.lease * 4 + 30, "its leases to be reaped", poll=0.2)
                for pid in frozen:
                    kill_quietly(pid, signal.SIGCONT)
                return hit, f"SIGSTOP {m.name} ({len(frozen)} processes) past its leases"
            if fault == "clock":
                m.down()
                shift = self.root / "skew"
                shift.mkdir(exist_ok=True)
                (shift / "sitecustomize.py").write_text(SITECUSTOMIZE)
                m.up({"PYTHONPATH": str(shift)})
                return hit, f"{m.name} restarted with its clock {SKEW:+.0f} s off"
            if self.small is None:
                return [], "skipped: not root, no tmpfs to fill"
            filler = self.small / "filler"
            subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"],
                           capture_output=True, check=False)
            time.sleep(self.outage / 3)
            filler.unlink()
            return hit, f"{m.name}'s disk full for {self.outage / 3:.0f} s"
        if fault in ("db-restart", "db-outage"):
            self.cluster.stop("fast")
            time.sleep(1.0 if fault == "db-restart" else self.outage)
            self.cluster.start()
            return [t.id for t in running], ("PostgreSQL restarted" if fault == "db-restart"
                                             else f"PostgreSQL down for {self.outage:.0f} s")
        hook = self.bare / "hooks" / "pre-receive"
        hook.write_text("#!/bin/sh\necho 'read-only for now' >&2\nexit 1\n")
        hook.chmod(0o755)
        time.sleep(self.outage / 3)
        hook.unlink()
        return [t.id for t in running], f"the remote refused every push for " \
            f"{self.outage / 3:.0f} s"

    def _held(self, m: Machine) -> list[str]:
        with open_board(self.layout, self.config) as b:
            mine = {st.task for st in b.team.all() if st.host == m.name and st.task}
            return sorted(t.id for t in b.list(Status.IN_PROGRESS) if t.id in mine)

    # --- the audit ----------------------------------------------------------------
    def audit(self, ids: list[str]) -> dict[str, Any]:
        tasks = self.tasks()
        with open_board(self.layout, self.config) as b:
            events = list(b.events.read())
        completed = Counter(e.task for e in events if e.event == "task_completed")
        stale, wrong = [], []
        for tid in ids:
            t = tasks.get(tid)
            if t is None or not t.branch:
                continue
            on_remote = git(self.bare, "rev-parse", "--verify", "-q", f"refs/heads/{t.branch}")
            if on_remote != t.pushed.get("branch"):
                stale.append(tid)
            files = git(self.bare, "diff", "--name-only", f"main...{t.branch}").split()
            body = git(self.bare, "show", f"{t.branch}:work_{tid}.txt")
            if files != [f"work_{tid}.txt"] or body != tid:
                wrong.append(tid)
        return {
            "lost": [i for i in ids if i not in tasks or tasks[i].status is not Status.REVIEW],
            "twice": sorted(t for t, n in completed.items() if n > 1),
            "stale": sorted(set(stale) | set(wrong)),
            "not_on_remote": [i for i in ids if i in tasks and tasks[i].branch and not git(
                self.bare, "rev-parse", "--verify", "-q", f"refs/heads/{tasks[i].branch}")],
            "push_pending": [i for i in ids if i in tasks and tasks[i].push_pending],
            "wip_refs_left": len(git(self.bare, "for-each-ref",
                                     "refs/orchestrator/wip/").splitlines()),
            "attempts": sum(t.attempts for t in tasks.values()),
            "released_for_machine_faults": sum(
                e.event == "task_released" and "machine fault" in str(e.fields.get("reason"))
                for e in events),
        }

    def close(self) -> None:
        for m in self.machines:
            m.down()
        if self.small is not None:
            subprocess.run(["umount", "-l", str(self.small)], check=False)


def run(*, n_machines: int, mates: int, n_tasks: int, lease: float, task_seconds: float,
        max_attempts: int, outage: float, seed: int, say: Any) -> dict[str, Any]:
    from orchestrator.board.pg import schema
    from tests.pg import start_cluster

    rng = random.Random(seed)
    ok = False
    cluster = start_cluster(durable=True)
    root = Path(tempfile.mkdtemp(prefix="chaos-machines-"))
    try:
        url = cluster.url(cluster.new_database("chaos"))
        schema.migrate(url)
        r = Run(root, n_machines, mates, lease, task_seconds, max_attempts, outage, cluster,
                url, say)
        try:
            with open_board(r.layout, r.config) as b:
                ids = [b.add(f"chaos task {i}", max_attempts=max_attempts).id
                       for i in range(n_tasks)]
            for m in r.machines:
                m.up()
            plan = list(FAULTS)
            rng.shuffle(plan)
            marks = [int(n_tasks * (0.08 + 0.6 * i / (len(plan) - 1))) for i in range(len(plan))]
            say(f"chaos: {n_tasks} tasks, {n_machines} machines x {mates} teammates, lease "
                f"{lease}s, seed {seed}; faults in order: {', '.join(plan)}")
            t0 = time.monotonic()
            rows: list[dict[str, Any]] = []
            for fault, mark in zip(plan, marks, strict=True):
                wait_until(lambda mark=mark: r.done() >= mark,  # type: ignore[misc]
                           600, f"{mark} tasks done", poll=0.5)
                hit, what = r.inject(fault, rng)
                ended = time.monotonic()
                say(f"[{ended - t0:6.1f}s, {r.done()}/{n_tasks}] {fault}: {what}; hit "
                    f"{', '.join(hit) or 'no task'}")
                rows.append({"fault": fault, "what": what, "hit": hit, "ended": ended,
                             "recovered_s": None})
                _recovered(r, rows)
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and (r.done() < n_tasks or any(
                    t.push_pending for t in r.tasks().values())):
                _recovered(r, rows)
                time.sleep(0.5)
            _recovered(r, rows)
            seconds = round(time.monotonic() - t0, 1)
        finally:
            r.close()
        total = r.audit(ids)
        for row in rows:
            hits = set(row["hit"])
            row.update(tasks=len(hits), lost=len(hits & set(total["lost"])),
                       twice=len(hits & set(total["twice"])),
                       stale_accepted=len(hits & set(total["stale"])))
            row.pop("ended")
        ok = not any(total[k] for k in ("lost", "twice", "stale", "not_on_remote",
                                         "push_pending", "wip_refs_left"))
    finally:
        cluster.stop("immediate")
        shutil.rmtree(cluster.folder, ignore_errors=True)
        if ok:
            shutil.rmtree(root, ignore_errors=True)
        else:
            say(f"the machines' logs are kept in {root}")
    return {"tasks": n_tasks, "machines": n_machines, "teammates": mates, "seed": seed,
            "seconds": seconds, "faults": rows, "total": total, "ok": ok}


def _recovered(r: Run, rows: list[dict[str, Any]]) -> None:
    """Note, for each fault not yet recovered from, when every task it hit is in review."""
    waiting = [row for row in rows if row["recovered_s"] is None]
    if not waiting:
        return
    tasks = r.tasks()
    for row in waiting:
        if all(tasks[i].status is Status.REVIEW for i in row["hit"]):
            row["recovered_s"] = round(time.monotonic() - row["ended"], 1)


def report(res: dict[str, Any]) -> str:
    out = [f"chaos across machines: {res['tasks']} tasks, {res['machines']} machines x "
           f"{res['teammates']} teammates, seed {res['seed']}: {res['seconds']:.0f} s", "",
           "| fault | tasks | lost | twice | stale writes accepted | time to recover |",
           "| --- | --- | --- | --- | --- | --- |"]
    for row in res["faults"]:
        rec = "-" if not row["tasks"] else (
            f"{row['recovered_s']} s" if row["recovered_s"] is not None else "not recovered")
        out.append(f"| {row['fault']}: {row['what']} | {row['tasks']} | {row['lost']} | "
                   f"{row['twice']} | {row['stale_accepted']} | {rec} |")
    t = res["total"]
    out += ["", f"all tasks: lost {len(t['lost'])}, done twice {len(t['twice'])}, stale "
                f"writes accepted {len(t['stale'])}, branch not on the remote "
                f"{len(t['not_on_remote'])}, push still pending {len(t['push_pending'])}, "
                f"WIP refs left {t['wip_refs_left']}; attempts counted {t['attempts']}; "
                f"released for a machine fault {t['released_for_machine_faults']}",
            "RESULT: " + ("PASS" if res["ok"] else "FAIL")]
    if not res["ok"]:
        out.append(json.dumps({k: v for k, v in t.items() if v}, default=str)[:2000])
    return "\n".join(out)
