"""``orchestrator up`` and ``down``: one lead per repository, in the foreground or detached.

The lead holds ``.tasks/.run/daemon.lock`` (an flock) for its whole life, so a
second `up` is refused with `AlreadyRunning` while it lives and a lead killed
with ``kill -9`` never blocks the next one (the kernel drops the lock). The pid
file and ``daemon.json`` are written once the lock is held and removed on exit.

``--detach`` starts ``python -m orchestrator.team.daemon`` in a new session with
its output in ``.tasks/.run/daemon.out`` and returns once it has taken the lock.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.config import Config
from orchestrator.errors import AlreadyRunning, ConfigError, OrchestratorError, UserError
from orchestrator.flock import FileLocked, acquire, open_lock_file
from orchestrator.layout import Layout
from orchestrator.logging import configure
from orchestrator.model import utcnow
from orchestrator.team import status
from orchestrator.team.lead import Lead
from orchestrator.team.wake import COLD_SIGNAL

START_TIMEOUT_SECONDS = 30.0


def _refuse(layout: Layout) -> AlreadyRunning:
    info = status.running_daemon(layout)
    pid = f" (pid {info['pid']})" if info else ""
    return AlreadyRunning(f"orchestrator is already running in {layout.root}{pid}; "
                          "`orchestrator down` stops it")


def check_team(config: Config) -> None:
    """Refuse a team that could only fail: an unknown backend, a command backend without one."""
    from orchestrator.backend_names import check_backend

    check_backend(config.team.backend)
    if config.team.backend == "command" and not config.team.command:
        raise ConfigError("the command backend needs a command: --command 'CMD' "
                          "or team.command in orchestrator.toml")
    if config.team.land and not config.team.verify:
        raise ConfigError("--land verifies each merge result: give the verify command with "
                          "--verify 'CMD' or team.verify in orchestrator.toml")


def up(layout: Layout, config: Config, *, teammates: int | None = None,
       overrides: dict[str, dict[str, Any]] | None = None, burst: bool = False,
       console: bool = True) -> int:
    """Run the lead in this process until it stops; returns the exit code."""
    layout.ensure()
    lock = open_lock_file(status.lock_file(layout))
    try:
        acquire(lock, status.lock_file(layout), 0)
    except FileLocked:
        os.close(lock)
        raise _refuse(layout) from None
    try:
        configure(status.log_file(layout), console=console, actor="lead",
                  fmt=config.team.log_format)
        lead = Lead(layout, config, teammates=teammates, overrides=overrides, burst=burst,
                    console=console)
        status.write_json(status.daemon_file(layout), {
            "pid": os.getpid(), "started_at": utcnow(), "root": str(layout.root),
            "teammates": [c.name for c in lead.children], "mode": "burst" if burst else "daemon",
            "log": str(status.log_file(layout)),
        })
        status.pid_file(layout).write_text(f"{os.getpid()}\n")
        try:
            return lead.run()
        finally:
            for f in (status.pid_file(layout), status.daemon_file(layout)):
                f.unlink(missing_ok=True)
            # The team is down and every file closed: spare the interpreter's last
            # collection over all the lead made (~70 ms of a burst's ~0.15 s from the last
            # task to the exit); the process ends now and the system frees the memory.
            gc.freeze()
    finally:
        os.close(lock)  # releases the flock


def up_detached(layout: Layout, *, teammates: int | None = None,
                overrides: dict[str, dict[str, Any]] | None = None,
                burst: bool = False) -> int:
    """Start the lead in the background; returns its pid once it runs."""
    layout.ensure()
    if status.running_daemon(layout):
        raise _refuse(layout)
    cmd = [sys.executable, "-m", "orchestrator.team.daemon", "--root", str(layout.root),
           "--worktree-root", str(layout.worktree_root),
           "--overrides", json.dumps(overrides or {})]
    if teammates:
        cmd += ["--teammates", str(teammates)]
    if burst:
        cmd.append("--burst")
    out = layout.run / "daemon.out"
    with out.open("ab") as fh:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=fh,
                                start_new_session=True, cwd=layout.root)
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        info = status.running_daemon(layout)
        if info and info.get("pid") == proc.pid:
            return proc.pid
        if proc.poll() is not None:
            tail = out.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise UserError(f"the daemon did not start: {tail[0]}")
        time.sleep(0.05)
    raise UserError(f"the daemon did not start within {START_TIMEOUT_SECONDS:.0f}s; see {out}")


def down(layout: Layout, *, now: bool = False, wait: float | None = None) -> int | None:
    """Stop the running lead (warm, or cold with ``now``); returns its pid, None if none ran.

    Waits up to ``wait`` seconds (None: until it has exited).
    """
    info = status.running_daemon(layout)
    if info is None:
        return None
    pid = int(info["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, COLD_SIGNAL if now else signal.SIGTERM)
    deadline = None if wait is None else time.monotonic() + wait
    while status.pid_alive(pid):
        if deadline is not None and time.monotonic() > deadline:
            raise UserError(f"the daemon (pid {pid}) is still stopping; "
                            "`orchestrator down --now` stops it at once")
        time.sleep(0.1)
    return pid


def main(argv: list[str] | None = None) -> int:
    """Entry point of the detached daemon."""
    p = argparse.ArgumentParser(prog="orchestrator.team.daemon")
    p.add_argument("--root", required=True)
    p.add_argument("--worktree-root")
    p.add_argument("--teammates", type=int)
    p.add_argument("--overrides", default="{}")
    p.add_argument("--burst", action="store_true")
    args = p.parse_args(argv)
    layout = Layout.at(Path(args.root), args.worktree_root)
    overrides = json.loads(args.overrides)
    try:
        config = Config.load(layout.root, overrides=overrides)
        return up(layout, config, teammates=args.teammates, overrides=overrides,
                  burst=args.burst, console=False)
    except OrchestratorError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
