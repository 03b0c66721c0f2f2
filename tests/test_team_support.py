"""Driving a real team from tests (helpers, no tests): the CLI as a subprocess, state files."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from orchestrator.board import open_board
from orchestrator.board.eventlog import EventLog
from orchestrator.board.teamstatus import FileTeamStatus
from orchestrator.layout import Layout
from orchestrator.model import Task
from orchestrator.team import status
from orchestrator.team.status import pid_alive


def team_env(**settings: str | float) -> dict[str, str]:
    env = dict(os.environ)
    env.update({f"ORCH_{k.upper()}": str(v) for k, v in settings.items()})
    return env


def cli(repo: Path, *args: str, env: dict[str, str] | None = None,
        timeout: float = 100) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                          env=env or team_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)


def start(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``orchestrator up …`` in the background, as a user's terminal would run it."""
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "up", *args], cwd=repo,
                            env=env or team_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def add_tasks(repo: Path, n: int, **fields: Any) -> list[Task]:
    with open_board(Layout.at(repo)) as board:
        return [board.add(f"Task number {i}", description=f"write file {i}", **fields)
                for i in range(n)]


def tasks(repo: Path) -> list[Task]:
    with open_board(Layout.at(repo)) as board:
        return board.list()


def events(repo: Path, event: str | None = None) -> list[dict[str, Any]]:
    recs = EventLog(Layout.at(repo).events).read()
    return [e for e in recs if event is None or e["event"] == event]


def mate(repo: Path, name: str) -> dict[str, Any]:
    st = FileTeamStatus(Layout.at(repo)).get(name)
    return st.to_dict() if st is not None else {}


def wait_until(pred: Callable[[], Any], timeout: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or pred}")


def working_on(repo: Path, task_id: str) -> dict[str, Any] | None:
    """The state of the teammate working on ``task_id`` once its backend runs."""
    for found in FileTeamStatus(Layout.at(repo)).all():
        st = found.to_dict()
        if st.get("state") == "working" and st.get("task") == task_id and st.get("backend_pgid"):
            return st
    return None


def finish(proc: subprocess.Popen[str], timeout: float = 100) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


@contextlib.contextmanager
def team_cleanup(repo: Path) -> Iterator[None]:
    """Whatever a test did, no process of its team outlives it."""
    try:
        yield
    finally:
        layout = Layout.at(repo)
        info = status.read_json(status.daemon_file(layout)) or {}
        pids = [info.get("pid")]
        pgids = []
        for found in FileTeamStatus(layout).all():
            st = found.to_dict()
            pids.append(st.get("pid"))
            pgids.append(st.get("backend_pgid"))
        for pid in pids:
            if pid and pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for pgid in pgids:
            if pgid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
        for pid in pids:
            if pid:
                wait_until(lambda pid=pid: not pid_alive(pid), 10, f"pid {pid} to die")


def branch_commits(repo: Path, branch: str) -> list[str]:
    out = subprocess.run(["git", "rev-list", f"main..{branch}"], cwd=repo, check=True,
                         capture_output=True, text=True).stdout.split()
    return out


def show(repo: Path, rev: str, fmt: str) -> str:
    return subprocess.run(["git", "show", "-s", f"--format={fmt}", rev], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


def changed_files(repo: Path, rev: str) -> list[str]:
    out = subprocess.run(["git", "show", "--name-only", "--format=", rev], cwd=repo,
                         check=True, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line]


def as_json(text: str) -> Any:
    return json.loads(text)
