"""A team across machines, simulated on one: a bare repository as the shared remote, three
clones each running its own `orchestrator up` (own process group, own .worktrees) on one
PostgreSQL board. Real git, real processes, real PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from orchestrator.board import open_board
from orchestrator.config import BoardConfig
from orchestrator.layout import Layout
from tests.helpers import child_pids, git, make_repo

AGENT = 'echo "done by $(basename $(git rev-parse --git-common-dir | xargs dirname))" ' \
        '> "$ORCH_TASK_ID.txt"'


def orch(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def machines(tmp_path: Path, url: str, n: int = 3) -> tuple[Path, list[Path]]:
    seed = make_repo(tmp_path / "seed", {"app.py": "print('hi')\n"})
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(bare)], check=True)
    clones = []
    for i in range(n):
        c = tmp_path / f"machine{i}"
        subprocess.run(["git", "clone", "-q", str(bare), str(c)], check=True)
        p = orch(c, "init", "--board", url)
        assert p.returncode == 0, p.stderr
        clones.append(c)
    return bare, clones


def up(clone: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "up", *args], cwd=clone,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own process group, like a machine


@pytest.mark.timeout(400)
def test_thirty_tasks_on_three_machines_each_reviewed_once_with_work_on_the_remote(
        tmp_path: Path, pg_board_url: str) -> None:
    bare, clones = machines(tmp_path, pg_board_url)
    with open_board(Layout.at(clones[0]), BoardConfig(url=pg_board_url)) as board:
        for i in range(30):
            board.add(f"task {i}")
    procs = [up(c, "--burst", "-n", "1", "--command", AGENT) for c in clones]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs

    tasks = json.loads(orch(clones[1], "list", "--json").stdout)
    assert len(tasks) == 30 and {t["status"] for t in tasks} == {"review"}
    events = [json.loads(x) for x in orch(clones[2], "events", "--json").stdout.splitlines()]
    completed = Counter(e["task"] for e in events if e["event"] == "task_completed")
    assert sorted(completed) == sorted(t["id"] for t in tasks)
    assert set(completed.values()) == {1}  # each in review exactly once
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    by_machine = Counter(e["machine"] for e in events if e["event"] == "task_claimed")
    assert len(by_machine) >= 2, by_machine  # the work really was shared out
    for t in tasks:  # every branch is on the remote, with the task's own work
        assert git(bare, "show", f"{t['branch']}:{t['id']}.txt").startswith("done by machine")

    # review and merge on a machine that did not run the task: it fetches the branch
    other = next(c for c in clones
                 if not (c / ".worktrees" / tasks[0]["id"]).exists())
    review = json.loads(orch(other, "review", "--json").stdout)
    assert len(review) == 30
    wip = f"refs/orchestrator/wip/{tasks[0]['id']}"
    assert git(bare, "for-each-ref", wip)  # the final snapshot of each task is there
    p = orch(other, "merge", tasks[0]["id"])
    assert p.returncode == 0, p.stderr
    assert not git(bare, "for-each-ref", wip)  # and dropped once it is merged
    assert git(bare, "show", f"main:{tasks[0]['id']}.txt").startswith("done by machine")
    # a machine whose main is now behind the remote refuses to merge, saying why
    behind = next(c for c in clones if c != other)
    p = orch(behind, "merge", tasks[1]["id"])
    assert p.returncode == 1 and "the remote moved" in p.stderr, p.stderr
    assert json.loads(orch(behind, "show", tasks[1]["id"], "--json").stdout)["status"] == \
        "review"


@pytest.mark.timeout(300)
def test_a_killed_machines_task_resumes_on_another_from_its_wip_snapshot(
        tmp_path: Path, pg_board_url: str) -> None:
    _, (a, b) = machines(tmp_path, pg_board_url, 2)
    for c in (a, b):  # short leases, so the dead machine's task comes back quickly
        with (c / "orchestrator.toml").open("a") as f:
            f.write("lease_seconds = 3\n")
    slow = ('if [ -f progress.txt ]; then echo resumed >> progress.txt; '
            'else echo started > progress.txt; sleep 60; fi')
    assert orch(a, "add", "long job").returncode == 0
    machine_a = up(a, "-n", "1", "--command", slow)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the snapshot of the half-done work is pushed
            if git(a, "ls-remote", "origin", "refs/orchestrator/wip/task_001"):
                break
            time.sleep(0.5)
        else:
            raise AssertionError("no WIP snapshot was pushed")
    finally:
        # the whole machine dies at once: every process of it (teammates and their agents
        # run in process groups of their own)
        doomed = [machine_a.pid, *child_pids(machine_a.pid)]
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        machine_a.communicate(timeout=30)
    time.sleep(4)  # its lease runs out on the database's clock
    machine_b = up(b, "--burst", "-n", "1", "--command", slow)
    out = machine_b.communicate(timeout=120)[0]
    assert machine_b.returncode == 0, out
    task = json.loads(orch(b, "show", "1", "--json").stdout)
    events = [(e["event"], e["machine"][-9:]) for e in map(
        json.loads, orch(b, "events", "--json").stdout.splitlines())]
    assert task["status"] == "review" and task["attempts"] == 1, events
    assert git(b, "show", f"{task['branch']}:progress.txt").split() == ["started", "resumed"]
