"""A teammate: one worker process, started by the lead as

    python -m orchestrator.team.teammate --root REPO --name alice [--lead-fd N] [--overrides JSON]

It loops: read its mailbox → wait for a ready task (asleep in `Waker.wait`, no
polling) → claim → create or reuse the task's worktree → run the backend with
a heartbeat thread renewing the lease → commit what the agent left → run the
verification command → ``review`` (worktree kept) or retry/fail → wait again.

Every board write carries the claim's lease token. When a renewal is refused
(`LeaseLost`: the lease expired and someone else owns the task now) the run is
stopped and abandoned without touching the worktree or the board again.

Stopping: the first SIGTERM/SIGINT (or a ``shutdown_request`` in the mailbox)
is a warm stop — the backend is asked to stop, a finished run is still
completed, an unfinished one released — and the second is cold: the backend
is killed at once and the task released. When the lead dies (the pipe it
passed in closes) the teammate stops cold too, so a restarted lead never meets
an orphaned namesake.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from orchestrator import budget
from orchestrator.backends import load_backend
from orchestrator.board.model import Task, Usage, utcnow
from orchestrator.config import Config
from orchestrator.errors import LeaseLost, OrchestratorError
from orchestrator.fsutil import atomic_write
from orchestrator.layout import Layout
from orchestrator.logging import configure, get_logger
from orchestrator.protocols import Backend, Board, RunContext
from orchestrator.settings.live import LiveConfig
from orchestrator.tasklog import TaskLog
from orchestrator.team import status
from orchestrator.team.checks import run_checks
from orchestrator.team.command import task_env
from orchestrator.team.commit import commit_leftovers, idle_maintenance
from orchestrator.team.mailbox import Mailbox
from orchestrator.team.wake import COLD_SIGNAL, Wake, Waker


class Teammate:
    def __init__(self, layout: Layout, config: Config, name: str, *,
                 lead_fd: int | None = None,
                 overrides: dict[str, dict[str, Any]] | None = None) -> None:
        self.layout = layout
        self.config = config
        self.live = LiveConfig(layout.root, config, overrides)
        self.name = name
        self.lead_fd = lead_fd
        self.mailbox = Mailbox(layout, name)
        self.waker = Waker()
        self.log = get_logger(teammate=name)
        self.signals = 0
        self.warm = threading.Event()
        """Set on the first stop request: finish the current step, then exit."""
        self.cold = threading.Event()
        self.shutdown_requests: list[dict[str, Any]] = []
        self._backends: dict[str, Backend] = {}
        self._mail_seen = -1
        self.board: Board
        self.isolation: Any = None
        self.started_at = utcnow()
        self.committed = False
        """A task was committed since the last `idle_maintenance`."""
        self.fault: str | None = None
        """The last error from the board (disk full, read-only, no file descriptors)."""

    # --- the loop -------------------------------------------------------------
    def run(self) -> int:
        from orchestrator.board import open_board
        from orchestrator.worktree import open_isolation

        self.waker.install_signals()
        self.board = open_board(self.layout, self.config.board, actor=self.name)
        self.isolation = open_isolation(self.layout, self.config.worktree, self.board)
        self.isolation.prepare()
        self.waker.follow_board(self.board, self.config.board.rescan_seconds)
        self.log.info("teammate ready", pid=os.getpid())
        try:
            while not self.warm.is_set():
                try:
                    self.read_mail()
                    if self.warm.is_set():
                        break
                    if self.fault is None or self.healthy():
                        self.refresh_config()
                        task = self.board.claim(self.name,
                                                lease_seconds=self.config.board.lease_seconds)
                        if task is not None:
                            self.work(task)
                            continue
                        self.publish("idle")
                        if self.committed:
                            self.committed = False
                            idle_maintenance(self.layout.root)
                except OSError as exc:  # a full or read-only disk, too few open files
                    self.board_fails(exc)
                # board changes wake us; mailboxes are not watched (and a failing board
                # is retried), so look again on the board's rescan period as well
                self.absorb(self.waker.wait(self.config.board.rescan_seconds, self._fds()))
        finally:
            self.publish("stopped")
            self.answer_shutdown()
            self.waker.close()
            self.board.close()
            self.log.info("teammate stopped")
        return 0

    def _fds(self) -> list[int]:
        return [self.lead_fd] if self.lead_fd is not None else []

    def absorb(self, wake: Wake) -> None:
        """Turn what woke us into stop requests."""
        for sig in wake.signals:
            self.signals += 2 if sig == COLD_SIGNAL else 1
            self.warm.set()
            if self.signals >= 2:
                self.cold.set()
        if self.lead_fd is not None and self.lead_fd in wake.fds:
            try:
                data = os.read(self.lead_fd, 64)
            except OSError:
                data = b""
            if not data:  # the lead is gone: nobody will supervise us any more
                self.log.warning("lead is gone, stopping")
                self.lead_fd = None
                self.warm.set()
                self.cold.set()

    def refresh_config(self) -> None:
        """Pick up changed settings before a claim: each task runs with the settings of the
        moment it starts (a broken file keeps the last good ones; the lead reports it)."""
        change = self.live.check()
        if change is None or change.error or not change.changed:
            return
        self.config = self.live.config
        self._backends.clear()
        self.log.info("settings reloaded", keys=[c.key for c in change.changed])

    def read_mail(self) -> None:
        try:
            size = self.mailbox.path.stat().st_size
        except FileNotFoundError:
            return
        if size == self._mail_seen:
            return
        self._mail_seen = size
        for msg in self.mailbox.read_new():
            kind = msg.get("kind")
            if kind == "shutdown_request" and str(msg.get("ts", "")) < self.started_at:
                # sent to a namesake of an earlier run (e.g. by a lead stopped before it
                # could read it): not for this process, which would otherwise stop at once
                self.log.info("ignoring a shutdown request older than this teammate",
                              request_id=msg.get("request_id"))
            elif kind == "shutdown_request":
                self.log.info("shutdown requested", by=msg.get("from"),
                              request_id=msg.get("request_id"))
                self.shutdown_requests.append(msg)
                self.warm.set()
            elif kind == "message":
                self.log.info("message", sender=msg.get("from"), body=msg.get("body"))

    def answer_shutdown(self) -> None:
        for req in self.shutdown_requests:
            sender = req.get("from") or "lead"
            try:
                Mailbox(self.layout, sender).send(
                    self.name, "stopped", kind="shutdown_response",
                    request_id=req.get("request_id"), approve=True)
            except OrchestratorError:
                self.log.warning("cannot answer shutdown request", sender=sender)
        self.shutdown_requests = []

    def publish(self, state: str, **fields: Any) -> None:
        with contextlib.suppress(OSError):  # a hint for `status`; the board is the truth
            status.write_teammate(self.layout, self.name, state, pid=os.getpid(),
                                  started_at=self.started_at, since=utcnow(), **fields)

    def board_fails(self, exc: Exception) -> None:
        """Stop claiming while the machine cannot do a task's work (a full or read-only
        disk, too few file descriptors): one log line per new error, then `healthy` is
        probed on every rescan period instead of claiming, so no attempt is burned."""
        error = f"{type(exc).__name__}: {exc}"
        kind = f"{type(exc).__name__} {getattr(exc, 'errno', '')}"  # not the file name
        if kind != self.fault:
            self.log.error("cannot work; not claiming until this is fixed", error=error)
            self.fault = kind
        self.publish("blocked", error=error)

    def healthy(self) -> bool:
        """Whether what a task needs works again: writing the control plane and the
        worktree root, and starting a process."""
        try:
            for folder in (self.layout.run, self.layout.worktree_root):
                probe = folder / f".probe-{self.name}"
                atomic_write(probe, "ok\n")
                probe.unlink()
            subprocess.run(["git", "--version"], capture_output=True, check=True)
        except (OSError, subprocess.CalledProcessError) as exc:
            self.board_fails(exc)
            return False
        self.log.info("working again; claiming", after=self.fault)
        self.fault = None
        return True

    # --- one task -------------------------------------------------------------
    def work(self, task: Task) -> None:
        assert task.lease is not None
        token = task.lease.token
        tlog = TaskLog(self.layout, task.id, actor=self.name)
        self.publish("working", task=task.id)
        self.log.info("claimed", task=task.id, token=token)
        stop = threading.Event()
        if self.warm.is_set():
            stop.set()
        beat = Heartbeat(self, task.id, token, stop)
        beat.start()
        try:
            self._work(task, token, tlog, stop, beat)
        except LeaseLost:
            beat.lost = True
        except OSError as exc:
            # The machine, not the task (a full or read-only disk, too few open files): hand
            # it back without counting an attempt, and let the loop stop claiming for a
            # while. If even that write fails, the lease expires and the lead requeues it.
            self.log.error("task interrupted", task=task.id,
                           error=f"{type(exc).__name__}: {exc}")
            if not beat.lost:
                beat.ending = True
                with contextlib.suppress(OSError, LeaseLost):
                    self.board.release(task.id, token, reason=f"{type(exc).__name__}: {exc}")
            raise
        except Exception as exc:  # a run error: record it on the task, keep serving
            self.log.exception("task error", task=task.id)
            tlog.write("error", error=f"{type(exc).__name__}: {exc}")
            if not beat.lost:
                beat.ending = True
                try:
                    self.board.fail(task.id, token, f"{type(exc).__name__}: {exc}")
                except LeaseLost:
                    beat.lost = True
        finally:
            beat.finish()
        if beat.lost:
            self.log.warning("lease lost, task abandoned", task=task.id)
            tlog.write("abandoned", reason="lease lost (another teammate owns the task now)")
            self.board.events.emit("task_abandoned", task.id, actor=self.name, token=token,
                                   reason="lease lost")

    def _work(self, task: Task, token: int, tlog: TaskLog, stop: threading.Event,
              beat: Heartbeat) -> None:
        from orchestrator.worktree.manager import binding

        ws = self.isolation.create(task)
        task = self.board.update(task.id, token, **binding(ws))
        backend = self.backend_for(task)
        limits = budget.limits_for(task, self.name, self.config.budget, self.board)
        reason = budget.first_reached(limits, Usage())
        if reason:  # resumed without raising the limit, spent by an earlier run, or shared
            self.pause(task, token, ws.path, reason, tlog, beat)
            return
        left = budget.remaining_seconds(task.budget, task.usage)
        timeout = self.config.team.task_timeout if left is None else min(
            self.config.team.task_timeout, left)
        ctx = RunContext(
            task=task, token=token, teammate=self.name, workspace=ws, board=self.board,
            layout=self.layout, log=tlog, stop=stop, timeout=timeout,
            settings={"command": self.config.team.command, "limits": limits,
                      "on_process_start": lambda pgid: self.publish(
                          "working", task=task.id, backend_pgid=pgid)},
        )
        started = time.monotonic()
        result = backend.run(ctx)
        if beat.lost:
            return
        run = self.count_spending(task, token, result.usage, time.monotonic() - started, limits)
        stopping = result.stopped or self.cold.is_set() or (not result.ok and stop.is_set())
        paused = result.paused or (None if result.ok or stopping
                                   else budget.first_reached(limits, run))
        if paused:
            self.pause(task, token, ws.path, paused, tlog, beat, result.session_id)
            return
        if result.stopped or self.cold.is_set() or (not result.ok and stop.is_set()):
            beat.ending = True
            self.board.release(task.id, token, reason="teammate stopping")
            return
        if not result.ok:
            beat.ending = True
            self.board.fail(task.id, token, result.error or "backend failed", retry=result.retry)
            return
        self.still_ours(task.id, token)  # never commit over a new owner's work
        # a workspace that is no git checkout (hook isolation) cannot be committed: its
        # isolation snapshots it on keep instead
        sha = commit_leftovers(ws.path, task, self.name) if (ws.path / ".git").exists() else None
        if sha:
            self.committed = True
            self.board.events.emit("commit", task.id, actor=self.name, sha=sha,
                                   branch=ws.branch)
            tlog.write("commit", sha=sha)
        fields: dict[str, Any] = {}
        if self.config.team.verify:
            checks = run_checks(self.config.team.verify, cwd=ws.path, env=task_env(ctx),
                                log=tlog, timeout=self.config.team.verify_timeout,
                                stop=self.cold)  # a warm stop lets the checks finish
            if beat.lost:
                return
            if checks["stopped"]:
                beat.ending = True
                self.board.release(task.id, token, reason="teammate stopping")
                return
            self.board.events.emit("checks_passed" if checks["passed"] else "checks_failed",
                                   task.id, actor=self.name, command=checks["command"],
                                   result=checks["result"])
            if not checks["passed"]:
                self.board.update(task.id, token, checks=checks)
                beat.ending = True
                self.board.fail(task.id, token, f"verification failed ({checks['result']}): "
                                f"{checks['command']}\n{_tail(checks['output_tail'])}")
                return
            fields["checks"] = checks
        if result.session_id:
            fields["session_id"] = result.session_id
        beat.ending = True
        done = self.board.complete(task.id, token, **fields)
        self.isolation.keep(done)
        self.log.info("completed", task=task.id, sha=sha)

    def count_spending(self, task: Task, token: int, usage: Usage, seconds: float,
                       limits: list[budget.Limit]) -> Usage:
        """Add a run's usage and wall-clock time to the task, write the ``spend`` event
        the daily budgets add up, report a budget's 80 %; the run's usage."""
        run = usage.model_copy(update={"seconds": usage.seconds + seconds})
        so_far = self.board.get(task.id).usage  # a backend may have counted live already
        self.board.update(task.id, token, usage=task.usage.add(run))
        self.board.events.emit("spend", task.id, actor=self.name, usage=run.model_dump(),
                               plan=budget.plan_of(task))
        live = budget.minus(so_far, task.usage)  # what the backend already warned about
        budget.warn(limits, live, run, self.board.events, task.id, self.name)
        return run

    def pause(self, task: Task, token: int, path: Path, reason: str, tlog: TaskLog,
              beat: Heartbeat, session_id: str | None = None) -> None:
        """Stop for a person: commit the work in progress to the task branch, and the task
        waits (``failed`` with ``waiting_for`` = the reason) for `orchestrator resume`."""
        self.still_ours(task.id, token)
        sha = commit_leftovers(path, task, self.name, wip=True) if (path / ".git").exists() \
            else None
        if sha:
            self.committed = True
            self.board.events.emit("commit", task.id, actor=self.name, sha=sha,
                                   branch=task.branch, wip=True)
        beat.ending = True
        self.board.fail(task.id, token, reason, retry=False)
        fields: dict[str, Any] = {"waiting_for": reason}
        if session_id:
            fields["session_id"] = session_id
        done = self.board.edit(task.id, actor=self.name, **fields)
        event = "budget_reached" if reason.startswith("budget:") else "no_progress"
        self.board.events.emit(event, task.id, actor=self.name, reason=reason, wip=sha,
                               spent=budget.describe(done.budget, done.usage))
        tlog.write("paused", reason=reason, commit=sha)
        self.log.info("paused for a person", task=task.id, reason=reason)

    def still_ours(self, task_id: str, token: int) -> None:
        """Raise `LeaseLost` unless our lease holds for a good while yet: a read when the
        heartbeat has kept it fresh, a renewal (a fenced write) otherwise."""
        lease = self.board.get(task_id).lease
        margin = self.config.board.lease_seconds / 3
        if lease is None or lease.token != token or lease.owner != self.name \
                or lease.expires_at - time.time() < margin:
            self.board.renew(task_id, token)

    def backend_for(self, task: Task) -> Backend:
        name = task.backend or self.config.team.backend
        if name not in self._backends:
            self._backends[name] = load_backend(name, self.config, self.layout)
        return self._backends[name]


class Heartbeat(threading.Thread):
    """Renews the lease every ``lease_seconds / 3`` while the task runs.

    It also listens for stop signals and the lead's death while the main thread
    is busy in the backend, and sets the run's ``stop`` event for either.
    """

    def __init__(self, mate: Teammate, task_id: str, token: int, stop: threading.Event) -> None:
        super().__init__(name=f"heartbeat-{task_id}", daemon=True)
        self.mate = mate
        self.task_id = task_id
        self.token = token
        self.stop = stop
        self.lost = False
        self.ending = False
        """Set just before the run's last board write (complete, fail, release): a renewal
        refused after it lost nothing, the lease was handed back."""
        self._done = threading.Event()
        self._r, self._w = os.pipe()
        self.interval = mate.config.board.lease_seconds / 3

    def run(self) -> None:
        next_renew = time.monotonic() + self.interval
        while not self._done.is_set():
            wake = self.mate.waker.wait(next_renew - time.monotonic(),
                                        [*self.mate._fds(), self._r], notes=False)
            self.mate.absorb(wake)
            if time.monotonic() >= next_renew and not self._done.is_set():
                next_renew = time.monotonic() + self.interval
                self.beat()
            if self.mate.warm.is_set() or self.lost:
                self.stop.set()

    def beat(self) -> None:
        try:
            self.mate.board.renew(self.task_id, self.token,
                                  lease_seconds=self.mate.config.board.lease_seconds)
        except LeaseLost:
            self.lost = self.lost or not self.ending
            self._done.set()
            return
        except OSError as exc:  # a full or read-only disk: try again next beat
            self.mate.log.error("heartbeat failed", task=self.task_id,
                                error=f"{type(exc).__name__}: {exc}")
        except Exception:  # a transient error (a lock): try again next beat
            self.mate.log.exception("heartbeat failed", task=self.task_id)
        self.mate.read_mail()

    def finish(self) -> None:
        self._done.set()
        os.write(self._w, b"\0")
        self.join()
        os.close(self._r)
        os.close(self._w)


def _tail(text: str, n: int = 20) -> str:
    return "\n".join(text.rstrip().splitlines()[-n:])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="orchestrator.team.teammate")
    p.add_argument("--root", required=True)
    p.add_argument("--worktree-root")
    p.add_argument("--name", required=True)
    p.add_argument("--lead-fd", type=int)
    p.add_argument("--overrides", default="{}")
    p.add_argument("--console", action="store_true")
    args = p.parse_args(argv)
    layout = Layout.at(Path(args.root), args.worktree_root)
    try:
        config = Config.load(layout.root, overrides=json.loads(args.overrides))
        configure(status.log_file(layout), console=args.console, actor=args.name)
        return Teammate(layout, config, args.name, lead_fd=args.lead_fd,
                        overrides=json.loads(args.overrides)).run()
    except OrchestratorError as exc:
        sys.stderr.write(f"{args.name}: error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
