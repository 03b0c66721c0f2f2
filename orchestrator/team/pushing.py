"""A claim's pushes to the shared remote of a team across machines: each carries its lease.

`Pushes` belongs to one claim. Every push of the task's WIP snapshot or branch expects the
remote's ref to hold the commit the board recorded for it (``Task.pushed``, read at the
claim), and a push that goes through is recorded at once with a fenced write; so:

- a teammate that lost its lease pushes against the commit of its own time: once the new
  owner has pushed, the remote refuses it (`PushRefused`), and its record, fenced by an old
  token, is refused by the board;
- a push of the current owner that meets an unrecorded commit (a fenced-out teammate
  slipped one in between its last renewal and losing the lease) checks that the lease holds
  with a fenced write (`Claim.still_ours`) and then pushes over it; a fenced-out teammate
  fails that check (`LeaseLost`) and stops.

One lock per claim serializes the heartbeat's WIP push and the run's final push, so they
never race (a WIP push finishing after the branch push would leave the task's snapshot
newer than its branch, or the other way round).

The final branch push (`finish`) is not a condition of review: when the remote refuses for
a reason of its own (down, read-only, full) the task goes to review with ``push_pending``,
and this machine's lead pushes it again until it lands (`retry_pending`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.errors import GitError
from orchestrator.events import BranchPushed
from orchestrator.model import PushPending, Status, Task
from orchestrator.worktree.remote import PushRefused, Remote

if TYPE_CHECKING:
    from orchestrator.controlplane import ControlPlane
    from orchestrator.team.claim import Claim

_Push = Callable[[str | None], str | None]
TAKEOVERS = 3
"""How often the current owner pushes over an unrecorded commit before it gives up."""


class Pushes:
    def __init__(self, remote: Remote, claim: Claim, task: Task, log: Any) -> None:
        self.remote = remote
        self.claim = claim
        self.task_id = task.id
        self.pushed = dict(task.pushed)
        """What the remote holds for this task as far as this lease knows."""
        self.lock = threading.Lock()
        self.log = log
        self.finished = False
        """The final push has run: no more snapshots (the heartbeat beats on until the
        task is completed, and would push the dropped WIP ref again)."""

    def wip(self, worktree: Path) -> str | None:
        """Push the worktree's state when it changed; the commit pushed, or None."""
        with self.lock:
            if self.finished:
                return None
            return self._leased("wip", lambda expect: self.remote.snapshot(
                worktree, self.task_id, expect, leased=True))

    def finish(self, worktree: Path, branch: str, machine: str) -> PushPending | None:
        """The final snapshot, then the branch; the WIP ref goes once the branch is there.
        None when it all landed, else what is pending (the reason the remote gave).
        `LeaseLost` when this lease is gone."""
        with self.lock:
            self.finished = True
            try:
                self._leased("wip", lambda expect: self.remote.snapshot(
                    worktree, self.task_id, expect, leased=True))
                self._leased("branch", lambda expect: self.remote.push_branch(branch, expect))
            except PushRefused:
                raise
            except GitError as exc:
                return PushPending(machine=machine, reason=str(exc))
            if not self.remote.drop_wip(self.task_id):  # the lead drops it with the retries
                return PushPending(machine=machine, reason=DROP_REFUSED)
            self.pushed.pop("wip", None)
            self.claim.update(pushed=self.pushed)
            return None

    def _leased(self, key: str, push: _Push) -> str | None:
        for _ in range(TAKEOVERS):
            try:
                commit = push(self.pushed.get(key))
            except PushRefused as exc:
                # someone pushed that the board never recorded: a fenced-out owner, if the
                # lease is still ours (a fenced write; LeaseLost: we are the fenced-out one)
                self.claim.still_ours()
                self.pushed[key] = self.remote.remote_commit(exc.ref) or ""
                self.log.warning("pushing over a write of a fenced-out owner",
                                 task=self.task_id, ref=exc.ref)
                if not self.pushed[key]:
                    self.pushed.pop(key)
                continue
            if commit is not None and commit != self.pushed.get(key):
                self.pushed[key] = commit
                self.claim.update(pushed=self.pushed)
            return commit
        raise PushRefused(f"{self.task_id}: the remote's {key} kept moving under this lease",
                          ref=key)


DROP_REFUSED = "the remote refused to delete the task's WIP ref"


class WorktreeWatch:
    """Notes when a file of a task's worktree changes (inotify, through watchdog), so a
    backend without steps (a command agent, Claude Code) has its work snapshotted as it
    changes rather than only on the heartbeat. ``wake`` is called once per change noted
    (`changed` set), from the watcher's thread."""

    def __init__(self, path: Path, wake: Callable[[], object]) -> None:
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        self.changed = threading.Event()
        changed = self.changed

        class Noted(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.event_type in ("opened", "closed_no_write") or changed.is_set():
                    return
                changed.set()
                wake()

        self._observer = Observer()
        self._observer.name = f"worktree-watch-{path.name}"
        self._observer.daemon = True
        self._observer.schedule(Noted(), str(path), recursive=True)
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join()


def retry_pending(board: ControlPlane, remote: Remote, machine: str,
                  log: Any) -> tuple[int, int]:
    """Push again the branches of this machine's finished tasks that the remote has not
    taken yet; how many landed now, and how many are still pending."""
    landed = left = 0
    for task in mine(board, machine):
        assert task.branch is not None and task.push_pending is not None
        try:
            commit = remote.push_branch(task.branch, task.pushed.get("branch"))
        except GitError as exc:
            log.info("push still pending", task=task.id, reason=str(exc))
            left += 1
            continue
        if not remote.drop_wip(task.id):
            log.info("push still pending", task=task.id, reason=DROP_REFUSED)
            left += 1
            continue
        pushed = {k: v for k, v in task.pushed.items() if k != "wip"}
        board.edit(task.id, actor="lead", push_pending=None, pushed={**pushed,
                                                                     "branch": commit})
        board.events.emit(BranchPushed(branch=task.branch, sha=commit,
                                       after=task.push_pending.reason), task.id, actor="lead")
        log.info("pending push landed", task=task.id, branch=task.branch)
        landed += 1
    return landed, left


def mine(board: ControlPlane, machine: str) -> list[Task]:
    """The finished tasks whose branch this machine still has to push."""
    return [t for t in board.list(Status.REVIEW) if t.push_pending is not None
            and t.push_pending.machine == machine and t.branch]


class PendingPushes:
    """The lead's side: `retry_pending` now and then, backing off while the remote
    refuses (2 s, doubled up to `MAX_BACKOFF`), at once again after a push landed."""

    def __init__(self) -> None:
        self.remote: Remote | None = None
        self.due: float | None = None
        """When to try next (monotonic); None: nothing is known to be pending."""
        self.failures = 0

    def retry(self, board: ControlPlane, log: Any) -> None:
        machine = getattr(board, "machine", None)
        if self.remote is None or machine is None:
            return
        now = time.monotonic()
        if self.due is not None and now < self.due:
            return
        landed, left = retry_pending(board, self.remote, str(machine), log)
        self.failures = 0 if landed or not left else self.failures + 1
        self.due = now + min(2.0 * 2 ** self.failures, MAX_BACKOFF) if left else \
            now + RESCAN

    def pending(self, board: ControlPlane) -> bool:
        machine = getattr(board, "machine", None)
        return self.remote is not None and machine is not None and bool(
            mine(board, str(machine)))


MAX_BACKOFF = 60.0
RESCAN = 10.0
"""With nothing pending, how often to look for a task whose push is pending (a teammate
just completed one)."""
