"""Failures say why, where the user looks, and retries can help (issue 22).

A real team (`orchestrator up --burst` as a process) runs a command agent that fails in
chosen ways: a program that is not found fails once; another failure retries with back-off,
and the retry's ORCH_PROMPT says what went wrong; failing checks go straight back to the
agent with their output, then wait for a person.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import msgspec

from orchestrator.board.tasklogs import read_jsonl
from orchestrator.model import Status, Task
from orchestrator.prompting import build_prompt, last_failure
from tests.helpers import make_repo
from tests.test_team_support import cli, tasks, team_env

AGENT = """#!/bin/sh
printf '%s\\n===\\n' "$ORCH_PROMPT" >> "$PROMPTS/$ORCH_TASK_ID"
case "$ORCH_TASK_ID" in
  task_001) nosuchprogram --flag ;;
  task_002) echo "the database is locked"; exit 3 ;;
  task_004) if grep -q need-fix "$PROMPTS/$ORCH_TASK_ID"; then echo ok > fixed.txt
            else echo start > work.txt; fi ;;
  *) echo "$ORCH_TASK_ID" > "out-$ORCH_TASK_ID.txt" ;;
esac
"""
VERIFY = ("case $ORCH_TASK_ID in task_004) test -f fixed.txt || { echo need-fix; exit 1; };; "
          "task_005) echo never-good-enough; exit 1;; esac")


def test_failures_say_why_fail_once_when_retrying_cannot_help_and_retries_get_the_error(
        tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"agent.sh": AGENT, "README.md": "x\n"})
    (repo / "agent.sh").chmod(0o755)
    subprocess.run(["git", "commit", "-qam", "agent"], cwd=repo, check=True)
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    for args in (["not found"], ["locked"], ["waits on the first", "-b", "1"], ["fixable"],
                 ["never passes"]):
        assert cli(repo, "add", *args).returncode == 0
    # the agent notes each prompt outside its worktree, which a sandboxed agent cannot
    # (tests/test_sandbox*.py): here the backend runs on the host
    env = team_env(team_retry_backoff=0.5, checks_retries=1, sandbox_backends="false")
    env["PROMPTS"] = str(prompts)
    out = cli(repo, "up", "--burst", "-n", "2", "--command", "./agent.sh", "--verify", VERIFY,
              env=env)
    assert out.returncode == 1, out.stderr
    board = {t.id: t for t in tasks(repo)}

    # command not found (exit 127): failed at once, with the reason, on the console
    t1 = board["task_001"]
    assert t1.status is Status.FAILED and t1.attempts == 1
    assert "exit code 127" in (t1.error or "") and "nosuchprogram" in (t1.error or "")
    console = out.stderr
    line = next(ln for ln in console.splitlines() if "task failed" in ln and "task_001" in ln)
    assert "not found" in line and "orchestrator logs task_001" in line
    # the summary names what the failure leaves blocked
    summary = next(ln for ln in console.splitlines() if "tasks failed" in ln)
    assert "task_003" in summary and "left_blocked" in summary
    assert board["task_003"].status is Status.PENDING
    # one line per teammate stopping (the lead's, with how it ended), no stale-request noise
    assert console.count("teammate stopped") == 2 and "ignoring a shutdown" not in console
    # daemon.log reads like the console (JSON only with team.log_format = "json")
    daemon_log = (repo / ".tasks" / ".run" / "daemon.log").read_text()
    assert "attempt failed; will retry" in daemon_log and "task_002" in daemon_log
    assert not any(line.startswith("{") for line in daemon_log.splitlines())

    # an ordinary failure: three attempts, spaced by the back-off, each retry told why
    t2 = board["task_002"]
    assert t2.status is Status.FAILED and t2.attempts == 3
    runs = (prompts / "task_002").read_text().split("===\n")[:-1]
    assert len(runs) == 3
    assert "database is locked" not in runs[0]
    assert all("database is locked" in r and "exit code 3" in r for r in runs[1:])
    starts = [datetime.fromisoformat(r["ts"]).timestamp()
              for r in read_jsonl(repo / ".tasks" / "logs" / "task_002.jsonl")
              if r["kind"] == "backend_started"]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps[0] >= 0.5 and gaps[1] >= 1.0, gaps  # 0.5 s, then doubled
    assert "attempt failed; will retry" in console

    # failing checks: back to the same agent with the check output, then it passes
    t4 = board["task_004"]
    assert t4.status is Status.REVIEW and t4.attempts == 0 and t4.error is None
    runs = (prompts / "task_004").read_text().split("===\n")[:-1]
    assert len(runs) == 2 and "need-fix" in runs[1] and "verification failed" in runs[1]

    # checks that never pass: 1 + checks.retries runs, then it waits for a person
    t5 = board["task_005"]
    assert t5.status is Status.FAILED and t5.attempts == 1
    assert "never-good-enough" in (t5.error or "") and "orchestrator retry task_005" in (
        t5.error or "")
    assert len((prompts / "task_005").read_text().split("===\n")[:-1]) == 2


def test_every_backends_retry_prompt_says_what_went_wrong() -> None:
    from orchestrator.agent.prompt import task_text
    from orchestrator.backends.claude_code import resume_prompt

    fresh = Task(id="task_001", subject="Fix it")
    assert last_failure(fresh) is None and "went wrong" not in build_prompt(fresh)
    output = "\n".join(f"line {i}" for i in range(100))
    failed = msgspec.structs.replace(
        fresh, attempts=1, error=f"verification failed (exit code 1): pytest -q\n{output}")
    for prompt in (build_prompt(failed), task_text(failed), resume_prompt(failed)):
        assert "verification failed (exit code 1)" in prompt
        assert "line 99" in prompt and "line 3\n" not in prompt  # the tail, bounded
        assert "attempt 1 of 3" in prompt


def test_a_repository_without_commits_is_refused_at_once(tmp_path: Path) -> None:
    repo = tmp_path / "empty"
    repo.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    for args in (["add", "x"], ["up", "--burst", "--command", "true"]):
        out = subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 1
        assert out.stderr.count("\n") == 1 and "no commits yet" in out.stderr
        assert "Traceback" not in out.stderr
    assert not list((repo / ".tasks").glob("task_*.json")) if (repo / ".tasks").exists() else True
