"""Waiting without polling: one ``select`` over signals, the board's change feed and pids.

A process of the team (lead or teammate) sleeps in `Waker.wait` until a signal
arrives (``signal.set_wakeup_fd``), another thread calls `notify` (the board
feed does on every change under ``.tasks/``), or one of the watched file
descriptors becomes readable (a child's pidfd when it exits, the pipe that
closes when the lead dies). Signal handlers themselves only count: all the
work happens in the loop that woke up.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from orchestrator.protocols import Board

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)
COLD_SIGNAL = signal.SIGUSR1
"""Stop now (what a second SIGTERM means), sent by `down --now` and the lead's cold stop:
two signals of one kind sent back to back may reach a process as one."""


@dataclass
class Wake:
    signals: list[int] = field(default_factory=list)
    notified: bool = False
    fds: list[int] = field(default_factory=list)


class Waker:
    def __init__(self) -> None:
        self._sig_r, self._sig_w = _pipe()
        self._note_r, self._note_w = _pipe()
        self._feed: threading.Thread | None = None
        self._feed_stop = threading.Event()
        self._lock = threading.Lock()
        self._closed = False

    def install_signals(self, signals: Iterable[int] = STOP_SIGNALS) -> None:
        """Route ``signals`` into the wake-up pipe (main thread only)."""
        # The pipe first: a signal caught between the two would find no pipe to wake.
        signal.set_wakeup_fd(self._sig_w, warn_on_full_buffer=False)
        for sig in signals:
            signal.signal(sig, lambda *_: None)

    def notify(self) -> None:
        with self._lock:
            if not self._closed:
                with contextlib.suppress(BlockingIOError):
                    os.write(self._note_w, b"\0")

    def wait(self, timeout: float | None, fds: Iterable[int] = (),
             *, notes: bool = True) -> Wake:
        """Sleep until something happens or ``timeout`` passes; returns what happened.

        With ``notes=False`` only signals and ``fds`` wake it (used while busy, when
        board changes do not matter).
        """
        watch = [self._sig_r, *fds] + ([self._note_r] if notes else [])
        try:
            ready, _, _ = select.select(watch, [], [], None if timeout is None else max(timeout, 0))
        except InterruptedError:  # pragma: no cover - PEP 475 retries select
            ready = []
        wake = Wake()
        if self._sig_r in ready:
            wake.signals = list(_drain(self._sig_r))
        if notes and self._note_r in ready:
            _drain(self._note_r)
            wake.notified = True
        wake.fds = [fd for fd in ready if fd not in (self._sig_r, self._note_r)]
        return wake

    def follow_board(self, board: Board, period: float, *, events: bool = True,
                     running: bool = True) -> None:
        """Start a thread that calls `notify` whenever the board reports a change (``events``
        and ``running`` as for `Board.wait_for_change`)."""

        def feed() -> None:
            while not self._feed_stop.is_set():
                try:
                    changed = board.wait_for_change(period, events=events, running=running)
                except Exception:  # a closed board during shutdown: stop following
                    return
                if changed:
                    self.notify()

        self._feed = threading.Thread(target=feed, name="board-feed", daemon=True)
        self._feed.start()

    def close(self) -> None:
        # The feed thread is a daemon blocked in the board's wait (at most one rescan
        # period); it sees the stop flag or the closed board then. Joining it here
        # would only delay the exit of the process.
        self._feed_stop.set()
        with contextlib.suppress(ValueError):  # ValueError: not the main thread
            old = signal.set_wakeup_fd(-1)
            if old != self._sig_w:
                signal.set_wakeup_fd(old)
        with self._lock:
            self._closed = True
            for fd in (self._sig_r, self._sig_w, self._note_r, self._note_w):
                with contextlib.suppress(OSError):
                    os.close(fd)


def _pipe() -> tuple[int, int]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


def _drain(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk
