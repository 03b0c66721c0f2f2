"""The lead's forge thread: `ForgeSync` passes, timed so the forge is asked little.

- A pass runs at once when the board says something the forge should hear (a task reached
  review, was discarded, cancelled or merged) or a webhook arrived (``forge_webhook``,
  written by `orchestrator.forge.webhook`): the lead, which wakes on every change of the
  board, pokes the thread (`ForgeWatcher.poke`), and the thread reads the events that came
  since it last looked. No thread of its own polls the board.
- Otherwise every ``[forge] poll_seconds`` while a pull request's checks are still
  running; while nothing is waiting on the forge the wait doubles, up to
  ``poll_max_seconds``. GETs are conditional, so an unchanged answer is a 304 that does not
  count against the rate limit.
- A rate limit (403/429 with retry-after) pauses every request of the board until it
  passes (one log line and a ``forge_backoff`` event); an outage or a refused token backs
  off the same way, doubling. The team keeps working meanwhile: only the forge waits.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config import Config
from orchestrator.events import (
    Discarded,
    ForgeBackoff,
    ForgeWebhook,
    Merged,
    TaskCancelled,
    TaskCompleted,
    TaskStatusSet,
    names,
)
from orchestrator.forge import ForgeError, RateLimited, open_forge
from orchestrator.layout import Layout
from orchestrator.logging import get_logger

if TYPE_CHECKING:
    from orchestrator.controlplane import ControlPlane
    from orchestrator.forge.sync import ForgeSync

WAKE_EVENTS = names(ForgeWebhook, TaskCompleted, Discarded, TaskCancelled, Merged,
                    TaskStatusSet)


class ForgeWatcher:
    def __init__(self, layout: Layout, config: Config) -> None:
        self.layout, self.config = layout, config
        self.stop_event = threading.Event()
        self.wake = threading.Event()
        self.log = get_logger(actor="forge")
        self.thread: threading.Thread | None = None
        self.passes = 0
        self.last_error: str | None = None

    @classmethod
    def for_config(cls, layout: Layout, config: Config) -> ForgeWatcher | None:
        return None if config.forge.kind == "none" else cls(layout, config)

    def start(self) -> ForgeWatcher:
        self.thread = threading.Thread(target=self._run, name="forge-sync", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(10)

    def poke(self) -> None:
        """The board changed: look at its new events (the lead calls this on every wake)."""
        self.wake.set()

    def _run(self) -> None:
        from orchestrator.board import open_board
        from orchestrator.forge.sync import ForgeSync

        try:
            forge = open_forge(self.config.forge, Path(self.layout.root))
        except ForgeError as exc:
            self.log.error("forge: not started", error=str(exc))
            return
        except Exception as exc:  # a ConfigError: one line, the team runs without the forge
            self.log.error("forge: not started", error=str(exc))
            return
        assert forge is not None
        cfg = self.config.forge
        delay = cfg.poll_seconds
        with open_board(self.layout, self.config.board, actor="forge") as board:
            sync = ForgeSync(self.layout, self.config, board, forge)
            seen = board.events.last_seq()
            try:
                while not self.stop_event.is_set():
                    delay = self._pass(sync, delay)
                    seen = self._sleep(board, seen, delay)
            finally:
                forge.close()

    def _sleep(self, board: ControlPlane, seen: int, delay: float) -> int:
        """Until ``delay`` passes, or a poke finds an event the forge should hear among
        those after ``seen``; returns the newest seq looked at."""
        deadline = time.monotonic() + delay
        while not self.stop_event.is_set() and self.wake.wait(deadline - time.monotonic()):
            self.wake.clear()
            heard = False
            for ev in board.events.read(since=seen):
                seen, heard = ev.seq, heard or ev.event in WAKE_EVENTS
            if heard:
                break
        return seen

    def _pass(self, sync: ForgeSync, delay: float) -> float:
        cfg = self.config.forge
        try:
            out = sync.run()
        except RateLimited as exc:
            wait = max(exc.retry_after, cfg.poll_seconds)
            self._trouble(sync, f"{exc}: every forge request of the board waits {wait:.0f} s")
            return wait
        except ForgeError as exc:
            later = min(delay * 2, cfg.poll_max_seconds)
            self._trouble(sync, f"{exc} (asking again in {later:.0f} s)")
            return later
        except Exception as exc:  # our bug or the board's trouble: one line, keep going
            self.log.exception("forge pass failed", error=str(exc))
            return min(delay * 2, cfg.poll_max_seconds)
        finally:
            self.passes += 1
        if self.last_error is not None:
            self.log.info("forge reachable again")
            self.last_error = None
        if out.changed or out.waiting:
            return cfg.poll_seconds
        return min(delay * 2, cfg.poll_max_seconds)

    def _trouble(self, sync: ForgeSync, line: str) -> None:
        if line.split(" (asking")[0] != (self.last_error or "").split(" (asking")[0]:
            self.log.warning("forge", problem=line)
            sync.board.events.emit(ForgeBackoff(problem=line), None, actor="forge")
        self.last_error = line
