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


def process_state(pid: int) -> str | None:
    """The state letter of ``/proc/<pid>/stat`` (``R``, ``S``, ``T`` stopped, ``Z`` …);
    None when there is no such process (or no /proc)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


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
