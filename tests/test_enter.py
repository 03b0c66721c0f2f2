"""`orchestrator enter ID [-- CMD]`, run as a person runs it: a real subprocess, a real shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from orchestrator.board import init_repo, open_board
from orchestrator.board.eventlog import EventLog
from orchestrator.config import Config
from orchestrator.model import Task
from orchestrator.worktree import binding, open_isolation


def claimed_task(repo: Path) -> Task:
    """A task in progress with its worktree, as a teammate leaves it mid-run."""
    layout = init_repo(repo)
    with open_board(layout) as board:
        task = board.add("Fix the parser")
        claimed = board.claim("alice", task_id=task.id)
        assert claimed is not None and claimed.lease is not None
        ws = open_isolation(layout, Config.load(repo).worktree, board).create(claimed)
        return board.update(task.id, claimed.lease.token, **binding(ws))


def enter(repo: Path, *args: str, stdin: str = "", shell: str | None = None,
          cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("SHELL", None)
    if shell is not None:
        env["SHELL"] = shell
    where = ["--repo", str(repo)] if cwd else []
    return subprocess.run([sys.executable, "-m", "orchestrator", "enter", *where, *args],
                          input=stdin,
                          cwd=cwd or repo, env=env, capture_output=True, text=True, timeout=60)


def test_a_command_runs_in_the_worktree_with_the_task_environment_and_its_status(
        repo: Path) -> None:
    task = claimed_task(repo)
    res = enter(repo, task.id, "--", "sh", "-c",
                'pwd; echo "$ORCH_TASK_ID $ORCH_PORT_BASE $ORCH_TASK_SUBJECT"; exit 7')
    assert res.returncode == 7, res.stderr
    where, env_line = res.stdout.splitlines()
    assert where == task.worktree
    assert env_line == f"{task.id} 20000 Fix the parser"


def test_the_shell_opens_there_and_returning_leaves_the_task_as_it_was(
        repo: Path, tmp_path: Path) -> None:
    task = claimed_task(repo)
    with open_board(init_repo(repo)) as board:
        before = board.get(task.id)
    # $SHELL reads its commands from stdin, as a person would type them
    res = enter(repo, task.id, stdin='echo "in $(pwd) as $ORCH_TASK_ID"; exit 3\n',
                shell="/bin/sh", cwd=tmp_path)
    assert res.returncode == 3, res.stderr
    assert res.stdout == f"in {task.worktree} as {task.id}\n"
    assert f"entering {task.id} in {task.worktree}" in res.stderr
    with open_board(init_repo(repo)) as board:
        after = board.get(task.id)
    assert after == before  # same status, lease, token, fields
    [visit] = [e for e in EventLog(init_repo(repo).events).read()
               if e["event"] == "worktree_entered"]
    assert visit["task"] == task.id and visit["actor"] == "cli"


def test_a_missing_shell_falls_back_to_bin_sh(repo: Path) -> None:
    task = claimed_task(repo)
    res = enter(repo, task.id, stdin="echo fallback\n", shell="/no/such/shell")
    assert res.returncode == 0 and res.stdout == "fallback\n", res.stderr


def test_bad_input_is_one_line(repo: Path) -> None:
    task = claimed_task(repo)
    res = enter(repo, "task_999", "--", "true")
    assert res.returncode == 1 and res.stderr.count("\n") == 1 and "task_999" in res.stderr
    with open_board(init_repo(repo)) as board:
        pending = board.add("Not started")
    res = enter(repo, pending.id, "--", "true")
    assert res.returncode == 1 and "has no workspace" in res.stderr
    assert "made when a teammate claims the task" in res.stderr
    assert res.stderr.count("\n") == 1
    res = enter(repo, task.id, "--", "no-such-command-here")
    assert res.returncode == 127 and res.stderr.startswith("error: cannot run no-such-command")
    assert "Traceback" not in res.stderr


def test_json_prints_the_command_s_output_first_then_the_json_as_the_last_line(
        repo: Path) -> None:
    """`enter ID --json -- CMD`: what the command prints comes first, as it printed it; the
    JSON is the last line, on its own even when the command's output ends mid-line."""
    import json

    task = claimed_task(repo)
    body = "".join(f"line {i}\n" for i in range(5000))  # more than one pipe buffer
    script = f"printf '%s' '{body}'; echo to-stderr >&2; printf 'no newline at the end'; exit 3"
    res = enter(repo, "1", "--json", "--", "sh", "-c", script)
    assert res.returncode == 3, res.stderr
    *printed, last = res.stdout.split("\n")[:-1]
    assert "\n".join(printed) + "\n" == body + "no newline at the end\n"
    assert json.loads(last) == {"task": task.id, "worktree": task.worktree,
                                "command": ["sh", "-c", script], "exit_code": 3}
    assert res.stderr == "to-stderr\n"
    res = enter(repo, "1", "--json", "--", "sh", "-c", "echo done")
    assert res.returncode == 0 and res.stdout.split("\n")[0] == "done"
    assert json.loads(res.stdout.split("\n")[1])["exit_code"] == 0
    assert res.stdout.count("\n") == 2  # no blank line added after a whole line
