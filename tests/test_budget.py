"""Budgets (issue 20, part 1): limits per task, the pause for a person, `resume`.

End to end through `orchestrator up --burst`: the built-in loop on the loopback Messages
API stops at its dollar budget, its work is committed, and `resume --budget-usd` continues
the same conversation to review; a command backend reports its spending through
``$ORCH_USAGE_FILE``; a wall-clock budget stops a run that takes too long. Parsing of what
people and dropped files write is tested with hostile values.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import waits
from orchestrator.board import open_board
from orchestrator.budget import crossed, make_budget, parse_duration, reached, read_usage_file
from orchestrator.clock import utcnow
from orchestrator.errors import InvalidInput
from orchestrator.events import BudgetWarning, Spend, TaskFailed
from orchestrator.layout import Layout
from orchestrator.model import Budget, Status, Usage
from orchestrator.team.hooks import hook_kind
from tests.helpers import git
from tests.loopback import LoopbackAPI, tool_use
from tests.test_team_support import cli as up_cli
from tests.test_team_support import events, tasks, team_cleanup, team_env


def orch(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], cwd=repo,
                          capture_output=True, text=True, timeout=60, check=False)


def only(repo: Path) -> object:
    [task] = tasks(repo)
    return task


@pytest.mark.timeout(300)  # two team runs: slow on a loaded machine
def test_dollar_budget_pauses_commits_wip_and_resume_continues_the_session(
        repo: Path) -> None:
    res = orch(repo, "add", "Write two files", "--budget-usd", "0.01", "--json")
    assert res.returncode == 0, res.stderr
    task_id = json.loads(res.stdout)["id"]
    with LoopbackAPI() as api:
        api.reply(tool_use("write", {"file_path": "a.txt", "content": "part one\n"}, id="w1"))
        api.reply(tool_use("write", {"file_path": "b.txt", "content": "part two\n"}, id="w2"))
        api.reply("Both files are written.")
        env = team_env(agent_sandbox="off", team_backend="anthropic")
        env.update(ANTHROPIC_BASE_URL=api.url, ANTHROPIC_API_KEY="sk-test-not-a-real-key")
        with team_cleanup(repo):
            res = up_cli(repo, "up", "--burst", "-n", "1", env=env)
        # the first request alone costs more than a cent: no second request was made
        assert len(api.requests) == 1, res.stdout + res.stderr
        with open_board(Layout.at(repo)) as board:
            task = board.get(task_id)
        assert task.status is Status.FAILED and isinstance(task.wait, waits.BudgetReached)
        assert task.wait.reason == f"budget: ${task.usage.cost_usd:.2f} of $0.01 spent"
        assert 0.01 <= task.usage.cost_usd < 0.01 + 0.2  # over by one request at most
        # its work in progress is on the task branch, nothing lost
        assert task.branch is not None
        assert git(repo, "show", f"{task.branch}:a.txt") == "part one"
        assert git(repo, "log", "-1", "--format=%s", task.branch) == "WIP: Write two files"
        reached_events = [e for e in events(repo, "budget_reached") if e["task"] == task_id]
        assert reached_events and reached_events[0]["reason"] == task.wait.reason
        listing = orch(repo, "list").stdout
        assert "waiting" in listing and "budget" in listing

        # resuming without raising the spent limit is refused, with the reason
        res = orch(repo, "resume", task_id)
        assert res.returncode == 1 and "raise the limit" in res.stderr
        res = orch(repo, "resume", task_id, "--budget-usd", "5", "-m", "b.txt next")
        assert res.returncode == 0, res.stderr
        with team_cleanup(repo):
            res = up_cli(repo, "up", "--burst", "-n", "1", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        assert len(api.requests) == 3
        # the same conversation: the second run's first request carries the first one's
        first, resumed = api.requests[0]["messages"], api.requests[1]["messages"]
        assert resumed[0] == first[0] and len(resumed) == 3
        assert resumed[1]["content"][0]["id"] == "w1"
        assert resumed[2]["content"][0]["tool_use_id"] == "w1"
        assert resumed[2]["content"][-1]["text"] == "Feedback from a person:\n- b.txt next"
    with open_board(Layout.at(repo)) as board:
        done = board.get(task_id)
    assert done.status is Status.REVIEW and done.wait is None
    assert done.budget.usd == 5.0 and done.usage.cost_usd > task.usage.cost_usd
    assert git(repo, "show", f"{done.branch}:b.txt") == "part two"
    assert git(repo, "show", f"{done.branch}:a.txt") == "part one"


USAGE_AGENT = """
printf '{"input_tokens": 1000, "output_tokens": 200, "cost_usd": 3}\\n' > "$ORCH_USAGE_FILE"
echo started > work.txt
exit 1
"""


@pytest.mark.timeout(300)  # two team runs: slow on a loaded machine
def test_command_backend_usage_file_counts_and_a_slow_run_hits_its_timeout(
        repo: Path) -> None:
    with open_board(Layout.at(repo).ensure()) as board:
        spender = board.add("spend", budget=Budget(usd=2.0), backend="command",
                            metadata={"kind": "usage"})
        slow = board.add("slow", budget=Budget(seconds=1.5))
    cmd = f'if [ "$ORCH_TASK_ID" = {spender.id} ]; then\n{USAGE_AGENT}\nelse sleep 30; fi'
    with team_cleanup(repo):
        res = up_cli(repo, "up", "--burst", "-n", "2", "--command", cmd, env=team_env())
    assert res.returncode == 1, res.stdout + res.stderr  # two tasks wait for a person
    by_id = {t.id: t for t in tasks(repo)}
    spent = by_id[spender.id]
    assert spent.usage.cost_usd == 3.0 and spent.usage.input_tokens == 1000
    assert isinstance(spent.wait, waits.BudgetReached)
    assert spent.wait.reason == "budget: $3.00 of $2.00 spent"
    assert git(repo, "show", f"{spent.branch}:work.txt") == "started"
    timed = by_id[slow.id]
    assert isinstance(timed.wait, waits.BudgetReached)
    assert timed.wait.reason.startswith("budget: ")
    assert timed.wait.reason.endswith("of 2s spent")
    assert 1.5 <= timed.usage.seconds < 10
    shown = orch(repo, "status").stdout
    assert f"{spender.id} waits for budget reached: $3.00 of $2.00 spent  (orchestrator " \
        f"resume {spender.id} --budget-usd N | orchestrator resume {spender.id} --review" \
        in shown, shown
    assert "spent: $3.00" in shown
    # send the spender to review as it is; discard the slow one
    assert orch(repo, "resume", spender.id, "--review").returncode == 0
    assert orch(repo, "discard", slow.id, "--force").returncode == 0
    by_id = {t.id: t for t in tasks(repo)}
    assert by_id[spender.id].status is Status.REVIEW
    assert by_id[slow.id].status is Status.DISCARDED
    res = orch(repo, "review")
    assert "$3.00/$2.00" in res.stdout, res.stdout


GROWING_AGENT = """
echo started > work.txt
for n in 1 2 3 4 5 6; do
  printf '{"cost_usd": 0.25}\\n' >> "$ORCH_USAGE_FILE"
  sleep 0.6
done
echo finished > work.txt
"""


@pytest.mark.timeout(120)
def test_a_command_agents_dollars_count_as_its_usage_file_grows(repo: Path) -> None:
    """The run is stopped when its spending reaches the budget, not after it ended."""
    with open_board(Layout.at(repo).ensure()) as board:
        task = board.add("spend as you go", budget=Budget(usd=0.3), backend="command")
    with team_cleanup(repo):
        res = up_cli(repo, "up", "--burst", "-n", "1", "--command", GROWING_AGENT,
                     env=team_env())
    assert res.returncode == 1, res.stdout + res.stderr  # it waits for a person
    [done] = tasks(repo)
    assert done.id == task.id and done.status is Status.FAILED
    assert isinstance(done.wait, waits.BudgetReached), done
    assert 0.5 <= done.usage.cost_usd < 1.0, done.usage  # stopped at $0.50, not $1.50
    assert git(repo, "show", f"{done.branch}:work.txt") == "started"


def test_parsing_what_people_and_files_write() -> None:
    assert parse_duration("30m") == 1800 and parse_duration("1h30m") == 5400
    assert parse_duration(90) == 90 and parse_duration("2.5s") == 2.5
    for bad in ("", "m", "30x", "-5", "0", "1h 2q", True, None, [1], "nan", "1e999"):
        with pytest.raises(InvalidInput):
            parse_duration(bad)
    assert make_budget("2", "400000", "30m") == Budget(usd=2, tokens=400000, seconds=1800)
    assert make_budget("$1.5").usd == 1.5
    for kwargs in ({"usd": "-1"}, {"usd": 0}, {"usd": "inf"}, {"usd": True},
                   {"usd": 10**9}, {"tokens": 1.5}, {"tokens": "lots"}, {"tokens": -3},
                   {"timeout": "forever"}):
        with pytest.raises(InvalidInput):
            make_budget(**kwargs)


def test_reasons_thresholds_and_hooks() -> None:
    b = Budget(usd=2.0, tokens=1000)
    assert reached(b, Usage(cost_usd=1.99)) is None
    assert reached(b, Usage(cost_usd=2.0)) == "budget: $2.00 of $2.00 spent"
    assert reached(b, Usage(input_tokens=600, cache_read_tokens=400)) == \
        "budget: 1000 of 1000 tokens spent"
    assert crossed(b, Usage(cost_usd=1.0), Usage(cost_usd=1.7)) == ["budget_warning"]
    assert crossed(b, Usage(cost_usd=1.0), Usage(cost_usd=2.5)) == ["budget_warning",
                                                                    "budget_reached"]
    assert crossed(b, Usage(cost_usd=1.7), Usage(cost_usd=1.8)) == []
    assert crossed(Budget(), Usage(cost_usd=1.0), Usage(cost_usd=1e6)) == []
    assert hook_kind(BudgetWarning(limit="task", spent="$1.60/$2.00")) == "budget"
    assert hook_kind(TaskFailed(token=1, status="failed", attempts=1,
                                error="budget: $2.00 of $2.00 spent")) is None
    assert hook_kind(TaskFailed(token=1, status="failed", attempts=3, error="boom")) == "failed"


@pytest.mark.parametrize("content", [
    b"not json", b'{"cost_usd": -1}', b'{"cost_usd": "3"}', b'{"input_tokens": 1.5}',
    b'[1, 2]', b'{"cost_usd": 1e400}', b'{"input_tokens": true}', b"x" * 70_000,
])
def test_a_hostile_usage_file_is_refused(tmp_path: Path, content: bytes) -> None:
    f = tmp_path / "usage.json"
    f.write_bytes(content)
    with pytest.raises(InvalidInput):
        read_usage_file(f)


def test_a_usage_file_that_is_no_regular_file_is_refused_without_blocking(
        tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)  # an agent may put anything under the name it was given
    with pytest.raises(InvalidInput, match="not a regular file"):
        read_usage_file(fifo)
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(InvalidInput, match="not a regular file"):
        read_usage_file(tmp_path / "dir.json")
    link = tmp_path / "zero.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(InvalidInput, match="not a regular file"):
        read_usage_file(link)


def test_usage_file_shapes(tmp_path: Path) -> None:
    f = tmp_path / "usage.json"
    assert read_usage_file(f) == Usage()
    f.write_text('{"input_tokens": 10, "cost_usd": 0.5, "note": "ignored"}')
    assert read_usage_file(f) == Usage(input_tokens=10, cost_usd=0.5)
    f.write_text('{"output_tokens": 5, "cost_usd": 0.25}\n{"output_tokens": 7}\n')
    assert read_usage_file(f) == Usage(output_tokens=12, cost_usd=0.25)


def test_dropped_files_carry_budgets_and_bad_ones_are_rejected(repo: Path) -> None:
    layout = Layout.at(repo).ensure()
    (layout.inbox / "a.md").write_text("---\nbudget_usd: 3\ntimeout: 1h\n---\n# with budget\n")
    (layout.inbox / "b.json").write_text('{"title": "nested", "budget": {"tokens": 5000}}')
    (layout.inbox / "c.json").write_text('{"title": "bad", "budgetUsd": "free"}')
    (layout.inbox / "d.json").write_text('{"title": "bad", "budget": {"dollars": 1}}')
    for f in layout.inbox.iterdir():  # settled: a fresh bad file may be half written
        os.utime(f, (f.stat().st_mtime - 60, f.stat().st_mtime - 60))
    with open_board(layout) as board:
        board.intake()
        made = {t.subject: t.budget for t in board.list()}
    assert made == {"with budget": Budget(usd=3, seconds=3600),
                    "nested": Budget(tokens=5000)}
    reasons = sorted(p.read_text() for p in layout.rejected.glob("*.error.txt"))
    assert any("budget_usd: not a number" in r for r in reasons)
    assert any("budget must be an object" in r for r in reasons)


SPENDER = """printf '{"cost_usd": 3, "output_tokens": 10}' > "$ORCH_USAGE_FILE"
echo "$ORCH_TASK_ID" > "$ORCH_TASK_ID.txt"
"""


@pytest.mark.timeout(300)  # two team runs: slow on a loaded machine
def test_board_daily_budget_set_live_stops_the_next_run(repo: Path) -> None:
    with open_board(Layout.at(repo).ensure()) as board:
        ids = [board.add(f"t{i}").id for i in range(3)]
    res = orch(repo, "config", "set", "budget.daily_usd", "5")
    assert res.returncode == 0, res.stderr
    with team_cleanup(repo):
        res = up_cli(repo, "up", "--burst", "-n", "1", "--command", SPENDER, env=team_env())
    by_id = {t.id: t for t in tasks(repo)}
    assert [by_id[i].status for i in ids] == [Status.REVIEW, Status.REVIEW, Status.FAILED]
    wait = by_id[ids[2]].wait
    assert isinstance(wait, waits.BudgetReached) and wait.limit == "board today"
    assert wait.reason == "budget: board today $6.00 of $5.00 spent"
    assert sum(e["usage"]["cost_usd"] for e in events(repo, "spend")) == 6.0
    # the limit raised live, resuming runs it
    assert orch(repo, "config", "set", "budget.daily_usd", "20").returncode == 0
    assert orch(repo, "resume", ids[2]).returncode == 0
    with team_cleanup(repo):
        res = up_cli(repo, "up", "--burst", "-n", "1", "--command", SPENDER, env=team_env())
    assert res.returncode == 0, res.stdout + res.stderr
    assert {t.status for t in tasks(repo)} == {Status.REVIEW}


def test_plan_and_teammate_limits(repo: Path) -> None:
    from orchestrator.budget import limits_for
    from orchestrator.config import BudgetConfig

    with open_board(Layout.at(repo).ensure()) as board:
        plan = {"plan": {"id": "plan-abc", "goal": "g", "ref": "a"}}
        a = board.add("a", metadata=plan)
        b = board.add("b", metadata=plan)
        board.add("other", metadata={"plan": {"id": "plan-xyz"}})
        for t, cost in ((a, 1.5), (b, 2.0)):
            claimed = board.claim("alice", task_id=t.id)
            assert claimed is not None and claimed.lease is not None
            board.update(t.id, claimed.lease.token, usage=Usage(cost_usd=cost))
            board.events.emit(Spend(usage=Usage(cost_usd=cost), plan=None), t.id, actor="alice")
        with board.layout.events.open("a") as fh:  # a hand-edited line that does not fit
            fh.write(json.dumps({"seq": 99, "ts": utcnow(), "event": "spend", "task": None,
                                 "actor": "bob", "usage": {"cost_usd": "bogus"}}) + "\n")
        config = BudgetConfig(plan_usd=3.0, teammate_daily_usd=10.0, daily_usd=3.4)
        limits = limits_for(board.get(a.id), "alice", config, board)
    labels = {lim.label: lim.reached(Usage()) for lim in limits}
    assert labels == {"": None, "plan plan-abc": "budget: plan plan-abc $3.50 of $3.00 spent",
                      "alice today": None,
                      "board today": "budget: board today $3.50 of $3.40 spent"}


def test_a_subagent_counts_against_the_task_budget() -> None:
    import dataclasses

    from orchestrator.agent.base import BudgetReached
    from orchestrator.agent.loop import Limits, LoopState
    from orchestrator.agent.tools.subagent import SharedLimits
    from orchestrator.budget import Limit

    root = Limits(budgets=[Limit("", Budget(usd=1.0), Usage(cost_usd=0.5))])
    shared = SharedLimits(**{f.name: getattr(root, f.name) for f in dataclasses.fields(Limits)})
    shared.check(LoopState(usage=Usage(cost_usd=0.4)))
    with pytest.raises(BudgetReached, match=r"budget: \$1.00 of \$1.00 spent"):
        shared.check(LoopState(usage=Usage(cost_usd=0.5)))
