"""Notification hooks (issue 8): real shell commands on real events, from the lead too."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.board import init_repo, open_board
from orchestrator.board.eventlog import EventLog
from orchestrator.config import HOOK_GROUPS, Config, HooksConfig
from orchestrator.errors import ConfigError
from orchestrator.events import (
    HOOK_EVENTS,
    BudgetReached,
    BudgetWarning,
    EventKind,
    LeaseExpired,
    Merged,
    NoProgress,
    PermissionRequested,
    PlanSubmitted,
    TaskClaimed,
    TaskCompleted,
    TaskFailed,
    TaskRequeued,
    fields_of,
)
from orchestrator.layout import Layout
from orchestrator.team.hooks import Hooks, hook_kind
from tests.test_team_support import cli, team_cleanup, team_env


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_hook_kinds() -> None:
    assert hook_kind(TaskCompleted(token=1)) == "review"
    assert hook_kind(PermissionRequested(request_id="r", tool="Bash", subject="ls")) == "waiting"
    assert hook_kind(PlanSubmitted(request_id="r", plan="p")) == "waiting"
    assert hook_kind(TaskFailed(token=1, error="boom", attempts=3, status="failed")) == "failed"
    assert hook_kind(LeaseExpired(owner="a", token=1, reason="lease expired", attempts=3,
                                  status="failed")) == "failed"
    assert hook_kind(TaskFailed(token=1, error="boom", attempts=1,
                                status="pending")) is None  # will be retried
    assert hook_kind(TaskClaimed(owner="a", token=1, attempt=1)) is None
    assert hook_kind(None) is None  # a line of a kind this code does not know


NAMED: list[tuple[str, EventKind]] = [  # an event of each type a named hook runs on
    ("review", TaskCompleted(token=1)),
    ("failed", TaskFailed(token=1, error="boom", attempts=3, status="failed")),
    ("failed", LeaseExpired(owner="a", token=1, reason="lease expired", attempts=3,
                            status="failed")),
    ("failed", TaskRequeued(owner="a", token=1, reason="teammate died", attempts=3,
                            status="failed")),
    ("waiting", PermissionRequested(request_id="r", tool="Bash", subject="ls")),
    ("waiting", PlanSubmitted(request_id="r", plan="p")),
    ("waiting", NoProgress(reason="same error 3 times", wip=None, spent="$1")),
    ("budget", BudgetWarning(limit="task", spent="$4")),
    ("budget", BudgetReached(reason="task budget", wip=None, spent="$5")),
]


def test_each_named_hook_says_which_event_types_run_it() -> None:
    """The event types each named hook's description gives are exactly those that run it,
    so an event renamed or added to a group cannot leave the settings' docs wrong."""
    for group in HOOK_GROUPS:
        said = re.findall(r"`([a-z]+_[a-z_]+)`", HooksConfig.model_fields[group].description or "")
        runs = {fields_of(event)[0] for g, event in NAMED if g == group}
        assert set(said) == runs, group
    for group, event in NAMED:
        assert hook_kind(event) == group, event


@pytest.mark.parametrize(("name", "says"), [
    ("merge", "'merge' is not an event type; did you mean merged or task_merged?"),
    ("Merged", "'Merged' is not an event type; did you mean merged or task_merged?"),
    ("task_complete", "'task_complete' is not an event type; did you mean task_completed or "
                      "task_created?"),
    ("review", "'review' is not an event type: its commands go in [hooks] review = [...]"),
    ("hook_failed", "'hook_failed' runs no hooks: a failing hook would run itself again"),
    ("deploy", "'deploy' is not an event type (docs/events.md lists them)"),
    ("x" * 100_000, f"'{'x' * 60}…' is not an event type (docs/events.md lists them)"),
    ('"merged\\u001b[2J\\n"', "'merged\\x1b[2J\\n' is not an event type; did you mean merged?"),
])
def test_a_hook_on_a_name_that_is_not_an_event_type_is_refused(
        repo: Path, name: str, says: str) -> None:
    toml = repo / "orchestrator.toml"
    toml.write_text(f'[hooks]\nreview = ["true"]\n\n[hooks.events]\n{name} = ["true"]\n')
    with pytest.raises(ConfigError) as exc:
        Config.load(repo)
    assert str(exc.value) == f"config hooks.events in {toml}, line 4: {says}"


def test_every_event_type_but_a_hooks_own_failure_takes_a_hook() -> None:
    hooks = HooksConfig(events={name: ["true"] for name in HOOK_EVENTS})
    assert len(hooks.events) == len(HOOK_EVENTS) > 60


def test_up_and_config_refuse_a_hook_on_a_misspelt_event(repo: Path) -> None:
    """The real CLI: one line naming the key and the closest types, exit code 1, nothing
    started and the file as the person wrote it."""
    toml = repo / "orchestrator.toml"
    text = '[team]\nteammates = 1\n[hooks]\nevents = { merge = ["./deploy"] }\n'
    toml.write_text(text)
    says = "'merge' is not an event type; did you mean merged or task_merged?"
    with team_cleanup(repo):
        res = cli(repo, "up", "--burst", "--command", "true")
    assert (res.returncode, res.stdout) == (1, "")
    assert res.stderr == f"error: config hooks.events in {toml}, line 4: {says}\n"
    assert not (repo / ".worktrees" / "events.jsonl").exists()  # no lead ever ran
    for args in (["config", "list"], ["config", "get", "hooks.events"]):
        res = cli(repo, *args)
        assert (res.returncode, res.stderr) == (1, res.stderr.splitlines()[0] + "\n"), args
        assert res.stderr.endswith(f": {says}\n"), (args, res.stderr)
    res = cli(repo, "config", "set", "team.teammates", "2")
    assert (res.returncode, res.stderr) == (
        1, f"error: {toml} has a bad setting, fix it first: hooks.events: {says}\n")
    assert toml.read_text() == text


def test_a_hook_gets_the_event_on_stdin_only_for_new_events(repo: Path, tmp_path: Path) -> None:
    layout = init_repo(repo)
    out = tmp_path / "hook.jsonl"
    with open_board(layout) as board:
        old = board.add("before the lead started")
        board.events.emit(TaskCompleted(token=None), old.id)
        hooks = Hooks(layout, HooksConfig(
            review=[f'cat >> {out}; echo "$ORCH_HOOK $ORCH_TASK_ID" >> {out}.env'],
            events={"merged": [f"cat >> {out}"]}), board)
        task = board.add("Fix the login page")
        board.events.emit(TaskCompleted(token=1), task.id)
        board.events.emit(TaskClaimed(owner="alice", token=2, attempt=2), task.id)
        board.events.emit(Merged(strategy="merge", into="main", commit="c", branch=None,
                                 tip=None), task.id)
        assert hooks.poll() == 2
        assert hooks.poll() == 0  # each event once
        hooks.close()
    got = lines(out)
    assert {(g["event"], g["hook"]) for g in got} == {("task_completed", "review"),
                                                       ("merged", "merged")}
    review = next(g for g in got if g["hook"] == "review")
    assert review["task"] == task.id and review["subject"] == "Fix the login page"
    assert review["status"] == "pending" and review["token"] == 1
    assert Path(f"{out}.env").read_text() == f"review {task.id}\n"


def test_failing_and_hanging_hooks_are_logged_and_killed(repo: Path) -> None:
    layout = init_repo(repo)
    hooks = Hooks(layout, HooksConfig(failed=["echo oops; exit 3", "sleep 60"], timeout=0.5))
    log = EventLog(layout.events)
    log.emit(TaskFailed(token=1, status="failed", error="boom", attempts=3), "task_001")
    log.emit(TaskFailed(token=1, status="pending", error="will retry", attempts=1), "task_002")
    assert hooks.poll() == 2
    hooks.close()  # waits for both: the sleeping one is killed at its timeout
    failures = [e for e in log.read() if e["event"] == "hook_failed"]
    by_cmd = {e["command"]: e for e in failures}
    assert set(by_cmd) == {"echo oops; exit 3", "sleep 60"}
    assert by_cmd["echo oops; exit 3"]["error"] == "exit code 3"
    assert by_cmd["echo oops; exit 3"]["output"] == "oops\n"
    assert by_cmd["sleep 60"]["error"].startswith("timed out")
    assert all(e["task"] == "task_001" and e["hook"] == "failed" for e in failures)
    hooks.poll()  # a hook's own failure event fires nothing
    hooks.close()
    assert len([e for e in log.read() if e["event"] == "hook_failed"]) == 2


def test_a_torn_last_line_waits_for_its_end(repo: Path, tmp_path: Path) -> None:
    layout = init_repo(repo)
    out = tmp_path / "hook.jsonl"
    hooks = Hooks(layout, HooksConfig(waiting=[f"cat >> {out}"]))
    record = json.dumps({"seq": 1, "event": "permission_requested", "task": "task_001",
                         "request_id": "r1", "tool": "Bash", "subject": "make"})
    with layout.events.open("a") as fh:
        fh.write(record[:10])
    assert hooks.poll() == 0
    with layout.events.open("a") as fh:
        fh.write(record[10:] + "\n")
    assert hooks.poll() == 1
    hooks.close()
    assert lines(out)[0]["hook"] == "waiting"


def test_the_lead_runs_hooks_and_a_failing_one_does_not_stop_the_team(repo: Path,
                                                                       tmp_path: Path) -> None:
    out = tmp_path / "review.jsonl"
    claims = tmp_path / "claims.jsonl"
    (repo / "orchestrator.toml").write_text(
        "[hooks]\n"
        f'review = ["cat >> {out}", "exit 7"]\n'
        f'failed = ["cat >> {out}"]\n'
        "timeout = 20\n"
        "[hooks.events]\n"
        f'task_claimed = ["cat >> {claims}"]\n')
    with open_board(init_repo(repo)) as board:
        good = board.add("writes a file")
        bad = board.add("breaks", max_attempts=1)
    cmd = f'test "$ORCH_TASK_ID" = {bad.id} && exit 1; echo done > "$ORCH_TASK_ID.txt"'
    with team_cleanup(repo):
        res = cli(repo, "up", "--burst", "-n", "1", "--command", cmd, env=team_env())
    assert res.returncode == 1, res.stdout + res.stderr  # a task failed during the burst
    got = {(g["hook"], g["task"]) for g in lines(out)}
    assert got == {("review", good.id), ("failed", bad.id)}
    assert sorted((g["hook"], g["task"]) for g in lines(claims)) == [
        ("task_claimed", good.id), ("task_claimed", bad.id)]
    failures = [e for e in EventLog(Layout.at(repo).events).read() if e["event"] == "hook_failed"]
    assert [(e["task"], e["command"], e["error"]) for e in failures] == [
        (good.id, "exit 7", "exit code 7")]
    with open_board(Layout.at(repo)) as board:
        assert str(board.get(good.id).status) == "review"
