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
from orchestrator.controlplane import BoardSummary, ControlPlane, TeammateState
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
    daemon = info or {}
    here = getattr(board, "machine", None)  # a shared board: teammates of every machine
    states = board.team.all()
    mates = _mates_here(daemon.get("teammates", []), info is not None,
                        [st for st in states if st.host in (None, here)],
                        here or platform.node(), now)
    stopped_team = info is not None and bool(mates) and all(
        m["state"] == "stopped" for m in mates)
    mates += [_mate_elsewhere(board, st, now) for st in states
              if st.host not in (None, here)]
    return {
        "running": info is not None,
        "team_stopped": stopped_team,
        "hint": ("every teammate has stopped (a shutdown request?), so no new task will run: "
                 "orchestrator down, then orchestrator up") if stopped_team else None,
        "pid": daemon.get("pid"),
        "uptime": _age(daemon.get("started_at"), now),
        "mode": daemon.get("mode"),
        "teammates": mates,
        "board": counts or {},
        "spending": spending or {},
        "push_pending": _push_pending(board) if here is not None else [],
        "permission_requests": _permission_requests(board),
    }


def _push_pending(board: ControlPlane) -> list[dict[str, Any]]:
    """Kept tasks whose branch is not on the shared remote yet."""
    return [{"task": t.id, "branch": t.branch, "machine": t.push_pending.machine,
             "reason": t.push_pending.reason}
            for t in board.list(Status.REVIEW) if t.push_pending is not None]


def _permission_requests(board: ControlPlane) -> list[dict[str, Any]]:
    return [{"request_id": r.id, "from": r.sender, "task": r.task, "body": r.body,
             "ts": r.ts, "kind": "permission_request", **r.fields}
            for r in open_requests(board) if r.kind == "permission"]


def _mates_here(started: list[str], running: bool, states: list[TeammateState],
                machine: str, now: float) -> list[dict[str, Any]]:
    """The teammates of this machine's lead: those it started, then any other that
    published a state here; each stopped unless the lead runs and its pid lives."""
    known = {st.name: st for st in states}
    names = [*started, *(n for n in known if n not in started)]
    return [_mate_here(name, known.get(name), running, machine, now) for name in names]


def _mate_here(name: str, st: TeammateState | None, running: bool, machine: str,
               now: float) -> dict[str, Any]:
    if st is None:
        return {"name": name, "machine": machine, "state": "stopped", "pid": None,
                "task": None, "seconds": None}
    alive = running and pid_alive(st.pid)
    return {"name": name, "machine": machine, "state": st.state if alive else "stopped",
            "pid": st.pid if running else None, "task": st.task if alive else None,
            "seconds": _age(st.since, now)}


SILENT_RESCANS = 3
"""How many rescan periods (`board.rescan_seconds`) a waiting teammate of another machine
may go without writing its state before `status` shows it gone."""


def _mate_elsewhere(board: ControlPlane, st: TeammateState, now: float) -> dict[str, Any]:
    """Another machine's teammate: what it last said, and when."""
    gone = _gone(board, st, now)
    return {"name": st.name, "machine": st.host, "host": st.host,
            "state": "gone" if gone else st.state, "pid": st.pid,
            "task": None if gone else st.task, "seconds": _age(st.since, now),
            # stamped by the board's clock (another machine's may be off)
            "heartbeat_seconds": _age(st.updated_at, board.now())}


def _gone(board: ControlPlane, st: TeammateState, now: float) -> bool:
    """Another machine's teammate whose machine died or lost the board: it says it works
    on a task whose lease it no longer holds (expired, or a later claim's), or it waits
    (idle, blocked) but has not written its state for `SILENT_RESCANS` rescan periods
    (a waiting teammate writes it on each, `Teammate.publish`)."""
    if st.state in ("idle", "blocked", "starting"):
        silent = _age(st.updated_at, board.now())
        rescan = getattr(getattr(board, "config", None), "rescan_seconds", None)
        return silent is not None and rescan is not None and silent > SILENT_RESCANS * rescan
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
    if st["running"]:
        mode = f" ({st['mode']})" if st.get("mode") else ""
        lines = [f"daemon: running, pid {st['pid']}, up {_dur(st['uptime'])}{mode}"]
    else:
        lines = ["daemon: not running"]
    width = max([len("machine")] + [len(m.get("machine") or "") for m in st["teammates"]])
    if st["teammates"]:
        lines.append(f"  {'machine':<{width}} {'teammate':<10} state")
    lines += [f"  {m.get('machine') or '':<{width}} {m['name']:<10} {_doing(m)}"
              for m in st["teammates"]]
    if st.get("hint"):
        lines.append(st["hint"])
    if st["board"]:
        shown = [f"{k} {v}" for k, v in st["board"].items() if v]
        lines.append("board: " + (", ".join(shown) if shown else "no tasks"))
    return "\n".join(lines + _waiting(st))


def _doing(mate: dict[str, Any]) -> str:
    """What a teammate of `team_status` does, for its line in `format_status`."""
    state, seconds = mate["state"], _dur(mate["seconds"])
    what: str = {"working": f"working on {mate['task']} for {seconds}",
            "idle": f"idle for {seconds}",
            "gone": "gone (its machine stopped writing to the board)"}.get(state, state)
    pid = f" (pid {mate['pid']})" if mate.get("pid") else ""
    beat = f", last heartbeat {_dur(mate.get('heartbeat_seconds'))} ago" \
        if mate.get("host") else ""
    return what + pid + beat


def _waiting(st: dict[str, Any]) -> list[str]:
    """The lines of `format_status` after the board: the cost so far, and what waits
    for a person or for a lead."""
    spent = st.get("spending") or {}
    lines = [f"spent: {money(spent['cost_usd'])}, {spent['tokens']} tokens"] \
        if spent.get("cost_usd") or spent.get("tokens") else []
    for w in spent.get("waiting", []):
        answers = w.get("actions") or [f"orchestrator show {w['task']}"]
        lines.append(f"{w['task']} waits for {w['reason']}  ({' | '.join(answers)})")
    lines += [f"{p['task']} push pending: {p['branch']} is not on the remote yet; "
              f"the lead of {p['machine']} pushes it again ({p['reason']})"
              for p in st["push_pending"]]
    return lines + [
        f"permission request {req.get('request_id')} from {req.get('from')}: "
        f"{req.get('body', '')}  (orchestrator approve|deny {req.get('request_id')})"
        for req in st["permission_requests"]]


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
