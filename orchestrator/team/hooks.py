"""Notification hooks: commands run on task events, configured in ``[hooks]``.

    [hooks]
    review  = ["notify-send 'ready for review'"]     # task_completed
    failed  = ["./scripts/page-me"]                  # a task failed for good
    waiting = ["./scripts/ask-me"]                   # permission_requested, plan_submitted,
                                                     # no_progress
    budget  = ["./scripts/spend-alert"]              # budget_warning (80 %), budget_reached
    events  = { merged = ["./scripts/deploy"] }      # any other event type
    timeout = 30

The lead owns a `Hooks`: on every wake-up it calls `poll`, which reads the events
appended to ``events.jsonl`` since the last call and hands each matching one to a
small thread pool. A hook runs through the shell in the repository root, in its
own process group, with the event as one JSON object on stdin (plus ``hook``, and
the task's ``subject``/``status``/``branch`` when known, and its ``wait`` with the
commands that answer it, `orchestrator.waits.as_dict`) and ``ORCH_HOOK``,
``ORCH_EVENT``, ``ORCH_TASK_ID`` in its environment. Its output goes to the
daemon log; a non-zero exit or a run past ``timeout`` (the group is killed) is
logged and written as a ``hook_failed`` event. Nothing a hook does can block the
team: the lead only reads and enqueues.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator.config import HooksConfig
from orchestrator.controlplane import ActorEvents, ControlPlane, Event
from orchestrator.errors import OrchestratorError
from orchestrator.events import (
    HOOK_EVENTS,
    AnyEvent,
    BudgetReached,
    BudgetWarning,
    HookFailed,
    LeaseExpired,
    NoProgress,
    PermissionRequested,
    PlanSubmitted,
    TaskCompleted,
    TaskFailed,
    TaskRequeued,
)
from orchestrator.layout import Layout
from orchestrator.logging import get_logger
from orchestrator.waits import as_dict

MAX_WORKERS = 4
OUTPUT_TAIL = 2000
PAUSES = ("budget:", "no progress:")
"""The errors of runs stopped to wait for a person (see `orchestrator.budget`)."""


def hook_kind(event: AnyEvent | None) -> str | None:
    """Which named hook an event fires: ``review``, ``failed``, ``waiting``, ``budget`` or
    None. A run stopped to wait for a person (budget, no progress) is not a failure."""
    match event:
        case TaskCompleted():
            return "review"
        case BudgetWarning() | BudgetReached():
            return "budget"
        case NoProgress() | PermissionRequested() | PlanSubmitted():
            return "waiting"
        case TaskFailed(error=error) if error.startswith(PAUSES):
            return None
        case (TaskFailed(status="failed") | LeaseExpired(status="failed")
              | TaskRequeued(status="failed")):
            return "failed"
    return None


class Hooks:
    """Runs the configured hooks for events appended after it was made."""

    def __init__(self, layout: Layout, config: HooksConfig,
                 board: ControlPlane | None = None) -> None:
        from orchestrator.board import open_board

        self.layout = layout
        self.config = config
        self.board = board
        plane = board if board is not None else open_board(layout, actor="hooks",
                                                            create=False)
        self.events = ActorEvents(plane.events, "hooks")
        self.log = get_logger(actor="hooks")
        self.pos = self.events.last_seq()
        """The seq of the last event seen: only what happens from now on."""
        self._pool: ThreadPoolExecutor | None = None

    @property
    def configured(self) -> bool:
        c = self.config
        return bool(c.review or c.failed or c.waiting or c.budget or any(c.events.values()))

    def poll(self) -> int:
        """Start the hooks of the events that arrived since the last call; how many started."""
        if not self.configured:
            return 0
        started = 0
        for event in self._new_events():
            for kind, cmd in self.commands(event):
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(MAX_WORKERS, thread_name_prefix="hook")
                self._pool.submit(self.run, kind, cmd, self._payload(kind, event.to_dict()))
                started += 1
        return started

    def commands(self, event: Event) -> list[tuple[str, str]]:
        name = event.event
        if name not in HOOK_EVENTS:
            return []  # a hook's own failure (or a kind this code does not know) runs none
        kind = hook_kind(event.decode())
        named = getattr(self.config, kind) if kind else []
        return [(kind or name, c) for c in named] + \
            [(name, c) for c in self.config.events.get(name, [])]

    def run(self, kind: str, cmd: str, payload: dict[str, Any]) -> dict[str, Any]:
        """Run one hook to completion or its timeout; what happened (also logged)."""
        env = dict(os.environ, ORCH_HOOK=kind, ORCH_EVENT=str(payload.get("event", "")),
                   ORCH_TASK_ID=str(payload.get("task") or ""))
        outcome: dict[str, Any] = {"hook": kind, "command": cmd, "task": payload.get("task")}
        try:
            proc = subprocess.Popen(cmd, shell=True, cwd=self.layout.root, env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            return self._failed(outcome, f"could not start: {exc}", "")
        data = (json.dumps(payload, default=str) + "\n").encode()
        try:
            out, _ = proc.communicate(data, timeout=self.config.timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, _ = proc.communicate()
            return self._failed(outcome, f"timed out after {self.config.timeout:g}s",
                                _text(out))
        if proc.returncode != 0:
            return self._failed(outcome, f"exit code {proc.returncode}", _text(out))
        self.log.info("hook ran", **outcome, output=_text(out))
        return {**outcome, "ok": True, "output": _text(out)}

    def close(self) -> None:
        """Run the hooks of the last events, then wait for running hooks (each is bounded by
        its timeout)."""
        try:
            self.poll()
        except OSError:
            self.log.exception("reading events for hooks failed")
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    # --- internals ------------------------------------------------------------------
    def _new_events(self) -> list[Event]:
        """Events appended since ``pos`` (the seq of the last one seen)."""
        if self.events.last_seq() < self.pos:
            self.pos = 0  # the log was replaced
        found = [e for e in self.events.read(since=self.pos) if e.seq > self.pos]
        if found:
            self.pos = max(self.pos, max(e.seq for e in found))
        return found

    def _payload(self, kind: str, event: dict[str, Any]) -> dict[str, Any]:
        payload = {**event, "hook": kind}
        if self.board is not None and event.get("task"):
            try:
                task = self.board.get(str(event["task"]))
            except OrchestratorError:
                return payload
            for key, value in (("subject", task.subject), ("status", str(task.status)),
                               ("branch", task.branch)):
                payload.setdefault(key, value)
            if task.wait is not None:  # what it waits for, and the commands that answer it
                payload.setdefault("wait", as_dict(task.wait, task.id))
        return payload

    def _failed(self, outcome: dict[str, Any], why: str, output: str) -> dict[str, Any]:
        self.log.warning("hook failed", **outcome, error=why, output=output)
        self.events.emit(HookFailed(hook=outcome["hook"], command=outcome["command"],
                                    error=why, output=output), outcome.get("task"))
        return {**outcome, "ok": False, "error": why, "output": output}


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _text(out: bytes | None) -> str:
    return (out or b"").decode(errors="replace")[-OUTPUT_TAIL:]
