"""The lead: the supervisor process of a team.

It prepares the repository (``init_repo``), reconciles worktrees with the
board, then starts one teammate process per name and sleeps in `Waker.wait`
until something happens:

- the board changed        → intake dropped files, reap expired leases, read its mailbox
- a teammate exited        → kill its backend's process group, requeue its task at
                             once, restart it after an exponential back-off
- a lease will expire      → the wait's timeout is the earliest expiry, so reaping is
                             on time without polling
- a config file changed    → reload it (`orchestrator.settings.live`): log and record
                             ``config_changed`` (or ``config_rejected`` for a broken file,
                             keeping the last good settings), start or retire teammates to
                             match ``team.teammates``, use the new hooks
- ``team.land`` is on       → one ``orchestrator land ID…`` process at a time for the
                             tasks in review (not those a land rejected to wait for a
                             person); it is asked to stop (SIGTERM) when the team stops
- SIGTERM/SIGINT           → first: warm stop (``shutdown_request`` + SIGTERM to each
                             teammate, wait for them); second: cold (SIGTERM again,
                             SIGKILL whoever is still there after `COLD_GRACE_SECONDS`)

In ``burst`` mode the lead stops the team as soon as nothing is claimable, nothing
is in progress and no dropped file is still settling in the inbox, and exits 1 if a
task failed or a dropped file was rejected during the run.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

import msgspec

from orchestrator.backends import backend_module
from orchestrator.board import board_modules
from orchestrator.config import Config
from orchestrator.controlplane import ControlPlane
from orchestrator.errors import ConfigError, OrchestratorError
from orchestrator.events import (
    ConfigChanged,
    ConfigRejected,
    TaskClaimed,
    TaskCompleted,
    TaskStatusSet,
    TeammateStarted,
    TeammateStopped,
    last_status_event,
)
from orchestrator.forge.watcher import ForgeWatcher
from orchestrator.layout import Layout
from orchestrator.logging import get_logger
from orchestrator.model import LAND_FEEDBACK, Status, Task, utcnow
from orchestrator.process import signal_group
from orchestrator.procutil import lock_holders, process_state
from orchestrator.prompting import reason_line
from orchestrator.settings.live import ConfigWatcher, LiveConfig
from orchestrator.team import status
from orchestrator.team.hooks import Hooks
from orchestrator.team.mailbox import LEAD, read_new
from orchestrator.team.pushing import PendingPushes
from orchestrator.team.spawner import SpawnedProcess, Spawner, SpawnerGone
from orchestrator.team.wake import COLD_SIGNAL, Waker
from orchestrator.worktree.remote import Remote

BACKOFF_BASE_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0
HEALTHY_SECONDS = 60.0
"""A teammate that ran this long before crashing starts its back-off from the beginning."""
COLD_GRACE_SECONDS = 10.0
LAND_POLL_SECONDS = 0.5
"""How often the lead looks whether its ``orchestrator land`` has finished."""

T = TypeVar("T")
P = ParamSpec("P")


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes] | SpawnedProcess | None = None
    pidfd: int = -1
    lead_w: int = -1
    """Our end of the pipe whose closing tells the teammate that the lead is gone."""
    started: float = 0.0
    crashes: int = 0
    restart_at: float | None = None
    retired: bool = False
    """Exited on purpose (asked to stop): not restarted."""
    retiring: bool = False
    """Asked to stop because the team shrank; retired when it exits, however it exits."""
    request_ids: list[str] = field(default_factory=list)
    stopped_since: float | None = None
    """When the lead first saw the process stopped (SIGSTOP), see `Lead.kill_frozen`."""

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class Lead:
    def __init__(self, layout: Layout, config: Config, *, teammates: int | None = None,
                 overrides: dict[str, dict[str, Any]] | None = None, burst: bool = False,
                 console: bool = False) -> None:
        self.layout = layout
        self.config = config
        self.n = teammates or config.team.teammates
        self.overrides = overrides or {}
        self.burst = burst
        self.console = console
        names = config.team.names
        self.children = [Child(names[i] if i < len(names) else f"mate{i + 1}")
                         for i in range(self.n)]
        self.waker = Waker()
        self.log = get_logger(actor=LEAD)
        self.stopping = 0  # 0 running, 1 warm stop, 2 cold stop
        self.cold_deadline: float | None = None
        self.board: ControlPlane
        self.hooks: Hooks
        self.faults: dict[str, str] = {}
        """What failed with an OSError (see `guarded`), with the last error."""
        self.spawner: Spawner | None = None
        """Forks teammates from a process that has imported them (see `spawner`)."""
        self.rejected = 0
        """Dropped files rejected during this run (a burst with any exits 1)."""
        self.lander: subprocess.Popen[bytes] | None = None
        self.forge: ForgeWatcher | None = None  # [forge], not in a burst: pull requests
        """The running ``orchestrator land`` (``team.land``)."""
        self.pushes = PendingPushes()
        """Across machines: this machine's finished branches the remote has not taken."""

    # --- life -----------------------------------------------------------------
    def run(self) -> int:
        from orchestrator.board import init_repo, open_board
        from orchestrator.secrets import protect_process

        protect_process()  # an ancestor of every tool process: no secrets in its /proc
        init_repo(self.layout.root)
        self.start_spawner()  # it imports while the lead recovers
        self.board = open_board(self.layout, self.config.board, actor=LEAD)
        self.hooks = Hooks(self.layout, self.config.hooks, self.board)
        self.pushes.remote = Remote.for_config(self.layout.root, self.config)
        self.live = LiveConfig(self.layout.root, self.config, self.overrides)
        watcher = ConfigWatcher(self.live.files, self.waker.notify).start()
        try:
            self.waker.install_signals()
            self.recover()
            failed_before = {t.id for t in self.board.list(Status.FAILED)}
            if not self.burst:
                self.forge = ForgeWatcher.for_config(self.layout, self.config)
            # an event alone (a webhook's) matters only to the forge thread: without one,
            # the lead sleeps through the ~6 events of each task
            self.waker.follow_board(self.board, self.config.board.rescan_seconds,
                                    events=self.forge is not None)
            for child in self.children:
                self.guarded("starting a teammate", self.spawn, child)
            if self.forge is not None:
                self.forge.start()
            if not self.burst and not self.board.ready():
                self.log.info("waiting for tasks",
                              add="orchestrator add 'SUBJECT' (or drop a file in the inbox)")
            self.loop()
            failed = {t.id for t in self.board.list(Status.FAILED)} - failed_before
            if failed:
                self.summarise_failures(failed)
            if self.rejected:
                self.log.warning("dropped files rejected during this run (see the board's "
                                 "rejected files)", count=self.rejected)
            return 1 if self.burst and (failed or self.rejected) else 0
        finally:
            watcher.stop()
            if self.forge is not None:
                self.forge.stop()
            self.shutdown_children()
            if self.spawner is not None:
                self.spawner.close()
            self.hooks.close()  # the last events' hooks, then wait for running ones
            self.waker.close()
            self.board.close()

    def summarise_failures(self, failed: set[str]) -> None:
        """The end of a run: each task that failed, why, and what it leaves blocked."""
        tasks = {t.id: t for t in self.board.list()}
        for tid in sorted(failed):
            t = tasks[tid]
            self.log.error("task failed", task=tid, reason=reason_line(t.error or ""),
                           attempts=t.attempts, see=f"orchestrator logs {tid}")
        blocked = sorted(_blocked_by(failed, tasks))
        self.log.warning("tasks failed", count=len(failed), tasks=sorted(failed),
                         left_blocked=blocked or None,
                         next="orchestrator retry ID -m 'what to change'")

    def recover(self) -> None:
        """Start-up after any kind of exit: orphans, worktrees, leases, intake."""
        for st in self.board.team.all():
            if st.host is None and status.pid_alive(st.pid):
                self.log.warning("a teammate of an earlier run is still alive", name=st.name,
                                 pid=st.pid)
            elif st.host is None and st.backend_pgid \
                    and signal_group(st.backend_pgid, signal.SIGKILL):
                self.log.warning("killed an orphaned backend", name=st.name,
                                 pgid=st.backend_pgid)
            self.board.team.publish(st.name, "stopped")
        self.guarded("reconciling worktrees", self.reconcile)
        self.tick()

    def reconcile(self) -> None:
        from orchestrator.sandbox import task_sandbox
        from orchestrator.worktree import open_isolation

        manager = open_isolation(
            self.layout, self.config.worktree, self.board,
            sandbox=task_sandbox(self.config, network=self.config.sandbox.network,
                                 root=self.layout.root))
        report = manager.reconcile(self.board.list())
        self.log.info("worktrees reconciled", report=_plain(report))

    def loop(self) -> None:
        while True:
            # before sleeping, not only after a wake-up: a burst with nothing to do (an
            # empty board, every task in review) ends at once, not after a rescan period
            if self.burst and not self.stopping \
                    and self.guarded("reading the board", self.drained):
                self.log.info("burst finished: no claimable work left")
                self.stop(1)
            timeout = self.guarded("reading the board", self.timeout)
            wake = self.waker.wait(self.config.board.rescan_seconds if timeout is None
                                   else timeout, [c.pidfd for c in self.children if c.alive])
            for sig in wake.signals:
                self.stop(2 if sig == COLD_SIGNAL else self.stopping + 1)
            for child in self.children:
                if child.pidfd in wake.fds:
                    self.reap(child)
            if self.cold_deadline is not None and time.monotonic() >= self.cold_deadline:
                self.kill_all()
            if self.stopping:
                if not any(c.alive for c in self.children):
                    return
                continue
            self.tick()
            if self.forge is not None and wake.notified:
                self.forge.poke()  # the board changed: the forge thread reads what is new
            self.guarded("pushing a finished branch", self.pushes.retry, self.board, self.log)
            now = time.monotonic()
            for child in self.children:
                if child.restart_at is not None and now >= child.restart_at:
                    self.guarded("starting a teammate", self.spawn, child)

    def timeout(self) -> float:
        """Until the next thing that is due without any event: a lease expiry, a restart."""
        due: list[float] = []
        now_m, now_w = time.monotonic(), self.board.now()  # leases are on the board's clock
        if self.cold_deadline is not None:
            due.append(self.cold_deadline - now_m)
        if self.pushes.due is not None:
            due.append(self.pushes.due - now_m)
        if self.lander is not None:
            due.append(LAND_POLL_SECONDS)
        if not self.stopping:
            due += [c.restart_at - now_m for c in self.children if c.restart_at is not None]
            for t in self.board.list(Status.IN_PROGRESS):
                if t.lease is not None:  # one the last pass could not reap: again in a second
                    left = t.lease.expires_at - now_w + 0.05
                    due.append(left if left > 0 else 1.0)
        if self.burst and not self.stopping:
            wait = self.board.settling()  # a drop still settling: look again when it has
            if wait is not None:
                due.append(wait)
        due.append(self.config.board.rescan_seconds)  # the lead's mailbox is not watched
        return max(0.0, min(due))

    def tick(self) -> None:
        """What every wake-up does: settings, intake, reap expired leases, kill frozen
        teammates, read the lead's mailbox, start notification hooks. Each step stands
        alone: one that fails is logged (one line) and the others still run."""
        self.guarded("applying changed settings", self.apply_settings)
        self.guarded("intake", self.intake)
        self.guarded("reaping expired leases", self.reap_expired)
        self.guarded("checking for frozen teammates", self.kill_frozen)
        self.guarded("reading the lead's mailbox", self.route_mail)
        self.guarded("landing reviewed tasks", self.land)
        self.guarded("starting notification hooks", self.hooks.poll)

    def intake(self) -> None:
        from orchestrator.board import rejected_line

        for t in self.board.intake():
            self.log.info("task added", task=t.id, subject=t.subject)
        rejected = self.board.rejected_drops()
        line = rejected_line(rejected)
        if line:
            self.log.warning(line)
            self.rejected += len(rejected)

    def reap_expired(self) -> None:
        for t in self.board.requeue_expired(actor=LEAD):
            self.log.warning("lease expired", task=t.id, status=str(t.status))

    def kill_frozen(self) -> None:
        """A teammate stopped (SIGSTOP) in the middle of a write holds a lock the others
        need (its task's, the worktree lock) for as long as it stays stopped. Stopped for
        longer than a lease while holding a lock, it is killed, and its task is requeued
        like any dead teammate's. (One stopped outside a write is left alone: its task is
        reaped when the lease runs out, and its late writes are fenced off.)"""
        now = time.monotonic()
        stopped = []
        for child in self.children:
            if child.alive and child.proc is not None \
                    and process_state(child.proc.pid) == "T":
                child.stopped_since = child.stopped_since or now
                if now - child.stopped_since > self.config.board.lease_seconds:
                    stopped.append(child)
            else:
                child.stopped_since = None
        holding = lock_holders() if stopped else set()
        for child in stopped:
            assert child.proc is not None
            if child.proc.pid in holding:
                self.log.warning("teammate stopped past its lease while holding a lock; "
                                 "killing it", teammate=child.name, pid=child.proc.pid)
                _signal(child.proc, signal.SIGKILL)

    def guarded(self, what: str, fn: Callable[P, T], *args: P.args,
                **kwargs: P.kwargs) -> T | None:
        """Run ``fn``; when it fails — the control plane cannot be used (a full or read-only
        disk, too few open files, a board database that is down), or any other error — log
        one line (once, until it works again) and return None: the supervisor stays up, the
        other steps still run, and leases and the next pass put the board right later."""
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            error = " ".join(f"{type(exc).__name__}: {exc}".split())[:500]
            # an OSError by its kind, not the file name; a board database's message names
            # its kind of error
            kind = (f"{type(exc).__name__} {exc.errno}" if isinstance(exc, OSError)
                    else error)
            if self.faults.get(what) != kind:
                self.log.error(f"{what} failed", error=error)
                self.faults[what] = kind
            return None
        if self.faults.pop(what, None) is not None:
            self.log.info(f"{what} works again")
        return result

    def apply_settings(self) -> None:
        """Reload changed config files and apply what is live (see the module docstring)."""
        change = self.live.check()
        if change is None:
            return
        if change.error:
            self.log.error("configuration not applied; the last good settings stay in force",
                           error=change.error)
            self.board.events.emit(ConfigRejected(error=change.error), actor=LEAD)
            return
        if not change.changed:
            return
        # say what was running (`up -n` may differ from the file)
        changes = [msgspec.structs.replace(c, old=self.n) if c.key == "team.teammates" else c
                   for c in change.changed]
        self.log.info("settings changed", changes=msgspec.to_builtins(changes))
        for c in changes:
            if not c.live:
                self.log.warning("setting changed; it applies after a restart", key=c.key)
        self.board.events.emit(ConfigChanged(changes=changes), actor=LEAD)
        self.config = self.live.config
        if not self.hooks.configured:  # newly configured hooks start from now on
            self.hooks.pos = self.board.events.last_seq()
        self.hooks.config = self.config.hooks
        if change.has("team.teammates"):
            self.resize(self.config.team.teammates)

    def resize(self, n: int) -> None:
        """Start or retire teammates until ``n`` are active; idle ones are retired first
        (a working one releases its task at its next step, as on a warm stop)."""
        self.children = [c for c in self.children
                         if not (c.retired and not c.alive and c.pidfd < 0)]
        active = [c for c in self.children if not c.retired and not c.retiring]
        if n > len(active):
            used = {c.name for c in self.children}
            names = [*self.config.team.names, *(f"mate{i + 1}" for i in range(64))]
            for name in [x for x in names if x not in used][:n - len(active)]:
                child = Child(name)
                self.children.append(child)
                self.spawn(child)
        else:
            def busy(c: Child) -> bool:
                st = self.board.team.get(c.name)
                return st is not None and st.state == "working"

            victims = sorted(active, key=lambda c: (busy(c), -active.index(c)))
            for child in victims[:len(active) - n]:
                self.retire(child)
        self.n = n
        names_now = [c.name for c in self.children if not c.retired and not c.retiring]
        self.log.info("team resized", teammates=n, names=names_now)
        info = status.read_json(status.daemon_file(self.layout))
        if info is not None and info.get("pid") == os.getpid():
            status.write_json(status.daemon_file(self.layout), {**info, "teammates": names_now})

    def retire(self, child: Child) -> None:
        child.retiring = True
        child.restart_at = None
        if not child.alive:
            child.retired = True
            return
        assert child.proc is not None
        rid = uuid.uuid4().hex[:12]
        child.request_ids.append(rid)
        self.board.mailboxes.send(child.name, LEAD, "the team is smaller now",
                                  kind="shutdown_request", request_id=rid)
        _signal(child.proc, signal.SIGTERM)
        self.log.info("retiring teammate", teammate=child.name)

    def route_mail(self) -> None:
        for msg in read_new(self.board.mailboxes, LEAD):
            kind, sender = msg.get("kind"), msg.get("from")
            if kind == "permission_request":
                self.log.warning("permission requested", teammate=sender,
                                 request_id=msg.get("request_id"), body=msg.get("body"),
                                 hint=f"orchestrator approve|deny {msg.get('request_id')}")
            elif kind == "shutdown_request":  # `down --all` on another machine, `send lead`
                self.log.info("shutdown requested", by=sender,
                              request_id=msg.get("request_id"))
                self.stop(1)
            elif kind == "shutdown_response":
                self.log.info("teammate acknowledged shutdown", teammate=sender,
                              request_id=msg.get("request_id"))
            else:
                self.log.info("message", sender=sender, kind=kind, body=msg.get("body"))

    def drained(self) -> bool:
        """Nothing claimable, nothing running, no dropped file still settling in the inbox
        (it becomes a task or is rejected once it settles), and nothing left to land.
        Claimable is asked again after running: a failed attempt that goes back to pending
        between the two reads was neither (and the burst ended with it undone)."""
        return not self.board.ready() and not self.board.list(Status.IN_PROGRESS) \
            and not self.board.ready() and self.board.settling() is None \
            and self.lander is None and not (self.config.team.land and self.landable()) \
            and not self.pushes.pending(self.board)

    # --- the merge queue (team.land) --------------------------------------------
    def land(self) -> None:
        """Start ``orchestrator land`` for the tasks in review when none runs; a land that
        ended is reaped here (its outcome is in the events)."""
        if self.lander is not None:
            if self.lander.poll() is None:
                return
            self.log.info("land finished", exit_code=self.lander.returncode)
            self.lander = None
        if self.stopping or not self.config.team.land:
            return
        ids = self.landable()
        if not ids:
            return
        with status.log_file(self.layout).open("ab") as out:
            self.lander = subprocess.Popen(
                [sys.executable, "-m", "orchestrator", "land", *ids, "--unattended", "--repo",
                 str(self.layout.root)], stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        self.log.info("landing", tasks=ids, pid=self.lander.pid)

    def landable(self) -> list[str]:
        return [t.id for t in self.board.list(Status.REVIEW)
                if not (t.error or "").startswith(LAND_FEEDBACK)]

    # --- teammates ------------------------------------------------------------
    def spawn(self, child: Child) -> None:
        try:
            child.proc, child.pidfd, child.lead_w = self._start_process(child)
        except OSError as exc:  # too few file descriptors or processes: try again later
            delay = min(BACKOFF_BASE_SECONDS * 2 ** child.crashes, BACKOFF_MAX_SECONDS)
            child.crashes += 1
            child.restart_at = time.monotonic() + delay
            self.log.error("cannot start teammate", teammate=child.name, retry_in=delay,
                           error=f"{type(exc).__name__}: {exc}")
            return
        child.started = time.monotonic()
        child.restart_at = None
        self.guarded("recording a teammate", self.board.team.publish, child.name,
                     "starting", pid=child.proc.pid, since=utcnow())
        self.guarded("recording an event", self.board.events.emit,
                     TeammateStarted(teammate=child.name, pid=child.proc.pid), actor=LEAD)
        self.log.info("teammate started", teammate=child.name, pid=child.proc.pid)

    def start_spawner(self) -> None:
        from orchestrator.sandbox import task_sandbox

        board = board_modules(self.config.board)
        for module in board:  # the lead opens the board next: its import (psycopg's ~0.08 s)
            importlib.import_module(module)  # is paid once, before the fork, not twice after
        # bubblewrap is probed (a process in namespaces of its own) once, here: the lead's
        # reconcile and every teammate forked from the spawner inherit the answer
        with contextlib.suppress(ConfigError):  # reconciling reports it
            task_sandbox(self.config, network=self.config.sandbox.network,
                         root=self.layout.root)
        try:
            self.spawner = Spawner().start(preload=[backend_module(self.config.team.backend),
                                                    *board])
        except OSError as exc:
            self.log.warning("no spawner; teammates start as fresh interpreters",
                             error=f"{type(exc).__name__}: {exc}")

    def board_now(self, name: str) -> str:
        """The board's time now (the time of a status row written for ``name``); this
        machine's if the board cannot be written."""
        st = self.guarded("recording a teammate", self.board.team.publish, name, "starting",
                          since=utcnow())
        return st.updated_at if st is not None and st.updated_at else utcnow()

    def _start_process(self, child: Child
                       ) -> tuple[subprocess.Popen[bytes] | SpawnedProcess, int, int]:
        """The teammate's process, a pidfd to wait on, our end of its lead pipe."""
        r, w = os.pipe()
        args = [
            "--root", str(self.layout.root), "--worktree-root", str(self.layout.worktree_root),
            "--name", child.name, "--lead-fd", "{lead_fd}",
            "--overrides", json.dumps(self.overrides),
            # what this lead sends it from now on is for it, even before it is up (on the
            # board's clock, as the messages are)
            "--started-at", self.board_now(child.name),
        ]
        if self.console:
            args.append("--console")
        if self.spawner is not None:
            try:
                forked = self.spawner.spawn(args, r)
            except SpawnerGone as exc:
                self.log.warning("the spawner is gone; teammates start as fresh interpreters",
                                 error=str(exc))
                self.spawner = None
            except BaseException:
                os.close(r)
                os.close(w)
                raise
            else:
                os.close(r)
                return forked, forked.pidfd, w
        cmd = [sys.executable, "-m", "orchestrator.team.teammate",
               *[str(r) if a == "{lead_fd}" else a for a in args]]
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, pass_fds=(r,),
                                    start_new_session=True)
        except BaseException:
            os.close(w)
            raise
        finally:
            os.close(r)
        try:
            return proc, os.pidfd_open(proc.pid), w
        except OSError:
            proc.kill()
            proc.wait()
            os.close(w)
            raise

    def reap(self, child: Child) -> None:
        assert child.proc is not None
        rc = child.proc.wait()
        os.close(child.pidfd)
        os.close(child.lead_w)
        child.pidfd = child.lead_w = -1
        how = f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"
        st = self.guarded("reading a teammate", self.board.team.get, child.name)
        if rc != 0 and st is not None and st.backend_pgid:
            signal_group(st.backend_pgid, signal.SIGKILL)
        requeued = []
        if rc != 0:  # when the board cannot be written now, the lease expires later
            requeued = self.guarded("requeueing a dead teammate's task",
                                    self.board.requeue_owner, child.name,
                                    reason=f"teammate {child.name} died ({how})",
                                    actor=LEAD) or []
        if rc != 0 and st is not None and st.task:
            self.guarded("completing the events log", self.log_lost_write, child.name,
                         st.task)
        self.guarded("recording a teammate", self.board.team.publish, child.name,
                     "stopped", pid=child.proc.pid, exit=how, since=utcnow())
        self.guarded("recording an event", self.board.events.emit, TeammateStopped(
            teammate=child.name, pid=child.proc.pid, exit_code=rc,
            requeued=[t.id for t in requeued]), actor=LEAD)
        if self.stopping or rc == 0 or child.retiring:
            child.retired = True
            self.log.info("teammate stopped", teammate=child.name, exit=how)
            return
        lived = time.monotonic() - child.started
        child.crashes = 1 if lived >= HEALTHY_SECONDS else child.crashes + 1
        delay = min(BACKOFF_BASE_SECONDS * 2 ** (child.crashes - 1), BACKOFF_MAX_SECONDS)
        child.restart_at = time.monotonic() + delay
        self.log.warning("teammate died", teammate=child.name, exit=how, restart_in=delay,
                         requeued=[t.id for t in requeued])

    def log_lost_write(self, name: str, task_id: str) -> None:
        """A teammate killed between its board write and the event that records it leaves
        the log one line short (the board says ``review``, the log still says it was
        claimed). When the task still carries that teammate's claim (no claim since),
        log what the board shows on its behalf, marked ``recovered``."""
        last = last_status_event(self.board.events, task_id)
        claimed = None if last is None else last.decode()
        if not isinstance(claimed, TaskClaimed) or claimed.owner != name:
            return
        try:
            task = self.board.get(task_id)
        except OrchestratorError:
            return
        token = claimed.token
        if task.status is Status.IN_PROGRESS or task.fence != token:
            return  # still running (requeued just now if it was ours), or claimed again
        if task.status is Status.REVIEW:
            self.board.events.emit(TaskCompleted(token=token, recovered=True), task_id,
                                   actor=name)
        else:
            self.board.events.emit(TaskStatusSet(from_="in_progress", to=str(task.status),
                                                 recovered=True, token=token, error=task.error),
                                   task_id, actor=name)
        self.log.warning("logged the last board write of a dead teammate", teammate=name,
                         task=task_id, status=str(task.status))

    def stop(self, level: int) -> None:
        """Warm (1) or cold (2) stop of the whole team; a further signal is cold again."""
        level = min(level, 2)
        if level <= self.stopping:
            return
        self.stopping = level
        if level == 1 and self.console:
            self.log.info("stopping", mode="warm",
                          note="running work finishes its step; Ctrl-C again to stop now")
        else:
            self.log.info("stopping", mode="warm" if level == 1 else "cold")
        for child in self.children:
            child.restart_at = None
            if not child.alive:
                continue
            assert child.proc is not None
            if level == 1:
                rid = uuid.uuid4().hex[:12]
                child.request_ids.append(rid)
                self.board.mailboxes.send(child.name, LEAD, "stop after this step",
                                          kind="shutdown_request", request_id=rid)
            _signal(child.proc, signal.SIGTERM if level == 1 else COLD_SIGNAL)
        if level == 2:
            self.cold_deadline = time.monotonic() + COLD_GRACE_SECONDS

    def kill_all(self) -> None:
        for child in self.children:
            if child.alive:
                assert child.proc is not None
                self.log.warning("teammate did not stop, killing it", teammate=child.name)
                _signal(child.proc, signal.SIGKILL)
        self.cold_deadline = None

    def shutdown_children(self) -> None:
        """On the way out, whatever happened: no teammate outlives the lead."""
        if self.lander is not None:  # stops between steps, killing its verify command
            _signal(self.lander, signal.SIGTERM)
            try:
                self.lander.wait(COLD_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                _signal(self.lander, signal.SIGKILL)
                self.lander.wait()
            self.lander = None
        for child in self.children:
            if child.alive:
                assert child.proc is not None
                _signal(child.proc, signal.SIGKILL)
                self.reap(child)
            elif child.pidfd >= 0:
                self.reap(child)


def _signal(proc: subprocess.Popen[bytes] | SpawnedProcess, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except ProcessLookupError:
        pass


def _plain(obj: Any) -> Any:
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "__dataclass_fields__"):
        return {k: str(v) for k, v in vars(obj).items()}
    return str(obj) if obj is not None else None


def _blocked_by(failed: set[str], tasks: dict[str, Task]) -> set[str]:
    """The not-yet-done tasks that wait, directly or through others, on a failed one."""
    stuck: set[str] = set()
    grew = True
    while grew:
        grew = False
        for t in tasks.values():
            if t.id not in stuck and not t.status.final and t.status is not Status.FAILED \
                    and any(b in failed or b in stuck for b in t.blocked_by):
                stuck.add(t.id)
                grew = True
    return stuck
