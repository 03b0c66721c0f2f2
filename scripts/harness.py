"""Shared by the hardening scripts (chaos, soak, faults): a scratch repository, a team
started the way a user starts one, and what ``/proc`` says about its processes.

Nothing here is faked: real git, real ``orchestrator up`` processes, real files.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from orchestrator.board import open_board  # noqa: E402
from orchestrator.board.teamstatus import FileTeamStatus  # noqa: E402
from orchestrator.config import BoardConfig  # noqa: E402
from orchestrator.layout import Layout  # noqa: E402
from orchestrator.procutil import descendants, parent_map  # noqa: E402
from orchestrator.team import status  # noqa: E402

GIT_ID = {"GIT_AUTHOR_NAME": "harness", "GIT_AUTHOR_EMAIL": "harness@example.com",
          "GIT_COMMITTER_NAME": "harness", "GIT_COMMITTER_EMAIL": "harness@example.com"}

WRITE_OWN_FILE = 'printf "%s\\n" "$ORCH_TASK_ID" > "work_$ORCH_TASK_ID.txt"'
"""A command-backend task that leaves exactly one file, unique to the task."""


def make_repo(path: Path) -> Path:
    """A real git repository with one commit on ``main``."""
    path.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **GIT_ID)
    (path / "README.md").write_text("# scratch\n")
    for args in (["init", "-q", "-b", "main"], ["add", "README.md"],
                 ["commit", "-q", "-m", "initial"]):
        subprocess.run(["git", *args], cwd=path, check=True, env=env, capture_output=True)
    return path


def add_tasks(repo: Path, n: int, first: int = 0, config: BoardConfig | None = None,
              **fields: Any) -> list[str]:
    with open_board(Layout.at(repo), config) as board:
        return [board.add(f"harness task {i}", **fields).id for i in range(first, first + n)]


def team_env(**settings: Any) -> dict[str, str]:
    """The environment for a team: ``board_lease_seconds=2`` → ``ORCH_BOARD_LEASE_SECONDS``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_")}
    env.update(GIT_ID)
    env.update({f"ORCH_{k.upper()}": str(v) for k, v in settings.items()})
    return env


def orch(repo: Path, *args: str, env: dict[str, str] | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                          env=env or team_env(), capture_output=True, text=True,
                          timeout=timeout, check=False)


def start_lead(repo: Path, args: list[str], env: dict[str, str], log: Path,
               preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen[bytes]:
    """``orchestrator up ARGS`` in the background; the process *is* the lead."""
    with log.open("ab") as fh:
        return subprocess.Popen([sys.executable, "-m", "orchestrator", "up", *args], cwd=repo,
                                env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                                start_new_session=True, preexec_fn=preexec_fn)


def wait_until(pred: Callable[[], Any], timeout: float, what: str,
               poll: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(poll)


def teammates(layout: Layout, config: BoardConfig | None = None) -> dict[str, dict[str, Any]]:
    """Each teammate's state (name → state), as the team wrote it: its state file, or its
    row on a PostgreSQL board (``config.url``)."""
    if config is not None and config.url:
        with open_board(layout, config) as board:
            return {st.name: st.to_dict() for st in board.team.all()}
    out = {}
    for st in FileTeamStatus(layout).all():
        out[st.name] = st.to_dict()
    return out


def alive(pid: int | None) -> bool:
    return status.pid_alive(pid)


def status_counts(repo: Path) -> dict[str, int]:
    with open_board(Layout.at(repo)) as board:
        return status.board_counts(board.list())


# --- /proc ---------------------------------------------------------------------------
def proc_stats(pid: int) -> dict[str, float]:
    """Open files, threads, live descendant processes and resident memory (MB) of ``pid``."""
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {"fds": fds, "threads": int(fields["Threads"]),
            "children": len(descendants(pid)),
            "rss_mb": round(int(fields["VmRSS"].split()[0]) / 1024, 1)}


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def processes_in(repo: Path, exclude: int | None = None) -> list[tuple[int, str]]:
    """Live processes that work in ``repo``: their cwd is inside it or it is on their
    command line (leads, teammates, backends, checks)."""
    repo = repo.resolve()
    mine = {os.getpid(), exclude}
    found = []
    for pid in parent_map():
        if pid in mine:
            continue
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            continue
        cmd = cmdline(pid)
        if cwd == repo or repo in cwd.parents or f"--root {repo}" in cmd:
            found.append((pid, cmd))
    return found


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def killpg_quietly(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
