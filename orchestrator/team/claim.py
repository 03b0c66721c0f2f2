"""A teammate's claim on one task: the lease token, the renewals, the one final write.

Every board write of the run goes through the `Claim`, so every one carries the
token. The final write (`complete`, `fail`, `release`) marks the claim ``ending``
first: a renewal refused after that lost nothing (the lease was handed back), while
a renewal refused before it means another teammate owns the task now (``lost``),
and the run is abandoned without touching the board again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from orchestrator.controlplane import Board
from orchestrator.errors import LeaseLost
from orchestrator.model import Task

_Write = Callable[[], Task]


class Claim:
    def __init__(self, board: Board, task: Task, *, owner: str, lease_seconds: float) -> None:
        assert task.lease is not None, "a claimed task carries its lease"
        self.board = board
        self.task_id = task.id
        self.token = task.lease.token
        self.owner = owner
        self.lease_seconds = lease_seconds
        self._lock = threading.Lock()
        self.lost = False
        """Another teammate owns the task now: write nothing more."""
        self.ending = False
        """The final write has started: a refused renewal after it is no loss."""

    def renew(self) -> bool:
        """Extend the lease (the heartbeat). False, and `lost` set unless ending, when the
        board refuses: the claim is over either way."""
        try:
            self.board.renew(self.task_id, self.token, lease_seconds=self.lease_seconds)
        except LeaseLost:
            with self._lock:
                self.lost = self.lost or not self.ending
            return False
        return True

    def mark_lost(self) -> None:
        """Another owner has the task now, or it was cancelled (seen on the board's change
        feed): write nothing more, unless the final write has started."""
        with self._lock:
            self.lost = self.lost or not self.ending

    def update(self, **fields: object) -> Task:
        """A fenced write of non-status fields; `LeaseLost` marks the claim lost."""
        return self._write(lambda: self.board.update(self.task_id, self.token, **fields))

    def still_ours(self) -> None:
        """Raise `LeaseLost` unless the lease holds, renewed for a full term: a fenced
        write timed by the board's clock, so a machine whose clock is off by minutes
        neither trusts a dead lease nor doubts a live one."""
        self._write(lambda: self.board.renew(self.task_id, self.token,
                                             lease_seconds=self.lease_seconds))

    # --- the final write ---------------------------------------------------------
    def complete(self, **fields: object) -> Task:
        return self._final(lambda: self.board.complete(self.task_id, self.token, **fields))

    def fail(self, error: str, *, retry: bool = True) -> Task:
        return self._final(lambda: self.board.fail(self.task_id, self.token, error,
                                                   retry=retry))

    def release(self, reason: str) -> Task:
        return self._final(lambda: self.board.release(self.task_id, self.token,
                                                      reason=reason))

    def _final(self, write: _Write) -> Task:
        with self._lock:
            if self.lost:
                raise LeaseLost(f"{self.task_id}: the claim was lost", task=self.task_id)
            self.ending = True
        return self._write(write)

    def _write(self, write: _Write) -> Task:
        try:
            return write()
        except LeaseLost:
            with self._lock:
                self.lost = True
            raise

