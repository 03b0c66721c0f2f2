"""Processes by pid (no imports from the rest of orchestrator, so any layer may use it)."""

from __future__ import annotations

import os
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
