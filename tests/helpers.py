"""Shared test helpers: real git repositories and process inspection via /proc."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

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


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
