"""Disk and resource faults (issue 10) against a running team, through `scripts/faults.py`:
a full disk, too few file descriptors, a read-only `.tasks/`. Each must give clear one-line
errors, keep the team up without claiming, corrupt nothing and recover once removed.

The scenarios mount a tmpfs and use ``prlimit``/``chattr``, so they need root; the
heartbeat test below runs anywhere.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from orchestrator.board import init_repo, open_board
from orchestrator.board.mailboxes import Mailbox
from orchestrator.clock import utcnow
from orchestrator.config import Config
from orchestrator.errors import LeaseLost
from orchestrator.team.claim import Claim
from orchestrator.team.teammate import Heartbeat, Teammate
from scripts import faults

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (needs root)")


@root_only
@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", ["full", "emfile", "readonly"])
def test_a_fault_stops_claiming_corrupts_nothing_and_the_team_recovers(
        tmp_path: Path, fault: str) -> None:
    res = faults.run(fault, tmp_path, say=lambda _: None)
    during = res["during"]
    # the team stays up: no crash, no restart loop
    assert during["lead_alive"] and all(during["teammates_alive"].values()), during
    # nothing half written (a temp file may exist for a moment during a failing write;
    # none may be left afterwards)
    assert not during["broken_task_files"], during
    assert not res["after_broken_task_files"] and not res["after_temp_files"]
    if fault != "emfile":  # the CLI process has its own, normal, limit
        assert during["cli_add_exit"] == 1 and during["cli_add_error_lines"] == 1
        assert during["cli_add_error"].startswith("error: ") and not during["cli_traceback"]
        assert during["claims"] == 0, "a teammate claimed a task it could not write"
    else:  # a claim needs one or two descriptors; the work, more: each gives its task back
        assert during["claims"] <= 2
    # recovered: every task (those waiting and the one added during the fault) done, once
    assert not res["lost"] and not res["not_in_review"], res
    assert not res["completed_twice"] and not res["commits_not_one"], res
    assert res["error_count"] >= 1 and res["tracebacks"] == 0, res["error_lines"]
    assert not res["leftover_processes"]


def test_a_renewal_refused_after_our_own_completion_is_not_a_lost_lease(repo: Path) -> None:
    """The heartbeat may renew just after the run completed the task: that refusal must
    not read as 'lease lost' (which would log the finished task as abandoned)."""
    layout = init_repo(repo)
    mate = Teammate(layout, Config.load(repo), "alice")
    with open_board(layout) as board:
        mate.board = board
        done, taken = (board.claim("alice", task_id=board.add(s).id) for s in ("one", "two"))
        assert done is not None and taken is not None
        claims = [Claim(board, t, owner="alice", lease_seconds=30) for t in (done, taken)]
        beats = [Heartbeat(mate, c, threading.Event()) for c in claims]
        try:
            claims[0].complete()  # the final write marks the claim ending first
            beats[0].beat()
            assert not claims[0].lost
            board.requeue_owner("alice", reason="the lead saw it die")  # not our doing
            beats[1].beat()
            assert claims[1].lost
            with pytest.raises(LeaseLost):  # a lost claim writes nothing more
                claims[1].release("too late")
        finally:
            for b in beats:
                os.close(b._r)
                os.close(b._w)
            mate.waker.close()


def test_a_shutdown_request_left_from_an_earlier_run_does_not_stop_a_new_teammate(
        repo: Path) -> None:
    """A warm stop mails each teammate a shutdown request; one that exits on the signal
    before reading it leaves it behind. Its namesake in the next run must not obey it (the
    chaos run found a restarted team retiring itself this way)."""
    layout = init_repo(repo)
    Mailbox(layout, "alice").send("lead", "stop after this step", kind="shutdown_request",
                                  request_id="old")
    stamp = utcnow()
    while utcnow() == stamp:  # the next millisecond: the new teammate starts after it
        pass
    mate = Teammate(layout, Config.load(repo), "alice")
    mate.board = open_board(layout, actor="alice")
    try:
        mate.read_mail()
        assert not mate.warm.is_set()
        Mailbox(layout, "alice").send("lead", "stop now", kind="shutdown_request",
                                      request_id="new")
        mate.read_mail()
        assert mate.warm.is_set()
        assert [r.get("request_id") for r in mate.shutdown_requests] == ["new"]
    finally:
        mate.board.close()
        mate.waker.close()
