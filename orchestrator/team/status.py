"""What the team is doing: the lead's runtime files on this machine (`Layout.run`)
and each teammate's state on the board (``board.team``).

    <run>/daemon.pid          the lead's pid (while it runs)
    <run>/daemon.json         pid, start time, repository, teammate names, mode
    <run>/daemon.lock         held (flock) for the lead's whole life
    <run>/daemon.log          JSON lines from the lead and every teammate

A teammate's state says ``idle``, ``working`` (with the task and since when) or
``stopped``; `team_status` checks the pids so a killed process never shows as
alive. Every file is written atomically, so readers never see half of one.
"""

from __future__ import annotations

import contextlib
import json
import platform
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.agent.permission_flow import open_requests
from orchestrator.budget import money
from orchestrator.controlplane import BoardSummary, ControlPlane
from orchestrator.errors import OrchestratorError
from orchestrator.fsutil import atomic_write
from orchestrator.layout import Layout
from orchestrator.model import Status
from orchestrator.procutil import pid_alive as pid_alive  # re-exported


def pid_file(layout: Layout) -> Path:
    return layout.run / "daemon.pid"


def daemon_file(layout: Layout) -> Path:
    return layout.run / "daemon.json"


def lock_file(layout: Layout) -> Path:
    return layout.run / "daemon.lock"


def log_file(layout: Layout) -> Path:
    return layout.run / "daemon.log"


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(data, indent=1), durable=False)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def running_daemon(layout: Layout) -> dict[str, Any] | None:
    """The running lead's ``daemon.json`` (with ``pid``), or None when none runs."""
    info = read_json(daemon_file(layout))
    if info is None or not pid_alive(info.get("pid")):
        return None
    return info


def _age(iso: str | None, now: float) -> float | None:
    if not iso:
        return None
    try:
        return max(0.0, now - datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


def team_status(layout: Layout, board: ControlPlane, counts: dict[str, int] | None = None,
                spending: dict[str, Any] | None = None) -> dict[str, Any]:
    """The daemon, its teammates and the board counts, as ``status --json`` prints it."""
    now = time.time()
    info = running_daemon(layout)
    names = list(info.get("teammates", [])) if info else []
    here = getattr(board, "machine", None)  # a shared board: teammates of every machine
    machine = here or platform.node()
    states = board.team.all()
    known = {st.name: st for st in states if st.host is None or st.host == here}
    names += [n for n in known if n not in names]
    mates = []
    for name in names:
        st = known.get(name)
        state, task = (st.state, st.task) if st is not None else ("stopped", None)
        pid = st.pid if st is not None else None
        if info is None or not pid_alive(pid):
            state, task = "stopped", None
        mates.append({
            "name": name, "machine": machine, "state": state, "pid": pid if info else None,
            "task": task, "seconds": _age(st.since if st is not None else None, now),
        })
    stopped_team = info is not None and bool(mates) and all(
        m["state"] == "stopped" for m in mates)
    for st in states:  # other machines' teammates: what they last said, and when
        if st.host is not None and st.host != here:
            state = "gone" if _gone(board, st, now) else st.state
            mates.append({"name": st.name, "machine": st.host, "host": st.host, "state": state,
                          "pid": st.pid, "task": st.task if state != "gone" else None,
                          "seconds": _age(st.since, now),
                          # stamped by the board's clock (another machine's may be off)
                          "heartbeat_seconds": _age(st.updated_at, board.now())})
    return {
        "running": info is not None,
        "team_stopped": stopped_team,
        "hint": ("every teammate has stopped (a shutdown request?), so no new task will run: "
                 "orchestrator down, then orchestrator up") if stopped_team else None,
        "pid": info.get("pid") if info else None,
        "uptime": _age(info.get("started_at"), now) if info else None,
        "mode": info.get("mode") if info else None,
        "teammates": mates,
        "board": counts or {},
        "spending": spending or {},
        "push_pending": [
            {"task": t.id, "branch": t.branch, "machine": t.push_pending.machine,
             "reason": t.push_pending.reason}
            for t in (board.list(Status.REVIEW) if here is not None else [])
            if t.push_pending is not None],
        "permission_requests": [
            {"request_id": r.id, "from": r.sender, "task": r.task, "body": r.body,
             "ts": r.ts, "kind": "permission_request", **r.fields}
            for r in open_requests(board) if r.kind == "permission"],
    }


def _gone(board: ControlPlane, st: Any, now: float) -> bool:
    """Another machine's teammate that says it works on a task whose lease it no longer
    holds (expired, or a later claim's): its machine died or lost the board."""
    if st.state != "working" or not st.task:
        return False
    try:
        task = board.get(st.task)
    except OrchestratorError:
        return True
    lease = task.lease
    if task.status is not Status.IN_PROGRESS or lease is None or lease.expires_at <= now:
        return True
    since = _age(st.since, now)
    taken = _age(lease.acquired_at, now)
    return since is not None and taken is not None and taken < since - 1  # claimed anew


def board_counts(tasks: list[Any]) -> dict[str, int]:
    counts = {s.value: 0 for s in Status}
    for t in tasks:
        counts[str(t.status)] += 1
    return counts


def spending(totals: BoardSummary, board: ControlPlane | None = None) -> dict[str, Any]:
    """What the board's tasks spent, and the tasks that wait for a person (with ``board``:
    each with the commands that answer its wait, `orchestrator.waits`)."""
    waiting: list[dict[str, Any]] = [{"task": tid, "reason": why}
                                     for tid, why in totals.waiting]
    for row in waiting:
        if board is None:
            break
        with contextlib.suppress(OrchestratorError):
            wait = board.get(row["task"]).wait
            if wait is not None:
                row.update(kind=wait.label, reason=wait.text,
                           actions=wait.commands(row["task"]))
    return {"cost_usd": totals.cost_usd, "tokens": totals.tokens, "waiting": waiting}


def format_status(st: dict[str, Any]) -> str:
    """The human form of `team_status`."""
    lines = []
    if st["running"]:
        lines.append(f"daemon: running, pid {st['pid']}, up {_dur(st['uptime'])}"
                     + (f" ({st['mode']})" if st.get("mode") else ""))
    else:
        lines.append("daemon: not running")
    width = max([len("machine")] + [len(m.get("machine") or "") for m in st["teammates"]])
    if st["teammates"]:
        lines.append(f"  {'machine':<{width}} {'teammate':<10} state")
    for m in st["teammates"]:
        if m["state"] == "working":
            what = f"working on {m['task']} for {_dur(m['seconds'])}"
        elif m["state"] == "idle":
            what = f"idle for {_dur(m['seconds'])}"
        elif m["state"] == "gone":
            what = "gone (its machine stopped renewing its task's lease)"
        else:
            what = m["state"]
        pid = f" (pid {m['pid']})" if m.get("pid") else ""
        beat = f", last heartbeat {_dur(m.get('heartbeat_seconds'))} ago" \
            if m.get("host") else ""
        lines.append(f"  {m.get('machine') or '':<{width}} {m['name']:<10} {what}{pid}{beat}")
    if st.get("hint"):
        lines.append(st["hint"])
    if st["board"]:
        shown = [f"{k} {v}" for k, v in st["board"].items() if v]
        lines.append("board: " + (", ".join(shown) if shown else "no tasks"))
    spent = st.get("spending") or {}
    if spent.get("cost_usd") or spent.get("tokens"):
        lines.append(f"spent: {money(spent['cost_usd'])}, {spent['tokens']} tokens")
    for w in spent.get("waiting", []):
        answers = w.get("actions") or [f"orchestrator show {w['task']}"]
        lines.append(f"{w['task']} waits for {w['reason']}  ({' | '.join(answers)})")
    for p in st["push_pending"]:
        lines.append(f"{p['task']} push pending: {p['branch']} is not on the remote yet; "
                     f"the lead of {p['machine']} pushes it again ({p['reason']})")
    for req in st["permission_requests"]:
        lines.append(f"permission request {req.get('request_id')} from {req.get('from')}: "
                     f"{req.get('body', '')}  (orchestrator approve|deny {req.get('request_id')})")
    return "\n".join(lines)


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
