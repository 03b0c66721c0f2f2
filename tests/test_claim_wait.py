"""A claim that loses the race for a task's lock comes back for it: it waits for the lock
in its second round instead of skipping the task again (found by the forge's bench: a
task sent back to pending while its writer still held the lock was claimed only at the
board's next rescan, 10 s later)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest

from orchestrator.board import init_repo, open_board


def test_a_claim_waits_for_a_task_whose_lock_is_held_for_a_moment(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = init_repo(repo)
    with open_board(layout, actor="lead") as writer, open_board(layout, actor="mate") as mate:
        task = writer.add("sent back")
        monkeypatch.setattr(random, "randrange", lambda n: n - 1)  # the skip after a lost race
        held, done = threading.Event(), threading.Event()

        def hold() -> None:
            with writer._lock(task.id, 5):
                held.set()
                time.sleep(0.3)
            done.set()

        t = threading.Thread(target=hold)
        t.start()
        held.wait(5)
        got = mate.claim("mate")
        t.join()
    assert done.is_set() and got is not None and got.id == task.id
