"""Starting teammates by forking a process that has already imported them.

A teammate is a Python process that imports pydantic, structlog, watchdog and the
board before it can claim anything: about half a CPU-second. Started as fresh
interpreters, four teammates on two cores queued for the CPU, and the last one
claimed its first task 0.1 to 0.3 s after the first (a crashed teammate's restart
paid the same). So the lead starts one *spawner* first, by forking itself before it
starts any thread: the spawner begins with everything the lead has imported (the
config, the task model, the board and its driver, logging, the bubblewrap probe's answer)
and imports only the rest (the teammate module, the backend), ~0.1 s instead of a fresh
interpreter's ~0.4 s, while the lead recovers. It keeps no file of the lead's open (each inherited
descriptor but stdout and stderr is pointed at ``/dev/null``): not the lead's lock,
which must go when the lead does. It runs as its own session, named ``orch-spawner``.

It waits on a socket; for each teammate the lead asks for, it forks (it never starts a
thread, so the fork is safe) and the child runs `orchestrator.team.teammate.main` at
once, as its own session, named ``orch-<name>`` (what ``ps -e`` and ``top`` show).

The protocol, over a ``SOCK_SEQPACKET`` socket pair (one JSON message each):

- lead → spawner: ``{"argv": [...]}`` with the teammate's lead pipe attached;
  ``{lead_fd}`` in argv is replaced by that descriptor's number in the child;
- spawner → lead: ``{"pid": N}`` with a pidfd of the child attached, or ``{"error": "…"}``;
- spawner → lead: ``{"exit": N, "code": C}`` when a child exits (``C`` as
  ``Popen.returncode``: negative for a signal).

When the lead's end closes (the lead exited or died) the spawner exits; its
teammates see their own lead pipe close and stop as before. When anything about
the spawner fails (or the lead runs threads already, so forking it is not safe), the
lead starts teammates as fresh interpreters instead.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import select
import signal
import socket
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

MAX_MESSAGE = 64 * 1024
REPLY_TIMEOUT = 60.0
"""How long the lead waits for the spawner's answer (it may still be importing)."""
EXIT_TIMEOUT = 10.0
"""How long the lead waits for the exit code of a teammate it saw exit (the spawner
reports it at once; one that does not is treated as gone, so the lead never hangs)."""


class SpawnerGone(OSError):
    """The spawner died or stopped answering: start teammates the old way."""


class Spawner:
    """The lead's handle on the spawner process."""

    def __init__(self) -> None:
        self.sock: socket.socket | None = None
        self.pid: int | None = None
        """The spawner process (a child of this one)."""
        self._exits: dict[int, int] = {}

    def start(self, preload: Sequence[str] = ()) -> Spawner:
        """Fork the spawner from this process; it imports ``preload`` too (modules a
        teammate imports only once it runs, such as its backend's), so no teammate pays
        for them. Raises OSError when it cannot (then teammates start the old way)."""
        if threading.active_count() > 1:  # another thread may hold a lock the child needs
            raise OSError("this process runs threads: forking it is not safe")
        for stream in (sys.stdout, sys.stderr):  # what is buffered is written once
            stream.flush()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = os.fork()
        except BaseException:
            ours.close()
            theirs.close()
            raise
        if pid == 0:
            _spawner_process(theirs, list(preload))
        theirs.close()
        self.sock, self.pid = ours, pid
        return self

    def spawn(self, argv: list[str], lead_fd: int) -> SpawnedProcess:
        """Fork a teammate running ``teammate.main(argv)``; raises `SpawnerGone` (an OSError)
        when the spawner cannot, so the caller can fall back to a fresh interpreter."""
        if self.sock is None:
            raise SpawnerGone("no spawner")
        try:
            socket.send_fds(self.sock, [json.dumps({"argv": argv}).encode()], [lead_fd])
            msg, fds = self._receive(REPLY_TIMEOUT)
            while "exit" in msg:
                msg, fds = self._receive(REPLY_TIMEOUT)
            if "error" not in msg and not fds:
                raise SpawnerGone(f"a malformed answer from the spawner: {msg}")
        except SpawnerGone:
            self.close(kill=True)
            raise
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.close(kill=True)
            raise SpawnerGone(f"{type(exc).__name__}: {exc}") from exc
        if "error" in msg:  # the fork failed (too many processes …): like a failed Popen
            raise OSError(msg["error"])
        return SpawnedProcess(self, int(msg["pid"]), fds[0])

    def exit_code(self, pid: int, *, block: bool) -> int | None:
        """The exit code of a child that has exited; None while unknown (``block=False``).
        -9 when the spawner is gone and cannot tell any more."""
        while pid not in self._exits:
            if self.sock is None:
                return -signal.SIGKILL
            try:
                self._receive(EXIT_TIMEOUT if block else 0.0)
            except TimeoutError:
                return None
            except (OSError, ValueError):
                self.close(kill=True)
        return self._exits.pop(pid)

    def _receive(self, timeout: float | None) -> tuple[dict[str, Any], list[int]]:
        assert self.sock is not None
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            if timeout == 0:
                raise TimeoutError
            raise SpawnerGone("the spawner did not answer")
        data, fds, _, _ = socket.recv_fds(self.sock, MAX_MESSAGE, 4)
        if not data:
            for fd in fds:
                os.close(fd)
            raise SpawnerGone("the spawner exited")
        msg = json.loads(data)
        if "exit" in msg:
            self._exits[int(msg["exit"])] = int(msg["code"])
        return msg, fds

    def close(self, *, kill: bool = False) -> None:
        """Stop the spawner: it exits when its socket closes; ``kill`` for one that stopped
        answering. (Its teammates are stopped by the lead, not by this.)"""
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.pid is not None:
            pidfd = os.pidfd_open(self.pid)
            try:
                if kill or not select.select([pidfd], [], [], 5)[0]:
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            finally:
                os.close(pidfd)
            os.waitpid(self.pid, 0)
            self.pid = None


class SpawnedProcess:
    """A teammate forked by the spawner, with the part of ``Popen`` the lead uses."""

    def __init__(self, spawner: Spawner, pid: int, pidfd: int) -> None:
        self.spawner = spawner
        self.pid = pid
        self.pidfd = pidfd
        """Readable once the process has exited; owned (and closed) by the caller."""
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.spawner.exit_code(self.pid, block=False)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            select.select([self.pidfd], [], [])
            self.returncode = self.spawner.exit_code(self.pid, block=True)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            signal.pidfd_send_signal(self.pidfd, sig)


# --- the spawner process ------------------------------------------------------------
PRELOAD = ("orchestrator.board", "orchestrator.worktree")
"""What every teammate imports once it runs, besides its own module."""


def _spawner_process(sock: socket.socket, preload: list[str]) -> NoReturn:
    """In the forked spawner: serve the lead, and never return into the lead's code."""
    code = 1
    try:
        os.setsid()
        _set_name("orch-spawner")
        _let_go_of_inherited(keep=sock.fileno())
        code = serve(sock, preload)
    except KeyboardInterrupt:
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _let_go_of_inherited(keep: int) -> None:
    """Point every descriptor inherited from the lead but stdout, stderr and ``keep`` at
    /dev/null: the files stay the lead's alone (its lock is released when it exits), and a
    Python object of the lead's that still names one of these numbers closes /dev/null,
    never a file the spawner or a teammate opens later."""
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        for fd in map(int, os.listdir("/proc/self/fd")):
            if fd not in (1, 2, keep, null) and _is_open(fd):  # not the listing's own
                os.dup2(null, fd, inheritable=fd == 0)
    finally:
        os.close(null)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def serve(sock: socket.socket, preload: list[str]) -> int:
    from orchestrator.secrets import protect_process
    from orchestrator.team import teammate  # the point: imported once, before any fork

    protect_process()  # before any fork: every teammate inherits the scrubbed environment

    for name in (*PRELOAD, *filter(None, preload)):
        try:
            importlib.import_module(name)
        except ImportError:  # the teammate reports it, if it needs the module at all
            pass

    gc.freeze()  # what is loaded now stays shared: no collection in a teammate writes to it
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the lead decides; it closes the socket
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _report_exits(sock)
        if sock.fileno() not in ready:
            continue
        data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 4)
        if not data:  # the lead is gone
            return 0
        # SIGTERM is held back across the fork: the child starts with the spawner's SIG_IGN,
        # and a stop the lead sends it before it has set SIG_DFL would be lost; held, it is
        # delivered (and ends the child) the moment the child lets it through.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            argv = [a.replace("{lead_fd}", str(fds[0]) if fds else "") for a in
                    json.loads(data)["argv"]]
            pid = os.fork()
        except Exception as exc:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            _send(sock, {"error": f"{type(exc).__name__}: {exc}"})
            for fd in fds:
                os.close(fd)
            continue
        if pid == 0:
            _child(teammate.main, argv, sock, [wake_r, wake_w])
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        for fd in fds:
            os.close(fd)
        try:
            pidfd = os.pidfd_open(pid)  # not reaped before this: we reap in this loop
        except OSError as exc:
            _send(sock, {"error": f"{type(exc).__name__}: {exc}"})
            continue
        try:
            socket.send_fds(sock, [json.dumps({"pid": pid}).encode()], [pidfd])
        finally:
            os.close(pidfd)


def _report_exits(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(msg).encode())
    except OSError:
        pass  # the lead is gone: the loop sees it next


def _child(main: Any, argv: list[str], sock: socket.socket, fds: list[int]) -> None:
    """In the forked child: become the teammate, and never return into the spawner."""
    code: Any = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # held since the fork
        sock.close()
        for fd in fds:
            os.close(fd)
        os.setsid()
        name = argv[argv.index("--name") + 1] if "--name" in argv else "teammate"
        _set_name(f"orch-{name}")
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed stream: nothing to flush
                pass
        os._exit(code if isinstance(code, int) else 1)


def _set_name(name: str) -> None:
    """The process name ``ps -e`` and ``top`` show (Linux ``prctl(PR_SET_NAME)``)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)
    except (OSError, AttributeError):
        pass
