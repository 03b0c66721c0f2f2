"""Shared test helpers: real git repositories and process inspection via /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.procutil import descendants


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A real git repository with one commit on ``main``."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in (files or {"README.md": "# sample\n"}).items():
        f = path / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def child_pids(pid: int | None = None) -> list[int]:
    """Live (non-zombie) descendants of ``pid`` (default: this process)."""
    return descendants(os.getpid() if pid is None else pid)


def survivors(marker: str) -> list[int]:
    """Processes of the machine whose command line holds ``marker`` (a sandboxed run's
    pids are its own namespace's: a marker finds them from outside)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid() and marker in cmdline(
                int(entry.name)):
            found.append(int(entry.name))
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def run_on_terminal(cwd: Path, args: list[str], env: dict[str, str] | None = None,
                    rows: int = 20, cols: int = 100) -> str:
    """``orchestrator ARGS`` with its stdin, stdout and stderr on a pseudo-terminal of
    ``rows`` x ``cols``; everything it wrote there (it must exit 0)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    p = subprocess.Popen([sys.executable, "-m", "orchestrator", *args], cwd=cwd,
                         env={**os.environ, "TERM": "xterm", **(env or {})}, stdin=slave,
                         stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    out = b""
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        out += data
    code = p.wait(60)
    os.close(master)
    assert code == 0, out
    return out.decode(errors="replace")



def count_task_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the task files the file board reads from now on (its index's reader)."""
    from orchestrator.board import index

    reads: list[str] = []
    real = index.read_task_file

    def counted(path: Path | str, dir_fd: int | None = None) -> Any:
        reads.append(os.path.basename(path))
        return real(path, dir_fd)

    monkeypatch.setattr(index, "read_task_file", counted)
    return reads


def during(wait: Callable[[], bool], step: Callable[[], object],
           after: float) -> tuple[bool, float]:
    """Run ``step`` in a thread ``after`` seconds from now and ``wait`` meanwhile: what
    ``wait`` returned, and how long it took."""
    timer = threading.Timer(after, step)
    timer.start()
    t0 = time.monotonic()
    try:
        return wait(), time.monotonic() - t0
    finally:
        timer.join()
