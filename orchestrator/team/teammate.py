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
import itertools
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from orchestrator import budget, delivery, waits
from orchestrator.backends import load_backend
from orchestrator.branches.facts import remember
from orchestrator.checks import run_checks
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane, Message, TaskLogger
from orchestrator.errors import (
    BoardUnavailable,
    GitError,
    LeaseLost,
    OrchestratorError,
    SecretLeak,
)
from orchestrator.events import (
    BudgetReached,
    ChecksFailed,
    ChecksPassed,
    Committed,
    NoProgress,
    Spend,
    TaskAbandoned,
    WorktreeSetAside,
)
from orchestrator.fsutil import atomic_write
from orchestrator.git import Git
from orchestrator.layout import Layout
from orchestrator.logging import configure, get_logger
from orchestrator.model import Status, Task, Usage, utcnow
from orchestrator.prompting import reason_line, task_env
from orchestrator.protocols import Backend, RunContext, Workspace
from orchestrator.sandbox import task_sandbox
from orchestrator.secrets import redact, safe_env
from orchestrator.settings.live import LiveConfig
from orchestrator.team import status
from orchestrator.team.claim import Claim
from orchestrator.team.commit import commit_leftovers, idle_maintenance
from orchestrator.team.mailbox import read_new
from orchestrator.team.pushing import Pushes, WorktreeWatch
from orchestrator.team.wake import COLD_SIGNAL, Wake, Waker
from orchestrator.transcript import Abandoned, ChecksRetry, Commit, CommitRefused, Error, RunPaused
from orchestrator.worktree.remote import Remote

if TYPE_CHECKING:  # imported when the teammate runs (see `run`), not at start-up
    from orchestrator.worktree import Workspaces


class Teammate:
    def __init__(self, layout: Layout, config: Config, name: str, *,
                 lead_fd: int | None = None,
                 overrides: dict[str, dict[str, Any]] | None = None) -> None:
        self.layout = layout
        self.config = config
        self.live = LiveConfig(layout.root, config, overrides)
        self.name = name
        self.lead_fd = lead_fd
        self.waker = Waker()
        self.log = get_logger(teammate=name)
        self.signals = 0
        self.warm = threading.Event()
        """Set on the first stop request: finish the current step, then exit."""
        self.cold = threading.Event()
        self.shutdown_requests: list[Message] = []
        self._backends: dict[str, Backend] = {}
        self.board: ControlPlane
        self.isolation: Workspaces
        self.started_at = utcnow()
        """When this process started, on the board's clock (`start_on_board_clock`): a stop
        request older than that was for a namesake of an earlier run."""
        self.lead_started_at: str | None = None
        """When the lead asked for this process, on the board's clock (``--started-at``)."""
        self.committed = False
        """A task was committed since the last `idle_maintenance`."""
        self.remote: Remote | None = None
        """The shared git remote of a team across machines (a PostgreSQL board)."""
        self.pushes: Pushes | None = None
        """The running claim's pushes to the remote (each carries the lease)."""
        self.undelivered: list[Message] = []
        """Messages for the agent that came while no task ran: they go to the next run."""
        self.messages_path: Path | None = None
        """The running task's messages file (`orchestrator.delivery`)."""
        self._mail_lock = threading.Lock()
        self.fault: str | None = None
        """The last error from the board (disk full, read-only, no file descriptors)."""
        self.unreleased: list[tuple[Claim, str]] = []
        """Claims handed back for a machine fault whose release the board could not take
        yet (its database was down): released once it can, so no attempt is counted."""
        self.fault_until = 0.0
        """After a task was interrupted by a machine fault: no claim before (monotonic)."""
        self._state: tuple[tuple[str, str | None], str] = (("", None), "")
        """The state last published (with its task) and since when (`publish`)."""
        self.reviews = ThreadPoolExecutor(max_workers=1, thread_name_prefix="review-cache",
                                          initializer=lowest_priority)
        """Fills the review cache for each task that reached review (`remember_for_review`)
        while the next task runs, so the next claim does not wait for it, and at the lowest
        CPU priority, so the next task's own work does not wait for it either."""
        self.room = threading.Event()
        """Set while this teammate's own work leaves room for the background's (`reviews`):
        it is idle, or its agent's process runs; not from a claim to that process's start
        (the worktree, the sandbox), nor from its end to the final write (the commit)."""
        self.room.set()

    # --- the loop -------------------------------------------------------------
    def run(self) -> int:
        from orchestrator.board import open_board
        from orchestrator.secrets import protect_process
        from orchestrator.worktree import open_isolation

        protect_process()  # the parent of its tools: no secrets in its /proc (forked: done)
        self.waker.install_signals()
        self.board = open_board(self.layout, self.config.board, actor=self.name)
        self.start_on_board_clock()
        self.isolation = open_isolation(
            self.layout, self.config.worktree, self.board,
            sandbox=task_sandbox(self.config, network=self.config.sandbox.network,
                                 root=self.layout.root))
        self.isolation.prepare()
        self.remote = Remote.for_config(self.layout.root, self.config)
        # tasks, mail and requests wake it; the audit log's events are the lead's
        self.waker.follow_board(self.board, self.config.board.rescan_seconds, events=False,
                                running=False)
        self.log.info("teammate ready", pid=os.getpid())
        try:
            while not self.warm.is_set():
                try:
                    self.release_pending()
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
                        self.room.set()
                        if self.committed:
                            self.committed = False
                            idle_maintenance(self.layout.root)
                except (OSError, BoardUnavailable) as exc:  # a full or read-only disk, too
                    self.board_fails(exc)  # few open files, the board's database is down
                # board changes wake us; mailboxes are not watched (and a failing board
                # is retried), so look again on the board's rescan period as well
                self.absorb(self.waker.wait(self.config.board.rescan_seconds, self._fds()))
        finally:
            self.room.set()
            self.reviews.shutdown(cancel_futures=self.cold.is_set())  # ~25 ms a task
            self.publish("stopped")
            self.answer_shutdown()
            self.waker.close()
            self.board.close()
            self.log.debug("teammate stopped")  # the lead says so, with how it ended
        return 0

    def start_on_board_clock(self) -> None:
        """Take `started_at` from the board's clock (the time of our first status row), the
        clock a message's ``ts`` is on: a machine whose clock is off by minutes would
        otherwise ignore every stop request (or obey one meant for a namesake)."""
        with contextlib.suppress(OSError, BoardUnavailable):
            self.started_at = self.board.team.publish(
                self.name, "starting", pid=os.getpid(), since=self.started_at).updated_at \
                or self.started_at
        if self.lead_started_at:
            self.started_at = min(self.started_at, self.lead_started_at)

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

    def disks(self) -> list[Path]:
        """Where a task's work is written: the worktrees and the repository (git's
        objects)."""
        return [self.layout.worktree_root, self.layout.root]

    def release_pending(self) -> None:
        """Hand back the claims of `unreleased` (a lease that ran out meanwhile: nothing to
        do); a board that still cannot be written keeps the rest for the next pass."""
        while self.unreleased:
            claim, reason = self.unreleased[0]
            try:
                claim.release(reason)
            except LeaseLost:
                pass
            except (OSError, BoardUnavailable):
                return
            self.unreleased.pop(0)

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
        for msg in read_new(self.board.mailboxes, self.name):
            kind = msg.get("kind")
            if kind == "shutdown_request" and str(msg.get("ts", "")) < self.started_at:
                # sent to a namesake of an earlier run (e.g. by a lead stopped before it
                # could read it): not for this process, which would otherwise stop at once
                self.log.debug("ignoring a shutdown request older than this teammate",
                               request_id=msg.get("request_id"))
            elif kind == "shutdown_request":
                self.log.info("shutdown requested", by=msg.get("from"),
                              request_id=msg.get("request_id"))
                self.shutdown_requests.append(msg)
                self.warm.set()
            elif kind == "message":
                with self._mail_lock:
                    if self.messages_path is not None:
                        delivery.deliver(self.messages_path, msg)
                        where = f"the agent of {self.messages_path.stem}"
                    else:
                        self.undelivered.append(msg)
                        where = "the agent of the next task"
                self.log.info("message", sender=msg.get("from"), body=msg.get("body"),
                              to=where)

    def answer_shutdown(self) -> None:
        for req in self.shutdown_requests:
            sender = req.get("from") or "lead"
            try:
                self.board.mailboxes.send(
                    sender, self.name, "stopped", kind="shutdown_response",
                    request_id=req.get("request_id"), approve=True)
            except OrchestratorError:
                self.log.warning("cannot answer shutdown request", sender=sender)
        self.shutdown_requests = []

    def publish(self, state: str, **fields: Any) -> None:
        """Write this teammate's state (a hint for `status`). An idle one writes it on each
        rescan period too: its heartbeat, which tells another machine it still runs; its
        ``since`` stays the time it became idle (or took its task)."""
        now = (state, fields.get("task"))
        if self._state[0] != now:
            self._state = (now, utcnow())
        with contextlib.suppress(OSError, BoardUnavailable):
            self.board.team.publish(self.name, state, pid=os.getpid(),
                                    started_at=self.started_at, since=self._state[1], **fields)

    def board_fails(self, exc: Exception) -> None:
        """Stop claiming while the machine cannot do a task's work (a full or read-only
        disk, too few file descriptors): one log line per new error, then `healthy` is
        probed on every rescan period instead of claiming, so no attempt is burned."""
        error = f"{type(exc).__name__}: {exc}"
        kind = f"{type(exc).__name__} {getattr(exc, 'errno', '')}" if isinstance(
            exc, OSError) else str(exc)  # not the file name; a database's message: its kind
        if kind != self.fault:
            self.log.error("cannot work; not claiming until this is fixed", error=error)
            self.fault = kind
        self.publish("blocked", error=error)

    def healthy(self) -> bool:
        """Whether what a task needs works again: writing the control plane and the
        worktree root, and starting a process (not before `FAULT_BACKOFF` has passed since
        a task was handed back for a machine fault: the others take it meanwhile)."""
        if time.monotonic() < self.fault_until:
            return False
        try:
            for folder in (self.layout.run, self.layout.worktree_root):
                probe = folder / f".probe-{self.name}"
                atomic_write(probe, "ok\n")
                probe.unlink()
            Git(self.layout.root).run("--version")
        except (OSError, GitError) as exc:
            self.board_fails(exc)
            return False
        self.log.info("working again; claiming", after=self.fault)
        self.fault = None
        return True

    # --- one task -------------------------------------------------------------
    def work(self, task: Task) -> None:
        assert task.lease is not None
        token = task.lease.token
        self.room.clear()
        tlog = self.board.logs.writer(task.id, actor=self.name)
        self.publish("working", task=task.id)
        self.log.info("claimed", task=task.id, token=token)
        stop = threading.Event()
        if self.warm.is_set():
            stop.set()
        claim = Claim(self.board, task, owner=self.name,
                      lease_seconds=self.config.board.lease_seconds)
        if self.remote is not None:
            self.pushes = Pushes(self.remote, claim, task, self.log)
        beat = Heartbeat(self, claim, stop)
        beat.start()
        try:
            self._work(task, claim, tlog, stop, beat)
        except LeaseLost:
            claim.lost = True
        except Exception as exc:
            fault = machine_fault(exc, self.disks())
            if fault is not None:
                # The machine, not the task (a full or read-only disk, git failing for
                # either, too few open files, the board's database gone): hand it back
                # without counting an attempt, so another machine takes it, and stop
                # claiming here for a while. If even that write fails, the lease expires.
                self.log.error("task interrupted by this machine's fault", task=task.id,
                               error=fault)
                if not claim.lost:
                    self.unreleased.append((claim, f"machine fault: {fault}"))
                    self.release_pending()
                self.fault_until = time.monotonic() + FAULT_BACKOFF
                if isinstance(exc, OSError | BoardUnavailable):
                    raise
                raise MachineFault(fault) from exc
            # a run error: record it on the task, keep serving
            self.log.exception("task error", task=task.id)
            tlog.write(Error(error=f"{type(exc).__name__}: {exc}"))
            if not claim.lost:
                with contextlib.suppress(LeaseLost):  # marks the claim lost
                    self.fail(claim, f"{type(exc).__name__}: {exc}")
        finally:
            beat.finish()
            self.pushes = None
        if claim.lost:
            why = ("cancelled" if beat.cancelled
                   else "lease lost (another teammate owns the task now)")
            self.log.warning("task abandoned", task=task.id, reason=why)
            tlog.write(Abandoned(reason=why))
            self.board.events.emit(TaskAbandoned(
                token=token, reason="cancelled" if beat.cancelled else "lease lost"),
                task.id, actor=self.name)

    def _work(self, task: Task, claim: Claim, tlog: TaskLogger, stop: threading.Event,
              beat: Heartbeat) -> None:
        from orchestrator.worktree.manager import WorktreeManager, binding

        if self.remote is not None and isinstance(self.isolation, WorktreeManager):
            self.set_aside_stale(task)
            self.isolation.start_ref = self.remote.prepare(
                task, self.isolation.branch_for(task), self.board, self.config.worktree.base)
        ws = self.isolation.create(task)
        beat.poke()  # the worktree is there: across machines, watched from now on
        task = claim.update(**binding(ws))
        if task.attempts and not self.back_off(task, stop):
            claim.release("teammate stopping")
            return
        backend = self.backend_for(task)
        messages = delivery.messages_file(self.layout, task.id)
        with self._mail_lock:
            delivery.start(messages, self.undelivered)
            self.undelivered = []
            self.messages_path = messages
        try:
            self._run(task, claim, tlog, stop, ws, backend, messages)
        finally:
            with self._mail_lock:
                self.messages_path = None

    def _run(self, task: Task, claim: Claim, tlog: TaskLogger, stop: threading.Event,
             ws: Workspace, backend: Backend, messages: Path) -> None:
        """Run the agent until its work passes the checks, then complete the task. Each
        step raises how the run ends short of that (`Outcome`), acted on here."""
        limits = budget.limits_for(task, self.name, self.config.budget, self.board)
        left = budget.remaining_seconds(task.budget, task.usage)
        timeout = self.config.team.task_timeout if left is None else min(
            self.config.team.task_timeout, left)
        ctx = RunContext(
            task=task, token=claim.token, teammate=self.name, workspace=ws, board=self.board,
            layout=self.layout, log=tlog, stop=stop, timeout=timeout,
            command=self.config.team.command, messages=messages, limits=limits,
            on_process_start=lambda pgid: self.agent_started(task.id, pgid),
            on_files_changed=lambda: self.push_wip(task.id),
        )
        try:
            # resumed without raising the limit, spent by an earlier run, or shared
            if reason := budget.first_reached(limits, Usage()):
                raise Paused(reason)
            for check_round in itertools.count():
                session_id = self._agent(ctx, claim, backend, limits)
                sha = self._commit(ctx, claim)
                fields: dict[str, Any] = {"session_id": session_id} if session_id else {}
                if self._checked(ctx, claim, check_round, fields):
                    break
        except Stopping:
            claim.release("teammate stopping")
        except Paused as end:
            self.pause(ctx.task, claim, ws.path, end.reason, tlog, end.session_id)
        except Failed as end:
            self.fail(claim, end.error, retry=end.retry)
            if end.wait is not None:
                self.board.edit(task.id, actor=self.name, wait=end.wait)
        else:
            done = self._complete(ctx, claim, fields)
            self.log.info("completed", task=task.id, sha=sha)
            self.reviews.submit(self.remember_for_review, done)

    def agent_started(self, task_id: str, pgid: int) -> None:
        """The agent's process runs (its group ``pgid``): say so on the board (`down` and a
        restarted lead find it there), and make room for the background's work."""
        self.publish("working", task=task_id, backend_pgid=pgid)
        self.room.set()

    def _agent(self, ctx: RunContext, claim: Claim, backend: Backend,
               limits: list[budget.Limit]) -> str | None:
        """One run of the agent, its spending counted; the session it leaves, if any."""
        started = time.monotonic()
        result = backend.run(ctx)
        self.room.clear()
        if claim.lost:
            raise LeaseLost(f"{ctx.task.id}: the claim was lost", task=ctx.task.id)
        # across machines: what the run left is on the remote, even when it failed, so
        # a retry on another machine starts from it (a backend with steps also pushes
        # after each step that changed files)
        self.push_wip(ctx.task.id)
        ctx.task, run = self.count_spending(ctx.task, claim, result.usage,
                                            time.monotonic() - started, limits)
        if result.paused:
            raise Paused(result.paused, result.session_id)
        if result.stopped or self.cold.is_set() or (not result.ok and ctx.stop.is_set()):
            raise Stopping
        if result.ok:
            return result.session_id
        if reason := budget.first_reached(limits, run):
            raise Paused(reason, result.session_id)
        if (fault := fault_in(result.error or "", self.disks())) is not None:
            raise MachineFault(f"the agent failed: {fault}")
        raise Failed(result.error or "backend failed", retry=result.retry)

    def _commit(self, ctx: RunContext, claim: Claim) -> str | None:
        """Commit what the agent left (never over a new owner's work); the commit, if any.
        A workspace that is no git checkout (hook isolation) cannot be committed: its
        isolation snapshots it on keep instead."""
        claim.still_ours()
        ws, task = ctx.workspace, ctx.task
        if not (ws.path / ".git").exists():
            return None
        try:
            sha = commit_leftovers(ws.path, task, self.name, ws.base_commit)
        except SecretLeak as exc:  # shown on the task; a retry may take the value out
            ctx.log.write(CommitRefused(reason=str(exc)))
            raise Failed(str(exc)) from exc
        if sha:
            self.committed = True
            self.board.events.emit(Committed(sha=sha, branch=ws.branch), task.id,
                                   actor=self.name)
            ctx.log.write(Commit(sha=sha))
        elif task.expect_changes and _unchanged(ws.path, task):
            raise Failed("the agent changed nothing: no commit and no change in the "
                         "worktree (a task that may rightly change nothing says "
                         "expect_changes: false)")
        return sha

    def _checked(self, ctx: RunContext, claim: Claim, check_round: int,
                 fields: dict[str, Any]) -> bool:
        """Run the verification checks (none: passed); True when they pass (their result
        added to ``fields``). A failure goes straight back to the same agent (its session
        resumed where the backend keeps one) with the failing check's output in its
        prompt, up to ``checks.retries`` times; then the task waits for a person."""
        if not self.config.team.verify:
            return True
        task = ctx.task
        env = safe_env(task_env(ctx), self.config.agent.pass_env)  # checks hold no key
        checks = run_checks(self.config.team.verify, cwd=ctx.workspace.path, env=env,
                            log=ctx.log, timeout=self.config.team.verify_timeout,
                            stop=self.cold,  # a warm stop lets the checks finish
                            sandbox=task_sandbox(self.config, root=self.layout.root))
        if claim.lost:
            raise LeaseLost(f"{task.id}: the claim was lost", task=task.id)
        if checks.stopped:
            raise Stopping
        outcome = ChecksPassed if checks.passed else ChecksFailed
        self.board.events.emit(outcome(command=checks.command, result=checks.result),
                               task.id, actor=self.name)
        if checks.passed:
            fields["checks"] = checks
            return True
        error = (f"verification failed ({checks.result}): {checks.command}\n"
                 f"{redact(_tail(checks.output_tail))}")
        if check_round >= self.config.checks.retries:
            claim.update(checks=checks)
            raise Failed(error + f"\n(checks failed {check_round + 1} times; waiting for a "
                         f"person: orchestrator retry {task.id} -m …)", retry=False,
                         wait=waits.ChecksExhausted(result=checks.result[:2000],
                                                    rounds=check_round + 1))
        self.log.warning("checks failed; back to the agent with their output",
                         task=task.id, result=checks.result,
                         round=f"{check_round + 1}/{self.config.checks.retries}")
        ctx.log.write(ChecksRetry(round=check_round + 1, of=self.config.checks.retries))
        ctx.task = claim.update(checks=checks, error=error, **fields)
        return False

    def _complete(self, ctx: RunContext, claim: Claim, fields: dict[str, Any]) -> Task:
        """The final write: the task goes to review, its worktree kept (across machines,
        its branch pushed, or left for this machine's lead to push). Returns the task as
        written."""
        ws = ctx.workspace
        if self.pushes is not None and ws.branch and (ws.path / ".git").exists():
            pending = self.pushes.finish(ws.path, ws.branch, str(getattr(
                self.board, "machine", "")))
            if pending:  # still kept for review: this machine's lead pushes it again
                self.log.error("push pending", task=ctx.task.id, reason=pending.reason)
                fields["push_pending"] = pending
        done = claim.complete(error=None, **fields)
        self.isolation.keep(done)
        return done

    def remember_for_review(self, task: Task) -> None:
        """Ask git now what ``review`` will ask about the task's branch and keep it in the
        review cache (`orchestrator.branches.facts.remember`), so a person's first
        ``review`` after the team's run reads it instead of asking git five times per
        branch. Best effort, after the task's final write and beside the next task's run
        (`reviews`): a failure is logged, and ``review`` asks git itself."""
        if not task.branch:
            return
        self.room.wait(ROOM_WAIT)
        started = time.monotonic()
        try:
            remember(self.layout.root, task)
        except Exception as exc:  # whatever it is, the task is in review already
            self.log.warning("review cache not filled", task=task.id,
                             error=f"{type(exc).__name__}: {exc}")
            return
        self.log.debug("review cache filled", task=task.id,
                       seconds=round(time.monotonic() - started, 3))

    def back_off(self, task: Task, stop: threading.Event) -> bool:
        """Wait before a failed task's next attempt (``team.retry_backoff``, doubled per
        attempt, at most `MAX_BACKOFF`); False when a stop came first."""
        delay = min(self.config.team.retry_backoff * 2 ** (task.attempts - 1), MAX_BACKOFF)
        if delay <= 0:
            return not stop.is_set()
        self.log.info("retrying after a failure", task=task.id, attempt=task.attempts + 1,
                      wait=f"{delay:g}s")
        return not stop.wait(delay)

    def push_wip(self, task_id: str) -> None:
        """Across machines: push the task's worktree state as its WIP snapshot when it
        changed since the last push (`Pushes`: one at a time, each carrying the lease), so
        another machine resumes from here if this one dies. A failure is logged: the next
        push tries again; a lost lease marks the claim lost."""
        path = self.layout.worktree(task_id)
        pushes = self.pushes
        if pushes is None or not (path / ".git").exists():
            return
        try:
            pushes.wip(path)
        except LeaseLost:
            pass  # the claim is marked lost: the run stops
        except Exception as exc:  # the remote is down
            self.log.error("snapshot failed", task=task_id,
                           error=f"{type(exc).__name__}: {exc}")

    def set_aside_stale(self, task: Task) -> None:
        """A worktree here whose state is not what the board recorded last (a run here lost
        its lease, and another lease pushed since, or its agent went on writing): saved
        under ``refs/orchestrator/stale/<task>`` and removed, so this run starts from the
        recorded state and no write of the fenced-out run reaches it."""
        assert self.remote is not None
        saved = self.remote.set_aside(self.layout.worktree(task.id), task.id, task.branch,
                                      task.pushed)
        if saved:
            self.log.warning("set aside a stale worktree", task=task.id, saved=saved)
            self.board.events.emit(WorktreeSetAside(sha=saved), task.id, actor=self.name)

    def fail(self, claim: Claim, error: str, *, retry: bool = True) -> None:
        """Record a failed run (the claim's final write), and say why on the console: the
        reason, whether it runs again, and where to see more."""
        task = claim.fail(error, retry=retry)
        reason = reason_line(error)
        see = f"orchestrator logs {task.id}"
        if task.status is Status.FAILED:
            self.log.error("task failed", task=task.id, reason=reason,
                           attempts=f"{task.attempts}/{task.max_attempts}"
                           if retry else "no retry (it cannot help)", see=see)
        else:
            self.log.warning("attempt failed; will retry", task=task.id, reason=reason,
                             attempts=f"{task.attempts}/{task.max_attempts}", see=see)
    def count_spending(self, task: Task, claim: Claim, usage: Usage, seconds: float,
                       limits: list[budget.Limit]) -> tuple[Task, Usage]:
        """Add a run's usage and wall-clock time to the task, write the ``spend`` event
        the daily budgets add up, report a budget's 80 %; the task, and the run's usage."""
        run = msgspec.structs.replace(usage, seconds=usage.seconds + seconds)
        so_far = self.board.get(task.id).usage  # a backend may have counted live already
        updated = claim.update(usage=task.usage.add(run))
        self.board.events.emit(Spend(usage=run, plan=budget.plan_of(task)),
                               task.id, actor=self.name)
        live = budget.minus(so_far, task.usage)  # what the backend already warned about
        budget.warn(limits, live, run, self.board.events, task.id, self.name)
        return updated, run

    def pause(self, task: Task, claim: Claim, path: Path, reason: str, tlog: TaskLogger,
              session_id: str | None = None) -> None:
        """Stop for a person: commit the work in progress to the task branch, and the task
        waits (``failed`` with the `orchestrator.waits` wait of the reason) for
        `orchestrator resume`."""
        claim.still_ours()
        sha = commit_leftovers(path, task, self.name, wip=True) if (path / ".git").exists() \
            else None
        if sha:
            self.committed = True
            self.board.events.emit(Committed(sha=sha, branch=task.branch, wip=True), task.id,
                                   actor=self.name)
        claim.fail(reason, retry=False)
        fields: dict[str, Any] = {"wait": waits.paused(reason)}
        if session_id:
            fields["session_id"] = session_id
        done = self.board.edit(task.id, actor=self.name, **fields)
        paused = BudgetReached if reason.startswith("budget:") else NoProgress
        self.board.events.emit(paused(reason=reason, wip=sha,
                                      spent=budget.describe(done.budget, done.usage)),
                               task.id, actor=self.name)
        tlog.write(RunPaused(reason=reason, commit=sha))
        self.log.info("paused for a person", task=task.id, reason=reason)


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

    def __init__(self, mate: Teammate, claim: Claim, stop: threading.Event) -> None:
        super().__init__(name=f"heartbeat-{claim.task_id}", daemon=True)
        self.mate = mate
        self.claim = claim
        self.task_id = claim.task_id
        self.stop = stop
        self.cancelled = False
        """The task was cancelled while it ran (seen on the board's change feed)."""
        self._done = threading.Event()
        self._r, self._w = os.pipe()
        self.interval = mate.config.board.lease_seconds / 3
        self.watch: WorktreeWatch | None = None
        """Across machines: the worktree's changes, so they are pushed as they happen."""
        self.next_wip = 0.0

    def run(self) -> None:
        next_renew = time.monotonic() + self.interval
        while not self._done.is_set():
            due = next_renew
            changed = self.watching()
            if changed:
                due = min(due, self.next_wip)
            wake = self.mate.waker.wait(due - time.monotonic(), [*self.mate._fds(), self._r])
            if self._r in wake.fds:
                os.read(self._r, 4096)
            self.mate.absorb(wake)
            if wake.notified and not self._done.is_set():
                self.check_cancelled()
            now = time.monotonic()
            if now >= next_renew and not self._done.is_set():
                next_renew = now + self.interval
                self.beat()
            elif self.watching() and now >= self.next_wip and not self._done.is_set():
                assert self.watch is not None
                self.watch.changed.clear()
                self.next_wip = now + WIP_EVERY
                self.snapshot()
            if self.mate.warm.is_set() or self.claim.lost:
                self.stop.set()

    def watching(self) -> bool:
        """Whether the worktree changed since the last snapshot; starts watching it once
        it exists (across machines only: with a remote to push to)."""
        if self.watch is None:
            path = self.mate.layout.worktree(self.task_id)
            if self.mate.pushes is None or self.next_wip < 0 or not (path / ".git").exists():
                return False
            try:
                self.watch = WorktreeWatch(path, lambda: os.write(self._w, b"\0"))
            except OSError as exc:  # out of inotify watches: the heartbeat's pushes remain
                self.mate.log.warning("cannot watch the worktree", task=self.task_id,
                                      error=f"{type(exc).__name__}: {exc}")
                self.next_wip = -1.0
                return False
        return self.watch.changed.is_set()

    def beat(self) -> None:
        try:
            if not self.claim.renew():  # lost, or handed back by the final write
                self._done.set()
                return
        except OSError as exc:  # a full or read-only disk: try again next beat
            self.mate.log.error("heartbeat failed", task=self.task_id,
                                error=f"{type(exc).__name__}: {exc}")
        except Exception:  # a transient error (a lock): try again next beat
            self.mate.log.exception("heartbeat failed", task=self.task_id)
        self.mate.read_mail()
        self.snapshot()

    def snapshot(self) -> None:
        """Across machines: push the worktree's state when it changed since the last beat,
        so another machine resumes from here if this one dies."""
        self.mate.push_wip(self.task_id)

    def check_cancelled(self) -> None:
        """On a board change: stop the run at once when its task was cancelled (or is no
        longer ours), instead of at the next renewal."""
        try:
            task = self.mate.board.get(self.task_id)
        except Exception:  # a torn read or a lock: the next renewal decides
            return
        mine = task.lease is not None and task.lease.token == self.claim.token
        if task.status is Status.CANCELLED or not mine:
            self.cancelled = task.status is Status.CANCELLED
            self.claim.mark_lost()
            self._done.set()

    def poke(self) -> None:
        """Look again now (the worktree was just made), not at the next renewal."""
        os.write(self._w, b"\0")

    def finish(self) -> None:
        self._done.set()
        self.poke()
        self.join()
        if self.watch is not None:
            self.watch.stop()
        os.close(self._r)
        os.close(self._w)


def lowest_priority() -> None:
    """Give the calling thread, and the processes it starts, the lowest CPU priority (on
    Linux a thread has its own nice value, and a child inherits its thread's): they run
    on what the rest leaves of the machine."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


ROOM_WAIT = 10.0
"""The longest a review-cache fill waits for `Teammate.room` (an agent that starts no
process leaves none until its task ends)."""
MAX_BACKOFF = 60.0
"""The longest wait before a retry, in seconds."""
WIP_EVERY = 1.0
"""Across machines: the shortest time between two snapshots pushed for a changing
worktree (between the heartbeat's own, every third of the lease)."""
FAULT_BACKOFF = 30.0
"""No claim on this machine for so long after a task was handed back for its fault."""
MACHINE_FAULTS = ("No space left on device", "Read-only file system", "Disk quota exceeded")
"""What git or an agent says when a disk, not the task, is at fault (LC_ALL=C)."""
LOW_SPACE = 16 * 1024 * 1024
"""Free bytes below which a disk counts as full (git needs room for a task's objects)."""


class MachineFault(OSError):
    """A task's run failed because of this machine (see `MACHINE_FAULTS`)."""


class Outcome(Exception):
    """How a task's run ends short of review: raised by a step of `Teammate._run`, acted
    on there. (A lost claim is `LeaseLost`, a machine's fault `MachineFault`.)"""


class Stopping(Outcome):
    """The teammate is stopping: the task is released, no attempt counted."""


class Paused(Outcome):
    """The task waits for a person (a budget reached, no progress): `Teammate.pause`."""

    def __init__(self, reason: str, session_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.session_id = session_id


class Failed(Outcome):
    """The attempt failed: `Teammate.fail`, and the task waits as ``wait`` says."""

    def __init__(self, error: str, *, retry: bool = True,
                 wait: waits.Wait | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.retry = retry
        self.wait = wait


def fault_in(text: str, disks: list[Path]) -> str | None:
    """The disk fault ``text`` (a git error, an agent's output) reports, if one of
    ``disks`` really is full or read-only: the text alone proves nothing (an agent can
    print anything, and its sandbox's own read-only folders are not the machine's)."""
    fault = next((f for f in MACHINE_FAULTS if f in text), None)
    return fault if fault is not None and any(map(_disk_trouble, disks)) else None


def machine_fault(exc: BaseException, disks: list[Path]) -> str | None:
    """What is wrong with the machine when ``exc`` is its fault and not the task's: any
    OSError, the board's database unreachable, or an error reporting a disk fault that
    one of ``disks`` confirms (`fault_in`)."""
    if isinstance(exc, OSError | BoardUnavailable):
        return f"{type(exc).__name__}: {exc}"
    fault = fault_in(str(exc), disks)
    return None if fault is None else f"{type(exc).__name__}: {fault}: {exc}"


def _disk_trouble(folder: Path) -> bool:
    """Whether the file system of ``folder`` is read-only or all but full."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return True
    return bool(st.f_flag & os.ST_RDONLY) or st.f_bavail * st.f_frsize < LOW_SPACE


def _unchanged(path: Path, task: Task) -> bool:
    """Whether the task's branch is still at the commit it started from (nothing of any
    attempt committed). A workspace that is no git checkout cannot tell: False."""
    if not (path / ".git").exists() or not task.base_commit:
        return False
    try:
        out = Git(path).run("rev-parse", "HEAD", check=False)
    except GitError:
        return False
    return out.returncode == 0 and out.stdout.strip() == task.base_commit


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
    p.add_argument("--started-at", help="When the lead asked for this process (its stop "
                   "requests from then on are for it; older ones were for a namesake).")
    args = p.parse_args(argv)
    layout = Layout.at(Path(args.root), args.worktree_root)
    try:
        config = Config.load(layout.root, overrides=json.loads(args.overrides))
        configure(status.log_file(layout), console=args.console, actor=args.name,
                  fmt=config.team.log_format)
        mate = Teammate(layout, config, args.name, lead_fd=args.lead_fd,
                        overrides=json.loads(args.overrides))
        mate.lead_started_at = args.started_at
        return mate.run()
    except OrchestratorError as exc:
        sys.stderr.write(f"{args.name}: error: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
