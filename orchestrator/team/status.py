"""What the team is doing, from the small state files under ``.tasks/.run``.

    .tasks/.run/daemon.pid          the lead's pid (while it runs)
    .tasks/.run/daemon.json         pid, start time, repository, teammate names, mode
    .tasks/.run/daemon.lock         held (flock) for the lead's whole life
    .tasks/.run/daemon.log          JSON lines from the lead and every teammate
    .tasks/.run/teammates/<name>.json   each teammate's state, written by itself

A teammate's file says ``idle``, ``working`` (with the task and since when) or
``stopped``; `team_status` checks the pids so a killed process never shows as
alive. Every file is written atomically, so readers never see half of one.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.board.model import Status, utcnow
from orchestrator.fsutil import atomic_write
from orchestrator.layout import Layout
from orchestrator.procutil import pid_alive
from orchestrator.team.mailbox import LEAD, Mailbox


def pid_file(layout: Layout) -> Path:
    return layout.run / "daemon.pid"


def daemon_file(layout: Layout) -> Path:
    return layout.run / "daemon.json"


def lock_file(layout: Layout) -> Path:
    return layout.run / "daemon.lock"


def log_file(layout: Layout) -> Path:
    return layout.run / "daemon.log"


def teammates_dir(layout: Layout) -> Path:
    return layout.run / "teammates"


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps(data, indent=1), durable=False)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def write_teammate(layout: Layout, name: str, state: str, **fields: Any) -> None:
    write_json(teammates_dir(layout) / f"{name}.json",
               {"name": name, "state": state, "updated_at": utcnow(), **fields})


def read_teammate(layout: Layout, name: str) -> dict[str, Any] | None:
    return read_json(teammates_dir(layout) / f"{name}.json")


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


def team_status(layout: Layout, counts: dict[str, int] | None = None,
                spending: dict[str, Any] | None = None) -> dict[str, Any]:
    """The daemon, its teammates and the board counts, as ``status --json`` prints it."""
    now = time.time()
    info = running_daemon(layout)
    names = list(info.get("teammates", [])) if info else []
    for f in sorted(teammates_dir(layout).glob("*.json")):
        if f.stem not in names:
            names.append(f.stem)
    mates = []
    for name in names:
        st = read_teammate(layout, name) or {"name": name, "state": "stopped"}
        if info is None or not pid_alive(st.get("pid")):
            st["state"] = "stopped"
            st.pop("task", None)
        mates.append({
            "name": name, "state": st["state"], "pid": st.get("pid") if info else None,
            "task": st.get("task"), "seconds": _age(st.get("since"), now),
        })
    return {
        "running": info is not None,
        "pid": info.get("pid") if info else None,
        "uptime": _age(info.get("started_at"), now) if info else None,
        "mode": info.get("mode") if info else None,
        "teammates": mates,
        "board": counts or {},
        "spending": spending or {},
        "permission_requests": open_permission_requests(layout),
    }


def open_permission_requests(layout: Layout) -> list[dict[str, Any]]:
    """Permission requests in the lead's mailbox that no one has answered yet."""
    if not (layout.mailboxes / f"{LEAD}.jsonl").exists():
        return []
    requests = Mailbox(layout, LEAD).find(kind="permission_request")
    out = []
    for req in requests:
        rid, sender = req.get("request_id"), req.get("from")
        if not rid or not isinstance(sender, str):
            continue
        try:
            answered = Mailbox(layout, sender).find(kind="permission_response", request_id=rid)
        except Exception:  # a malformed sender name cannot have a mailbox
            answered = []
        if not answered:
            out.append(req)
    return out


def board_counts(tasks: list[Any]) -> dict[str, int]:
    counts = {s.value: 0 for s in Status}
    for t in tasks:
        counts[str(t.status)] += 1
    return counts


def board_spending(tasks: list[Any]) -> dict[str, Any]:
    """What the board's tasks spent, and the tasks stopped to wait for a person."""
    return {
        "cost_usd": round(sum(t.usage.cost_usd for t in tasks), 6),
        "tokens": sum(t.usage.tokens for t in tasks),
        "waiting": [{"task": t.id, "reason": t.waiting_for} for t in tasks
                    if t.status is Status.FAILED and t.waiting_for],
    }


def format_status(st: dict[str, Any]) -> str:
    """The human form of `team_status`."""
    lines = []
    if st["running"]:
        lines.append(f"daemon: running, pid {st['pid']}, up {_dur(st['uptime'])}"
                     + (f" ({st['mode']})" if st.get("mode") else ""))
    else:
        lines.append("daemon: not running")
    for m in st["teammates"]:
        if m["state"] == "working":
            what = f"working on {m['task']} for {_dur(m['seconds'])}"
        elif m["state"] == "idle":
            what = f"idle for {_dur(m['seconds'])}"
        else:
            what = m["state"]
        pid = f" (pid {m['pid']})" if m.get("pid") else ""
        lines.append(f"  {m['name']:<10} {what}{pid}")
    if st["board"]:
        shown = [f"{k} {v}" for k, v in st["board"].items() if v]
        lines.append("board: " + (", ".join(shown) if shown else "no tasks"))
    spent = st.get("spending") or {}
    if spent.get("cost_usd") or spent.get("tokens"):
        lines.append(f"spent: ${spent['cost_usd']:.2f}, {spent['tokens']} tokens")
    for w in spent.get("waiting", []):
        lines.append(f"{w['task']} waits: {w['reason']}  (orchestrator resume {w['task']} "
                     "--budget-usd N | --review)")
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
