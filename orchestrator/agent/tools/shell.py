"""The bash tool: one shell command in the worktree, bounded in time and output.

The command runs with ``ctx.env`` (built by the caller with `safe_env`, so no
secrets), stdin closed, in its own process group — under bubblewrap when
``ctx.sandbox`` is an enabled `Sandbox`. On timeout the whole group
is killed. Background processes do not outlive the call: when the command
exits, whatever it left running is killed too. Only the head and the tail of a
very long output are kept, saying how much was cut; a non-zero exit code is
reported in the result (not as an error: ``grep`` finding nothing is an answer).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import subprocess
import time
from typing import Any

from orchestrator.agent.base import ToolContext, ToolResult
from orchestrator.agent.tools.common import obj, prop
from orchestrator.sandbox import Sandbox

DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 600.0
OUTPUT_HEAD_BYTES = 50_000
OUTPUT_TAIL_BYTES = 50_000
EXIT_GRACE_SECONDS = 0.5
"""After the command exits, how long to keep reading what its leftovers still print."""


class BashTool:
    name = "bash"
    read_only = False
    description = (
        "Run a bash command in the working directory (the task's git worktree) and return its "
        "output (stdout and stderr together) and exit code. No stdin; no background "
        f"processes survive the call. Default timeout {DEFAULT_TIMEOUT:.0f} s. Use read/edit/"
        "grep/glob for files rather than cat/sed/find."
    )
    input_schema = obj(
        ["command"],
        command=prop("string", "The command line, e.g. `pytest -q tests/test_x.py`."),
        timeout=prop("number", f"Seconds before the command is killed (at most "
                     f"{MAX_TIMEOUT:.0f}).", minimum=1, maximum=MAX_TIMEOUT),
    )

    def __init__(self, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.default_timeout = timeout

    def permission_subject(self, args: dict[str, Any]) -> str | None:
        return args.get("command")

    def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        command = args["command"]
        if not command.strip():
            return ToolResult("bash: empty command", is_error=True)
        timeout = float(args.get("timeout", self.default_timeout))
        argv = [shutil.which("bash", path=ctx.env.get("PATH")) or "/bin/bash", "-c", command]
        sandbox = ctx.sandbox if isinstance(ctx.sandbox, Sandbox) else Sandbox(enabled=False)
        with sandbox.session(argv, ctx.cwd, dict(ctx.env)) as run:
            try:
                proc = run.popen(cwd=ctx.cwd, env=dict(ctx.env), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            except OSError as exc:
                return ToolResult(f"bash: cannot start: {exc}", is_error=True)
            output, timed_out = _collect(proc, timeout)
        note = run.note
        if note:
            output = f"{output.rstrip()}\n{note}".lstrip()
        code = proc.returncode
        if timed_out:
            return ToolResult(f"{output}\n[timed out after {timeout:g} s; the command and its "
                              "children were killed]".lstrip(), is_error=True)
        tail = f"\n[exit code {code}]" if code else ""
        return ToolResult((output or "(no output)") + tail)


def _collect(proc: subprocess.Popen[bytes], timeout: float) -> tuple[str, bool]:
    """Read the output until EOF, exit (plus a grace period) or timeout; then kill the
    process group and reap. Returns (text, timed out)."""
    assert proc.stdout is not None
    head, tail, total = bytearray(), bytearray(), 0
    deadline = time.monotonic() + timeout
    exited_at: float | None = None
    timed_out = False
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            now = time.monotonic()
            if now >= deadline:
                timed_out = exited_at is None
                break
            if exited_at is None and _exited(proc.pid):
                exited_at = now
            if exited_at is not None and now - exited_at > EXIT_GRACE_SECONDS:
                break
            if not sel.select(timeout=min(0.1, deadline - now)):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            total += len(chunk)
            room = OUTPUT_HEAD_BYTES - len(head)
            head += chunk[:room]
            tail += chunk[max(room, 0):]
            del tail[:-OUTPUT_TAIL_BYTES]
    while not timed_out and not _exited(proc.pid):  # EOF can come just before the exit
        if time.monotonic() >= deadline:
            timed_out = True
            break
        time.sleep(0.005)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.stdout.close()
    proc.wait()
    text = head.decode("utf-8", errors="replace")
    cut = total - len(head) - len(tail)
    if cut > 0:
        text += f"\n\n[... {cut} bytes of output cut ...]\n\n"
    return text + tail.decode("utf-8", errors="replace"), timed_out


def _exited(pid: int) -> bool:
    """Whether the process has exited, without reaping it (so its group id stays ours)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None
