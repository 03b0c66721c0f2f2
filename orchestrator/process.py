"""Run one shell command in its own process group, streaming its output to a task log.

Used by the `command` backend and by the verification checks. Output is read
in chunks and written to the task log as it comes, so a command that prints
megabytes never sits in memory; only a short tail is kept for error messages.
Past its timeout, or when ``stop`` is set, the whole process group gets
SIGTERM, then SIGKILL after a grace period, so nothing it started survives.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.protocols import TaskLogger
from orchestrator.secrets import StreamMasker, redact
from orchestrator.transcript import Output, SandboxNote

if TYPE_CHECKING:
    from orchestrator.sandbox import Sandbox

CHUNK_BYTES = 64 * 1024
TAIL_BYTES = 4 * 1024
MAX_LOGGED_BYTES = 8 * 1024 * 1024
"""Output past this is counted but not written to the task log (the log must stay readable)."""
KILL_GRACE_SECONDS = 3.0


@dataclass
class ProcResult:
    returncode: int | None
    seconds: float
    tail: str
    """The last few KB of output, for error messages."""
    output_bytes: int = 0
    timed_out: bool = False
    stopped: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and not self.stopped

    def describe(self) -> str:
        if self.timed_out:
            return f"timed out after {self.seconds:.0f}s (process group killed)"
        if self.stopped:
            return "stopped"
        if self.returncode is not None and self.returncode < 0:
            return f"killed by signal {-self.returncode}"
        return f"exit code {self.returncode}"


CANNOT_RUN = (126, 127)
"""The shell's exit codes for 'found but not executable' and 'not found'."""


def run_streamed(
    cmd: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    log: TaskLogger,
    output: type[Output] = Output,
    timeout: float | None = None,
    stop: threading.Event | None = None,
    on_start: Callable[[int], None] | None = None,
    log_limit: int | None = MAX_LOGGED_BYTES,
    sandbox: Sandbox | None = None,
) -> ProcResult:
    """Run ``cmd`` through the shell in ``cwd``; every chunk of output goes to ``log``.

    ``on_start`` (a callable taking the process group id) lets the caller publish
    the group so a supervisor can kill it if the caller itself dies. ``log_limit``
    None hands every byte to ``log`` (for a logger that parses the output as it comes).
    With an enabled ``sandbox`` the command runs inside it (`Sandbox.session`): every
    process it starts ends with it, and what it committed is imported afterwards.
    """
    if sandbox is None or not sandbox.enabled:
        return _run(functools.partial(subprocess.Popen, ["/bin/sh", "-c", cmd]), cwd, env, log,
                    output, timeout, stop, on_start, log_limit)
    with sandbox.session(["/bin/sh", "-c", cmd], cwd, dict(env)) as run:
        res = _run(run.popen, cwd, env, log, output, timeout, stop, on_start, log_limit)
    if run.note:
        with contextlib.suppress(OSError):
            log.write(SandboxNote(note=run.note))
    return res


def _run(start: Callable[..., subprocess.Popen[Any]], cwd: Path, env: Mapping[str, str],
         log: TaskLogger, output: type[Output], timeout: float | None, stop: threading.Event | None,
         on_start: Callable[[int], None] | None, log_limit: int | None) -> ProcResult:
    started = time.monotonic()
    proc = start(cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                 stderr=subprocess.STDOUT, start_new_session=True)
    if on_start is not None:
        on_start(proc.pid)
    reader = _Reader(proc, log, output, log_limit)
    reader.start()
    exited = _ExitWatch(proc)
    timed_out = stopped = False
    deadline = None if timeout is None else started + timeout
    try:
        while True:
            wait = 0.5 if stop is not None else None
            if deadline is not None:
                left = deadline - time.monotonic()
                wait = left if wait is None else min(wait, left)
            if exited.wait(None if wait is None else max(wait, 0.0)):
                break
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                kill_group(proc)
                break
            if stop is not None and stop.is_set():
                stopped = True
                kill_group(proc)
                break
    finally:
        exited.close()
        if proc.poll() is None:  # interrupted (KeyboardInterrupt …): never leave it behind
            kill_group(proc, grace=0)
        reader.join()
    return ProcResult(
        returncode=proc.returncode, seconds=time.monotonic() - started, tail=reader.tail(),
        output_bytes=reader.total, timed_out=timed_out, stopped=stopped,
    )


class _ExitWatch:
    """Waits for a process to exit and wakes the moment it does.

    ``Popen.wait(timeout)`` polls with sleeps of up to 50 ms, which added 25 ms on
    average to every task; a pidfd (Linux 5.3+) becomes readable at the exit itself.
    Elsewhere this falls back to ``Popen.wait``.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        try:
            self.fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # not Linux, an old kernel, or already reaped
            self.fd = -1

    def wait(self, timeout: float | None) -> bool:
        """True once the process has exited (and is reaped), False after ``timeout``."""
        if self.fd < 0:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        select.select([self.fd], [], [], timeout)
        return self.proc.poll() is not None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def kill_group(proc: subprocess.Popen[bytes], grace: float = KILL_GRACE_SECONDS) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds, reap the leader."""
    signal_group(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    signal_group(proc.pid, signal.SIGKILL)  # the leader may be gone while its children live on
    proc.wait()


def signal_group(pgid: int, sig: int) -> bool:
    """Send ``sig`` to a process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class _Reader(threading.Thread):
    """Drains the pipe in chunks into the task log, keeping only a short tail."""

    def __init__(self, proc: subprocess.Popen[bytes], log: TaskLogger, output: type[Output],
                 limit: int | None = MAX_LOGGED_BYTES) -> None:
        super().__init__(name=f"output-{proc.pid}", daemon=True)
        self.proc = proc
        self.log = log
        self.output = output
        self.limit = limit
        self.total = 0
        self._tail = b""
        self.masker = StreamMasker()

    def run(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        pending = b""
        with self.proc.stdout:
            while chunk := os.read(fd, CHUNK_BYTES):
                self.total += len(chunk)
                self._tail = (self._tail + chunk)[-TAIL_BYTES:]
                if self.limit is not None and self.total - len(chunk) >= self.limit:
                    continue
                pending += chunk
                cut = pending.rfind(b"\n") + 1
                if cut:  # write whole lines; a partial line waits for its end
                    self._write(pending[:cut])
                    pending = pending[cut:]
                elif len(pending) >= CHUNK_BYTES:
                    self._write(pending)
                    pending = b""
            if pending:
                self._write(pending)
            self._write(b"", last=True)
            if self.limit is not None and self.total > self.limit:
                self.log.write(self.output(text=f"[{self.total - self.limit} more bytes "
                                           "of output not logged]"))

    def _write(self, data: bytes, *, last: bool = False) -> None:
        """Log ``data`` masked (a secret split across two writes too: `StreamMasker`)."""
        data = self.masker.feed(data) + (self.masker.flush() if last else b"")
        if data:
            with contextlib.suppress(OSError):
                self.log.write(self.output(text=data.decode("utf-8", errors="replace")))

    def tail(self) -> str:
        return redact(self._tail.decode("utf-8", errors="replace"))
