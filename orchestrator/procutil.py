"""Processes by pid (no imports from the rest of orchestrator, so any layer may use it)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path


def pid_alive(pid: int | None) -> bool:
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return process_state(pid) != "Z"  # a zombie (exited, not yet reaped) is not alive


def stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name: state, parent pid, …
    (see proc(5), which numbers them from 3); None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def process_state(pid: int) -> str | None:
    """The state letter (``R``, ``S``, ``T`` stopped, ``Z`` zombie …); None when there is
    no such process (or no /proc)."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def parent_map() -> dict[int, int]:
    """Parent pid of every live (not zombie) process."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := stat_fields(entry)) and fields[0] != "Z":
            out[int(entry)] = int(fields[1])
    return out


def descendants(pid: int, parents: dict[int, int] | None = None) -> list[int]:
    """Live descendants of ``pid`` (``parents``: a `parent_map` already taken)."""
    parents = parent_map() if parents is None else parents
    found, frontier = [], [pid]
    while frontier:
        p = frontier.pop()
        kids = [c for c, pp in parents.items() if pp == p]
        found += kids
        frontier += kids
    return found


def lock_holders() -> set[int]:
    """Pids holding a file lock (``flock`` or ``fcntl``) now, from ``/proc/locks``."""
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return set()
    pids = set()
    for line in lines:
        fields = line.split()
        if len(fields) > 4 and fields[1] != "->" and fields[4].isdigit():
            pids.add(int(fields[4]))
    return pids


def processes_in(folder: Path) -> list[int]:
    """Pids of live processes whose working directory is ``folder`` or below it (read from
    ``/proc/<pid>/cwd``; processes we may not inspect are not seen)."""
    try:
        root = folder.resolve()
    except OSError:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{entry}/cwd"))
        except OSError:
            continue
        if (cwd == root or cwd.is_relative_to(root)) and process_state(int(entry)) != "Z":
            found.append(int(entry))
    return found


def busy_reason(folder: Path) -> str | None:
    """Why ``folder`` must not be removed now: a process still runs in it (None if none)."""
    pids = processes_in(folder)
    if not pids:
        return None
    shown = ", ".join(f"{pid} ({_name(pid)})" for pid in pids[:3])
    more = f" and {len(pids) - 3} more" if len(pids) > 3 else ""
    return (f"a process still runs in {folder}: pid {shown}{more}; stop it first "
            "(orchestrator cancel ID stops the task's agent)")


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"


def user_environ(root: Path | None = None,
                 environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The person's environment for the processes run for them (agents, checks, setup):
    ``environ`` (default ``os.environ``) without orchestrator's own virtualenv, which a
    person who activated it to run orchestrator has on ``PATH`` and in ``VIRTUAL_ENV``.
    Otherwise their project's checks would run orchestrator's Python (``No module named
    pytest``). A virtualenv inside the repository ``root`` is the project's own, not
    orchestrator's: it stays."""
    env = dict(os.environ if environ is None else environ)
    if sys.prefix == sys.base_prefix:
        return env  # not run from a virtualenv
    ours = Path(sys.prefix).resolve()
    if root is not None and ours.is_relative_to(Path(root).resolve()):
        return env
    if env.get("VIRTUAL_ENV") and Path(env["VIRTUAL_ENV"]).resolve() == ours:
        env.pop("VIRTUAL_ENV")
        env.pop("VIRTUAL_ENV_PROMPT", None)
    bin_dir = ours / "bin"
    if "PATH" in env:
        env["PATH"] = os.pathsep.join(
            p for p in env["PATH"].split(os.pathsep) if not p or _resolved(p) != bin_dir)
    return env


def _resolved(path: str) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(path)
