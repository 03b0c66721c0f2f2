"""What a task waits for (issue 30, item 1): one typed wait, the same in every face.

A paused task is made as a teammate makes it (claim, fail without retry, the wait set
from the run's reason) on a real file board; the CLI runs in-process, the web board's
pages and the MCP server through their library calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import waits
from orchestrator.board import init_repo, open_board
from orchestrator.config import Config
from orchestrator.layout import Layout
from orchestrator.model import Status, Task, Usage
from orchestrator.review import retry_task
from orchestrator.team.hooks import Hooks
from orchestrator.ui import cards
from tests.test_review import Cli, in_process


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return in_process(capsys)


def paused(repo: Path, subject: str, reason: str, spent: float = 0.0,
           **fields: object) -> Task:
    """A task whose run stopped for a person with ``reason`` after spending ``spent``
    dollars, as `Teammate.pause` leaves it."""
    layout = init_repo(repo)
    with open_board(layout) as board:
        task = board.add(subject, **fields)  # type: ignore[arg-type]
        claimed = board.claim("alice", task_id=task.id)
        assert claimed is not None and claimed.lease is not None
        board.update(task.id, claimed.lease.token, usage=Usage(cost_usd=spent))
        board.fail(task.id, claimed.lease.token, reason, retry=False)
        return board.edit(task.id, actor="alice", wait=waits.paused(reason))


def get(repo: Path, task_id: str) -> Task:
    with open_board(Layout.at(repo)) as board:
        return board.get(task_id)


def test_retry_of_a_budget_stop_never_lands_in_a_wrong_wait(repo: Path, cli: Cli) -> None:
    task = paused(repo, "costly", "budget: $0.50 of $0.30 spent", 0.5,
                  budget={"usd": 0.3})
    assert isinstance(task.wait, waits.BudgetReached) and task.wait.limit == "task"

    res = cli(repo, "retry", task.id)
    assert res.returncode != 0
    [line] = res.stderr.strip().splitlines()
    assert f"orchestrator resume {task.id} --budget-usd N" in line, line
    after = get(repo, task.id)
    assert after.status is Status.FAILED and after.wait == task.wait  # nothing changed

    res = cli(repo, "list")
    assert "(waiting: budget)" in res.stdout and "permission" not in res.stdout
    res = cli(repo, "show", task.id)
    assert f"waiting for budget reached: $0.50 of $0.30 spent: orchestrator resume {task.id} " \
        f"--budget-usd N | orchestrator resume {task.id} --review | orchestrator discard " \
        f"{task.id}" in res.stdout
    res = cli(repo, "approve", task.id)
    assert res.returncode != 0 and "no pending permission request" in res.stderr

    res = cli(repo, "resume", task.id, "--budget-usd", "2")
    assert res.returncode == 0, res.stderr
    resumed = get(repo, task.id)
    assert resumed.status is Status.PENDING and resumed.wait is None
    assert resumed.budget.usd == 2.0


def test_retry_of_a_no_progress_stop_resumes_with_the_message(repo: Path) -> None:
    task = paused(repo, "stuck", "no progress: the same call 3 times")
    assert task.wait is not None and task.wait.kind == "no_progress"
    layout = Layout.at(repo)
    done = retry_task(layout, Config.load(repo), task.id, "try the other file")
    assert done.status is Status.PENDING and done.wait is None
    assert done.feedback == ["try the other file"]


def test_a_wait_that_resume_does_not_answer_names_what_does(repo: Path, cli: Cli) -> None:
    layout = init_repo(repo)
    with open_board(layout) as board:
        task = board.add("asks")
        claimed = board.claim("alice", task_id=task.id)
        assert claimed is not None and claimed.lease is not None
        board.update(task.id, claimed.lease.token,
                     wait=waits.Permission(request_id="req-7", tool="bash", subject="rm x"))
    res = cli(repo, "resume", task.id, "--review")
    assert res.returncode != 0
    assert "waits for permission to run bash(rm x): orchestrator approve req-7" in res.stderr
    res = cli(repo, "list")
    assert "(waiting: permission)" in res.stdout


def test_old_task_files_with_waiting_for_still_read(repo: Path, cli: Cli) -> None:
    layout = init_repo(repo)
    with open_board(layout) as board:
        task = board.add("old")
    path = repo / ".tasks" / f"{task.id}.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "status": "failed",
                                "waiting_for": "budget: plan p1 $5.00 of $5.00 spent"}))
    old = get(repo, task.id)
    assert isinstance(old.wait, waits.BudgetReached) and old.wait.limit == "plan p1"
    assert old.waiting_for is None
    res = cli(repo, "resume", task.id, "--budget-usd", "9")
    assert res.returncode == 0, res.stderr  # not a "waits for nothing" refusal
    written = json.loads(path.read_text())
    assert written["status"] == "pending" and written["wait"] is None
    assert written.get("waiting_for") is None


@pytest.mark.parametrize("wait", [
    waits.BudgetReached(reason="budget: $1.00 of $1.00 spent"),
    waits.NoProgress(reason="no progress: 3 failures"),
    waits.ChecksExhausted(result="exit 1", rounds=3),
    waits.LandRejected(reason="checks failed on the merge result"),
    waits.MergeConflict(into="main", files=["a.txt"]),
    waits.PushRejected(reason="non-fast-forward"),
    waits.CiExhausted(reason="tests failed 3 times"),
])
def test_every_face_renders_each_kind_from_the_model(repo: Path, cli: Cli,
                                                    wait: waits.Wait) -> None:
    layout = init_repo(repo)
    with open_board(layout) as board:
        task = board.add("one")
        board.set_status(task.id, Status.FAILED, actor="test", wait=wait)
        hooks = Hooks(layout, Config.load(repo).hooks, board=board)
        payload = hooks._payload("waiting", {"event": "x", "task": task.id})
        fresh = board.get(task.id)
    assert fresh.wait == wait  # stored and read back as its own kind
    card = cards.card(fresh, {})
    assert card["waiting"] == wait.label and card["wait_text"] == wait.text
    assert cards.needs_person(fresh)
    assert payload["wait"]["kind"] == wait.kind
    assert [a["command"] for a in payload["wait"]["actions"]] == wait.commands(task.id)
    shown = cli(repo, "show", task.id).stdout
    assert f"waiting for {wait.text}: " + " | ".join(wait.commands(task.id)) in shown
    status = cli(repo, "status").stdout
    assert f"{task.id} waits for {wait.text}" in status
    assert " | ".join(wait.commands(task.id)) in status
    listed = json.loads(cli(repo, "show", task.id, "--json").stdout)
    assert listed["wait"]["kind"] == wait.kind
